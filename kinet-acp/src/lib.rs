//! kinet agents in editors: an [Agent Client Protocol](https://agentclientprotocol.com)
//! server ([`AcpServer`]). Zed, JetBrains IDEs, Neovim and other editors
//! launch an ACP agent as a child process and talk to it over stdio; with
//! this crate, any kinet agent is such an agent.
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
