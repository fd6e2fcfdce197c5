//! Mouse and keyboard tools (feature `input`, enigo).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use enigo::{Axis, Button, Coordinate, Direction, Enigo, Key, Keyboard, Mouse, Settings};
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::ComputerError;
use crate::coords::ScreenSpace;

/// Settings of the input tools.
#[derive(Debug, Clone, Default)]
pub struct InputConfig {
    /// The X11 display to send input to. Default: `DISPLAY`.
    pub x11_display: Option<String>,
}

/// The mouse and keyboard tools, mapping screenshot coordinates through a
/// [`ScreenSpace`] shared with the screen tools.
#[derive(Debug, Clone)]
pub struct InputTools {
    config: InputConfig,
    space: ScreenSpace,
}

impl InputTools {
    /// Tools mapping coordinates through `space`.
    pub fn new(config: InputConfig, space: ScreenSpace) -> Self {
        Self { config, space }
    }

    /// `mouse_click`, `mouse_scroll`, `mouse_drag`, `keyboard_type`,
    /// `keyboard_key`.
    pub fn toolset(&self) -> kinet_core::Toolset {
        let mut tools = kinet_core::Toolset::new();
        self.add_to(&mut tools);
        tools
    }

    /// Adds the same tools to `tools`.
    pub fn add_to(&self, tools: &mut kinet_core::Toolset) {
        tools.add(MouseClickTool(self.clone()));
        tools.add(MouseScrollTool(self.clone()));
        tools.add(MouseDragTool(self.clone()));
        tools.add(KeyboardTypeTool(self.clone()));
        tools.add(KeyboardKeyTool(self.clone()));
    }

    /// Runs `work` with a fresh connection to the display, off the async
    /// threads. `work` checks the [`Stop`] it is given between steps: it is
    /// raised when the run is cancelled or the call is dropped.
    async fn run(
        &self,
        ctx: &ToolCtx,
        work: impl FnOnce(&mut Enigo, &Stop) -> Result<(), enigo::InputError> + Send + 'static,
    ) -> Result<(), ComputerError> {
        let settings = Settings {
            x11_display: self.config.x11_display.clone(),
            ..Settings::default()
        };
        let stop = Stop::default();
        let _stop_when_dropped = stop.raise_on_drop();
        let worker_stop = stop.clone();
        let mut worker = tokio::task::spawn_blocking(move || {
            // Cancelled before it began: nothing happens.
            if worker_stop.raised() {
                return Ok(());
            }
            let mut enigo =
                Enigo::new(&settings).map_err(|e| ComputerError::Input(e.to_string()))?;
            work(&mut enigo, &worker_stop).map_err(|e| ComputerError::Input(e.to_string()))
        });
        let finished = tokio::select! {
            finished = &mut worker => finished,
            _ = ctx.cancellation().cancelled() => {
                // Let the worker end its step (and release what it holds).
                stop.raise();
                worker.await
            }
        };
        let result = finished.map_err(|e| ComputerError::Input(e.to_string()))?;
        // Cancelled only if the action really stopped short; one that was
        // done anyway says so.
        if stop.stopped_short() {
            return Err(ComputerError::Cancelled);
        }
        result
    }
}

/// Raised to make a running input action stop at its next step.
#[derive(Debug, Clone, Default)]
struct Stop {
    raised: Arc<AtomicBool>,
    stopped_short: Arc<AtomicBool>,
}

impl Stop {
    fn raise(&self) {
        self.raised.store(true, Ordering::Relaxed);
    }

    /// Whether to stop now; the action then counts as cut short.
    fn raised(&self) -> bool {
        let raised = self.raised.load(Ordering::Relaxed);
        if raised {
            self.stopped_short.store(true, Ordering::Relaxed);
        }
        raised
    }

    fn stopped_short(&self) -> bool {
        self.stopped_short.load(Ordering::Relaxed)
    }

    fn raise_on_drop(&self) -> RaiseOnDrop {
        RaiseOnDrop(self.clone())
    }
}

