//! `AgentRun`: the handle of one run.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::data::error::AgentError;
use crate::event::{AgentEvent, RunOutcome};

/// A running agent: a stream of [`AgentEvent`]s ending with
/// [`AgentEvent::Done`], plus cancellation.
///
/// The stream ends right after `Done`, even if a tool kept a copy of its
/// context (and so of the event sender) alive.
pub struct AgentRun {
    pub(super) events: mpsc::UnboundedReceiver<AgentEvent>,
    pub(super) task: Option<JoinHandle<RunOutcome>>,
    pub(super) cancel: CancellationToken,
    pub(super) done: bool,
}

impl AgentRun {
    /// Asks the run to stop. Pending tool calls get a "cancelled" result;
    /// the stream then ends with `Done { stop: Cancelled }`.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The run's cancellation token (cancelling it stops the run).
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Waits for the end of the run (events not yet read are dropped) and
    /// returns the outcome.
    pub async fn finish(mut self) -> RunOutcome {
        let Some(mut task) = self.task.take() else {
            return internal_failure("the run's outcome was already taken".into());
        };
        // Drain events until `Done` or the task's end, whichever comes first:
        // a leaked event sender must not keep us waiting.
        let joined = loop {
            if self.done {
                break task.await;
            }
            tokio::select! {
                event = self.events.recv() => match event {
                    Some(AgentEvent::Done { .. }) | None => self.done = true,
                    Some(_) => {}
                },
                joined = &mut task => break joined,
            }
        };
        joined.unwrap_or_else(|error| internal_failure(format!("the agent task failed: {error}")))
    }
}

fn internal_failure(message: String) -> RunOutcome {
    RunOutcome::failed(AgentError::Internal(message))
}

impl Stream for AgentRun {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        if self.done {
            return Poll::Ready(None);
        }
        let polled = self.events.poll_recv(cx);
        if let Poll::Ready(Some(AgentEvent::Done { .. }) | None) = &polled {
            self.done = true;
        }
        polled
    }
}

impl Drop for AgentRun {
    fn drop(&mut self) {
        // The token is the run's own child token: this stops this run only.
        self.cancel.cancel();
    }
}

impl std::fmt::Debug for AgentRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRun")
            .field("cancelled", &self.cancel.is_cancelled())
            .finish_non_exhaustive()
    }
}
