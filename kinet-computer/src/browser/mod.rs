//! A dedicated Chrome for the agent (feature `browser`): its own profile
//! directory, started on first use, restarted when it dies, driven over the
//! DevTools protocol over a pipe (chromiumoxide, plus a client of kinet's
//! own for navigations and frames of other sites, sharing the pipe).
//!
//! # What the model reads
//!
//! Pages come as text snapshots: headings, text blocks, code blocks exactly
//! as rendered (`- code: |` then the lines), lists (`- listitem`), tables
//! (`- row: a | b`) and frames (`- iframe "title" [frame=f3]:`) nested by
//! indentation, and every interactive element with a ref (`[ref=e12]`,
//! `[ref=f3e12]` inside a frame). Text blocks are whole up to 4,000
//! characters; a longer one ends with a marker naming the ref whose
//! snapshot shows all of it. `browser_snapshot` takes a `root` (a ref or a
//! CSS selector), a `depth` and a `mode` (`full`, `interactive`, `text`).
//! After an action the model reads what changed since the last snapshot
//! (`added:` / `removed:` lines with refs) when that is shorter than the
//! page; a snapshot longer than [`BrowserConfig::snapshot_limit`] is shown
//! in part and saved whole to a file whose path is in the result.
//!
//! # What the tools promise
//!
//! - **Truthful actions.** A click is done only when the element itself
//!   (or something inside it) is the topmost element at its centre, and
//!   the press is checked to have landed there. Hidden, disabled
//!   (`:disabled`, also through a disabled fieldset, and `aria-disabled`),
//!   covered or moving elements are waited for up to
//!   [`BrowserConfig::action_wait`], then refused with the reason.
//! - **Bounded time.** Every call finishes within
//!   [`BrowserConfig::navigation_timeout`] plus
//!   [`BrowserConfig::command_timeout`]. A navigation that does not load in
//!   time is stopped and the result says where the tab stayed; a click
//!   whose page has not answered is reported as done and still loading
//!   (the tab is then not taken for a hung one). Results carry the HTTP
//!   status of the document landed on.
//! - **Web pages only** by default: `file:` only when
//!   [`BrowserConfig::allow_file_urls`] is set, and then inside the call's
//!   workspace roots; other schemes only when named in
//!   [`BrowserConfig::allowed_schemes`].
//! - **Nothing left behind.** Chrome runs in kinet's process containment
//!   ([`kinet_core::sandbox::Launch`]): on Linux every Chrome process ends
//!   when the host exits in any way, SIGKILL included, and a watcher
//!   removes the temporary profile.
//! - **No DevTools port.** Chrome is driven over `--remote-debugging-pipe`
//!   (its descriptors 3 and 4): no TCP port is open while it runs, so no
//!   other local process or user can drive it. The driving library, which
//!   speaks WebSocket only, connects to a one-time loopback endpoint whose
//!   path holds 128 random bits and which closes as soon as it has
//!   connected, during the launch.
//! - **Confined writes** ([`BrowserConfig::confine_writes`], on by
//!   default): Chrome runs in kinet's sandbox with the network on. Landlock
//!   allows writes only to the profile, the downloads directory and
//!   Chrome's own `/proc`; its temp directory is a tmpfs private to it, so
//!   the Unix socket of Chrome's process singleton (Chrome always makes
//!   one) cannot be reached from outside; the session bus, the ssh agent
//!   and (headless) X11 sockets are hidden.
//!
//! # What cannot be reached
//!
//! Closed shadow roots (as in the browsers' own accessibility tools),
//! cross-origin frames nested more than four deep, `<canvas>` and plugin
//! content, and the inside of `<select>` pop-ups (choose options with
//! `browser_select`).

mod actions;
mod config;
mod dialogs;
mod document;
mod frames;
mod inspect;
mod launch;
mod link;
mod navigation;
mod pipe;
mod policy;
mod session;
mod shared;
mod tabs;
mod tools;
mod view;

pub use actions::{Snapshot, SnapshotMode, SnapshotOptions, click, select, snapshot, type_text};
/// A tab of the session's browser, as [`BrowserSession`] hands it out
/// (chromiumoxide's; for DevTools work the tools do not cover, depend on
/// `chromiumoxide` 0.9 and use its protocol types on it).
pub use chromiumoxide::Page;
pub use config::BrowserConfig;
pub use inspect::{BrowserScreenshotArgs, EvalArgs};
pub use session::BrowserSession;
pub use tabs::{TabAction, TabsArgs};
pub use tools::{BrowserTools, ClickArgs, NavigateArgs, SelectArgs, SnapshotArgs, TypeArgs};

/// A DevTools or connection error as a [`crate::ComputerError`].
fn browser_error(error: impl std::fmt::Display) -> crate::ComputerError {
    crate::ComputerError::Browser(error.to_string())
}