struct RaiseOnDrop(Stop);

impl Drop for RaiseOnDrop {
    fn drop(&mut self) {
        self.0.raise();
    }
}

/// The most wheel steps one `mouse_scroll` takes per axis.
const MAX_SCROLL_STEPS: i32 = 100;

/// The most characters one `keyboard_type` types (about two minutes of
/// keystrokes on X11).
const MAX_TYPED_CHARS: usize = 10_000;

/// Characters typed between checks for cancellation.
const TYPING_CHUNK: usize = 16;

/// Waits as long as the X server takes to play `keys` keystrokes: enigo
/// queues them with a per-key delay the server applies, so without this the
/// whole text would be queued at once and cancelling could not stop it.
fn keep_pace(keys: usize) {
    #[cfg(all(unix, not(target_os = "macos")))]
    {
        let per_key = u64::from(Settings::default().linux_delay);
        let keys = u64::try_from(keys).unwrap_or(u64::MAX);
        std::thread::sleep(Duration::from_millis(per_key.saturating_mul(keys)));
    }
    #[cfg(not(all(unix, not(target_os = "macos"))))]
    let _ = keys;
}

fn pause() {
    std::thread::sleep(Duration::from_millis(15));
}

/// A mouse button.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MouseButton {
    /// The left button.
    #[default]
    Left,
    /// The right button.
    Right,
    /// The middle button (wheel).
    Middle,
}

impl From<MouseButton> for Button {
    fn from(button: MouseButton) -> Self {
        match button {
            MouseButton::Left => Button::Left,
            MouseButton::Right => Button::Right,
            MouseButton::Middle => Button::Middle,
        }
    }
}

/// Arguments of `mouse_click`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct MouseClickArgs {
    /// x in the latest screenshot's pixels.
    pub x: f64,
    /// y in the latest screenshot's pixels.
    pub y: f64,
    /// left (default), right or middle.
    #[serde(default)]
    pub button: MouseButton,
    /// Double-click.
    #[serde(default)]
    pub double: bool,
}

struct MouseClickTool(InputTools);

#[async_trait]
impl Tool for MouseClickTool {
    type Args = MouseClickArgs;
    fn name(&self) -> &str {
        "mouse_click"
    }
    fn description(&self) -> &str {
        "Moves the mouse to a point of the latest screenshot and clicks (left by default, \
optionally right/middle or a double-click)."
    }
    async fn confirm_summary(&self, args: &MouseClickArgs, _ctx: &ToolCtx) -> Option<String> {
        let kind = if args.double { "Double-click" } else { "Click" };
        Some(format!(
            "{kind} {:?} at ({}, {})",
            args.button, args.x, args.y
        ))
    }
    async fn call(&self, args: MouseClickArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let (x, y) = self.0.space.to_screen(args.x, args.y)?;
        let button = Button::from(args.button);
        let clicks = if args.double { 2 } else { 1 };
        self.0
            .run(ctx, move |enigo, _stop| {
                enigo.move_mouse(x, y, Coordinate::Abs)?;
                pause();
                for _ in 0..clicks {
                    enigo.button(button, Direction::Click)?;
                }
                Ok(())
            })
            .await?;
        Ok(ToolOutput::text(format!("Clicked at screen ({x}, {y}).")))
    }
}

/// Arguments of `mouse_scroll`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct MouseScrollArgs {
    /// Horizontal wheel steps (positive scrolls right).
    #[serde(default)]
    pub dx: i32,
    /// Vertical wheel steps (positive scrolls down).
    #[serde(default)]
    pub dy: i32,
    /// Where to scroll (screenshot pixels); default where the mouse is.
    #[serde(default)]
    pub x: Option<f64>,
    /// Where to scroll (screenshot pixels).
    #[serde(default)]
    pub y: Option<f64>,
}

struct MouseScrollTool(InputTools);

