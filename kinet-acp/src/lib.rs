//! kinet agents in editors: an [Agent Client Protocol](https://agentclientprotocol.com)
//! server ([`AcpServer`]). Zed, JetBrains IDEs, Neovim and other editors
//! launch an ACP agent as a child process and talk to it over stdio; with
//! this crate, any kinet agent is such an agent.
//!
//! What the editor offers is used: its buffers for the file tools (reads,
//! and writes when it also reads), its terminals for the shell tool when
//! the program hands the server its launcher
//! ([`AcpServer::terminals`]; call
//! [`kinet_core::sandbox::launcher::launcher`] first thing in `main`), so
//! commands run where the person sees them, confined as kinet confines
//! them.
//!
//! A crate of its own (as `kinet-mcp` is for MCP) rather than a module:
//! it carries its own protocol dependency (the `agent-client-protocol`
//! crate, whose types it uses as they are) and is needed only by programs
//! an editor launches.

mod permission;
mod server;
mod terminal;
mod updates;

pub use server::{AcpError, AcpServer};
