//! [`TimeoutLayer`]: the one place a tool call's time limit is set and
//! enforced.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{Invocation, Next, ToolLayer};
use crate::ctx::EngineCtx as _;
use crate::data::output::{ToolError, ToolOutput};

/// How long a call in flight gets to stop on its own (it sees its
/// cancellation token: a shell kills its processes, an MCP call tells the
/// server) before it is dropped.
pub(crate) const CANCEL_GRACE: Duration = Duration::from_millis(200);

/// Limits how long a call runs.
///
/// The limit is the shorter of the layer's own and the tool's
/// [`timeout`](crate::Tool::timeout). The layer puts the deadline in the
/// call's context ([`ToolCtx::deadline`](crate::ToolCtx::deadline), which
/// tools use to bound their own work: a shell's processes, an HTTP request,
/// an MCP call), and when it passes cancels the call's token, gives the call
/// 200 ms to stop, then drops it and returns a
/// [`Timeout`](crate::tool::ToolErrorKind::Timeout) error. An earlier
/// deadline set further out is kept.
///
/// ```
/// use std::time::Duration;
/// use kinet_core::layer::TimeoutLayer;
///
/// let layer = TimeoutLayer::new(Duration::from_secs(30));
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TimeoutLayer {
    limit: Option<Duration>,
}

impl TimeoutLayer {
    /// At most `limit` per call.
    pub fn new(limit: Duration) -> Self {
        Self { limit: Some(limit) }
    }

    /// No limit of its own: only the tool's [`timeout`](crate::Tool::timeout)
    /// applies (the pipeline's innermost layer when the agent sets none).
    pub(crate) fn tool_only(limit: Option<Duration>) -> Self {
        Self { limit }
    }
}

#[async_trait]
impl ToolLayer for TimeoutLayer {
    async fn call(&self, mut call: Invocation, next: Next<'_>) -> Result<ToolOutput, ToolError> {
        let limit = match (self.limit, call.tool().timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let now = Instant::now();
        let ours = limit.and_then(|limit| now.checked_add(limit));
        let deadline = match (call.ctx().deadline(), ours) {
            (Some(outer), Some(ours)) => Some(outer.min(ours)),
            (outer, ours) => outer.or(ours),
        };
        let Some(deadline) = deadline else {
            return next.run(call).await;
        };
        let ctx = call.ctx().clone();
        let cancel = ctx.cancellation().clone();
        *call.ctx_mut() = ctx.clone().with_deadline(Some(deadline));
        let running = next.run(call);
        let mut running = std::pin::pin!(running);
        tokio::select! {
            result = &mut running => return result,
            _ = tokio::time::sleep_until(deadline) => {}
        }
        cancel.cancel();
        if let Ok(result) = tokio::time::timeout(CANCEL_GRACE, &mut running).await {
            match &result {
                // It finished after all: what it did is what happened.
                Ok(_) => return result,
                // The tool reported its own timeout: its message says more.
                Err(error) if error.kind() == crate::data::output::ToolErrorKind::Timeout => {
                    return result;
                }
                Err(_) => {}
            }
        }
        let allowed = deadline.saturating_duration_since(now);
        Err(ToolError::timeout(format!(
            "tool `{}` did not finish within {:.1} s and was stopped",
            ctx.tool_name(),
            allowed.as_secs_f64()
        )))
    }
}
