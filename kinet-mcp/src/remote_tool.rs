//! One tool of an MCP server as a kinet tool: `tools/call` with the call's
//! deadline and cancellation, progress forwarded, results normalised.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kinet_core::tool::{DynTool, PreparedCall, ToolErrorKind};
use kinet_core::{ToolAnnotations, ToolCtx, ToolError, ToolOutput};
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, RequestId,
    ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient};
use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::content::normalize_result;
use crate::supervisor::{Connection, ServerSlot};

/// One MCP tool as a kinet tool.
pub(crate) struct McpTool {
    /// The qualified name, `mcp__<server>__<tool>`.
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) parameters: Value,
    pub(crate) annotations: ToolAnnotations,
    /// The tool's name on its server.
    pub(crate) tool: String,
    pub(crate) slot: Arc<ServerSlot>,
    /// The server's (or the hub's) tool timeout.
    pub(crate) timeout: Duration,
    /// The tool's declared `outputSchema`, which its results must match.
    pub(crate) output: Option<Arc<crate::structured::OutputShape>>,
}

/// The annotations an MCP server gave a tool, with MCP's defaults for the
/// hints it left out.
pub(crate) fn annotations_of(tool: &rmcp::model::Tool) -> ToolAnnotations {
    let hints = tool.annotations.as_ref();
    let read_only = hints.and_then(|a| a.read_only_hint).unwrap_or(false);
    let base = if read_only {
        ToolAnnotations::read_only()
    } else {
        ToolAnnotations::default()
    };
    base.destructive(hints.and_then(|a| a.destructive_hint).unwrap_or(!read_only))
        .idempotent(hints.and_then(|a| a.idempotent_hint).unwrap_or(read_only))
        .open_world(hints.and_then(|a| a.open_world_hint).unwrap_or(true))
}

impl McpTool {
    /// Calls the tool on its server: sends the call again with the answers
    /// while the server asks for input (2026-07-28 `input_required`), and
    /// follows a call the server runs as a task to its end.
    async fn invoke(
        &self,
        arguments: Map<String, Value>,
        ctx: &ToolCtx,
    ) -> Result<ToolOutput, ToolError> {
        let server = &self.slot.config.name;
        let Some(connection) = self.slot.connection() else {
            return Err(ToolError::failed(format!(
                "the MCP server `{server}` is not connected ({:?}); try again later",
                self.slot.state()
            )));
        };
        let mut params = CallToolRequestParams::new(self.tool.clone()).with_arguments(arguments);
        let mut deadline = Deadline::new(self.timeout, ctx.deadline());
        let _busy = Busy::new(&self.slot.in_flight);
        // A 2026-07-28 server that needs input answers `input_required`:
        // the questions are answered here (the host's elicitation handler)
        // and the call sent again with the answers and the server's state.
        for _ in 0..MAX_INPUT_ROUNDS {
            match self.send(&connection, &params, ctx, &mut deadline).await? {
                ServerResult::CallToolResult(result) => {
                    return self.checked(normalize_result(server, result)?);
                }
                ServerResult::InputRequiredResult(asked) => {
                    let requests = asked.input_requests.unwrap_or_default();
                    let answers = self.answer(&connection, requests, ctx).await?;
                    params.input_responses = (!answers.is_empty()).then_some(answers);
                    params.request_state = asked.request_state;
                }
                ServerResult::CreateTaskResult(created) => {
                    let result = self
                        .follow_task(&connection, created.task, ctx, &mut deadline)
                        .await?;
                    let output = normalize_result(server, result)?;
                    return self.checked(output);
                }
                _ => {
                    return Err(ToolError::failed(format!(
                        "the MCP server `{server}` answered tools/call with something else"
                    )));
                }
            }
        }
        Err(ToolError::failed(format!(
            "the MCP tool `{}` on `{server}` still wanted input after {MAX_INPUT_ROUNDS} rounds of answers; giving up",
            self.tool
        )))
    }

