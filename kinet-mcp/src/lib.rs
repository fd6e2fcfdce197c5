//! MCP for kinet agents: a client hub that discovers the user's configured
//! MCP servers (Claude Code, Claude Desktop, Codex, Cursor, VS Code) and
//! exposes their tools to the loop as `mcp__<server>__<tool>`.
//!
//! - [`Discovery`] reads the configuration files with Claude Code's
//!   documented semantics (scopes local > project > user, approvals,
//!   `${VAR}` expansion that names what is missing, parent `.mcp.json`
//!   files, the managed file); every server is tagged with its
//!   [`ConfigSource`], and a bad file is reported, never fatal.
//! - [`McpHub`] starts every server concurrently (stdio children in their
//!   own process group, streamable HTTP, or the legacy HTTP+SSE
//!   transport), lists their tools, restarts dropped connections with
//!   backoff, pings remote servers so one that went away is noticed,
//!   refreshes on `tools/list_changed`, and is a
//!   [`kinet_core::tool::ToolSource`] for the loop. Tool schemas have every
//!   `$ref` inlined; each provider gets them in its own dialect
//!   ([`kinet_core::schema`]). Past a token budget the model gets
//!   `mcp_tool_search` instead of every schema (10% of the model's window
//!   when the agent knows it; [`HubSettings`]).
//! - [`oauth`]: OAuth 2.1 for remote servers (discovery, PKCE, dynamic
//!   registration, refresh, a token store; the browser step is the host's).
//! - [`resources`]: servers' resources and prompts for the host, and
//!   resources for the model (`mcp_list_resources`, `mcp_read_resource`).
//!
//! - [`McpServer`] serves a kinet agent (an `agent` and a `reply` tool, plus
//!   chosen tools) to other MCP clients over stdio or streamable HTTP.
//!
//! Protocol revisions. Both sides speak 2025-11-25 and 2026-07-28, chosen
//! per connection (the hub probes with `server/discover` and falls back to
//! `initialize`; [`ServerStatus::protocol`] says which) and, on the server,
//! per request (each 2026-07-28 request carries its version and
//! capabilities). From rmcp: the wire types, `server/discover`, per-request
//! metadata, the HTTP header checks, stateless serving. kinet's own: the
//! `input_required` rounds of served tools ([`served::ClientInput`], answers
//! sealed in `requestState`), the hub answering rounds and task questions
//! through the host's form, Tasks (a served tool marked
//! [`McpServerBuilder::run_as_task`] or
//! [`run_only_as_task`](McpServerBuilder::run_only_as_task) asks its first
//! questions in rounds of the call, then becomes a task kept in the
//! session store when it waits on other work or calls
//! [`served::ClientInput::escalate_to_task`]; the hub follows a server's
//! task by polling, `tasks/update` and `tasks/cancel`), the hub's
//! `subscriptions/listen` stream on 2026-07-28 connections (list changes
//! and subscribed resources, reopened when the set changes or the stream
//! ends; rmcp carries the stream), and `outputSchema` enforced both ways.
//! The official conformance suite runs in `tests/conformance.rs` (both
//! revisions and the extensions); what kinet does not offer (resources,
//! prompts and completions served, audio and embedded resources in tool
//! results, machine-to-machine OAuth grants and DPoP in the hub) is listed
//! with reasons in `tests/conformance/waivers/`.
//!
//! Deprecated by 2026-07-28 (kept for 2025-11-25 peers until at least
//! 2027-07-28, the end of the revision's 12-month window): the legacy
//! HTTP+SSE transport, roots, sampling and logging
//! ([`served::ClientInput::sample`] and [`roots`](served::ClientInput::roots)
//! among them; the hub declares neither).
//!
//! Every MCP tool call runs through a kinet-core call pipeline: the hub's
//! tools are ordinary tools of the agent's pipeline (their server's
//! `readOnlyHint` and other hints become their annotations, failing
//! closed: a tool without annotations, or without `readOnlyHint: true`,
//! is mutating, so the approval policy asks, destructive, open-world and
//! scheduled alone; a host's ask or deny rule, or a rules file, overrides
//! a hint in the strict direction only; their timeout bounds the call's
//! deadline), [`McpHub::call`] runs a direct call through
//! one, and served tools run through the agent's pipeline (its hooks and
//! layers) with the server's own working directory, roots (by default the
//! working directory: paths outside are refused), approval policy (by
//! default only calls that change nothing run) and timeout.
//!
//! An MCP tool's output is untrusted for the injection defence
//! ([`kinet_core::pipeline::Defence`]) unless its server says
//! `openWorldHint: false` or the host declares the server trusted
//! (`Defence::trust("mcp__<server>__*", Trust::Trusted)`), and a call the
//! defence flags reaches the served agent's client as an elicitation that
//! names the untrusted source.
//!
//! Modules: `config` (discovery: `claude`, `editors`, `codex`, `plugins`,
//! `entry`, `expand`, `policy`), `supervisor` (one client connection,
//! restarted when it drops, re-authorized when the server asks; `connect`
//! starts the transport), `oauth` (`metadata` discovery, `flow` steps,
//! `authorizer` per server, `client` the HTTP client that carries tokens,
//! `store`), `sse` (the legacy SSE client transport), `remote_tool` (an
//! MCP tool as a kinet tool), `hub`, `settings`, `server` (kinet as an MCP
//! server; `gate` checks origin and token, `conversations` holds and
//! claims them).
//!
//! Built on the official Rust SDK, `rmcp`.

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
