//! The runner: a turn's tool calls (or one call, [`run_one`]) through the
//! pipeline's stages.
//!
//! The calls are split into phases at every exclusive call (see
//! [`Scheduling`]): an exclusive call is a phase of its own, and the calls
//! between two exclusive ones form a phase whose calls run together, except
//! that calls sharing a key run one after another in call order. Phases run
//! in order; before a phase starts, its calls are confirmed one at a time
//! and pass the before-tool hooks. Results go back in call order.
//!
//! Every call gets exactly one `ToolCallStarted` and one `ToolCallFinished`
//! event and one result message, whether it ran, failed, was denied, or never
//! ran because the run stopped.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::{CallRecord, Gate, Pipeline, Prepared, call_ctx, not_run, panic_message};
use crate::confirm::ConfirmDecision;
use crate::ctx::EngineCtx as _;
use crate::ctx::ToolCtx;
use crate::data::output::{ToolError, ToolErrorKind, ToolOutput};
use crate::data::spec::Scheduling;
use crate::deferred::Suspension;
use crate::event::{AgentEvent, RunStop};
use crate::layer::CANCEL_GRACE;
use crate::message::{Message, ToolCall};
use crate::provenance::Seen;
use crate::session::{JournalEntry, Recorder};
use crate::toolset::ToolSnapshot;

type ToolResult = Result<ToolOutput, ToolError>;

/// The state of one turn's batch.
struct Batch<'a> {
    pipeline: &'a Pipeline,
    tools: &'a ToolSnapshot,
    /// The calls, copied only when a hook rewrites one.
    calls: Vec<Cow<'a, ToolCall>>,
    base: &'a ToolCtx,
    results: Vec<Option<Message>>,
    stop: Option<RunStop>,
    /// Each result is journalled here as its call finishes.
    recorder: Option<&'a Recorder>,
    /// Each call's `execute_tool` span, from its start to its result.
    spans: Vec<tracing::Span>,
    /// What the model will read of the results, for the ledger.
    seen: Vec<Seen>,
    /// What calls that stopped while running saved, by call id.
    saved: BTreeMap<String, serde_json::Value>,
    /// Each call's full result and whether the model's copy was cut, kept
    /// for a call run on its own ([`run_one`]).
    kept: Option<Vec<Option<(ToolResult, bool)>>>,
}

/// What a turn's calls came to.
pub(crate) struct Ran {
    /// One result message per call, in call order (per call answered,
    /// when a deferral stopped the batch).
    pub(crate) messages: Vec<Message>,
    /// Set when the run must end.
    pub(crate) stop: Option<RunStop>,
    /// What the model will read of the results, for the conversation's
    /// provenance ledger (each also journalled before its result).
    pub(crate) seen: Vec<Seen>,
    /// What calls that stopped while running saved, by call id.
    pub(crate) saved: BTreeMap<String, serde_json::Value>,
}

/// Runs the calls. `approvals` holds the tools the user approved for the
/// session; the defence checks against `base`'s provenance; on a resume,
/// `base`'s resumption holds the decisions given later.
///
/// When a call's approval is deferred, the run stops there
/// ([`RunStop::AwaitingApproval`]): the calls of earlier phases have their
/// results, and that call's phase and everything after it are left
/// unanswered (no result and no `ToolCallFinished`), to be run on resume.
/// A call that stops while running ([`ToolError::deferred`]) is left
/// unanswered the same way, with what it saved; its phase's other calls
/// finish, and later phases wait.
pub(crate) async fn run(
    pipeline: &Pipeline,
    tools: &ToolSnapshot,
    calls: &[ToolCall],
    approvals: &mut BTreeSet<String>,
    base: &ToolCtx,
    recorder: Option<&Recorder>,
) -> Ran {
    let mut batch = Batch::new(pipeline, tools, calls, base, recorder);
    batch.run(approvals).await;
    let deferred = batch.deferred();
    let Batch {
        results,
        stop,
        seen,
        saved,
        ..
    } = batch;
    if deferred {
        return Ran {
            messages: results.into_iter().flatten().collect(),
            stop,
            seen,
            saved,
        };
    }
    let messages = results
        .into_iter()
        .zip(calls)
        .map(|(message, call)| {
            // Every slot is filled by `Batch::run`; this keeps the history
            // paired even if that ever changed.
            message.unwrap_or_else(|| {
                let error = not_run(stop.as_ref().unwrap_or(&RunStop::Cancelled));
                error_message(call, error.message())
            })
        })
        .collect();
    Ran {
        messages,
        stop,
        seen,
        saved,
    }
}

