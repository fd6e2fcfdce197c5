//! Running one turn's tool calls.
//!
//! Each maximal run of consecutive read-only calls is a phase whose calls run
//! concurrently; every mutating call is a phase of its own. Phases run in
//! order, confirmations are asked one at a time before a phase starts, and
//! results go back to the model in the order of the calls.
//!
//! Every call gets exactly one `ToolCallStarted` and one `ToolCallFinished`
//! event and one result message, whether it ran, failed, was denied, or never
//! ran because the run stopped.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::agent::AgentConfig;
use crate::confirm::{ConfirmDecision, ConfirmRequest, Verdict};
use crate::ctx::{EventSink, ToolCtx};
use crate::engine::{guarded, panic_message};
use crate::error::AgentError;
use crate::event::{AgentEvent, RunStop};
use crate::message::{ContentPart, Conversation, Message, ToolCall};
use crate::tool::{DynTool, PreparedCall, ToolError, ToolErrorKind, ToolOutput};
use crate::toolset::ToolSnapshot;
use crate::truncate::TruncationPolicy;

type ToolResult = Result<ToolOutput, ToolError>;

/// A parsed call waiting for its phase, or the error that keeps it from running.
type Slot = Result<(Box<dyn PreparedCall>, bool), ToolError>;

/// How long calls in flight get to stop on their own (they see their
/// cancellation token) before their tasks are aborted: after the run is
/// cancelled, after a sibling failed fatally, and after a tool timeout.
const CANCEL_GRACE: Duration = Duration::from_millis(200);

/// The state of one turn's batch.
struct Batch<'a> {
    config: &'a Arc<AgentConfig>,
    tools: &'a ToolSnapshot,
    calls: &'a [ToolCall],
    base_ctx: &'a ToolCtx,
    cancel: &'a CancellationToken,
    events: &'a EventSink,
    results: Vec<Option<Message>>,
    stop: Option<RunStop>,
}

