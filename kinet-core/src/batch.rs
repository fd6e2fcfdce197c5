//! Running one turn's tool calls.
//!
//! Each maximal run of consecutive read-only calls is a phase whose calls run
//! concurrently; every mutating call is a phase of its own. Phases run in
//! order, confirmations are asked one at a time before a phase starts, and
//! results go back to the model in the order of the calls.

use std::any::Any;
use std::future::Future;
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
use crate::error::AgentError;
use crate::event::{AgentEvent, RunStop};
use crate::message::{ContentPart, Conversation, Message, ToolCall};
use crate::tool::{DynTool, PreparedCall, ToolError, ToolErrorKind, ToolOutput};
use crate::toolset::ToolSnapshot;

type ToolResult = Result<ToolOutput, ToolError>;

/// A parsed call waiting for its phase, or the error that keeps it from running.
type Slot = Result<(Arc<dyn DynTool>, Box<dyn PreparedCall>), ToolError>;

/// How long calls in flight get to stop on their own after cancellation
/// before their tasks are aborted.
const CANCEL_GRACE: Duration = Duration::from_millis(200);

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
    let mut slots: Vec<Option<Slot>> = Vec::with_capacity(calls.len());
    let mut mutating: Vec<bool> = Vec::with_capacity(calls.len());
    for call in calls {
        let slot = prepare(tools, call);
        mutating.push(matches!(&slot, Ok((_, prepared)) if !prepared.read_only()));
        slots.push(Some(slot));
    }
    let mut results: Vec<Option<Message>> = calls.iter().map(|_| None).collect();
    let finisher = Finisher {
        config,
        tools,
        events,
    };
    let mut stop: Option<RunStop> = None;

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
        if stop.is_none() && cancel.is_cancelled() {
            stop = Some(RunStop::Cancelled);
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
        for index in phase.clone() {
            let call = &calls[index];
            let slot = slots[index].take();
            let prepared = match (slot, &stop) {
                (_, Some(stop)) => {
                    results[index] = Some(
                        finisher
                            .finish(call, Err(not_run(stop)), Duration::ZERO)
                            .await,
                    );
                    continue;
                }
                (Some(Ok((_tool, prepared))), None) => prepared,
                (Some(Err(error)), None) => {
                    results[index] = Some(finisher.finish(call, Err(error), Duration::ZERO).await);
                    continue;
                }
                (None, None) => continue,
            };
            let approved = conversation.session_approvals.contains(&call.name);
            let denial = match config
                .policy
                .verdict(&call.name, !mutating[index], approved)
            {
                Verdict::Run => None,
                Verdict::Deny(reason) => Some(ToolError::new(
                    ToolErrorKind::Denied,
                    format!("{reason}. Do not retry this call; choose another approach."),
                )),
                Verdict::Ask => {
                    let decision = ask(base_ctx, call, &*prepared).await;
                    if cancel.is_cancelled() {
                        stop = Some(RunStop::Cancelled);
                        Some(not_run(&RunStop::Cancelled))
                    } else {
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
                                stop = Some(aborted);
                                Some(error)
                            }
                        }
                    }
                }
            };
            match denial {
                None => runnable.push((index, prepared)),
                Some(error) => {
                    results[index] = Some(finisher.finish(call, Err(error), Duration::ZERO).await);
                }
            }
        }
        if let Some(stop) = &stop {
            // An abort also stops the calls approved before it in this phase.
            for (index, _) in runnable.drain(..) {
                results[index] = Some(
                    finisher
                        .finish(&calls[index], Err(not_run(stop)), Duration::ZERO)
                        .await,
                );
            }
        }

        // Execution: everything runnable in this phase at once.
        let started = Instant::now();
        let mut in_flight: Vec<usize> = Vec::with_capacity(runnable.len());
        let mut running: FuturesUnordered<_> = runnable
            .into_iter()
            .map(|(index, prepared)| {
                let call = &calls[index];
                let mut ctx = base_ctx.for_call(&call.id, &call.name);
                if let Some(timeout) = config.tool_timeout {
                    ctx = ctx.with_deadline(Some(started + timeout));
                }
                in_flight.push(index);
                let task = AbortOnDrop(tokio::spawn(run_call(
                    prepared,
                    ctx,
                    call.name.clone(),
                    config.tool_timeout,
                )));
                async move { (index, task.await) }
            })
            .collect();
        let mut grace_until: Option<Instant> = None;
        loop {
            let next = tokio::select! {
                biased;
                _ = cancel.cancelled(), if grace_until.is_none() => {
                    grace_until = Some(Instant::now() + CANCEL_GRACE);
                    continue;
                }
                _ = tokio::time::sleep_until(grace_until.unwrap_or_else(Instant::now)), if grace_until.is_some() => None,
                next = running.next() => next,
            };
            let Some((index, joined)) = next else { break };
            in_flight.retain(|&i| i != index);
            let call = &calls[index];
            let result = match joined {
                Ok(result) => result,
                Err(join_error) if join_error.is_panic() => Err(ToolError::new(
                    ToolErrorKind::Panicked,
                    format!(
                        "tool `{}` panicked: {}",
                        call.name,
                        panic_message(join_error.into_panic())
                    ),
                )),
                Err(_) => Err(not_run(&RunStop::Cancelled)),
            };
            if let Err(error) = &result
                && error.is_fatal()
                && stop.is_none()
            {
                stop = Some(RunStop::Failed(AgentError::FatalTool {
                    tool: call.name.clone(),
                    message: error.message().to_owned(),
                }));
            }
            results[index] = Some(finisher.finish(call, result, started.elapsed()).await);
        }
        // Aborts whatever did not stop within the grace period.
        drop(running);
        if grace_until.is_some() {
            stop.get_or_insert(RunStop::Cancelled);
            for index in in_flight {
                let result = Err(not_run(&RunStop::Cancelled));
                results[index] = Some(
                    finisher
                        .finish(&calls[index], result, started.elapsed())
                        .await,
                );
            }
        }
    }

    conversation
        .messages
        .extend(results.into_iter().zip(calls).map(|(message, call)| {
            // Every index is filled above; this keeps the history paired even if
            // that ever changed.
            message.unwrap_or_else(|| {
                model_message(
                    call,
                    &Err(not_run(&RunStop::Cancelled)),
                    &crate::TruncationPolicy::default(),
                )
                .0
            })
        }));
    stop
}

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
    let prepared = Arc::clone(tool).prepare(&call.arguments)?;
    Ok((Arc::clone(tool), prepared))
}

