//! kinet: embeddable, tool-using AI agents.
//!
//! This facade re-exports the crate family behind cargo features:
//!
//! | module | crate | feature |
//! |---|---|---|
//! | [`core`] | `kinet-core`: `Tool`, `ToolCtx`, `ConfirmHandler`, providers, the loop | always |
//! | `tools` | `kinet-tools`: shell, files, grep, glob, git, web, todo, sub-agents | `tools` (default) |
//! | `mcp` | `kinet-mcp`: MCP client hub and server | `mcp` |
//! | `memory` | `kinet-memory`: SQLite facts, blocks, recall, triples | `memory` |
//! | `computer` | `kinet-computer`: screenshots, input, headless Chrome | `computer` |
//! | `restate` | `kinet-restate`: durable runs, an agent as a Restate virtual object | `restate` |
//! | `acp` | `kinet-acp`: an Agent Client Protocol server for editors | `acp` |
//!
//! The most used core items are also at the crate root.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use kinet::Agent;
//! use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
//!
//! let agent = Agent::builder(ScriptedProvider::new([ScriptedTurn::text("Hello!")])).build();
//! let outcome = agent.run_to_completion("hi").await;
//! assert_eq!(outcome.final_text().as_deref(), Some("Hello!"));
//! # }
//! ```

pub use kinet_core as core;
pub use kinet_core::confirm::ConfirmRequest;
pub use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
pub use kinet_core::{
    Agent, AgentEvent, ApprovalPolicy, ConfirmDecision, ConfirmHandler, Conversation, Message,
    Provider, RunOutcome, RunStop, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput, Toolset,
    async_trait,
};

#[cfg(feature = "acp")]
pub use kinet_acp as acp;
#[cfg(feature = "computer")]
pub use kinet_computer as computer;
#[cfg(feature = "mcp")]
pub use kinet_mcp as mcp;
#[cfg(feature = "memory")]
pub use kinet_memory as memory;
#[cfg(feature = "restate")]
pub use kinet_restate as restate;
#[cfg(feature = "tools")]
pub use kinet_tools as tools;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