/// One call on its own, a batch of one: the tool is looked up in `tools`
/// and runs in a context derived from `base`; approvals for the session
/// count for this call only. On a resume, a decision may have edited it.
///
/// A deferral has no run to stop outside one: for a `nested` call (made
/// by a run's call) it comes back as a [`ToolError::deferred`] with no
/// `ToolCallFinished` (the call runs again on resume); otherwise it
/// denies the call.
pub(crate) async fn run_one(
    pipeline: &Pipeline,
    tools: &ToolSnapshot,
    mut call: ToolCall,
    base: &ToolCtx,
    nested: bool,
) -> CallRecord {
    if let Some(ConfirmDecision::Edit { arguments }) =
        base.resumption().and_then(|r| r.decisions.get(&call.id))
    {
        call.arguments = arguments.to_string();
    }
    let calls = [call];
    let mut batch = Batch::new(pipeline, tools, &calls, base, None);
    batch.kept = Some(vec![None]);
    batch.run(&mut BTreeSet::new()).await;
    if batch.results[0].is_none()
        && let Some(RunStop::AwaitingApproval { pending }) = batch.stop.take()
    {
        let mut suspension = Suspension::new(pending);
        suspension.saved = std::mem::take(&mut batch.saved);
        let error = ToolError::deferred(suspension);
        if nested {
            return CallRecord {
                message: error_message(&calls[0], error.message()),
                result: Err(error),
                truncated_for_model: false,
                stop: None,
                seen: None,
            };
        }
        let denied = ToolError::new(
            ToolErrorKind::Denied,
            format!(
                "the approval of this `{}` call was deferred ({}), and a call made outside a run cannot wait for it; it did not run",
                calls[0].name,
                error.message()
            ),
        );
        batch.finish(0, Err(denied), Duration::ZERO, false).await;
    }
    let (result, truncated) = batch
        .kept
        .and_then(|mut kept| kept.pop().flatten())
        .unwrap_or_else(|| (Err(not_run(&RunStop::Cancelled)), false));
    let message = batch
        .results
        .pop()
        .flatten()
        .unwrap_or_else(|| error_message(&calls[0], not_run(&RunStop::Cancelled).message()));
    CallRecord {
        result,
        message,
        truncated_for_model: truncated,
        stop: batch.stop,
        seen: batch.seen.pop(),
    }
}

/// The result message of `call` that says `text` went wrong.
fn error_message(call: &ToolCall, text: &str) -> Message {
    Message::Tool {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        content: vec![crate::message::ContentPart::text(text)],
        is_error: true,
    }
}

/// Answers every call of the turn without running any: the run stops
/// (`stop`) before they start. Each still gets its events and a result.
pub(crate) async fn refuse_all(
    pipeline: &Pipeline,
    tools: &ToolSnapshot,
    calls: &[ToolCall],
    base: &ToolCtx,
    recorder: &Recorder,
    stop: RunStop,
) -> Vec<Message> {
    let mut batch = Batch::new(pipeline, tools, calls, base, Some(recorder));
    batch.stop = Some(stop);
    for index in 0..calls.len() {
        batch.start(index);
        batch.finish_not_run(index).await;
    }
    batch.results.into_iter().flatten().collect()
}

