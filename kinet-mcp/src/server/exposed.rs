//! A client's call of a served tool: through the pipeline with the
//! server's working directory, roots and policy, asking the client what the
//! tool needs (on the connection, in `input_required` rounds, or, for a
//! call run as a task, through `tasks/update`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use kinet_core::message::{ContentPart, ToolCall};
use kinet_core::pipeline::CallRecord;
use kinet_core::tool::ToolErrorKind;
use kinet_core::tool::engine::EngineCtx as _;
use kinet_core::tool::engine::EventSink;
use kinet_core::{AgentEvent, Message, ToolCtx};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CreateTaskResult,
    JsonObject, LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam,
    ProgressToken,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::TaskSupport;
use super::input::{ClientInput, Escalation, Rounds};
use super::session::{
    ElicitingConfirm, Session, asks_in_rounds, error_result, principal, raised, tasks_required,
};

/// A served call in flight, movable into a task.
type Running = std::pin::Pin<Box<dyn std::future::Future<Output = CallRecord> + Send>>;

/// Resolves when a call that may become a task asks to (never otherwise).
async fn wanted(escalation: Option<&Escalation>) {
    match escalation {
        Some(escalation) => escalation.wanted.notified().await,
        None => std::future::pending().await,
    }
}

/// Resolves after a few polls of the select it is in: a call still
/// pending then, with no question raised, waits on other work.
async fn settled() {
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
}

/// How a call of a served tool asks the client, and for whom it runs.
struct CallSetup {
    /// The caller, with OAuth (a task the call becomes is theirs).
    owner: Option<String>,
    /// What the answers of earlier rounds are sealed to: the tool and the
    /// caller.
    bound: String,
    /// The rounds of `input_required`, for a 2026-07-28 client.
    rounds: Option<Arc<Rounds>>,
    /// Set when the call may become a task.
    escalation: Option<Arc<Escalation>>,
    /// The client, as the tool asks it.
    input: Arc<ClientInput>,
    /// Cancels the call: with its request, unless it may become a task.
    cancel: CancellationToken,
}

/// Passes what a served tool reports while it runs on to the client: as
/// progress (when it asked for it) and as log messages (when it set a
/// level).
struct Reporter<'a> {
    context: &'a RequestContext<RoleServer>,
    tool: &'a str,
    progress_token: Option<ProgressToken>,
    logs: bool,
    /// Progress reported so far.
    step: f64,
}

impl Reporter<'_> {
    async fn forward(&mut self, event: AgentEvent) {
        let AgentEvent::ToolProgress { text, .. } = event else {
            return;
        };
        self.step += 1.0;
        if self.logs {
            #[allow(deprecated)]
            let _ = self
                .context
                .peer
                .notify_logging_message(
                    LoggingMessageNotificationParam::new(LoggingLevel::Info, json!(text))
                        .with_logger(self.tool.to_owned()),
                )
                .await;
        }
        if let Some(token) = &self.progress_token {
            let _ = self
                .context
                .peer
                .notify_progress(
                    ProgressNotificationParam::new(token.clone(), self.step).with_message(text),
                )
                .await;
        }
    }
}

/// Lets a call that raised a question run on until no new one comes, so
/// that questions asked together (a tool awaiting several at once) go out
/// in one round.
async fn gather_questions(rounds: &Rounds, running: &mut Running) {
    let mut quiet = 0;
    let mut waiting = rounds.waiting();
    while quiet < 3 {
        tokio::task::yield_now().await;
        if futures::poll!(&mut *running).is_ready() {
            break;
        }
        let now = rounds.waiting();
        quiet = if now == waiting { quiet + 1 } else { 0 };
        waiting = now;
    }
}

