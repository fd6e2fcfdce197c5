//! Screenshot space and screen space: the model reads coordinates off a
//! (possibly scaled) screenshot; input happens in screen pixels.

use std::sync::{Arc, Mutex};

/// How the last screenshot maps onto the screen: its top-left corner in
/// screen pixels and screen pixels per screenshot pixel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mapping {
    /// Screen x of the screenshot's left edge.
    pub origin_x: i32,
    /// Screen y of the screenshot's top edge.
    pub origin_y: i32,
    /// Screen pixels per screenshot pixel (1.0 when not scaled).
    pub scale: f64,
}

impl Mapping {
    /// Screen pixels are screenshot pixels.
    pub const IDENTITY: Mapping = Mapping {
        origin_x: 0,
        origin_y: 0,
        scale: 1.0,
    };

    /// The screen point of a screenshot point.
    pub fn to_screen(&self, x: f64, y: f64) -> (i32, i32) {
        (
            self.origin_x + (x * self.scale).round() as i32,
            self.origin_y + (y * self.scale).round() as i32,
        )
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
    /// A space with no screenshot yet (coordinates are screen pixels).
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the mapping of a screenshot just taken.
    pub fn set(&self, mapping: Mapping) {
        if let Ok(mut last) = self.last.lock() {
            *last = Some(mapping);
        }
    }

    /// The mapping of the latest screenshot, or the identity.
    pub fn current(&self) -> Mapping {
        self.last
            .lock()
            .ok()
            .and_then(|last| *last)
            .unwrap_or(Mapping::IDENTITY)
    }

    /// The screen point of a point in the latest screenshot.
    pub fn to_screen(&self, x: f64, y: f64) -> (i32, i32) {
        self.current().to_screen(x, y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_window_screenshots_map_back_to_screen_pixels() {
        let space = ScreenSpace::new();
        assert_eq!(space.to_screen(10.0, 20.0), (10, 20));
        space.set(Mapping {
            origin_x: 100,
            origin_y: 50,
            scale: 2.0,
        });
        assert_eq!(space.to_screen(10.0, 20.0), (120, 90));
        assert_eq!(space.to_screen(0.25, 0.75), (101, 52));
    }
}
