//! A client's call of a served tool: through the pipeline with the
//! server's working directory, roots and policy, asking the client what the
//! tool needs (on the connection, in `input_required` rounds, or, for a
//! call run as a task, through `tasks/update`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use kinet_core::message::{ContentPart, ToolCall};
use kinet_core::pipeline::CallRecord;
use kinet_core::tool::EventSink;
use kinet_core::{AgentEvent, Message, ToolCtx};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CreateTaskResult,
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::input::{ClientInput, Rounds};
use super::session::{ElicitingConfirm, Session, asks_in_rounds, error_result, principal, raised};

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
        let capabilities = context.client_capabilities().unwrap_or_default();
        // The answers of earlier rounds hold for this tool and this caller.
        let bound = format!(
            "{name}\n{}",
            principal(context).map(|p| p.owner()).unwrap_or_default()
        );
        let rounds = if asks_in_rounds(context) {
            Some(Rounds::open(
                &shared.request_state,
                &bound,
                request.request_state.as_deref(),
                request.input_responses.as_ref(),
            )?)
        } else {
            None
        };
        let input = Arc::new(match &rounds {
            Some(rounds) => ClientInput::rounds(Arc::clone(rounds), capabilities),
            None => ClientInput::direct(context.peer.clone(), capabilities),
        });
        let cancel = context.ct.child_token();
        let base = self.tool_ctx(&input, cancel.clone());
        let call = self.tool_call(name, arguments);
        // What the tool reports while it runs reaches the client as progress
        // (when it asked for it) and as log messages (when it set a level).
        let (sender, mut events) = tokio::sync::mpsc::unbounded_channel();
        let base = base.with_events(EventSink::new(sender));
        let progress_token = context.meta.get_progress_token();
        let logs = self.logs_info(context);
        let mut step = 0.0;
        let mut forward = async |event: AgentEvent| {
            let AgentEvent::ToolProgress { text, .. } = event else {
                return;
            };
            step += 1.0;
            if logs {
                #[allow(deprecated)]
                let _ = context
                    .peer
                    .notify_logging_message(
                        LoggingMessageNotificationParam::new(LoggingLevel::Info, json!(text))
                            .with_logger(name.to_owned()),
                    )
                    .await;
            }
            if let Some(token) = &progress_token {
                let _ = context
                    .peer
                    .notify_progress(
                        ProgressNotificationParam::new(token.clone(), step).with_message(text),
                    )
                    .await;
            }
        };
        let running = shared.pipeline.call(&shared.tools, call, &base);
        let mut running = std::pin::pin!(running);
        let record = loop {
            tokio::select! {
                record = &mut running => break record,
                Some(event) = events.recv() => forward(event).await,
                () = raised(rounds.as_deref()) => {
                    let Some(rounds) = &rounds else { continue };
                    // Questions asked together (a tool awaiting several at
                    // once) go out in one round: let the call run until no
                    // new one comes.
                    let mut quiet = 0;
                    let mut waiting = rounds.waiting();
                    while quiet < 3 {
                        tokio::task::yield_now().await;
                        if futures::poll!(&mut running).is_ready() {
                            break;
                        }
                        let now = rounds.waiting();
                        quiet = if now == waiting { quiet + 1 } else { 0 };
                        waiting = now;
                    }
                    cancel.cancel();
                    return Ok(CallToolResponse::InputRequired(
                        rounds.input_required(&shared.request_state, &bound)?,
                    ));
                }
            }
        };
        while let Ok(event) = events.try_recv() {
            forward(event).await;
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

    /// Whether a call of `name` runs as a task: the tool is one the host
    /// marked, and the client (2026-07-28) declared the Tasks extension.
    pub(super) fn runs_as_task(&self, name: &str, context: &RequestContext<RoleServer>) -> bool {
        self.shared.task_tools.contains(name)
            && asks_in_rounds(context)
            && context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks())
    }

    /// Starts a call of a served tool as a task and answers with its
    /// handle at once. The call runs apart from the request (a client may
    /// poll, answer and cancel it through any replica); its questions wait
    /// for `tasks/update`, and `tasks/cancel` stops it with no later effect.
    pub(super) fn start_task(
        &self,
        request: &CallToolRequestParams,
        arguments: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let owner = principal(context).map(|p| p.owner());
        let (task, runner) = self.shared.tasks.create(owner)?;
        let capabilities = context.client_capabilities().unwrap_or_default();
        let input = Arc::new(ClientInput::task(runner.clone(), capabilities));
        let cancel = CancellationToken::new();
        let ctx = self.tool_ctx(&input, cancel.clone());
        let name = request.name.to_string();
        let call = self.tool_call(&name, arguments);
        let session = self.clone();
        tokio::spawn(async move {
            let shared = Arc::clone(&session.shared);
            let running = shared.pipeline.call(&shared.tools, call, &ctx);
            tokio::select! {
                record = running => {
                    let result = session.result_of(&name, record);
                    let outcome = match serde_json::to_value(result) {
                        Ok(Value::Object(result)) => Ok(Some(result)),
                        _ => Err((-32603, format!("the result of `{name}` cannot be sent"))),
                    };
                    runner.end(outcome);
                }
                () = runner.cancelled() => {
                    cancel.cancel();
                    runner.end(Ok(None));
                }
            }
        });
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
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
