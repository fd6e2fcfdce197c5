//! MCP for kinet agents: a client hub that discovers the user's configured
//! MCP servers (Claude Desktop, Claude Code, Codex) and exposes their tools
//! to the loop as `mcp__<server>__<tool>`.
//!
//! - [`Discovery`] reads the configuration files; every server is tagged
//!   with its [`ConfigSource`], and a bad file is reported, never fatal.

mod config;

pub use config::{
    ConfigSource, Discovered, Discovery, ServerConfig, ServerTransport, SourceProblem,
};
pub use kinet_core;