impl<'a> Batch<'a> {
    /// Runs the calls, phase by phase: each phase's calls pass the gate
    /// half one at a time, then run together.
    async fn run(&mut self, approvals: &mut BTreeSet<String>) {
        let (pipeline, tools) = (self.pipeline, self.tools);
        let mut slots: Vec<Option<Result<Prepared, ToolError>>> = self
            .calls
            .iter()
            .map(|call| Some(pipeline.parse(tools, call)))
            .collect();
        // Whether a call runs alone (read before its phase takes it).
        let exclusive = |slot: &Option<Result<Prepared, ToolError>>| {
            pipeline.one_call_at_a_time()
                || matches!(slot, Some(Ok(p)) if p.scheduling == Scheduling::Exclusive)
        };
        let count = self.calls.len();
        let mut start = 0;
        while start < count && !self.deferred() {
            let end = if exclusive(&slots[start]) {
                start + 1
            } else {
                (start..count)
                    .find(|&i| exclusive(&slots[i]))
                    .unwrap_or(count)
            };
            let phase = start..end;
            start = end;
            if self.stop.is_none() && self.base.is_cancelled() {
                self.stop = Some(RunStop::Cancelled);
            }
            for index in phase.clone() {
                self.start(index);
            }
            let runnable = self.gate_phase(phase, &mut slots, approvals).await;
            if self.deferred() {
                break;
            }
            if self.stop.is_some() || self.base.is_cancelled() {
                self.stop.get_or_insert(RunStop::Cancelled);
                // A stop also stops the calls approved before it in this phase.
                for (index, _) in runnable {
                    self.finish_not_run(index).await;
                }
                continue;
            }
            self.execute(runnable).await;
        }
    }

    /// The gate half for one phase's calls, one at a time, before anything
    /// in the phase runs: the calls that may run.
    async fn gate_phase(
        &mut self,
        phase: std::ops::Range<usize>,
        slots: &mut [Option<Result<Prepared, ToolError>>],
        approvals: &mut BTreeSet<String>,
    ) -> Vec<(usize, Prepared)> {
        let mut runnable: Vec<(usize, Prepared)> = Vec::new();
        for index in phase {
            let mut prepared = match slots[index].take() {
                _ if self.stop.is_some() => {
                    self.finish_not_run(index).await;
                    continue;
                }
                Some(Ok(prepared)) => prepared,
                Some(Err(error)) => {
                    self.finish(index, Err(error), Duration::ZERO, false).await;
                    continue;
                }
                None => continue,
            };
            let (pipeline, tools, base) = (self.pipeline, self.tools, self.base);
            let span = self.spans[index].clone();
            let call = &mut self.calls[index];
            let gate = pipeline
                .gate(tools, call, &mut prepared, base, approvals)
                .instrument(span)
                .await;
            match gate {
                Gate::Run => runnable.push((index, prepared)),
                Gate::Refuse(error) => {
                    self.finish(index, Err(error), Duration::ZERO, false).await;
                }
                Gate::Stop(stop) => {
                    self.stop = Some(stop);
                    self.finish_not_run(index).await;
                }
                Gate::Defer(request) => {
                    self.stop = Some(RunStop::AwaitingApproval {
                        pending: vec![request],
                    });
                    break;
                }
            }
        }
        runnable
    }

    /// Whether a deferred approval stopped the batch (the rest of the turn
    /// waits, unanswered).
    fn deferred(&self) -> bool {
        matches!(self.stop, Some(RunStop::AwaitingApproval { .. }))
    }

    fn new(
        pipeline: &'a Pipeline,
        tools: &'a ToolSnapshot,
        calls: &'a [ToolCall],
        base: &'a ToolCtx,
        recorder: Option<&'a Recorder>,
    ) -> Self {
        Batch {
            pipeline,
            tools,
            calls: calls.iter().map(Cow::Borrowed).collect(),
            base,
            results: calls.iter().map(|_| None).collect(),
            stop: None,
            recorder,
            spans: calls.iter().map(|_| tracing::Span::none()).collect(),
            seen: Vec::new(),
            saved: BTreeMap::new(),
            kept: None,
        }
    }

