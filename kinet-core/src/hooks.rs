//! Hooks: code the host runs around model calls and tool calls.

use async_trait::async_trait;

use crate::error::HookError;
use crate::message::ToolCall;
use crate::provider::ChatRequest;
use crate::tool::{ToolError, ToolOutput};

/// Runs before each model call and after each tool call.
///
/// Both methods default to doing nothing. Hooks run in the order they were
/// added.
///
/// ```
/// use kinet_core::{ChatRequest, Hook, HookError};
///
/// /// Puts the current date at the end of the system prompt.
/// struct Today(String);
///
/// #[async_trait::async_trait]
/// impl Hook for Today {
///     async fn before_model_call(&self, request: &mut ChatRequest<'_>) -> Result<(), HookError> {
///         request.system.to_mut().push_str(&format!("\nToday is {}.", self.0));
///         Ok(())
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

    /// Sees each tool result before the model and the host do, and may
    /// rewrite it (redact secrets, record it in memory).
    async fn after_tool_call(&self, _call: &ToolCall, _result: &mut Result<ToolOutput, ToolError>) {
    }
}
