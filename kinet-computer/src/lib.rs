//! Computer use for kinet agents: a dedicated headless Chrome, mouse and
//! keyboard, and screenshots, each a cargo feature (`browser` and `input`
//! on by default, `screen` off).
//!
//! ```no_run
//! # #[cfg(feature = "browser")]
//! use kinet_computer::browser::{BrowserConfig, BrowserSession, BrowserTools};
//! use kinet_core::{Agent, ApprovalPolicy, Provider};
//!
//! # #[cfg(feature = "browser")]
//! async fn example(provider: impl Provider + 'static) {
//!     // Chrome with a fresh profile, started on the first browser call.
//!     let session = BrowserSession::new(BrowserConfig::default());
//!     let agent = Agent::builder(provider)
//!         .tools(BrowserTools::new(session.clone()).toolset())
//!         // Snapshots never ask. Navigating is allowed here; clicks, typing
//!         // and scripts still go to the confirm handler (none: refused).
//!         .policy(ApprovalPolicy::ask().allow("browser_navigate"))
//!         .build();
//!     let outcome = agent.run_to_completion("What is the heading of https://example.com?").await;
//!     let heading = outcome.final_text();
//!     session.shutdown().await; // Chrome and its temporary profile are gone
//! }
//! # fn main() {}
//! ```
//!
//! # Where to go next
//!
//! - [`ComputerPack`]: every tool of the enabled features in one toolset,
//!   screen and input sharing one [`ScreenSpace`] (coordinates read off a
//!   scaled screenshot are mapped back to screen pixels).
//! - [`browser`]: what the model reads of a page, what the tools promise
//!   and what they cannot reach; [`browser::BrowserTools`] (`browser_navigate`,
//!   `browser_snapshot`, `browser_click`, `browser_type`, `browser_select`,
//!   `browser_eval`, `browser_screenshot`, `browser_tabs`) on a
//!   [`browser::BrowserSession`] set up by [`browser::BrowserConfig`].
//! - [`InputTools`] (feature `input`): `mouse_click`, `mouse_scroll`,
//!   `mouse_drag`, `keyboard_type`, `keyboard_key`; `ax_script` on macOS.
//! - `ScreenTools` (feature `screen`): `screenshot` and
//!   `screenshot_window`. It builds against the system's X, Wayland,
//!   PipeWire and D-Bus libraries; on Debian: `libxcb1-dev libxrandr-dev
//!   libdbus-1-dev libpipewire-0.3-dev libwayland-dev libegl-dev
//!   libgbm-dev libclang-dev pkg-config`.
//!
//! Screenshots, `browser_snapshot`, `browser_screenshot` and listing tabs
//! only read and never ask; every other tool changes something, so an
//! asking policy puts it to the agent's
//! [`ConfirmHandler`](kinet_core::ConfirmHandler).

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