#[async_trait]
impl Tool for MouseScrollTool {
    type Args = MouseScrollArgs;
    fn name(&self) -> &str {
        "mouse_scroll"
    }
    fn description(&self) -> &str {
        "Scrolls the mouse wheel by dy steps (positive down) and dx steps (positive right), \
optionally at a point of the latest screenshot."
    }
    async fn confirm_summary(&self, args: &MouseScrollArgs, _ctx: &ToolCtx) -> Option<String> {
        Some(format!("Scroll dx={} dy={}", args.dx, args.dy))
    }
    async fn call(&self, args: MouseScrollArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        for (name, steps) in [("dx", args.dx), ("dy", args.dy)] {
            if !(-MAX_SCROLL_STEPS..=MAX_SCROLL_STEPS).contains(&steps) {
                return Err(ToolError::invalid_arguments(format!(
                    "{name} is {steps}; scroll at most {MAX_SCROLL_STEPS} steps per call"
                )));
            }
        }
        let at = match (args.x, args.y) {
            (Some(x), Some(y)) => Some(self.0.space.to_screen(x, y)?),
            (None, None) => None,
            _ => {
                return Err(ToolError::invalid_arguments(
                    "give both x and y, or neither",
                ));
            }
        };
        let (dx, dy) = (args.dx, args.dy);
        self.0
            .run(ctx, move |enigo, _stop| {
                if let Some((x, y)) = at {
                    enigo.move_mouse(x, y, Coordinate::Abs)?;
                    pause();
                }
                if dy != 0 {
                    enigo.scroll(dy, Axis::Vertical)?;
                }
                if dx != 0 {
                    enigo.scroll(dx, Axis::Horizontal)?;
                }
                Ok(())
            })
            .await?;
        Ok(ToolOutput::text(format!("Scrolled dx={dx} dy={dy}.")))
    }
}

/// A point in the latest screenshot's pixels.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
pub struct Point {
    /// x.
    pub x: f64,
    /// y.
    pub y: f64,
}

/// Arguments of `mouse_drag`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct MouseDragArgs {
    /// Where the drag starts.
    pub from: Point,
    /// Where it ends.
    pub to: Point,
}

struct MouseDragTool(InputTools);

#[async_trait]
impl Tool for MouseDragTool {
    type Args = MouseDragArgs;
    fn name(&self) -> &str {
        "mouse_drag"
    }
    fn description(&self) -> &str {
        "Drags with the left button held from one point of the latest screenshot to another."
    }
    async fn confirm_summary(&self, args: &MouseDragArgs, _ctx: &ToolCtx) -> Option<String> {
        Some(format!(
            "Drag from ({}, {}) to ({}, {})",
            args.from.x, args.from.y, args.to.x, args.to.y
        ))
    }
    async fn call(&self, args: MouseDragArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        // Both points are checked before the button goes down.
        let from = self.0.space.to_screen(args.from.x, args.from.y)?;
        let to = self.0.space.to_screen(args.to.x, args.to.y)?;
        self.0
            .run(ctx, move |enigo, stop| {
                enigo.move_mouse(from.0, from.1, Coordinate::Abs)?;
                pause();
                enigo.button(Button::Left, Direction::Press)?;
                // Intermediate moves, so drag handlers see motion.
                let moved = (|| {
                    const STEPS: i64 = 10;
                    let along = |a: i32, b: i32, step: i64| {
                        let (a, b) = (i64::from(a), i64::from(b));
                        // Between a and b, so it fits an i32.
                        (a + (b - a) * step / STEPS) as i32
                    };
                    for step in 1..=STEPS {
                        if stop.raised() {
                            // Dropped where it started: nothing moves.
                            enigo.move_mouse(from.0, from.1, Coordinate::Abs)?;
                            pause();
                            break;
                        }
                        let x = along(from.0, to.0, step);
                        let y = along(from.1, to.1, step);
                        enigo.move_mouse(x, y, Coordinate::Abs)?;
                        pause();
                    }
                    Ok(())
                })();
                // The button is released whatever happened on the way.
                let released = enigo.button(Button::Left, Direction::Release);
                moved.and(released)
            })
            .await?;
        Ok(ToolOutput::text(format!(
            "Dragged from screen ({}, {}) to ({}, {}).",
            from.0, from.1, to.0, to.1
        )))
    }
}