    /// Runs the approved calls of one phase, each in its own task with its
    /// own cancellation token; calls sharing a key wait for the one before.
    async fn execute(&mut self, mut runnable: Vec<(usize, Prepared)>) {
        if self.alone()
            && runnable.len() == 1
            && let Some((index, prepared)) = runnable.pop()
        {
            return self.execute_one(index, prepared).await;
        }
        let phase_cancel = self.base.cancellation().child_token();
        let mut in_flight: Vec<usize> = Vec::with_capacity(runnable.len());
        // The end of the last call of each key, for the next one to wait on.
        let mut lanes: HashMap<String, oneshot::Receiver<()>> = HashMap::new();
        let mut running: FuturesUnordered<_> = runnable
            .into_iter()
            .map(|(index, prepared)| {
                let call = &self.calls[index];
                let ctx = call_ctx(self.base, call, phase_cancel.child_token());
                let (after, done) = match &prepared.scheduling {
                    Scheduling::Keyed(key) => {
                        let (done, next) = oneshot::channel();
                        (lanes.insert(key.to_string(), next), Some(done))
                    }
                    _ => (None, None),
                };
                in_flight.push(index);
                let pipeline = self.pipeline.clone();
                let span = self.spans[index].clone();
                let task = AbortOnDrop(tokio::spawn(
                    async move {
                        if let Some(after) = after {
                            // Sent or dropped when the call before ends.
                            let _ = after.await;
                        }
                        let started = Instant::now();
                        let result = pipeline.execute(prepared, ctx).await;
                        drop(done);
                        (result, started.elapsed())
                    }
                    .instrument(span),
                ));
                async move { (index, task.await) }
            })
            .collect();
        let mut grace_until: Option<Instant> = None;
        loop {
            let next = tokio::select! {
                biased;
                _ = phase_cancel.cancelled(), if grace_until.is_none() => {
                    grace_until = Some(Instant::now() + CANCEL_GRACE);
                    continue;
                }
                // Calls that finished are collected before the grace ends.
                next = running.next() => next,
                _ = tokio::time::sleep_until(grace_until.unwrap_or_else(Instant::now)), if grace_until.is_some() => None,
            };
            let Some((index, joined)) = next else { break };
            in_flight.retain(|&i| i != index);
            // A task that panicked or was aborted: its result is kinet's
            // own text, not the tool's.
            let ran = joined.is_ok();
            let (result, elapsed) = match joined {
                Ok(done) => done,
                Err(join_error) if join_error.is_panic() => (
                    Err(ToolError::new(
                        ToolErrorKind::Panicked,
                        format!(
                            "tool `{}` panicked: {}",
                            self.calls[index].name,
                            panic_message(join_error.into_panic())
                        ),
                    )),
                    Duration::ZERO,
                ),
                Err(_) => (Err(not_run(&RunStop::Cancelled)), Duration::ZERO),
            };
            if self.finish(index, result, elapsed, ran).await {
                // A fatal error: stop the siblings still running.
                phase_cancel.cancel();
            }
        }
        // Aborts whatever did not stop within the grace period.
        drop(running);
        if grace_until.is_some() {
            self.stop.get_or_insert(RunStop::Cancelled);
            for index in in_flight {
                self.finish_not_run(index).await;
            }
        }
    }