    /// Sends the call once and waits for the server's answer, passing on
    /// its progress. When the deadline passes, or the call is cancelled,
    /// the server is told to cancel: the deadline (set by the pipeline from
    /// this tool's timeout) is enforced here so that it hears before the
    /// pipeline drops the call; rmcp's own timeout option would cost a
    /// watcher per request.
    async fn send(
        &self,
        connection: &Connection,
        params: &CallToolRequestParams,
        ctx: &ToolCtx,
        deadline: &mut Deadline,
    ) -> Result<ServerResult, ToolError> {
        let mut options = PeerRequestOptions::no_options();
        // The call's trace context, for servers that trace (SEP-414).
        if let Some(traceparent) = kinet_core::telemetry::traceparent() {
            let mut meta = rmcp::model::RequestMetaObject::new();
            meta.set_traceparent(traceparent);
            options.meta = Some(meta);
        }
        let handle = connection
            .peer
            .send_request_with_option(
                ClientRequest::CallToolRequest(CallToolRequest::new(params.clone())),
                options,
            )
            .await
            .map_err(|e| call_error(&self.slot, &self.tool, e, deadline.limit))?;
        let id = handle.id.clone();
        let peer = handle.peer.clone();
        let mut progress = connection
            .handler
            .progress
            .subscribe(handle.progress_token.clone());
        let mut response = std::pin::pin!(handle.await_response());
        let result = loop {
            tokio::select! {
                biased;
                result = &mut response => break result,
                _ = &mut deadline.sleep => {
                    tell_cancelled(&peer, id, "timed out").await;
                    break Err(deadline.timed_out());
                }
                _ = ctx.cancellation().cancelled() => {
                    tell_cancelled(&peer, id, "cancelled by the client").await;
                    return Err(self.cancelled());
                }
                Some(update) = progress.next() => {
                    report_progress(ctx, update);
                    deadline.restart();
                },
            }
        };
        // Progress sent just before the result may still be on its
        // way: the connection hands notifications to tasks of their
        // own, queued before the result reached us. Let them run.
        for _ in 0..4 {
            tokio::task::yield_now().await;
            while let Some(update) = progress.try_next() {
                report_progress(ctx, update);
            }
        }
        result.map_err(|error| call_error(&self.slot, &self.tool, error, deadline.limit))
    }

    /// Answers the questions of an `input_required` result through the
    /// host's form, unless the call is cancelled meanwhile.
    async fn answer(
        &self,
        connection: &Connection,
        requests: rmcp::model::InputRequests,
        ctx: &ToolCtx,
    ) -> Result<rmcp::model::InputResponses, ToolError> {
        let answers = tokio::select! {
            answers = connection.handler.answer(requests) => answers,
            _ = ctx.cancellation().cancelled() => return Err(self.cancelled()),
        };
        answers.map_err(|reason| self.asked_for(&reason))
    }

    /// The error of a call the client cancelled.
    fn cancelled(&self) -> ToolError {
        ToolError::new(
            ToolErrorKind::Cancelled,
            format!("the call to `{}` was cancelled", self.tool),
        )
    }

    /// The error of a call whose server asked for what cannot be given.
    fn asked_for(&self, reason: &str) -> ToolError {
        ToolError::failed(format!(
            "the MCP tool `{}` on `{}` asked for {reason}",
            self.tool, self.slot.config.name
        ))
    }
}

/// The deadline of one call. The server's timeout bounds the silence, not
/// the call: each progress notification (or change of its task) starts it
/// again, so a long tool that reports progress is not cut off. A deadline
/// from the host or the agent holds as it is.
struct Deadline {
    /// The longest silence: the server's (or the hub's) tool timeout.
    idle: Duration,
    /// The host's or the agent's deadline for the call.
    hard: Option<Instant>,
    /// The limit the call started with, as a timeout's error names it.
    limit: Duration,
    /// Fires when the call has run out of time.
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl Deadline {
    fn new(idle: Duration, hard: Option<Instant>) -> Self {
        let started = Instant::now();
        let at = Self::limit_from(idle, hard, started);
        Self {
            idle,
            hard,
            limit: at.saturating_duration_since(started),
            sleep: Box::pin(tokio::time::sleep_until(at)),
        }
    }

    /// When a call times out if nothing is heard after `now`.
    fn limit_from(idle: Duration, hard: Option<Instant>, now: Instant) -> Instant {
        // A huge timeout means none (and must not overflow).
        let soft = now
            .checked_add(idle)
            .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365));
        hard.map_or(soft, |hard| hard.min(soft))
    }

    /// The server showed it is at work: the silence starts again.
    fn restart(&mut self) {
        let at = Self::limit_from(self.idle, self.hard, Instant::now());
        self.sleep.as_mut().reset(at);
    }

    /// What a call that ran out of time failed with.
    fn timed_out(&self) -> ServiceError {
        ServiceError::Timeout {
            timeout: self.limit,
        }
    }
}

impl McpTool {
    /// `output` if it keeps to the tool's declared output schema.
    fn checked(&self, output: ToolOutput) -> Result<ToolOutput, ToolError> {
        if let Some(shape) = &self.output
            && let Err(problem) = shape.check(output.structured.as_ref())
        {
            return Err(ToolError::failed(format!(
                "the MCP tool `{}` on `{}` returned a result that cannot be trusted: {problem}",
                self.tool, self.slot.config.name
            )));
        }
        Ok(output)
    }