/// Arguments of `keyboard_type`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct KeyboardTypeArgs {
    /// The text to type into the focused window.
    pub text: String,
}

struct KeyboardTypeTool(InputTools);

#[async_trait]
impl Tool for KeyboardTypeTool {
    type Args = KeyboardTypeArgs;
    fn name(&self) -> &str {
        "keyboard_type"
    }
    fn description(&self) -> &str {
        "Types text into the focused window, as keystrokes."
    }
    async fn confirm_summary(&self, args: &KeyboardTypeArgs, _ctx: &ToolCtx) -> Option<String> {
        Some(format!("Type {:?}", args.text))
    }
    async fn call(&self, args: KeyboardTypeArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let count = args.text.chars().count();
        if count > MAX_TYPED_CHARS {
            return Err(ToolError::invalid_arguments(format!(
                "text has {count} characters; type at most {MAX_TYPED_CHARS} per call"
            )));
        }
        let text = args.text;
        self.0
            .run(ctx, move |enigo, stop| {
                let chars: Vec<char> = text.chars().collect();
                for chunk in chars.chunks(TYPING_CHUNK) {
                    if stop.raised() {
                        break;
                    }
                    enigo.text(&chunk.iter().collect::<String>())?;
                    keep_pace(chunk.len());
                }
                Ok(())
            })
            .await?;
        Ok(ToolOutput::text(format!("Typed {count} characters.")))
    }
}

/// Arguments of `keyboard_key`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct KeyboardKeyArgs {
    /// A key name (Enter, Tab, Escape, Backspace, Delete, Space, Up, Down,
    /// Left, Right, Home, End, PageUp, PageDown, F1-F12, or one
    /// character), optionally with modifiers joined by `+`: `ctrl+c`,
    /// `ctrl+shift+t`.
    pub key: String,
    /// Modifiers to hold as well: ctrl, shift, alt, meta (super/cmd).
    #[serde(default)]
    pub modifiers: Vec<String>,
}

/// The enigo key for a name.
fn parse_key(name: &str) -> Result<Key, ComputerError> {
    let lower = name.trim().to_ascii_lowercase();
    let key = match lower.as_str() {
        "enter" | "return" => Key::Return,
        "tab" => Key::Tab,
        "escape" | "esc" => Key::Escape,
        "backspace" => Key::Backspace,
        "delete" | "del" => Key::Delete,
        "space" => Key::Space,
        "up" | "arrowup" => Key::UpArrow,
        "down" | "arrowdown" => Key::DownArrow,
        "left" | "arrowleft" => Key::LeftArrow,
        "right" | "arrowright" => Key::RightArrow,
        "home" => Key::Home,
        "end" => Key::End,
        "pageup" => Key::PageUp,
        "pagedown" => Key::PageDown,
        "capslock" => Key::CapsLock,
        "ctrl" | "control" => Key::Control,
        "shift" => Key::Shift,
        "alt" | "option" => Key::Alt,
        "meta" | "super" | "cmd" | "command" | "win" => Key::Meta,
        "f1" => Key::F1,
        "f2" => Key::F2,
        "f3" => Key::F3,
        "f4" => Key::F4,
        "f5" => Key::F5,
        "f6" => Key::F6,
        "f7" => Key::F7,
        "f8" => Key::F8,
        "f9" => Key::F9,
        "f10" => Key::F10,
        "f11" => Key::F11,
        "f12" => Key::F12,
        _ => {
            let mut chars = name.trim().chars();
            match (chars.next(), chars.next()) {
                // Letters as lowercase: shift is a modifier of its own.
                (Some(c), None) => Key::Unicode(c.to_ascii_lowercase()),
                _ => {
                    return Err(ComputerError::InvalidInput(format!(
                        "unknown key {name:?}: use Enter, Tab, Escape, Backspace, Delete, Space, Up, Down, Left, Right, Home, End, PageUp, PageDown, F1-F12 or one character"
                    )));
                }
            }
        }
    };
    Ok(key)
}