/// Runs the calls, appends one result message per call (in call order) to
/// `conversation`, and returns a stop reason when the run must end.
pub(crate) async fn run(
    config: &Arc<AgentConfig>,
    tools: &ToolSnapshot,
    calls: &[ToolCall],
    conversation: &mut Conversation,
    base_ctx: &ToolCtx,
    cancel: &CancellationToken,
    events: &EventSink,
) -> Option<RunStop> {
    let mut slots: Vec<Option<Slot>> = calls
        .iter()
        .map(|call| Some(prepare(tools, call)))
        .collect();
    let mutating: Vec<bool> = slots
        .iter()
        .map(|slot| matches!(slot, Some(Ok((_, false)))))
        .collect();
    let mut batch = Batch {
        config,
        tools,
        calls,
        base_ctx,
        cancel,
        events,
        results: calls.iter().map(|_| None).collect(),
        stop: None,
    };

    let mut start = 0;
    while start < calls.len() {
        let end = if mutating[start] {
            start + 1
        } else {
            (start..calls.len())
                .find(|&i| mutating[i])
                .unwrap_or(calls.len())
        };
        let phase = start..end;
        start = end;
        if batch.stop.is_none() && cancel.is_cancelled() {
            batch.stop = Some(RunStop::Cancelled);
        }
        for call in &calls[phase.clone()] {
            events.emit(AgentEvent::ToolCallStarted {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }

        // Confirmations, one at a time, before anything in the phase runs.
        let mut runnable: Vec<(usize, Box<dyn PreparedCall>)> = Vec::new();
        for index in phase {
            let prepared = match slots[index].take() {
                _ if batch.stop.is_some() => {
                    batch.finish_not_run(index).await;
                    continue;
                }
                Some(Ok((prepared, _))) => prepared,
                Some(Err(error)) => {
                    batch.finish(index, Err(error), Duration::ZERO).await;
                    continue;
                }
                None => continue,
            };
            match batch
                .approve(index, &*prepared, !mutating[index], conversation)
                .await
            {
                None => runnable.push((index, prepared)),
                Some(error) => {
                    batch.finish(index, Err(error), Duration::ZERO).await;
                }
            }
        }
        if batch.stop.is_some() || cancel.is_cancelled() {
            batch.stop.get_or_insert(RunStop::Cancelled);
            // An abort also stops the calls approved before it in this phase.
            for (index, _) in runnable {
                batch.finish_not_run(index).await;
            }
            continue;
        }
        batch.execute(runnable).await;
    }

    let Batch { results, stop, .. } = batch;
    conversation
        .messages
        .extend(results.into_iter().zip(calls).map(|(message, call)| {
            // Every slot is filled above; this keeps the history paired even
            // if that ever changed.
            message.unwrap_or_else(|| {
                let error = not_run(stop.as_ref().unwrap_or(&RunStop::Cancelled));
                model_message(call, &Err(error), &TruncationPolicy::default()).0
            })
        }));
    stop
}

impl Batch<'_> {
    /// Applies the policy and, when it says so, asks the user. Returns the
    /// error result for a call that must not run.
    async fn approve(
        &mut self,
        index: usize,
        prepared: &dyn PreparedCall,
        read_only: bool,
        conversation: &mut Conversation,
    ) -> Option<ToolError> {
        let call = &self.calls[index];
        let approved = conversation.session_approvals.contains(&call.name);
        match self.config.policy.verdict(&call.name, read_only, approved) {
            Verdict::Run => None,
            Verdict::Deny(reason) => Some(ToolError::new(
                ToolErrorKind::Denied,
                format!("{reason}. Do not retry this call; choose another approach."),
            )),
            Verdict::Ask => {
                let decision = ask(self.base_ctx, call, prepared).await;
                if self.cancel.is_cancelled() {
                    self.stop = Some(RunStop::Cancelled);
                    return Some(not_run(&RunStop::Cancelled));
                }
                match decision {
                    ConfirmDecision::Approve => None,
                    ConfirmDecision::ApproveForSession => {
                        conversation.session_approvals.insert(call.name.clone());
                        None
                    }
                    ConfirmDecision::Deny { reason } => Some(denied(&call.name, reason)),
                    ConfirmDecision::Abort => {
                        let aborted = RunStop::Aborted {
                            tool: call.name.clone(),
                        };
                        let error = not_run(&aborted);
                        self.stop = Some(aborted);
                        Some(error)
                    }
                }
            }
        }
    }

    /// Runs the approved calls of one phase concurrently, each in its own
    /// task with its own cancellation token.
    async fn execute(&mut self, runnable: Vec<(usize, Box<dyn PreparedCall>)>) {
        let started = Instant::now();
        let phase_cancel = self.cancel.child_token();
        let timeout = self.config.tool_timeout;
        let mut in_flight: Vec<usize> = Vec::with_capacity(runnable.len());
        let mut running: FuturesUnordered<_> = runnable
            .into_iter()
            .map(|(index, prepared)| {
                let call = &self.calls[index];
                let call_cancel = phase_cancel.child_token();
                let deadline = timeout.and_then(|t| started.checked_add(t));
                let ctx = self
                    .base_ctx
                    .for_call(&call.id, &call.name)
                    .with_cancellation(call_cancel.clone())
                    .with_deadline(deadline);
                in_flight.push(index);
                let task = AbortOnDrop(tokio::spawn(run_call(
                    prepared,
                    ctx,
                    call_cancel,
                    call.name.clone(),
                    timeout,
                )));
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
                _ = tokio::time::sleep_until(grace_until.unwrap_or_else(Instant::now)), if grace_until.is_some() => None,
                next = running.next() => next,
            };
            let Some((index, joined)) = next else { break };
            in_flight.retain(|&i| i != index);
            let result = match joined {
                Ok(result) => result,
                Err(join_error) if join_error.is_panic() => Err(ToolError::new(
                    ToolErrorKind::Panicked,
                    format!(
                        "tool `{}` panicked: {}",
                        self.calls[index].name,
                        panic_message(join_error.into_panic())
                    ),
                )),
                Err(_) => Err(not_run(&RunStop::Cancelled)),
            };
            if self.finish(index, result, started.elapsed()).await {
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

    /// Records a call that never ran because the run is stopping.
    async fn finish_not_run(&mut self, index: usize) {
        let error = not_run(self.stop.as_ref().unwrap_or(&RunStop::Cancelled));
        self.finish(index, Err(error), Duration::ZERO).await;
    }

    /// Runs the after-tool hooks, builds what the model sees, and sends the
    /// host the full result. Returns true when the result ends the run.
    async fn finish(&mut self, index: usize, mut result: ToolResult, elapsed: Duration) -> bool {
        let call = &self.calls[index];
        for hook in &self.config.hooks {
            if self.cancel.is_cancelled() {
                break;
            }
            let ran = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => Ok(()),
                ran = guarded(hook.after_tool_call(call, &mut result)) => ran,
            };
            if let Err(panic) = ran {
                tracing::warn!(tool = %call.name, %panic, "an after-tool-call hook panicked");
            }
        }
        let mut fatal = false;
        if let Err(error) = &result
            && error.is_fatal()
            && self.stop.is_none()
        {
            fatal = true;
            self.stop = Some(RunStop::Failed(AgentError::FatalTool {
                tool: call.name.clone(),
                message: error.message().to_owned(),
            }));
        }
        let tool = self.tools.get(&call.name);
        let policy = self.config.truncation_for(tool.map(|t| &**t), &call.name);
        let (message, truncated_for_model) = model_message(call, &result, &policy);
        self.events.emit(AgentEvent::ToolCallFinished {
            call_id: call.id.clone(),
            name: call.name.clone(),
            result,
            truncated_for_model,
            elapsed,
        });
        self.results[index] = Some(message);
        fatal
    }
}

/// Looks the tool up and parses the arguments; a panicking `prepare` or
/// `read_only` becomes an error result.
fn prepare(tools: &ToolSnapshot, call: &ToolCall) -> Slot {
    let Some(tool) = tools.get(&call.name) else {
        let available = tools.names().collect::<Vec<_>>().join(", ");
        let message = if call.name.is_empty() {
            format!("the tool call has no tool name. Available tools: {available}.")
        } else {
            format!(
                "there is no tool named `{}`. Available tools: {available}.",
                call.name
            )
        };
        return Err(ToolError::new(ToolErrorKind::UnknownTool, message));
    };
    let tool: Arc<dyn DynTool> = Arc::clone(tool);
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        let prepared = tool.prepare(&call.arguments)?;
        let read_only = prepared.read_only();
        Ok((prepared, read_only))
    }))
    .unwrap_or_else(|payload| {
        Err(ToolError::new(
            ToolErrorKind::Panicked,
            format!(
                "tool `{}` panicked while reading its arguments: {}",
                call.name,
                panic_message(payload)
            ),
        ))
    })
}