impl Session {
    /// Runs a client's call of a served tool through the pipeline, in the
    /// server's working directory and roots. What the tool asks of the
    /// client ([`ClientInput`], and approvals when the client can elicit)
    /// is asked on the open connection (2025-11-25 and older) or, on
    /// 2026-07-28, ends the call with `input_required` and is answered when
    /// the client calls again.
    pub(super) async fn call_exposed(
        &self,
        request: &CallToolRequestParams,
        arguments: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let shared = &self.shared;
        let name = &*request.name;
        let CallSetup {
            owner,
            bound,
            rounds,
            escalation,
            input,
            cancel,
        } = self.set_up(request, context)?;
        let base = self.tool_ctx(&input, cancel.clone());
        let call = self.tool_call(name, arguments);
        // What the tool reports while it runs reaches the client.
        let (sender, mut events) = tokio::sync::mpsc::unbounded_channel();
        let base = base.with_events(EventSink::new(sender));
        let mut reporter = Reporter {
            context,
            tool: name,
            progress_token: context.meta.get_progress_token(),
            logs: self.logs_info(context),
            step: 0.0,
        };
        let session = self.clone();
        let mut running: Running = Box::pin(async move {
            let shared = &session.shared;
            shared.pipeline.call(&shared.tools, call, &base).await
        });
        let record = loop {
            tokio::select! {
                // In this order: a question the tool raised while polled is
                // seen before the call counts as waiting on other work.
                biased;
                record = &mut running => break Some(record),
                () = raised(rounds.as_deref()) => {
                    let Some(rounds) = &rounds else { continue };
                    gather_questions(rounds, &mut running).await;
                    cancel.cancel();
                    return Ok(CallToolResponse::InputRequired(
                        rounds.input_required(&shared.request_state, &bound)?,
                    ));
                }
                () = wanted(escalation.as_deref()) => break None,
                () = context.ct.cancelled(), if escalation.is_some() && !cancel.is_cancelled() => {
                    cancel.cancel();
                }
                Some(event) = events.recv() => reporter.forward(event).await,
                // Waiting on something other than the client: a task now.
                () = settled(), if escalation.is_some() => break None,
            }
        };
        let record = match (record, escalation) {
            (Some(record), _) => record,
            (None, Some(escalation)) => {
                return self.escalate(name, owner, running, &escalation, cancel);
            }
            (None, None) => return Err(McpError::internal_error("the call was lost", None)),
        };
        while let Ok(event) = events.try_recv() {
            reporter.forward(event).await;
        }
        // A 2026-07-28 client that lacked a capability the tool needed is
        // told which (it may call again declaring it).
        if record.result.is_err()
            && rounds.is_some()
            && let Some(required) = input.missing()
        {
            return Err(McpError::missing_required_client_capability(required));
        }
        Ok(self.result_of(name, record).into())
    }