const MODIFIERS: [&str; 10] = [
    "ctrl", "control", "shift", "alt", "option", "meta", "super", "cmd", "command", "win",
];

/// The modifiers and the main key of `ctrl+shift+t` plus extra modifiers.
fn parse_chord(key: &str, extra: &[String]) -> Result<(Vec<Key>, Key), ComputerError> {
    let chord: String = key.chars().filter(|c| !c.is_whitespace()).collect();
    let chord = chord.as_str();
    // `+` is a key too: `+`, `ctrl++`.
    let (held, main) = if chord == "+" {
        ("", "+")
    } else if let Some(held) = chord.strip_suffix("++") {
        (held, "+")
    } else {
        chord.rsplit_once('+').unwrap_or(("", chord))
    };
    let main = main.trim();
    if main.is_empty() {
        return Err(ComputerError::InvalidInput(format!("no key in {key:?}")));
    }
    let held = held.split('+').map(str::trim).filter(|m| !m.is_empty());
    let mut modifiers = Vec::new();
    for name in held.chain(extra.iter().map(|m| m.trim())) {
        if !MODIFIERS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(ComputerError::InvalidInput(format!(
                "{name:?} is not a modifier: use ctrl, shift, alt or meta"
            )));
        }
        modifiers.push(parse_key(name)?);
    }
    Ok((modifiers, parse_key(main)?))
}

struct KeyboardKeyTool(InputTools);

#[async_trait]
impl Tool for KeyboardKeyTool {
    type Args = KeyboardKeyArgs;
    fn name(&self) -> &str {
        "keyboard_key"
    }
    fn description(&self) -> &str {
        "Presses a key or a shortcut in the focused window: Enter, Tab, Escape, arrows, F1-F12, \
or chords like ctrl+c, ctrl+shift+t, alt+F4."
    }
    async fn confirm_summary(&self, args: &KeyboardKeyArgs, _ctx: &ToolCtx) -> Option<String> {
        let mut chord = args.modifiers.clone();
        chord.push(args.key.clone());
        Some(format!("Press {}", chord.join("+")))
    }
    async fn call(&self, args: KeyboardKeyArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let (modifiers, key) = parse_chord(&args.key, &args.modifiers)?;
        self.0
            .run(ctx, move |enigo, _stop| {
                for modifier in &modifiers {
                    enigo.key(*modifier, Direction::Press)?;
                }
                let pressed = enigo.key(key, Direction::Click);
                // Modifiers are released even when the key failed.
                for modifier in modifiers.iter().rev() {
                    enigo.key(*modifier, Direction::Release)?;
                }
                pressed
            })
            .await?;
        let mut chord = args.modifiers.clone();
        chord.push(args.key);
        Ok(ToolOutput::text(format!("Pressed {}.", chord.join("+"))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chords_and_key_names_parse() {
        let (mods, key) = parse_chord("ctrl+shift+T", &[]).unwrap();
        assert_eq!(mods, vec![Key::Control, Key::Shift]);
        assert_eq!(key, Key::Unicode('t'));
        let (mods, key) = parse_chord("Enter", &["alt".into()]).unwrap();
        assert_eq!((mods, key), (vec![Key::Alt], Key::Return));
        assert_eq!(parse_chord("+", &[]).unwrap().1, Key::Unicode('+'));
        let (mods, key) = parse_chord(" ctrl + + ", &[" Shift ".into()]).unwrap();
        assert_eq!(
            (mods, key),
            (vec![Key::Control, Key::Shift], Key::Unicode('+'))
        );
        assert!(parse_chord("hyper+x", &[]).is_err());
        assert!(parse_chord("ctrl+", &[]).is_err());
        let err = parse_key("Launch").unwrap_err().to_string();
        assert!(err.contains("unknown key \"Launch\""), "{err}");
    }
}