async fn ask(base_ctx: &ToolCtx, call: &ToolCall, prepared: &dyn PreparedCall) -> ConfirmDecision {
    let ctx = base_ctx.for_call(&call.id, &call.name);
    let summary = tokio::select! {
        biased;
        _ = ctx.cancellation().cancelled() => None,
        summary = guarded(prepared.confirm_summary(&ctx)) => summary.ok().flatten(),
    };
    let summary = summary.unwrap_or_else(|| pretty_arguments(&call.arguments));
    let request = ConfirmRequest {
        tool: call.name.clone(),
        call_id: call.id.clone(),
        arguments: serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone())),
        summary,
    };
    guarded(ctx.confirm(request))
        .await
        .unwrap_or_else(|panic| ConfirmDecision::Deny {
            reason: Some(format!("the confirmation handler panicked: {panic}")),
        })
}

/// Runs one call; on timeout, cancels the call's token and gives it the
/// grace period to clean up (kill its processes) before dropping it.
async fn run_call(
    prepared: Box<dyn PreparedCall>,
    ctx: ToolCtx,
    cancel: CancellationToken,
    name: String,
    timeout: Option<Duration>,
) -> ToolResult {
    let call = prepared.call(ctx);
    let Some(limit) = timeout else {
        return call.await;
    };
    let mut call = std::pin::pin!(call);
    tokio::select! {
        result = &mut call => return result,
        _ = tokio::time::sleep(limit) => {}
    }
    cancel.cancel();
    let _ = tokio::time::timeout(CANCEL_GRACE, &mut call).await;
    Err(ToolError::new(
        ToolErrorKind::Timeout,
        format!(
            "tool `{name}` did not finish within {:.1} s and was stopped",
            limit.as_secs_f64()
        ),
    ))
}

/// What the model sees of a result. Error messages are truncated by the
/// same policy as output.
fn model_message(
    call: &ToolCall,
    result: &ToolResult,
    policy: &TruncationPolicy,
) -> (Message, bool) {
    let (content, is_error, truncated) = match result {
        Ok(output) => {
            let seen = policy.apply(&output.text);
            let truncated = matches!(seen, std::borrow::Cow::Owned(_));
            let mut content = Vec::with_capacity(1 + output.images.len());
            if !seen.is_empty() || output.images.is_empty() {
                let text = if seen.is_empty() {
                    "(no output)".to_owned()
                } else {
                    seen.into_owned()
                };
                content.push(ContentPart::Text { text });
            }
            content.extend(output.images.iter().cloned().map(ContentPart::Image));
            (content, false, truncated)
        }
        Err(error) => {
            let seen = policy.apply(error.message());
            let truncated = matches!(seen, std::borrow::Cow::Owned(_));
            (vec![ContentPart::text(seen)], true, truncated)
        }
    };
    (
        Message::Tool {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            is_error,
        },
        truncated,
    )
}

fn not_run(stop: &RunStop) -> ToolError {
    match stop {
        RunStop::Aborted { tool } => ToolError::new(
            ToolErrorKind::Denied,
            format!("not run: the user aborted the run at a `{tool}` call"),
        ),
        RunStop::Failed(error) => ToolError::new(
            ToolErrorKind::Cancelled,
            format!("not run: the run failed ({error})"),
        ),
        _ => ToolError::new(ToolErrorKind::Cancelled, "cancelled: the run was stopped"),
    }
}

fn denied(tool: &str, reason: Option<String>) -> ToolError {
    let reason = reason
        .filter(|r| !r.trim().is_empty())
        .map(|r| format!(" Reason: {r}."))
        .unwrap_or_default();
    ToolError::new(
        ToolErrorKind::Denied,
        format!(
            "The user denied this `{tool}` call; it did not run.{reason} Do not retry it unchanged."
        ),
    )
}

fn pretty_arguments(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| arguments.to_owned())
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