    /// How a call of a served tool asks the client, and for whom it runs:
    /// in rounds of `input_required` (2026-07-28) or on the connection, and
    /// as a task when it may become one.
    fn set_up(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallSetup, McpError> {
        let name = &*request.name;
        let as_task = self.may_run_as_task(name, context)?;
        let capabilities = context.client_capabilities().unwrap_or_default();
        // The answers of earlier rounds hold for this tool and this caller.
        let owner = principal(context).map(|p| p.owner());
        let bound = format!("{name}\n{}", owner.as_deref().unwrap_or_default());
        let rounds = if asks_in_rounds(context) {
            Some(Rounds::open(
                &self.shared.request_state,
                &bound,
                request.request_state.as_deref(),
                request.input_responses.as_ref(),
            )?)
        } else {
            None
        };
        let escalation = match (&rounds, as_task) {
            (Some(rounds), true) => Some(Escalation::new(Arc::clone(rounds))),
            _ => None,
        };
        let input = Arc::new(match (&escalation, &rounds) {
            (Some(escalation), _) => ClientInput::task(Arc::clone(escalation), capabilities),
            (None, Some(rounds)) => ClientInput::rounds(Arc::clone(rounds), capabilities),
            (None, None) => ClientInput::direct(context.peer.clone(), capabilities),
        });
        // A call that may outlive its request is not cancelled with it
        // once it is a task.
        let cancel = if escalation.is_some() {
            CancellationToken::new()
        } else {
            context.ct.child_token()
        };
        Ok(CallSetup {
            owner,
            bound,
            rounds,
            escalation,
            input,
            cancel,
        })
    }

    /// The context a served call runs in: the server's directory, roots
    /// and policy, the client as [`ClientInput`], approvals asked through
    /// it when it can show a form.
    fn tool_ctx(&self, input: &Arc<ClientInput>, cancel: CancellationToken) -> ToolCtx {
        let shared = &self.shared;
        let mut base = shared
            .agent
            .tool_context(cancel)
            .with_cwd(shared.cwd.clone())
            .with_roots(shared.roots.clone());
        let mut extensions = base.extensions().clone();
        extensions.insert_arc(Arc::clone(input));
        base = base.with_extensions(extensions);
        if input.can_elicit() {
            base = base.with_confirm_handler(
                Arc::new(ElicitingConfirm {
                    input: (**input).clone(),
                }),
                shared.pipeline.policy().timeout(),
            );
        }
        base
    }

    fn tool_call(&self, name: &str, arguments: Map<String, Value>) -> ToolCall {
        ToolCall {
            id: format!("mcp-{}", self.shared.calls.fetch_add(1, Ordering::Relaxed)),
            name: name.to_owned(),
            arguments: Value::Object(arguments).to_string(),
        }
    }

    /// A finished call as an MCP result: text and images, the structured
    /// content when it keeps to the tool's declared schema.
    fn result_of(&self, name: &str, record: CallRecord) -> CallToolResult {
        let Message::Tool { content, .. } = record.message else {
            return error_result("the tool returned no result");
        };
        let blocks = content
            .into_iter()
            .map(|part| match part {
                ContentPart::Image(image) => ContentBlock::image(image.data, image.media_type),
                other => ContentBlock::text(other.as_text().unwrap_or_default().to_owned()),
            })
            .collect();
        match record.result {
            Ok(output) => {
                // A result that breaks the tool's declared shape is not
                // passed on as if it were one.
                let broken = self
                    .shared
                    .shapes
                    .get(name)
                    .and_then(|shape| shape.check(output.structured.as_ref()).err());
                match broken {
                    Some(problem) => error_result(format!("`{name}` failed: {problem}")),
                    None => {
                        let mut result = CallToolResult::success(blocks);
                        result.structured_content = output.structured;
                        result
                    }
                }
            }
            Err(_) => CallToolResult::error(blocks),
        }
    }

    /// Whether a call of `name` may run as a task: the host marked the
    /// tool, and the client (2026-07-28) declared the Tasks extension. A
    /// tool that runs only as a task refuses (-32021) a 2026-07-28 client
    /// without it; older clients, which have no tasks, call it as usual.
    fn may_run_as_task(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<bool, McpError> {
        let Some(support) = self.shared.task_tools.get(name) else {
            return Ok(false);
        };
        if !asks_in_rounds(context) {
            return Ok(false);
        }
        if context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
        {
            return Ok(true);
        }
        match support {
            TaskSupport::Required => Err(tasks_required()),
            TaskSupport::Optional => Ok(false),
        }
    }

    /// Turns a running call into a task and answers with its handle. The
    /// call goes on apart from the request (a client may poll, answer and
    /// cancel it through any replica); its questions wait for
    /// `tasks/update`, and `tasks/cancel` stops it with no later effect.
    fn escalate(
        &self,
        name: &str,
        owner: Option<String>,
        running: Running,
        escalation: &Escalation,
        cancel: CancellationToken,
    ) -> Result<CallToolResponse, McpError> {
        let (task, runner) = self.shared.tasks.create(owner)?;
        escalation.start(runner.clone());
        let name = name.to_owned();
        let session = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                record = running => runner.end(session.outcome(&name, record)),
                () = runner.cancelled() => {
                    cancel.cancel();
                    runner.end(Ok(None));
                }
            }
        });
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    /// How a call run as a task ended: its result (a tool's error is still
    /// a result), or a protocol error when the tool broke.
    fn outcome(&self, name: &str, record: CallRecord) -> Result<Option<JsonObject>, (i64, String)> {
        if let Err(error) = &record.result
            && error.kind() == ToolErrorKind::Panicked
        {
            return Err((-32603, error.to_string()));
        }
        match serde_json::to_value(self.result_of(name, record)) {
            Ok(Value::Object(result)) => Ok(Some(result)),
            _ => Err((-32603, format!("the result of `{name}` cannot be sent"))),
        }
    }

    /// Whether the client wants info-level log messages: it set a level
    /// with `logging/setLevel` (2025-11-25) or in the request's `_meta`
    /// (2026-07-28) at info or below.
    fn logs_info(&self, context: &RequestContext<RoleServer>) -> bool {
        let level = context
            .meta
            .log_level()
            .or_else(|| self.log_level.lock().ok().and_then(|level| *level));
        level.is_some_and(|level| matches!(level, LoggingLevel::Debug | LoggingLevel::Info))
    }
}
