//! [`ConcurrencyLimitLayer`]: at most N calls at once.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Semaphore;

use super::{Invocation, Next, ToolLayer, cancelled_while_waiting, unless_cancelled};
use crate::data::output::{ToolError, ToolOutput};

/// Lets at most `max` calls through at once; the others wait their turn
/// (first come, first served) or stop waiting when cancelled. Clones share
/// the limit, so one layer can cap an agent, its sub-agents and a server
/// together.
///
/// ```
/// use kinet_core::layer::ConcurrencyLimitLayer;
///
/// let two_at_a_time = ConcurrencyLimitLayer::new(2);
/// assert_eq!(two_at_a_time.available(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct ConcurrencyLimitLayer {
    permits: Arc<Semaphore>,
}

impl ConcurrencyLimitLayer {
    /// At most `max` calls at once (at least 1).
    pub fn new(max: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS))),
        }
    }

    /// How many more calls could start now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

#[async_trait]
impl ToolLayer for ConcurrencyLimitLayer {
    async fn call(&self, call: Invocation, next: Next<'_>) -> Result<ToolOutput, ToolError> {
        let permit = match unless_cancelled(call.ctx(), self.permits.acquire()).await {
            Some(Ok(permit)) => permit,
            Some(Err(_)) => return Err(ToolError::failed("the concurrency limit was closed")),
            None => return Err(cancelled_while_waiting(call.ctx(), "a free slot")),
        };
        let result = next.run(call).await;
        drop(permit);
        result
    }
}
