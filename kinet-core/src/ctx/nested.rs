//! The run's tools, callable from inside a call (Code Mode): behind a trait
//! object, so the context does not depend on the pipeline that implements
//! it.

use async_trait::async_trait;

use super::ToolCtx;
use crate::data::output::{ToolError, ToolOutput};

/// Runs calls of the run's tools through the run's pipeline, for a tool
/// that calls other tools (a script runner). The engine installs one per
/// turn; see [`ToolCtx::call_tool`].
#[async_trait]
pub trait ToolCaller: Send + Sync {
    /// Runs one call through every stage of the pipeline (approval, hooks,
    /// layers, events, spans), in a context derived from `ctx`, the calling
    /// tool's. `id` names the call in events.
    async fn call(
        &self,
        ctx: &ToolCtx,
        id: String,
        name: &str,
        arguments: String,
    ) -> Result<ToolOutput, ToolError>;
}
