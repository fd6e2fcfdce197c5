//! `screenshot` and `screenshot_window` (feature `screen`, xcap).

use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use image::{DynamicImage, RgbaImage, imageops::FilterType};
use kinet_core::message::ImagePart;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::ComputerError;
use crate::coords::{Mapping, ScreenSpace};

/// Hides and shows the host's own window around a capture (a library has no
/// window of its own; a desktop host does).
pub trait HideSelf: Send + Sync + 'static {
    /// Hides (`true`) or shows again (`false`) the host's window. Called
    /// from a blocking worker thread, not the host's UI thread: post to
    /// the UI thread if the toolkit needs that. `false` always follows
    /// `true`, also when the capture fails.
    fn set_hidden(&self, hidden: bool);
}

impl<F: Fn(bool) + Send + Sync + 'static> HideSelf for F {
    fn set_hidden(&self, hidden: bool) {
        self(hidden)
    }
}

/// Settings of the screen tools. Every field documents its default.
#[derive(Clone)]
pub struct ScreenConfig {
    /// Screenshots larger than this (width or height) are scaled down for
    /// the model; coordinates are mapped back. Default 1568.
    pub max_dimension: u32,
    /// The host's window hider, used when a call asks for `hide_self`.
    /// Default none.
    pub hide_self: Option<Arc<dyn HideSelf>>,
    /// How long to wait after hiding before capturing. Default 200 ms.
    pub hide_delay: Duration,
}

impl Default for ScreenConfig {
    fn default() -> Self {
        Self {
            max_dimension: 1568,
            hide_self: None,
            hide_delay: Duration::from_millis(200),
        }
    }
}

impl std::fmt::Debug for ScreenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScreenConfig")
            .field("max_dimension", &self.max_dimension)
            .field("hide_self", &self.hide_self.is_some())
            .field("hide_delay", &self.hide_delay)
            .finish()
    }
}

/// A captured image ready for the model.
struct Shot {
    png: Vec<u8>,
    width: u32,
    height: u32,
    shown_width: u32,
    shown_height: u32,
}

fn capture_error(error: impl std::fmt::Display) -> ComputerError {
    ComputerError::Capture(error.to_string())
}

/// The smallest `max_dimension` honoured (smaller settings are raised).
const MIN_DIMENSION: u32 = 64;

/// Scales `image` to fit `max` and encodes it as PNG. `logical_width` is
/// the captured area's width in the input system's units (points on macOS,
/// where the image has physical pixels); the returned scale maps the shown
/// image onto those units.
fn encode(image: RgbaImage, max: u32, logical_width: u32) -> Result<(Shot, f64), ComputerError> {
    let max = max.max(MIN_DIMENSION);
    let (width, height) = image.dimensions();
    let longest = width.max(height).max(1);
    let image = if longest > max {
        let factor = f64::from(max) / f64::from(longest);
        let w = ((f64::from(width) * factor).round() as u32).max(1);
        let h = ((f64::from(height) * factor).round() as u32).max(1);
        image::imageops::resize(&image, w, h, FilterType::Triangle)
    } else {
        image
    };
    let logical = if logical_width == 0 {
        width
    } else {
        logical_width
    };
    let scale = f64::from(logical) / f64::from(image.width().max(1));
    let (shown_width, shown_height) = image.dimensions();
    let mut png = Vec::new();
    DynamicImage::ImageRgba8(image)
        .write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)
        .map_err(|e| ComputerError::Image(e.to_string()))?;
    Ok((
        Shot {
            png,
            width,
            height,
            shown_width,
            shown_height,
        },
        scale,
    ))
}

/// The screen tools sharing one [`ScreenSpace`] with the input tools.
#[derive(Debug, Clone)]
pub struct ScreenTools {
    config: ScreenConfig,
    space: ScreenSpace,
    /// One capture at a time: a second one must not show the host's window
    /// again in the middle of the first.
    capturing: Arc<tokio::sync::Mutex<()>>,
}

/// Shows the host's window again when the capture ends, however it ends.
struct Unhide(Option<Arc<dyn HideSelf>>);

impl Drop for Unhide {
    fn drop(&mut self) {
        if let Some(hider) = self.0.take() {
            hider.set_hidden(false);
        }
    }
}

impl ScreenTools {
    /// Tools recording their mapping into `space`.
    pub fn new(config: ScreenConfig, space: ScreenSpace) -> Self {
        Self {
            config,
            space,
            capturing: Arc::default(),
        }
    }

    /// `screenshot` and `screenshot_window`.
    pub fn toolset(&self) -> kinet_core::Toolset {
        let mut tools = kinet_core::Toolset::new();
        self.add_to(&mut tools);
        tools
    }

