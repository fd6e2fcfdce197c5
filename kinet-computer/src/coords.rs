//! Screenshot space and screen space: the model reads coordinates off a
//! (possibly scaled) screenshot; input happens in screen coordinates.

use std::sync::{Arc, Mutex};

use crate::ComputerError;

/// How the last screenshot maps onto the screen: its top-left corner in
/// screen coordinates, screen units per screenshot pixel, and its size as
/// the model saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mapping {
    /// Screen x of the screenshot's left edge.
    pub origin_x: i32,
    /// Screen y of the screenshot's top edge.
    pub origin_y: i32,
    /// Screen units (what the input system takes: pixels on X11 and
    /// Windows, points on macOS) per screenshot pixel; 1.0 when not scaled.
    pub scale: f64,
    /// The screenshot's width as shown; points must lie inside it.
    pub width: u32,
    /// The screenshot's height as shown.
    pub height: u32,
}

/// The largest coordinate accepted before any screenshot was taken (X11
/// coordinates are 16-bit).
const MAX_UNMAPPED: f64 = 32767.0;

impl Mapping {
    /// The screen point of a screenshot point; points outside the
    /// screenshot (or not numbers) are refused.
    ///
    /// ```
    /// let mapping = kinet_computer::Mapping { origin_x: 100, origin_y: 0, scale: 2.0, width: 50, height: 40 };
    /// assert_eq!(mapping.to_screen(10.0, 5.0).unwrap(), (120, 10));
    /// assert!(mapping.to_screen(50.0, 5.0).is_err());
    /// ```
    pub fn to_screen(&self, x: f64, y: f64) -> Result<(i32, i32), ComputerError> {
        let inside = |v: f64, size: u32| v.is_finite() && v >= 0.0 && v < f64::from(size);
        if !inside(x, self.width) || !inside(y, self.height) {
            return Err(ComputerError::InvalidInput(format!(
                "point ({x}, {y}) is outside the latest screenshot, which is {}x{}: x must be \
0 to {}, y 0 to {}",
                self.width,
                self.height,
                self.width.saturating_sub(1),
                self.height.saturating_sub(1)
            )));
        }
        let axis = |origin: i32, v: f64| {
            let screen = f64::from(origin) + (v * self.scale).round();
            // In range: origin and the scaled screenshot both fit the screen.
            (screen.abs() <= f64::from(i32::MAX)).then_some(screen as i32)
        };
        match (axis(self.origin_x, x), axis(self.origin_y, y)) {
            (Some(sx), Some(sy)) => Ok((sx, sy)),
            _ => Err(ComputerError::InvalidInput(format!(
                "point ({x}, {y}) maps outside the screen"
            ))),
        }
    }
}

/// The mapping of the latest screenshot, shared by the screen and input
/// tools of one agent: coordinates the model reads off a scaled screenshot
/// land where it saw them. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ScreenSpace {
    last: Arc<Mutex<Option<Mapping>>>,
}

impl ScreenSpace {
    /// A space with no screenshot yet (coordinates are screen coordinates).
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the mapping of a screenshot just taken.
    pub fn set(&self, mapping: Mapping) {
        if let Ok(mut last) = self.last.lock() {
            *last = Some(mapping);
        }
    }

    /// The mapping of the latest screenshot, if one was taken.
    pub fn current(&self) -> Option<Mapping> {
        self.last.lock().ok().and_then(|last| *last)
    }

    /// The screen point of a point in the latest screenshot (before any
    /// screenshot: screen coordinates, checked to be plausible).
    pub fn to_screen(&self, x: f64, y: f64) -> Result<(i32, i32), ComputerError> {
        match self.current() {
            Some(mapping) => mapping.to_screen(x, y),
            None => {
                let ok = |v: f64| v.is_finite() && (0.0..=MAX_UNMAPPED).contains(&v);
                if ok(x) && ok(y) {
                    Ok((x.round() as i32, y.round() as i32))
                } else {
                    Err(ComputerError::InvalidInput(format!(
                        "point ({x}, {y}) is not on the screen; take a screenshot first"
                    )))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_window_screenshots_map_back_to_screen_pixels() {
        let space = ScreenSpace::new();
        assert_eq!(space.to_screen(10.0, 20.0).unwrap(), (10, 20));
        assert!(space.to_screen(-1.0, 20.0).is_err());
        assert!(space.to_screen(f64::NAN, 20.0).is_err());
        assert!(space.to_screen(1e12, 20.0).is_err());
        space.set(Mapping {
            origin_x: 100,
            origin_y: 50,
            scale: 2.0,
            width: 640,
            height: 400,
        });
        assert_eq!(space.to_screen(10.0, 20.0).unwrap(), (120, 90));
        assert_eq!(space.to_screen(0.25, 0.75).unwrap(), (101, 52));
        assert_eq!(space.to_screen(639.0, 399.0).unwrap(), (1378, 848));
        let err = space.to_screen(640.0, 10.0).unwrap_err().to_string();
        assert!(
            err.contains("outside the latest screenshot, which is 640x400"),
            "{err}"
        );
        assert!(space.to_screen(10.0, f64::INFINITY).is_err());
        assert!(space.to_screen(-0.5, 10.0).is_err());
    }
}
