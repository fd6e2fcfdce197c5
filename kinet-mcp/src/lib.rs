//! MCP for kinet agents: a client hub that discovers the user's configured
//! MCP servers (Claude Desktop, Claude Code, Codex) and exposes their tools
//! to the loop as `mcp__<server>__<tool>`.
//!
//! - [`Discovery`] reads the configuration files; every server is tagged
//!   with its [`ConfigSource`], and a bad file is reported, never fatal.
//! - [`McpHub`] starts every server concurrently (stdio children in their
//!   own process group, or streamable HTTP), lists their tools, restarts
//!   dropped connections with backoff, refreshes on `tools/list_changed`,
//!   and is a [`kinet_core::tool::ToolSource`] for the loop.
//!
//! - [`McpServer`] serves a kinet agent (an `agent` and a `reply` tool, plus
//!   chosen tools) to other MCP clients over stdio or streamable HTTP.
//!
//! Every MCP tool call runs through a kinet-core call pipeline: the hub's
//! tools are ordinary tools of the agent's pipeline (their server's
//! `readOnlyHint` and other hints become their annotations, their timeout
//! bounds the call's deadline), [`McpHub::call`] runs a direct call through
//! one, and served tools run through the agent's pipeline (its hooks and
//! layers) with the server's own working directory, roots (by default the
//! working directory: paths outside are refused), approval policy (by
//! default only calls that change nothing run) and timeout.
//!
//! Modules: `config` (discovery), `supervisor` (one client connection,
//! restarted when it drops), `remote_tool` (an MCP tool as a kinet tool),
//! `hub`, `settings`, `server` (kinet as an MCP server).
//!
//! Built on the official Rust SDK, `rmcp`.

mod config;
mod content;
mod hub;
mod naming;
mod progress;
mod remote_tool;
mod server;
mod settings;
mod supervisor;

pub use config::{
    ConfigSource, Discovered, Discovery, ServerConfig, ServerTransport, SourceProblem,
};
pub use hub::{McpHub, ServerStatus};
pub use kinet_core;
pub use naming::{MAX_TOOL_NAME, qualified_tool_name};
pub use server::{HttpServerHandle, McpServer, McpServerBuilder, ServeError};
pub use settings::HubSettings;
pub use supervisor::ServerState;