    /// Adds the same tools to `tools`.
    pub fn add_to(&self, tools: &mut kinet_core::Toolset) {
        tools.add(ScreenshotTool(self.clone()));
        tools.add(ScreenshotWindowTool(self.clone()));
    }

    /// Runs a capture with the host's window hidden when asked to.
    async fn capture<T: Send + 'static>(
        &self,
        hide: bool,
        work: impl FnOnce() -> Result<T, ComputerError> + Send + 'static,
    ) -> Result<T, ComputerError> {
        // The turn and the hidden window belong to the capture itself: they
        // end when it ends, even if this call is dropped before.
        let turn = Arc::clone(&self.capturing).lock_owned().await;
        let hider = if hide {
            self.config.hide_self.clone()
        } else {
            None
        };
        let delay = self.config.hide_delay;
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            let _unhide = Unhide(hider.clone());
            if let Some(hider) = &hider {
                hider.set_hidden(true);
                std::thread::sleep(delay);
            }
            work()
        })
        .await
        .map_err(capture_error)
        .and_then(|r| r)
    }

    fn output(&self, shot: Shot, scale: f64, origin: (i32, i32), what: String) -> ToolOutput {
        self.space.set(Mapping {
            origin_x: origin.0,
            origin_y: origin.1,
            scale,
            width: shot.shown_width,
            height: shot.shown_height,
        });
        let scaled = if (shot.shown_width, shot.shown_height) != (shot.width, shot.height) {
            format!(
                ", shown at {}x{}; give coordinates in the image's pixels",
                shot.shown_width, shot.shown_height
            )
        } else {
            String::new()
        };
        ToolOutput::text(format!("{what} ({}x{}{scaled}).", shot.width, shot.height))
            .with_image(ImagePart::from_bytes("image/png", &shot.png))
            .with_structured(json!({
                "width": shot.width,
                "height": shot.height,
                "shown_width": shot.shown_width,
                "shown_height": shot.shown_height,
                "origin": [origin.0, origin.1],
                "scale": scale,
            }))
    }
}

/// Arguments of `screenshot`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ScreenshotArgs {
    /// The monitor's index (0 = the primary one).
    #[serde(default)]
    pub monitor: Option<usize>,
    /// Hide the host application's own window during the capture.
    #[serde(default)]
    pub hide_self: bool,
}

struct ScreenshotTool(ScreenTools);

#[async_trait]
impl Tool for ScreenshotTool {
    type Args = ScreenshotArgs;
    fn name(&self) -> &str {
        "screenshot"
    }
    fn description(&self) -> &str {
        "Takes a screenshot of a monitor (default the primary one). Large screens are scaled \
down; give mouse coordinates in the pixels of the image you see."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, args: ScreenshotArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let max = self.0.config.max_dimension;
        let (shot, scale, origin, index) = self
            .0
            .capture(args.hide_self, move || {
                let monitors = xcap::Monitor::all().map_err(capture_error)?;
                let primary = monitors
                    .iter()
                    .position(|m| m.is_primary().unwrap_or(false))
                    .unwrap_or(0);
                let index = args.monitor.unwrap_or(primary);
                let count = monitors.len();
                let monitor = monitors.into_iter().nth(index).ok_or_else(|| {
                    ComputerError::NotFound(format!(
                        "there is no monitor {index}; {count} monitor(s) (0 to {})",
                        count.saturating_sub(1)
                    ))
                })?;
                let origin = (
                    monitor.x().map_err(capture_error)?,
                    monitor.y().map_err(capture_error)?,
                );
                let logical_width = monitor.width().map_err(capture_error)?;
                let image = monitor.capture_image().map_err(capture_error)?;
                let (shot, scale) = encode(image, max, logical_width)?;
                Ok((shot, scale, origin, index))
            })
            .await?;
        Ok(self.0.output(
            shot,
            scale,
            origin,
            format!("Screenshot of monitor {index}"),
        ))
    }
}

/// Arguments of `screenshot_window`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ScreenshotWindowArgs {
    /// Part of the window's title (case-insensitive).
    pub title: String,
}

struct ScreenshotWindowTool(ScreenTools);

