//! MCP for kinet agents, both ways: a client hub that starts the MCP
//! servers the user configured (Claude Code, Claude Desktop, Codex, Cursor,
//! VS Code) and gives their tools to an agent as `mcp__<server>__<tool>`,
//! and a server that offers a kinet agent to other MCP clients.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use kinet_core::{Agent, Provider, Toolset};
//! use kinet_mcp::{Discovery, HubSettings, McpHub};
//!
//! async fn example(provider: impl Provider + 'static) {
//!     // Every server configured on this machine, started concurrently.
//!     let found = Discovery::new().discover();
//!     let hub = McpHub::from_discovery(&found, HubSettings::default());
//!     hub.wait_settled(Duration::from_secs(30)).await;
//!     // The hub is a tool source: each turn offers the ready servers' tools.
//!     let agent = Agent::builder(provider)
//!         .tools(Toolset::new().with_source(Arc::new(hub.clone())))
//!         .build();
//!     let answer = agent.run_to_completion("Which issues are open?").await.final_text();
//!     hub.shutdown().await; // stops every server
//! }
//! # fn main() {}
//! ```
//!
//! # Where to go next
//!
//! - [`Discovery`]: reads the configuration files as Claude Code does
//!   (scopes, approvals, `${VAR}` expansion, the managed file); each
//!   server carries its [`ConfigSource`], and a bad file is reported in
//!   [`Discovered::problems`], never fatal. [`ServerConfig::stdio`] and
//!   [`ServerConfig::http`] add servers in code.
//! - [`McpHub`]: one supervised connection per server (stdio, streamable
//!   HTTP or legacy HTTP+SSE), restarted when it drops;
//!   [`McpHub::status`] for a host's panel, [`McpHub::call`] for a direct
//!   call, [`HubBuilder`] for elicitation ([`elicit`]) and OAuth
//!   ([`oauth`]).
//! - [`HubSettings`]: timeouts, restarts, and the token budget past which
//!   the model gets `mcp_tool_search` instead of every schema.
//! - [`resources`]: servers' resources and prompts for the host, and
//!   `mcp_list_resources` / `mcp_read_resource` for the model.
//! - [`McpServer`]: serves a kinet agent (an `agent` and a `reply` tool,
//!   plus chosen tools) over stdio or streamable HTTP; [`served`] is what
//!   a served tool can ask of the client that called it.
//!
//! Approval and trust: a server's tool hints become the tool's
//! annotations and fail closed (a tool without `readOnlyHint: true` is
//! mutating, so the approval policy asks); a host's rules override a hint
//! only in the strict direction. An MCP tool's output is untrusted for the
//! injection defence unless its server says `openWorldHint: false` or the
//! host trusts the server with
//! [`Defence::trust`](kinet_core::pipeline::Defence::trust) (pattern
//! `mcp__<server>__*`).
//!
//! Both sides speak MCP 2025-11-25 and 2026-07-28, chosen per connection
//! ([`ServerStatus::protocol`]). The official conformance suite runs in
//! `tests/conformance.rs`; what kinet does not offer is listed with
//! reasons in `tests/conformance/waivers/`. Built on `rmcp`, the official
//! Rust SDK.

mod changes;
mod config;
mod content;
pub mod elicit;
mod errors;
mod headers_helper;
mod hub;
mod naming;
pub mod oauth;
mod offer;
mod progress;
mod remote_tool;
pub mod resources;
mod search;
pub mod served;
mod server;
mod settings;
mod sse;
mod structured;
mod supervisor;

pub use config::{
    ConfigSource, Discovered, Discovery, ServerConfig, ServerTransport, SourceProblem,
};
pub use hub::{HubBuilder, McpHub, ServerStatus};
pub use kinet_core;
pub use naming::{MAX_TOOL_NAME, qualified_tool_name};
pub use offer::ConversationTools;
pub use server::{HttpServerHandle, McpServer, McpServerBuilder, ServeError};
pub use settings::HubSettings;
pub use supervisor::ServerState;
