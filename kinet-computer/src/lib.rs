//! Computer use for kinet agents: screenshots, mouse and keyboard, and a
//! dedicated headless Chrome. Each part is a cargo feature, so a host that
//! wants only the browser does not build screen capture. `input` and
//! `browser` are on by default and need no system library to build;
//! `screen` is off by default because screen capture builds against the
//! system's X, Wayland, PipeWire and D-Bus libraries (on Debian: `libxcb1-dev
//! libxrandr-dev libdbus-1-dev libpipewire-0.3-dev libwayland-dev libegl-dev
//! libgbm-dev libclang-dev pkg-config`):
//!
//! | tools | feature | read-only |
//! |---|---|---|
//! | `screenshot`, `screenshot_window` ([`ScreenTools`]) | `screen` | yes |
//! | `mouse_click`, `mouse_scroll`, `mouse_drag`, `keyboard_type`, `keyboard_key` ([`InputTools`]) | `input` | no |
//! | `browser_navigate`, `browser_click`, `browser_type`, `browser_select`, `browser_eval` ([`browser::BrowserTools`]) | `browser` | no |
//! | `browser_snapshot`, `browser_screenshot`, `browser_tabs` (list) | `browser` | yes |
//! | `ax_script` (macOS only) | `input` | no |
//!
//! Everything that changes something goes through the agent's
//! [`ConfirmHandler`](kinet_core::ConfirmHandler). Screen and input tools
//! share a [`ScreenSpace`]: coordinates the model reads off a scaled
//! screenshot are mapped back to screen pixels.
//!
//! ```
//! let tools = kinet_computer::ComputerPack::new().toolset();
//! let names: Vec<_> = tools.static_tools().names().collect();
//! # #[cfg(all(feature = "screen", feature = "input", feature = "browser"))]
//! assert!(names.contains(&"screenshot") && names.contains(&"mouse_click") && names.contains(&"browser_snapshot"));
//! ```

#[cfg(all(target_os = "macos", feature = "input"))]
mod ax;
#[cfg(feature = "browser")]
pub mod browser;
mod coords;
mod error;
#[cfg(feature = "input")]
mod input;
#[cfg(feature = "screen")]
mod screen;

#[cfg(all(target_os = "macos", feature = "input"))]
pub use ax::{AxScriptArgs, AxScriptTool};
pub use coords::{Mapping, ScreenSpace};
pub use error::ComputerError;
#[cfg(feature = "input")]
pub use input::{
    InputConfig, InputTools, KeyboardKeyArgs, KeyboardTypeArgs, MouseButton, MouseClickArgs,
    MouseDragArgs, MouseScrollArgs, Point,
};
pub use kinet_core;
#[cfg(feature = "screen")]
pub use screen::{HideSelf, ScreenConfig, ScreenTools, ScreenshotArgs, ScreenshotWindowArgs};

/// The computer-use pack: every tool of the enabled features, screen and
/// input sharing one [`ScreenSpace`], and a browser started on first use.
/// Build the parts yourself to keep a handle on the
/// [`BrowserSession`](browser::BrowserSession) (to shut Chrome down) or to
/// change settings.
#[derive(Debug, Clone, Copy, Default)]
pub struct ComputerPack;

impl ComputerPack {
    /// The pack with default settings.
    pub fn new() -> Self {
        Self
    }

    /// Every tool of the enabled features.
    pub fn toolset(&self) -> kinet_core::Toolset {
        computer_toolset()
    }
}

fn computer_toolset() -> kinet_core::Toolset {
    #[allow(unused_mut)]
    let mut tools = kinet_core::Toolset::new();
    #[allow(unused_variables)]
    let space = ScreenSpace::new();
    #[cfg(feature = "screen")]
    ScreenTools::new(ScreenConfig::default(), space.clone()).add_to(&mut tools);
    #[cfg(feature = "input")]
    InputTools::new(InputConfig::default(), space).add_to(&mut tools);
    #[cfg(all(target_os = "macos", feature = "input"))]
    tools.add(AxScriptTool);
    #[cfg(feature = "browser")]
    browser::BrowserTools::new(browser::BrowserSession::new(
        browser::BrowserConfig::default(),
    ))
    .add_to(&mut tools);
    tools
}
