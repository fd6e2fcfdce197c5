//! Hooks: code the host runs around model calls and tool calls.
//!
//! A [`Hook`] may edit each model request, decide about each tool call
//! before it runs ([`BeforeTool`]: go on, deny with a reason the model
//! reads, rewrite the arguments, or end the run), and see or rewrite each
//! result. [`DoomLoopGuard`] is a shipped hook.

mod doom_loop;

use async_trait::async_trait;

pub use crate::data::error::HookError;
use crate::data::model::ChatRequest;
use crate::data::output::{ToolError, ToolOutput};
use crate::message::ToolCall;

pub use doom_loop::DoomLoopGuard;

/// What a hook decides about a tool call before it runs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum BeforeTool {
    /// Run it (the next hook may still decide otherwise).
    Continue,
    /// Do not run it; the model reads this reason as the call's error.
    Deny(String),
    /// Run it with these arguments instead (a JSON object).
    ReplaceArguments(serde_json::Value),
    /// Do not run it, and end the run
    /// ([`RunStop::Halted`](crate::RunStop::Halted) with this reason).
    EndRun(String),
}

/// Runs before each model call, before each tool call and after each tool
/// call.
///
/// Every method defaults to doing nothing. Hooks run in the order they were
/// added; for a tool call they run after the approval policy and the user
/// agreed, right before the layers and the tool.
///
/// ```
/// use kinet_core::hook::{BeforeTool, Hook, HookError};
/// use kinet_core::message::ToolCall;
/// use kinet_core::provider::ChatRequest;
///
/// /// Puts the current date at the end of the system prompt and keeps the
/// /// model out of `.env` files.
/// struct House(String);
///
/// #[async_trait::async_trait]
/// impl Hook for House {
///     async fn before_model_call(&self, request: &mut ChatRequest<'_>) -> Result<(), HookError> {
///         request.system.to_mut().push_str(&format!("\nToday is {}.", self.0));
///         Ok(())
///     }
///
///     async fn before_tool_call(&self, call: &ToolCall) -> BeforeTool {
///         if call.arguments.contains(".env") {
///             BeforeTool::Deny("`.env` files hold secrets; leave them alone".into())
///         } else {
///             BeforeTool::Continue
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait Hook: Send + Sync {
    /// May edit the request (inject memory blocks into the system prompt,
    /// trim history). An error ends the run.
    async fn before_model_call(&self, _request: &mut ChatRequest<'_>) -> Result<(), HookError> {
        Ok(())
    }

    /// Decides about a tool call before it runs. The first hook that does
    /// not answer [`BeforeTool::Continue`] wins, except that rewritten
    /// arguments are passed on to the next hook.
    async fn before_tool_call(&self, _call: &ToolCall) -> BeforeTool {
        BeforeTool::Continue
    }

    /// Sees each tool result before the model and the host do, and may
    /// rewrite it (redact secrets, record it in memory).
    async fn after_tool_call(&self, _call: &ToolCall, _result: &mut Result<ToolOutput, ToolError>) {
    }
}

/// A shared hook is a hook: pass an `Arc` where one is taken.
#[async_trait]
impl<H: Hook + ?Sized> Hook for std::sync::Arc<H> {
    async fn before_model_call(&self, request: &mut ChatRequest<'_>) -> Result<(), HookError> {
        (**self).before_model_call(request).await
    }

    async fn before_tool_call(&self, call: &ToolCall) -> BeforeTool {
        (**self).before_tool_call(call).await
    }

    async fn after_tool_call(&self, call: &ToolCall, result: &mut Result<ToolOutput, ToolError>) {
        (**self).after_tool_call(call, result).await
    }
}
