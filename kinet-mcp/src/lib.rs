//! MCP client hub and MCP server for kinet agents.
//!
//! This crate is a placeholder in the workspace layout; its tools land in
//! their own issues. It depends only on `kinet-core`, like every pack.

pub use kinet_core;
