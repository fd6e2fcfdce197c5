//! kinet agents in editors: an [Agent Client Protocol](https://agentclientprotocol.com)
//! server, [`AcpServer`]. Zed, JetBrains IDEs, Neovim and other editors
//! start an ACP agent as a child process and talk to it over stdio; with
//! this crate any kinet agent is one.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use kinet_acp::AcpServer;
//! use kinet_core::builder::Workspace;
//! use kinet_core::sandbox::launcher::launcher;
//! use kinet_core::{Agent, ApprovalPolicy};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), kinet_acp::AcpError> {
//!     // First thing: when the editor's terminal starts this program to run
//!     // a shell command, `launcher` runs it, confined, and never returns.
//!     let launcher = launcher();
//! #   let provider = kinet_core::testing::ScriptedProvider::new([kinet_core::testing::ScriptedTurn::text("hi")]);
//!     let provider = Arc::new(provider); // any kinet Provider, shared by the sessions
//!     let tools = kinet_tools::default_tools();
//!     // One agent per session, confined to the editor's project.
//!     let mut server = AcpServer::new(move |cwd| {
//!         Agent::builder(provider.clone())
//!             .tools(tools.clone())
//!             .workspace(Workspace::new().cwd(cwd).root(cwd))
//!             .policy(ApprovalPolicy::ask()) // asked of the person in the editor
//!             .build()
//!     });
//!     if let Some(launcher) = launcher {
//!         server = server.terminals(launcher); // shell commands in the editor's terminals
//!     }
//!     server.serve_stdio().await
//! }
//! ```
//!
//! # Where to go next
//!
//! - [`AcpServer`]: what the editor sees of a run (text, thoughts, tool
//!   calls, diffs, the todo list as the plan), approvals as
//!   `session/request_permission`, and the editor's buffers for the file
//!   tools when it offers them.
//! - [`AcpServer::store`]: sessions saved after each prompt, and
//!   `session/load` to replay one, in this process or a later one.
//! - [`AcpServer::terminals`] and
//!   [`kinet_core::sandbox::launcher::launcher`]: shell commands in the
//!   editor's terminals, where the person watches them, confined as kinet
//!   confines them.
//!
//! - [`AcpEngine`] and [`EngineTable`]: the other side. Coding agents
//!   that speak ACP (Gemini CLI, Claude Code and Codex through their
//!   adapters, opencode, kinet itself) as read-only `dispatch_agent`
//!   engines, their processes confined by kinet's sandbox and their file
//!   reads and terminals served by kinet.
//!
//! A crate of its own, as `kinet-mcp` is for MCP: it carries the
//! `agent-client-protocol` dependency, and only programs an editor starts
//! need it.

pub mod engine;
mod permission;
mod server;
mod terminal;
mod updates;

pub use engine::{AcpEngine, EngineConfigError, EngineTable};
pub use server::{AcpError, AcpServer};
