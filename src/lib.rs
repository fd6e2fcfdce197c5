//! kinet: tool-using AI agents embedded in your Rust program.
//!
//! You bring the model provider, the tools and the approval UI; kinet runs
//! the loop. It calls the model and runs the tool calls it asks for:
//! read-only ones concurrently, mutating ones one at a time and only once
//! your [`ConfirmHandler`] approves. It truncates what the model sees while
//! your program gets everything, and reports it all as a stream of
//! [`AgentEvent`]s.
//!
//! # A first agent
//!
//! ```
//! use kinet::schemars::{self, JsonSchema};
//! use kinet::testing::{ScriptedProvider, ScriptedTurn};
//! use kinet::{Agent, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput, async_trait};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Args {
//!     /// The text to count words in.
//!     text: String,
//! }
//!
//! struct WordCount;
//!
//! #[async_trait]
//! impl Tool for WordCount {
//!     type Args = Args;
//!     fn name(&self) -> &str { "word_count" }
//!     fn description(&self) -> &str { "Counts the words in a text." }
//!     fn annotations(&self) -> ToolAnnotations { ToolAnnotations::read_only() }
//!     async fn call(&self, args: Args, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
//!         Ok(ToolOutput::text(args.text.split_whitespace().count().to_string()))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // A scripted model, so this runs offline; a real one is
//! // `kinet::core::provider::OpenAiProvider` or another provider.
//! let model = ScriptedProvider::new([
//!     ScriptedTurn::new().tool_call("c1", "word_count", serde_json::json!({"text": "a b c"})),
//!     ScriptedTurn::text("3 words."),
//! ]);
//! let agent = Agent::builder(model).tool(WordCount).build();
//! let outcome = agent.run_to_completion("How many words in 'a b c'?").await;
//! assert_eq!(outcome.final_text().as_deref(), Some("3 words."));
//! # }
//! ```
//!
//! # Where to go next
//!
//! - [`AgentBuilder`]: the everyday settings, and [`builder`] for the
//!   groups (approval, workspace, calls, limits, sessions, sub-agents).
//! - [`ConfirmHandler`] and [`ApprovalPolicy`]: who approves what. Without
//!   a handler, a mutating call is refused (the refusal says how to fix
//!   it).
//! - [`core`]: the whole core (providers, the pipeline, rules as data,
//!   sandboxing, sessions, the injection defence), and the crates below.
//!
//! | module | crate | feature |
//! |---|---|---|
//! | [`core`] | `kinet-core`: tools, the loop, providers, approvals, the pipeline | always |
//! | `tools` | `kinet-tools`: shell, files, grep, glob, git, web, todo, sub-agents | `tools` |
//! | `mcp` | `kinet-mcp`: MCP client hub and server | `mcp` |
//! | `memory` | `kinet-memory`: SQLite facts, blocks, recall, triples | `memory` |
//! | `computer` | `kinet-computer`: screenshots, input, headless Chrome | `computer` |
//! | `restate` | `kinet-restate`: durable runs on Restate | `restate` |
//! | `acp` | `kinet-acp`: the Agent Client Protocol, both sides: a server for editors, and other coding agents as engines | `acp` |
//!
//! The default features are the providers: `openai` (OpenAI-compatible
//! servers: OpenAI, GLM, Ollama, vLLM, llama.cpp; and the Responses API)
//! and `anthropic`. The packs above are one feature each, and `full` turns
//! on everything.

pub use kinet_core as core;
pub use kinet_core::builder;
pub use kinet_core::confirm::{ConfirmError, ConfirmRequest};
pub use kinet_core::{
    Agent, AgentBuilder, AgentError, AgentEvent, AgentRun, ApprovalPolicy, ConfirmDecision,
    ConfirmHandler, Conversation, Message, Provider, RunOutcome, RunStop, Tool, ToolAnnotations,
    ToolCtx, ToolError, ToolOutput, Toolset, async_trait,
};

/// Offline, scripted models for examples and tests.
pub mod testing {
    pub use kinet_core::testing::{ScriptedProvider, ScriptedTurn, skipped};
}

/// Re-exported so `#[derive(JsonSchema)]` on a tool's arguments works with
/// kinet alone: `use kinet::schemars::{self, JsonSchema};`.
pub use schemars;

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

/// The README's examples, compiled and run as doc tests (with the features
/// they use; CI builds all of them).
#[cfg(all(
    doctest,
    feature = "tools",
    feature = "memory",
    feature = "restate",
    feature = "computer",
    feature = "acp"
))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