#[async_trait]
impl Tool for ScreenshotWindowTool {
    type Args = ScreenshotWindowArgs;
    fn name(&self) -> &str {
        "screenshot_window"
    }
    fn description(&self) -> &str {
        "Takes a screenshot of one window found by part of its title. When none or several \
match, the error lists the titles to choose from."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(
        &self,
        args: ScreenshotWindowArgs,
        _ctx: &ToolCtx,
    ) -> Result<ToolOutput, ToolError> {
        let max = self.0.config.max_dimension;
        let wanted = args.title.trim().to_lowercase();
        if wanted.is_empty() {
            return Err(ToolError::invalid_arguments("title is empty"));
        }
        let (shot, scale, origin, title) = self
            .0
            .capture(false, move || {
                let windows = xcap::Window::all().map_err(|e| {
                    let text = e.to_string();
                    if text.contains("_NET_CLIENT_LIST") {
                        ComputerError::Capture(format!(
                            "cannot list windows: {text} (the display has no EWMH window manager)"
                        ))
                    } else {
                        capture_error(text)
                    }
                })?;
                let titled: Vec<(xcap::Window, String)> = windows
                    .into_iter()
                    .filter_map(|w| {
                        let title = w
                            .title()
                            .ok()
                            .filter(|t| !t.trim().is_empty())
                            .or_else(|| legacy_title(w.id().ok()?))?;
                        (!title.trim().is_empty()).then_some((w, title))
                    })
                    .collect();
                let mut matches: Vec<usize> = (0..titled.len())
                    .filter(|&i| titled[i].1.to_lowercase().contains(&wanted))
                    .collect();
                // An exact title wins over partial matches.
                if matches.len() > 1
                    && let Some(&exact) = matches
                        .iter()
                        .find(|&&i| titled[i].1.to_lowercase() == wanted)
                {
                    matches = vec![exact];
                }
                let list = |indexes: &mut dyn Iterator<Item = usize>| {
                    indexes
                        .map(|i| format!("{:?}", titled[i].1))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let index = match matches.as_slice() {
                    [one] => *one,
                    [] => {
                        return Err(ComputerError::NotFound(format!(
                            "no window title contains {wanted:?}; open windows: {}",
                            list(&mut (0..titled.len()))
                        )));
                    }
                    several => {
                        return Err(ComputerError::NotFound(format!(
                            "{} windows match {wanted:?}: {}; give more of the title",
                            several.len(),
                            list(&mut several.iter().copied())
                        )));
                    }
                };
                let (window, title) = titled.into_iter().nth(index).ok_or_else(|| {
                    ComputerError::Capture("the window list changed during the capture".into())
                })?;
                let origin = (
                    window.x().map_err(capture_error)?,
                    window.y().map_err(capture_error)?,
                );
                let logical_width = window.width().map_err(capture_error)?;
                let image = window.capture_image().map_err(capture_error)?;
                let (shot, scale) = encode(image, max, logical_width)?;
                Ok((shot, scale, origin, title))
            })
            .await?;
        Ok(self.0.output(
            shot,
            scale,
            origin,
            format!("Screenshot of window {title:?}"),
        ))
    }
}

/// The `WM_NAME` of an X window whatever its type (legacy programs set it
/// as STRING, which xcap skips).
#[cfg(target_os = "linux")]
fn legacy_title(window: u32) -> Option<String> {
    use x11rb::connection::Connection as _;
    use x11rb::protocol::xproto::{AtomEnum, ConnectionExt as _};
    let (conn, _) = x11rb::connect(None).ok()?;
    let reply = conn
        .get_property(false, window, AtomEnum::WM_NAME, AtomEnum::ANY, 0, 1024)
        .ok()?
        .reply()
        .ok()?;
    let _ = conn.flush();
    Some(String::from_utf8_lossy(&reply.value).into_owned())
}

#[cfg(not(target_os = "linux"))]
fn legacy_title(_window: u32) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_captures_are_scaled_and_map_back_to_input_units() {
        let image = RgbaImage::from_pixel(3136, 1000, image::Rgba([10, 20, 30, 255]));
        let (shot, scale) = encode(image.clone(), 1568, 3136).unwrap();
        assert_eq!((shot.shown_width, shot.shown_height), (1568, 500));
        assert_eq!((shot.width, shot.height), (3136, 1000));
        assert!((scale - 2.0).abs() < 1e-9, "{scale}");
        // A 2x (Retina) capture of a screen 1568 points wide: no extra scaling.
        let (_, scale) = encode(image.clone(), 1568, 1568).unwrap();
        assert!((scale - 1.0).abs() < 1e-9, "{scale}");
        // Small captures are left alone; a silly limit is raised.
        let (shot, scale) = encode(RgbaImage::new(100, 50), 1568, 100).unwrap();
        assert_eq!((shot.shown_width, scale), (100, 1.0));
        let (shot, _) = encode(RgbaImage::new(1000, 500), 0, 1000).unwrap();
        assert_eq!(shot.shown_width, MIN_DIMENSION);
        let decoded = image::load_from_memory(&shot.png).unwrap();
        assert_eq!(decoded.width(), MIN_DIMENSION);
    }
}
