//! Computer use for kinet agents: screenshots, mouse and keyboard, and a
//! dedicated headless Chrome.
//!
//! | tools | feature | read-only |
//! |---|---|---|
//! | `browser_navigate`, `browser_click`, `browser_type`, `browser_select`, `browser_eval` ([`browser::BrowserTools`]) | `browser` | no |
//! | `browser_snapshot`, `browser_screenshot`, `browser_tabs` (list) | `browser` | yes |
//!
//! Everything that changes something goes through the agent's
//! [`ConfirmHandler`](kinet_core::ConfirmHandler).

#[cfg(feature = "browser")]
pub mod browser;
mod error;

pub use error::ComputerError;
pub use kinet_core;