    /// A call on its own ([`run_one`]) runs in place instead of in a task
    /// of its own, with the same rule: once the run is cancelled it gets
    /// the grace period to stop, then is dropped, so it has no later
    /// effect. (A turn's calls keep their tasks: a tool that blocks its
    /// thread must not hold the loop.)
    async fn execute_one(&mut self, index: usize, prepared: Prepared) {
        // The run's cancellation, not the call's own token (which a
        // timeout layer cancels to end the call with a timeout).
        let run = self.base.cancellation().clone();
        let ctx = call_ctx(self.base, &self.calls[index], run.child_token());
        let pipeline = self.pipeline;
        let started = Instant::now();
        let result = {
            let running = pipeline
                .execute(prepared, ctx)
                .instrument(self.spans[index].clone());
            let mut running = std::pin::pin!(running);
            tokio::select! {
                result = &mut running => Some(result),
                _ = run.cancelled() => tokio::time::timeout(CANCEL_GRACE, &mut running).await.ok(),
            }
        };
        let elapsed = started.elapsed();
        match result {
            Some(result) => {
                self.finish(index, result, elapsed, true).await;
            }
            None => {
                self.stop.get_or_insert(RunStop::Cancelled);
                self.finish_not_run(index).await;
            }
        }
    }

    /// A call starts: its `execute_tool` span opens and the host hears of
    /// it.
    fn start(&mut self, index: usize) {
        let call = &self.calls[index];
        self.spans[index] = self.pipeline.tool_span(call);
        self.base.emit(AgentEvent::ToolCallStarted {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
    }

    /// Whether this is a call on its own ([`run_one`]), which keeps its
    /// full result and runs in place.
    fn alone(&self) -> bool {
        self.kept.is_some()
    }

    /// Records a call that never ran because the run is stopping.
    async fn finish_not_run(&mut self, index: usize) {
        let error = not_run(self.stop.as_ref().unwrap_or(&RunStop::Cancelled));
        self.finish(index, Err(error), Duration::ZERO, false).await;
    }

    /// The last stages of the pipeline (`ran`: the tool ran, so what it
    /// returned goes to the ledger); returns true when the result ends the
    /// run.
    async fn finish(
        &mut self,
        index: usize,
        result: ToolResult,
        elapsed: Duration,
        ran: bool,
    ) -> bool {
        if let Err(error) = &result
            && let Some(suspension) = error.suspension()
            && matches!(self.stop, None | Some(RunStop::AwaitingApproval { .. }))
        {
            // The call stopped while running: it waits, unanswered, with
            // what it saved, and the run stops after this phase. (A call
            // on its own keeps its span: `run_one` answers it.)
            if !self.alone() {
                self.spans[index] = tracing::Span::none();
            }
            self.saved.extend(suspension.saved.clone());
            match &mut self.stop {
                Some(RunStop::AwaitingApproval { pending }) => {
                    pending.extend(suspension.pending.iter().cloned());
                }
                _ => {
                    self.stop = Some(RunStop::AwaitingApproval {
                        pending: suspension.pending.clone(),
                    });
                }
            }
            return false;
        }
        let call = &self.calls[index];
        // The span records what the tool did (before after-tool hooks) and
        // ends here.
        let span = std::mem::replace(&mut self.spans[index], tracing::Span::none());
        crate::telemetry::spans::tool_result(&span, &result, self.pipeline.records_content());
        drop(span);
        let keep = self.kept.is_some();
        let finished = self
            .pipeline
            .finish(self.tools, call, result, elapsed, self.base, keep, ran)
            .await;
        if let (Some(kept), Some(result)) = (&mut self.kept, finished.result) {
            kept[index] = Some((result, finished.truncated));
        }
        if let Some(seen) = finished.seen {
            if let Some(recorder) = self.recorder {
                recorder.record(|| JournalEntry::Seen { seen: seen.clone() });
            }
            self.seen.push(seen);
        }
        if let Some(recorder) = self.recorder {
            recorder.message(&finished.message);
        }
        self.results[index] = Some(finished.message);
        match finished.stop {
            Some(stop) if self.stop.is_none() => {
                self.stop = Some(stop);
                true
            }
            _ => false,
        }
    }
}

/// A spawned task that is aborted when dropped.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