    /// Follows a call the server runs as a task (2026-07-28 Tasks
    /// extension) to its end: polls `tasks/get` at the interval the server
    /// suggests (each request on its own; no stream is held open), answers
    /// its questions through the host's form (`tasks/update`), and cancels
    /// it (`tasks/cancel`) when the call is cancelled or times out. Each
    /// change of the task (its `lastUpdatedAt`) restarts the idle timeout;
    /// the call's own deadline holds.
    async fn follow_task(
        &self,
        connection: &Connection,
        task: rmcp::model::Task,
        ctx: &ToolCtx,
        deadline: &mut Deadline,
    ) -> Result<rmcp::model::CallToolResult, ToolError> {
        use rmcp::model::{CancelTaskParams, GetTaskParams, TaskPayload, UpdateTaskParams};
        let server = &self.slot.config.name;
        let id = task.task_id;
        let interval = Duration::from_millis(task.poll_interval_ms.unwrap_or(500).clamp(20, 5_000));
        let peer = &connection.peer;
        let stop = async |why: &str| {
            let _ = peer.cancel_task(CancelTaskParams::new(id.clone())).await;
            tracing::debug!(server = %server, task = %id, "task cancelled: {why}");
        };
        let mut answered = std::collections::BTreeSet::new();
        let mut last_update = String::new();
        loop {
            tokio::select! {
                biased;
                _ = ctx.cancellation().cancelled() => {
                    stop("cancelled by the client").await;
                    return Err(self.cancelled());
                }
                _ = &mut deadline.sleep => {
                    stop("timed out").await;
                    return Err(call_error(&self.slot, &self.tool, deadline.timed_out(), deadline.limit));
                }
                _ = tokio::time::sleep(interval) => {}
            }
            let got = peer
                .get_task(GetTaskParams::new(id.clone()))
                .await
                .map_err(|e| call_error(&self.slot, &self.tool, e, deadline.limit))?;
            // The task changed (a status, a question, an answer taken):
            // as good as progress for the idle timeout.
            if got.task.task.last_updated_at != last_update {
                last_update = got.task.task.last_updated_at.clone();
                deadline.restart();
            }
            match got.task.payload {
                TaskPayload::Completed { result } => {
                    return serde_json::from_value(Value::Object(result)).map_err(|e| {
                        ToolError::failed(format!(
                            "the MCP server `{server}` finished the task of `{}` with a malformed result: {e}",
                            self.tool
                        ))
                    });
                }
                TaskPayload::Failed { error } => {
                    let message = error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("no reason given");
                    return Err(ToolError::failed(format!(
                        "the MCP tool `{}` on `{server}` failed as a task: {message}",
                        self.tool
                    )));
                }
                TaskPayload::Cancelled => {
                    return Err(ToolError::new(
                        ToolErrorKind::Cancelled,
                        format!(
                            "the MCP server `{server}` cancelled the task of `{}`",
                            self.tool
                        ),
                    ));
                }
                TaskPayload::InputRequired { input_requests } => {
                    let new: rmcp::model::InputRequests = input_requests
                        .into_iter()
                        .filter(|(key, _)| !answered.contains(key))
                        .collect();
                    if new.is_empty() {
                        continue;
                    }
                    let keys: Vec<String> = new.keys().cloned().collect();
                    let answers = connection
                        .handler
                        .answer(new)
                        .await
                        .map_err(|reason| self.asked_for(&reason))?;
                    peer.update_task(UpdateTaskParams::new(id.clone(), answers))
                        .await
                        .map_err(|e| call_error(&self.slot, &self.tool, e, deadline.limit))?;
                    answered.extend(keys);
                }
                _ => {}
            }
        }
    }
}

/// How many rounds of `input_required` one call may take.
const MAX_INPUT_ROUNDS: usize = 10;

/// Counts a call as in flight until dropped.
struct Busy<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Busy<'a> {
    fn new(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn report_progress(ctx: &ToolCtx, update: rmcp::model::ProgressNotificationParam) {
    let mut line = match update.total {
        Some(total) => format!("progress {}/{}", update.progress, total),
        None => format!("progress {}", update.progress),
    };
    if let Some(message) = update.message {
        line.push_str(&format!(": {message}"));
    }
    ctx.progress(format!("{line}\n"));
}

fn call_error(slot: &ServerSlot, tool: &str, error: ServiceError, timeout: Duration) -> ToolError {
    let server = slot.config.name.as_str();
    match error {
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
            if slot.stopping.load(std::sync::atomic::Ordering::SeqCst) =>
        {
            ToolError::unavailable(format!(
                "the MCP server `{server}` was stopped (the host is shutting its MCP servers down) while `{tool}` ran; it is not available any more"
            ))
        }
        ServiceError::Timeout { .. } => ToolError::new(
            ToolErrorKind::Timeout,
            format!(
                "the MCP tool `{tool}` on `{server}` did not answer (nor report progress) within {:.0} s",
                timeout.as_secs_f64()
            ),
        ),
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
            if slot.wants_authorization() =>
        {
            ToolError::unavailable(format!(
                "the MCP server `{server}` refused `{tool}` and wants a new OAuth authorization (a wider scope, or the grant was revoked); the user is asked, then try the call again"
            ))
        }
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
            ToolError::unavailable(format!(
                "the MCP server `{server}` closed the connection during the call; it is being restarted, try the call again"
            ))
        }
        ServiceError::McpError(error) => ToolError::failed(format!(
            "the MCP server `{server}` rejected the call to `{tool}`: {} (code {})",
            error.message, error.code.0
        )),
        other => ToolError::failed(format!(
            "calling `{tool}` on `{server}` failed: {}",
            crate::errors::service_error(&other)
        )),
    }
}

