//! The kinet agent core.
//!
//! - [`Tool`]: a struct with typed, schema-derived arguments that an agent can
//!   call; its [`ToolAnnotations`] say whether it only reads. [`ToolCtx`] is
//!   what a running tool sees (workspace, confirmation, cancellation,
//!   deadline, events, sub-agents, host extensions).
//! - [`ConfirmHandler`] + [`ApprovalPolicy`]: the host's approval UI and the
//!   rules for when to use it, in code or as data: a [`rules`] file
//!   (allow / ask / forbid for command lines, for tools by name and
//!   arguments, for paths, and the sandbox's network allowlist), checked
//!   against its own examples when it loads. A command line is
//!   [planned](command) once, at approval (parsed as dash and bash both
//!   read it, globs expanded, programs resolved through the `PATH` it
//!   gets); the rules judge the plan and the same plan runs, each program
//!   started by kinet ([`sandbox::Launch::plan`]), never re-read by a
//!   shell. A question can also
//!   be answered later, in another process: the run stops, its turn kept
//!   in the conversation, and [`Agent::resume`] finishes it ([`deferred`]).
//! - [`Provider`]: a streaming model backend ([`provider`] has the shipped
//!   ones and the kit to write more); [`testing::ScriptedProvider`] plays a
//!   script offline.
//! - [`Agent`]: the loop, a turn at a time: prepare the request (compacted
//!   to fit the window), call the model (a request too long is compacted
//!   and sent again), record the assistant's turn, run its tool calls,
//!   decide whether to go on. The calls go through the [`pipeline`], one
//!   ordered list of stages ([`pipeline::STAGES`]; a host adds its own at a
//!   named place, [`Calls::stage`](builder::Calls::stage)): a gate half (parse → policy →
//!   injection defence → confirm → before-tool [hooks](hook)), one call at
//!   a time, and an execution half ([layers](layer) → panic guard →
//!   after-tool hooks → truncation → provenance → record), consecutive
//!   calls that may run together at once and the others alone, results in
//!   call order. Everything is reported to the host as [`AgentEvent`]s.
//!   A [`Conversation`] is the run's whole state (history, approvals,
//!   provenance ledger, a turn waiting for approvals, run key); a
//!   [`session::Session`] embeds it and the journal is made from it.
//!
//! - Confinement: a tool opens a model-supplied path through
//!   [`ToolCtx::workspace_path`], which opens it beneath its workspace root
//!   with the kernel's help (`openat2` `RESOLVE_BENEATH` on Linux): symlink
//!   chains, swaps during the call and `/proc` magic links cannot lead
//!   outside. Programs a tool starts go through [`sandbox::Launch`]:
//!   contained in a PID namespace, optionally confined by Landlock with the
//!   network off or limited to an allowlist of hosts (a proxy kinet runs
//!   for the sandbox's network namespace), `.git` and `.kinet` read-only.
//!
//! - Prompt injection: every tool result the model reads joins the
//!   conversation's [`provenance`] ledger with its trust (the host declares
//!   it per tool or tool source; open-world tools are untrusted by
//!   default), and the pipeline's defence stage checks each mutating or
//!   open-world call against it before it runs. Once untrusted text was
//!   read, an action must be one the model declared with `declare_plan`
//!   before (its fixed values, its values from the tools the plan named),
//!   and no value may come from other untrusted text; anything else goes
//!   to the [`ConfirmHandler`] with the reason, or is refused when the host
//!   runs unattended ([`pipeline::Defence`] lists what it covers and what
//!   it does not). Tools never implement the defence.
//!
//! - Long sessions: [`session`] keeps a conversation with its approvals and
//!   tool state (versioned, resumable, forkable, journalled step by step into
//!   a [`session::SessionStore`]); the history is repaired before every
//!   request; [`context`] keeps requests inside the model's window (prune,
//!   then summarise) with a byte-stable prefix between compactions.
//!
//! - Observability: every run, model call and tool call is a `tracing`
//!   span named and attributed by the OpenTelemetry GenAI conventions
//!   (`invoke_agent`, `chat`, `execute_tool`; sub-agents nest under the call
//!   that started them); a host price table gives the cost of each call and
//!   run, and a budget ends a run cleanly ([`telemetry`]; the
//!   `opentelemetry` feature exports over OTLP).
//!
//! Module map: [`tool`] (writing tools), [`layer`], [`hook`], [`pipeline`]
//! (its stages, the runner of a turn's calls, the injection defence),
//! [`provenance`], [`confirm`], [`deferred`], [`rules`], [`command`],
//! [`sandbox`], [`session`], [`context`], [`telemetry`], [`provider`],
//! [`message`], [`event`], [`testing`]. Modules import one way, with no
//! circle at any level (CI checks): the data modules at the bottom
//! (messages, deferred turns, the provenance ledger, then outputs, specs,
//! the conversation and events), then the context and file-system
//! confinement, tools, layers, hooks, the pipeline, the engine and the
//! agent.
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
