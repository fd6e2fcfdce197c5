//! The kinet agent core: the [`Tool`] trait, the loop ([`Agent`]), model
//! [providers](provider), approvals, and the one [`pipeline`] every tool
//! call goes through. Most programs use it through the `kinet` facade.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
//! use kinet_core::{Agent, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::json;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct ShoutArgs {
//!     /// The text to shout.
//!     text: String,
//! }
//!
//! struct Shout;
//!
//! #[async_trait::async_trait]
//! impl Tool for Shout {
//!     type Args = ShoutArgs;
//!     fn name(&self) -> &str { "shout" }
//!     fn description(&self) -> &str { "Upper-cases text." }
//!     fn annotations(&self) -> ToolAnnotations { ToolAnnotations::read_only() }
//!     async fn call(&self, args: ShoutArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
//!         Ok(ToolOutput::text(args.text.to_uppercase()))
//!     }
//! }
//!
//! let provider = ScriptedProvider::new([
//!     ScriptedTurn::new().tool_call("c1", "shout", json!({"text": "hi"})),
//!     ScriptedTurn::text("It says HI."),
//! ]);
//! let agent = Agent::builder(provider).tool(Shout).build();
//! let outcome = agent.run_to_completion("shout hi").await;
//! assert_eq!(outcome.final_text().as_deref(), Some("It says HI."));
//! assert_eq!(outcome.conversation.messages[2].text(), "HI");
//! # }
//! ```
//!
//! # Where to go next
//!
//! - Writing tools: [`Tool`], [`ToolCtx`], [`ToolAnnotations`] (read-only?
//!   open-world? they decide approval, scheduling and trust), [`tool`].
//! - Configuring an agent: [`AgentBuilder`] and its groups in [`builder`].
//! - Approvals: [`ConfirmHandler`] (your UI), [`ApprovalPolicy`], rules as
//!   data ([`rules`]), answers given later in another process
//!   ([`deferred`]).
//! - Running: [`Agent::run`] streams [`AgentEvent`]s; [`AgentRun::finish`]
//!   gives the [`RunOutcome`]. A [`Conversation`] is the whole run state;
//!   [`session`] keeps it (resumable, forkable, journalled).
//! - Models: [`provider`] (OpenAI-compatible, Responses, Anthropic, and the
//!   kit for more), [`testing::ScriptedProvider`] offline.
//! - Safety: the [`pipeline`]'s stages in order ([`pipeline::STAGES`]),
//!   command lines [planned](command) and run as checked, the [`sandbox`]
//!   (PID namespace, Landlock, network allowlist), workspace confinement
//!   ([`ToolCtx::workspace_path`]), the injection defence
//!   ([`pipeline::Defence`], [`provenance`]).
//! - Long runs and cost: [`context`] (the context window), [`telemetry`]
//!   (GenAI spans, prices, budget), [`hook`] and [`layer`].
//!
//! Modules import one way, with no circle at any level (CI checks): the
//! data modules at the bottom (messages, decisions, deferred turns, the
//! provenance ledger, then outputs, specs, the conversation and events),
//! then the context and file-system confinement, tools, layers, hooks, the
//! pipeline, the engine and the agent.

// Internal modules import one way (see the module map above).
mod agent;
mod backend;
pub mod command;
mod confine;
pub mod confirm;
pub mod context;
mod ctx;
mod data;
mod decision;
mod engine;
pub mod hook;
pub mod layer;
pub mod pipeline;
#[cfg(feature = "http")]
mod providers;
mod random;
pub mod rules;
pub mod sandbox;
pub mod schema;
mod scripted;
pub mod session;
pub mod telemetry;
mod tooldef;
mod toolset;

// The public module map: re-exports only, imported by nothing inside.
pub mod builder;
pub mod deferred;
pub mod editor;
pub mod event;
pub mod message;
pub mod provenance;
pub mod provider;
pub mod testing;
pub mod tool;

pub use agent::{Agent, AgentBuilder, AgentRun};
pub use backend::Provider;
pub use confirm::{ApprovalPolicy, ConfirmDecision, ConfirmHandler};
pub use ctx::ToolCtx;
pub use data::conversation::Conversation;
pub use data::error::AgentError;
pub use data::output::{ToolError, ToolOutput};
pub use data::spec::ToolAnnotations;
pub use event::{AgentEvent, RunOutcome, RunStop};
pub use message::Message;
pub use tooldef::Tool;
pub use toolset::Toolset;

/// Re-exported so tool authors need not depend on it directly.
pub use async_trait::async_trait;
