//! Computer use for kinet agents: screenshots, mouse and keyboard, a dedicated headless Chrome.
//!
//! This crate is a placeholder in the workspace layout; its tools land in
//! their own issues. It depends only on `kinet-core`, like every pack.

pub use kinet_core;
