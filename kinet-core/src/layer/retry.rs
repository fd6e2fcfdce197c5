//! [`RetryLayer`]: runs a call again after a transient failure, for tools
//! that may safely run twice.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{Invocation, Next, ToolLayer, unless_cancelled};
use crate::data::output::{ToolError, ToolErrorKind, ToolOutput};

/// Retries calls that failed with
/// [`Unavailable`](crate::tool::ToolErrorKind::Unavailable) (a dropped
/// connection, a busy upstream), only for tools whose annotations say they
/// are read-only or idempotent. Waits 200 ms before the second attempt and
/// doubles the wait each time (up to 5 s), with up to 25 % jitter; never
/// waits past the call's deadline, and stops when the call is cancelled.
///
/// ```
/// use kinet_core::layer::RetryLayer;
///
/// let layer = RetryLayer::new(3); // one try and up to two retries
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RetryLayer {
    attempts: u32,
    first_wait: Duration,
}

impl RetryLayer {
    /// Up to `attempts` tries in all (at least 1). The first retry waits
    /// 200 ms.
    pub fn new(attempts: u32) -> Self {
        Self {
            attempts: attempts.max(1),
            first_wait: Duration::from_millis(200),
        }
    }

    /// The wait before the first retry (default 200 ms); it doubles after
    /// each retry, up to 5 s.
    pub fn first_wait(mut self, wait: Duration) -> Self {
        self.first_wait = wait;
        self
    }
}

#[async_trait]
impl ToolLayer for RetryLayer {
    async fn call(&self, call: Invocation, next: Next<'_>) -> Result<ToolOutput, ToolError> {
        if self.attempts == 1 || !call.annotations().retry_safe() {
            return next.run(call).await;
        }
        let mut spare = call.retry_copy();
        let mut result = next.run(call).await;
        let mut wait = self.first_wait;
        for attempt in 2..=self.attempts {
            match &result {
                Err(error) if error.kind() == ToolErrorKind::Unavailable => {}
                _ => break,
            }
            let ctx = spare.ctx().clone();
            let jittered = wait + wait.mul_f64(crate::random::unit() * 0.25);
            let resume = Instant::now() + jittered;
            if ctx.deadline().is_some_and(|deadline| resume >= deadline)
                || unless_cancelled(&ctx, tokio::time::sleep_until(resume))
                    .await
                    .is_none()
            {
                break;
            }
            tracing::debug!(tool = %ctx.tool_name(), attempt, "retrying a call that failed transiently");
            let again = spare.retry_copy();
            let this = std::mem::replace(&mut spare, again);
            result = next.run(this).await;
            wait = (wait * 2).min(Duration::from_secs(5));
        }
        result
    }
}