impl DynTool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn annotations(&self) -> ToolAnnotations {
        self.annotations
    }

    /// None: the call enforces the server's timeout itself, as a limit on
    /// silence that progress notifications restart.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    fn prepare(self: Arc<Self>, arguments: &str) -> Result<Box<dyn PreparedCall>, ToolError> {
        let arguments = if arguments.trim().is_empty() {
            Map::new()
        } else {
            match serde_json::from_str::<Value>(arguments) {
                Ok(Value::Object(map)) => map,
                Ok(other) => {
                    return Err(ToolError::invalid_arguments(format!(
                        "arguments for `{}` must be a JSON object, not {other}",
                        self.name
                    )));
                }
                Err(error) => {
                    return Err(ToolError::invalid_arguments(format!(
                        "invalid arguments for tool `{}`: {error}. Call it again with a JSON object that matches its schema.",
                        self.name
                    )));
                }
            }
        };
        Ok(Box::new(McpCall {
            tool: self,
            arguments,
        }))
    }
}

struct McpCall {
    tool: Arc<McpTool>,
    arguments: Map<String, Value>,
}

#[async_trait]
impl PreparedCall for McpCall {
    fn mutating(&self) -> bool {
        !self.tool.annotations.read_only
    }

    fn scheduling(&self) -> kinet_core::tool::Scheduling {
        kinet_core::tool::default_scheduling(self.tool.annotations, self.mutating())
    }

    async fn confirm_summary(&self, _ctx: &ToolCtx) -> Option<String> {
        Some(format!(
            "MCP server `{}`, tool `{}`:\n{}",
            self.tool.slot.config.name,
            self.tool.tool,
            serde_json::to_string_pretty(&self.arguments).unwrap_or_default()
        ))
    }

    async fn call(self: Box<Self>, ctx: ToolCtx) -> Result<ToolOutput, ToolError> {
        self.tool.invoke(self.arguments, &ctx).await
    }
}

/// Tells the server a request is cancelled, waiting at most a second: a
/// server that does not read its input must not hold the call up.
async fn tell_cancelled(peer: &Peer<RoleClient>, id: RequestId, reason: &str) {
    let notice = CancelledNotificationParam::new(Some(id), Some(reason.into()));
    let _ = tokio::time::timeout(Duration::from_secs(1), peer.notify_cancelled(notice)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinet_core::tool::{Scheduling, default_scheduling};

    fn tool(annotations: Option<rmcp::model::ToolAnnotations>) -> rmcp::model::Tool {
        let mut tool =
            rmcp::model::Tool::new("t", "a tool", std::sync::Arc::new(serde_json::Map::new()));
        tool.annotations = annotations;
        tool
    }

    /// A tool whose server says nothing about it is taken at its worst: it
    /// changes things (so the approval policy asks), destroys, is not
    /// safe to retry, reaches the world, and runs alone.
    #[test]
    fn an_unannotated_tool_is_mutating_and_runs_alone() {
        let unannotated = annotations_of(&tool(None));
        assert!(!unannotated.read_only && unannotated.destructive && unannotated.open_world);
        assert!(!unannotated.idempotent);
        assert_eq!(
            default_scheduling(unannotated, !unannotated.read_only),
            Scheduling::Exclusive
        );
        // Empty annotations (every hint left out) are the same.
        let empty = annotations_of(&tool(Some(rmcp::model::ToolAnnotations::new())));
        assert_eq!(empty, unannotated);
        // Only an explicit readOnlyHint makes a tool read-only and parallel.
        let read_only = annotations_of(&tool(Some(
            rmcp::model::ToolAnnotations::new().read_only(true),
        )));
        assert!(read_only.read_only && !read_only.destructive);
        assert_eq!(default_scheduling(read_only, false), Scheduling::Parallel);
    }
}
