//! [`RateLimitLayer`]: at most N calls per period.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{Invocation, Next, ToolLayer, cancelled_while_waiting, unless_cancelled};
use crate::data::output::{ToolError, ToolOutput};

/// Starts at most `calls` calls per `period`: a burst of `calls` may start
/// at once, after which calls are spaced `period / calls` apart (a generic
/// cell rate algorithm). A call waits for its slot, or stops waiting when
/// cancelled. Clones share the budget.
///
/// ```
/// use std::time::Duration;
/// use kinet_core::layer::RateLimitLayer;
///
/// // Ten web fetches a minute.
/// let layer = RateLimitLayer::new(10, Duration::from_secs(60));
/// # let _ = layer;
/// ```
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    /// The spacing between calls once the burst is spent.
    interval: Duration,
    /// How far ahead of now the schedule may run (the burst).
    burst: Duration,
    /// The theoretical start of the next call.
    next: Arc<Mutex<Option<Instant>>>,
}

impl RateLimitLayer {
    /// At most `calls` (at least 1) per `period`.
    pub fn new(calls: u32, period: Duration) -> Self {
        let calls = calls.max(1);
        let interval = period / calls;
        Self {
            interval,
            burst: period.saturating_sub(interval),
            next: Arc::new(Mutex::new(None)),
        }
    }

    /// Takes the next slot and returns when it starts.
    fn reserve(&self) -> Instant {
        let now = Instant::now();
        let Ok(mut next) = self.next.lock() else {
            return now;
        };
        let scheduled = next.map_or(now, |at| at.max(now));
        *next = Some(scheduled + self.interval);
        scheduled.checked_sub(self.burst).unwrap_or(now).max(now)
    }
}

#[async_trait]
impl ToolLayer for RateLimitLayer {
    async fn call(&self, call: Invocation, next: Next<'_>) -> Result<ToolOutput, ToolError> {
        let start = self.reserve();
        if start > Instant::now()
            && unless_cancelled(call.ctx(), tokio::time::sleep_until(start))
                .await
                .is_none()
        {
            return Err(cancelled_while_waiting(call.ctx(), "its rate limit"));
        }
        next.run(call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_then_spaced() {
        let layer = RateLimitLayer::new(3, Duration::from_secs(3));
        let t0 = Instant::now();
        let starts: Vec<Duration> = (0..5).map(|_| layer.reserve() - t0).collect();
        assert_eq!(
            starts,
            [0, 0, 0, 1, 2].map(Duration::from_secs).to_vec(),
            "three at once, then one a second"
        );
    }
}