async fn ask(base_ctx: &ToolCtx, call: &ToolCall, prepared: &dyn PreparedCall) -> ConfirmDecision {
    let ctx = base_ctx.for_call(&call.id, &call.name);
    let summary = match prepared.confirm_summary(&ctx).await {
        Some(summary) => summary,
        None => pretty_arguments(&call.arguments),
    };
    ctx.confirm(ConfirmRequest {
        tool: call.name.clone(),
        call_id: call.id.clone(),
        arguments: serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone())),
        summary,
    })
    .await
}

async fn run_call(
    prepared: Box<dyn PreparedCall>,
    ctx: ToolCtx,
    name: String,
    timeout: Option<Duration>,
) -> ToolResult {
    let call = prepared.call(ctx);
    match timeout {
        None => call.await,
        Some(limit) => match tokio::time::timeout(limit, call).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::new(
                ToolErrorKind::Timeout,
                format!(
                    "tool `{name}` did not finish within {:.1} s and was stopped",
                    limit.as_secs_f64()
                ),
            )),
        },
    }
}

/// Turns results into history messages and host events.
struct Finisher<'a> {
    config: &'a AgentConfig,
    tools: &'a ToolSnapshot,
    events: &'a EventSink,
}

impl Finisher<'_> {
    /// Runs the after-tool hooks, builds what the model sees, and sends the
    /// host the full result.
    async fn finish(&self, call: &ToolCall, mut result: ToolResult, elapsed: Duration) -> Message {
        for hook in &self.config.hooks {
            hook.after_tool_call(call, &mut result).await;
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
        message
    }
}

fn model_message(
    call: &ToolCall,
    result: &ToolResult,
    policy: &crate::TruncationPolicy,
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
        Err(error) => (vec![ContentPart::text(error.message())], true, false),
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

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a non-string panic payload".to_owned()
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
