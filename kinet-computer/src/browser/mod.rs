//! A dedicated Chrome for the agent (feature `browser`): its own profile
//! directory, started on first use, restarted when it dies, driven over the
//! DevTools protocol (chromiumoxide).
//!
//! The model reads pages as compact text snapshots in which every
//! interactive element carries a ref (`[ref=e12]`); the action tools take
//! those refs, click with real mouse events and answer with the page as it
//! is afterwards.

mod actions;
mod dialogs;
mod frames;
mod launch;
mod link;
mod navigation;
mod policy;
mod session;
mod tabs;
mod tools;
mod view;

pub use actions::{Snapshot, SnapshotMode, SnapshotOptions, click, select, snapshot, type_text};
/// The DevTools client the session's pages come from, for work the tools
/// do not cover.
pub use chromiumoxide;
pub use session::{BrowserConfig, BrowserSession};
pub use tabs::{TabAction, TabsArgs};
pub use tools::{
    BrowserScreenshotArgs, BrowserTools, ClickArgs, EvalArgs, NavigateArgs, SelectArgs,
    SnapshotArgs, TypeArgs,
};

/// A DevTools or connection error as a [`crate::ComputerError`].
fn browser_error(error: impl std::fmt::Display) -> crate::ComputerError {
    crate::ComputerError::Browser(error.to_string())
}
