//! The kinet agent core.
//!
//! - [`Tool`]: a struct with typed, schema-derived arguments that an agent can
//!   call; [`DynTool`] is its object-safe form.
//! - [`ToolCtx`]: what a running tool sees (workspace, confirmation,
//!   cancellation, events, sub-agents, host extensions).
//! - [`ConfirmHandler`] + [`ApprovalPolicy`]: the host's approval UI and the
//!   rules for when to use it.
//! - [`Provider`]: a streaming model backend; [`ScriptedProvider`] plays a
//!   script offline.
//! - [`Agent`]: the loop. Each turn it calls the model, runs the tool calls
//!   (consecutive read-only calls concurrently, mutating ones alone, results in
//!   call order), truncates what the model sees, and reports everything to the
//!   host as [`AgentEvent`]s.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use kinet_core::{Agent, ApprovalPolicy, ScriptedProvider, ScriptedTurn, Tool, ToolCtx, ToolError, ToolOutput};
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
//!     fn read_only(&self, _: &ShoutArgs) -> bool { true }
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

mod agent;
mod batch;
mod confirm;
mod ctx;
mod engine;
mod error;
mod event;
mod hooks;
mod message;
mod provider;
#[cfg(feature = "http")]
pub mod providers;
mod scripted;
mod spawner;
mod tool;
mod toolset;
mod truncate;
mod workspace;

pub use agent::{Agent, AgentBuilder, AgentRun, RunOutcome};
pub use confirm::{
    ApprovalMode, ApprovalPolicy, ChannelConfirmHandler, ConfirmDecision, ConfirmError,
    ConfirmHandler, ConfirmRequest, DenyingHandler, PendingConfirm, ToolRule,
};
pub use ctx::{EventSink, Extensions, SubAgentReport, SubAgentRequest, SubAgentSpawner, ToolCtx};
pub use error::{AgentError, HookError};
pub use event::{AgentEvent, RunStop, TodoItem, TodoStatus};
pub use hooks::Hook;
pub use message::{ContentPart, Conversation, ImagePart, Message, ToolCall};
pub use provider::{
    ChatRequest, GenerationParams, Provider, ProviderError, ProviderStream, StopReason,
    StreamEvent, Usage,
};
pub use scripted::{
    Expectation, RecordedRequest, ScriptError, ScriptedCall, ScriptedProvider, ScriptedTurn,
};
pub use tool::{
    DynTool, PreparedCall, Tool, ToolError, ToolErrorKind, ToolOutput, ToolSpec, parse_arguments,
    schema_for,
};
pub use toolset::{ToolSnapshot, ToolSource, Toolset, is_valid_tool_name};
pub use truncate::TruncationPolicy;

/// Re-exported so tool authors need not depend on it directly.
pub use async_trait::async_trait;
/// Re-exported cancellation token type used by [`ToolCtx`].
pub use tokio_util::sync::CancellationToken;
