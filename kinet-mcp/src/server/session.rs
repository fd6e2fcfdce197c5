//! One client session of an [`McpServer`](super::McpServer): the tool
//! list, the `agent` and `reply` runs, and served tool calls through the
//! pipeline.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use kinet_core::confirm::{ConfirmError, ConfirmRequest};
use kinet_core::message::{ContentPart, ToolCall};
use kinet_core::tool::EventSink;
use kinet_core::{AgentEvent, ConfirmDecision, ConfirmHandler, Conversation, Message, RunStop};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use super::Shared;

/// One client session.
#[derive(Clone)]
pub(super) struct Session {
    pub(super) shared: Arc<Shared>,
    pub(super) conversations: super::conversations::Conversations,
    pub(super) counter: Arc<AtomicU64>,
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

/// What `request_id` is for, as the tools' schemas say it.
const REQUEST_ID: &str = "An id unique to this request; sent again (after an answer was lost), \
     the answer already given is returned instead of running again.";

fn error_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text.into())])
}

impl Session {
    fn tool_list(&self) -> Vec<rmcp::model::Tool> {
        let mut tools = vec![
            rmcp::model::Tool::new(
                "agent",
                format!(
                    "Runs the {} agent on a task and returns its answer and a conversation_id; \
                     pass conversation_id to continue an earlier conversation.",
                    self.shared.name
                ),
                schema(json!({
                    "type": "object",
                    "properties": {
                        "prompt": {"type": "string", "description": "The task or question."},
                        "conversation_id": {"type": "string", "description": "Continue this conversation."},
                        "cwd": {"type": "string", "description": "Working directory for this run."},
                        "request_id": {"type": "string", "description": REQUEST_ID}
                    },
                    "required": ["prompt"]
                })),
            ),
            rmcp::model::Tool::new(
                "reply",
                "Continues a conversation started with `agent`.",
                schema(json!({
                    "type": "object",
                    "properties": {
                        "conversation_id": {"type": "string"},
                        "prompt": {"type": "string"},
                        "request_id": {"type": "string", "description": REQUEST_ID}
                    },
                    "required": ["conversation_id", "prompt"]
                })),
            ),
        ];
        for name in self.shared.tools.names() {
            let Some(tool) = self.shared.tools.get(name) else {
                continue;
            };
            let hints = tool.annotations();
            tools.push(
                rmcp::model::Tool::new(
                    tool.name().to_owned(),
                    tool.description().to_owned(),
                    schema(tool.parameters()),
                )
                .annotate(
                    ToolAnnotations::new()
                        .read_only(hints.read_only)
                        .destructive(hints.destructive)
                        .idempotent(hints.idempotent)
                        .open_world(hints.open_world),
                ),
            );
        }
        tools
    }

    async fn run_agent(
        &self,
        arguments: &Map<String, Value>,
        continuing: bool,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let text = |key: &str| {
            arguments
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let Some(prompt) = text("prompt").filter(|p| !p.trim().is_empty()) else {
            return error_result("`prompt` is required");
        };
        let id = text("conversation_id");
        if continuing && id.is_none() {
            return error_result("`conversation_id` is required");
        }
        let Ok(_permit) = Arc::clone(&self.shared.runs).try_acquire_owned() else {
            return error_result(format!(
                "busy: {} agent runs are in progress; try again shortly",
                self.shared.max_runs
            ));
        };
        // A reply holds its conversation until it is saved: another reply
        // to it (here or on another replica) is refused meanwhile.
        let claim = match id.as_deref() {
            Some(id) => match self.conversations.claim(id).await {
                Ok(claim) => Some(claim),
                Err(error) => return error_result(error),
            },
            None => None,
        };
        // Who asked (with OAuth): a conversation is theirs alone.
        let principal = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<crate::oauth::Principal>())
            .cloned();
        let owner = principal.as_ref().map(crate::oauth::Principal::owner);
        let request_id = text("request_id").filter(|r| !r.is_empty());
        let (id, mut conversation, saved) = match id {
            Some(id) => match self.conversations.load(&id, owner.as_deref()) {
                Ok(Some(loaded)) => {
                    // The same request again (its answer was lost): the
                    // answer given, not a second run.
                    if let (Some(request), Some((last, answer))) =
                        (&request_id, &loaded.last_request)
                        && request == last
                    {
                        let mut result =
                            CallToolResult::success(vec![ContentBlock::text(answer.clone())]);
                        result.structured_content = Some(json!({"conversation_id": id}));
                        return result;
                    }
                    let conversation = loaded.conversation;
                    let saved = (
                        conversation.messages.clone(),
                        conversation.provenance.seen().len(),
                    );
                    (id, conversation, Some(saved))
                }
                Ok(None) => return error_result(format!("no conversation `{id}` in this session")),
                Err(error) => return error_result(error),
            },
            None => (
                self.conversations
                    .new_id(self.counter.fetch_add(1, Ordering::Relaxed)),
                Conversation::new(),
                None,
            ),
        };
        conversation.push_user(prompt);
        let served = self.shared.agent(principal.as_ref());
        let mut agent = match text("cwd") {
            Some(cwd) => served.with_cwd(PathBuf::from(cwd)),
            None => served,
        };
        // Confirmations go to the client's user when the client can ask them;
        // otherwise the agent's own handler and policy decide.
        if client_elicits(context) {
            agent = agent.with_confirm_handler(Arc::new(ElicitingConfirm {
                peer: context.peer.clone(),
            }));
        }
        let progress_token = context.meta.get_progress_token();
        let mut run = agent.run_with_cancellation(conversation, context.ct.clone());
        let mut step = 0.0;
        while let Some(event) = run.next().await {
            if let (
                Some(token),
                AgentEvent::ToolCallStarted {
                    name, arguments, ..
                },
            ) = (&progress_token, &event)
            {
                step += 1.0;
                let _ = context
                    .peer
                    .notify_progress(
                        ProgressNotificationParam::new(token.clone(), step)
                            .with_message(format!("calling {name} {arguments}")),
                    )
                    .await;
            }
        }
        let outcome = run.finish().await;
        let answer = outcome.final_text().unwrap_or_default();
        let stop = outcome.stop.clone();
        if claim
            .as_ref()
            .is_some_and(super::conversations::Claim::lost)
        {
            return error_result(format!(
                "conversation `{id}` was taken over by another reply while this one ran (its claim expired); this reply was not saved: send it again"
            ));
        }
        if let Err(error) = self.conversations.save(
            &id,
            owner.as_deref(),
            request_id
                .as_deref()
                .map(|request| (request, answer.as_str())),
            &outcome.conversation,
            saved
                .as_ref()
                .map(|(messages, seen)| (&messages[..], *seen)),
        ) {
            return error_result(error);
        }
        match stop {
            RunStop::Completed | RunStop::MaxTurns => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(answer)]);
                result.structured_content = Some(json!({"conversation_id": id}));
                result
            }
            RunStop::Cancelled => error_result("the run was cancelled"),
            other => error_result(format!("the agent's run {other}")),
        }
    }

    /// Runs a client's call of a served tool through the pipeline, in the
    /// server's working directory and roots.
    async fn call_exposed(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let shared = &self.shared;
        let mut base = shared
            .agent
            .tool_context(context.ct.clone())
            .with_cwd(shared.cwd.clone())
            .with_roots(shared.roots.clone());
        if client_elicits(context) {
            base = base.with_confirm_handler(
                Arc::new(ElicitingConfirm {
                    peer: context.peer.clone(),
                }),
                shared.pipeline.policy().timeout(),
            );
        }
        let call = ToolCall {
            id: format!("mcp-{}", shared.calls.fetch_add(1, Ordering::Relaxed)),
            name: name.to_owned(),
            arguments: Value::Object(arguments).to_string(),
        };
        // Progress the tool reports reaches a client that asked for it.
        let (sender, mut events) = tokio::sync::mpsc::unbounded_channel();
        let base = base.with_events(EventSink::new(sender));
        let progress_token = context.meta.get_progress_token();
        let mut step = 0.0;
        let mut forward = async |event: AgentEvent| {
            if let (Some(token), AgentEvent::ToolProgress { text, .. }) = (&progress_token, event) {
                step += 1.0;
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
            }
        };
        while let Ok(event) = events.try_recv() {
            forward(event).await;
        }
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
                let mut result = CallToolResult::success(blocks);
                result.structured_content = output.structured;
                result
            }
            Err(_) => CallToolResult::error(blocks),
        }
    }
}

/// Whether the client can ask its user questions (MCP elicitation).
fn client_elicits(context: &RequestContext<RoleServer>) -> bool {
    context
        .peer
        .peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some())
}

/// Asks the MCP client's user to confirm a tool call (MCP elicitation).
struct ElicitingConfirm {
    peer: rmcp::service::Peer<RoleServer>,
}

#[async_trait::async_trait]
impl ConfirmHandler for ElicitingConfirm {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        let params: rmcp::model::ElicitRequestParams = serde_json::from_value(json!({
            "mode": "form",
            "message": match &request.concern {
                Some(concern) => format!(
                    "The agent wants to run `{}`:\n{}\n\nWarning, possible prompt injection: {concern}",
                    request.tool, request.summary
                ),
                None => format!("The agent wants to run `{}`:\n{}", request.tool, request.summary),
            },
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "approve": {"type": "boolean", "title": "Allow this call?"}
                },
                "required": ["approve"]
            }
        }))
        .map_err(|e| ConfirmError(format!("cannot build the elicitation: {e}")))?;
        let answer = self
            .peer
            .create_elicitation(params)
            .await
            .map_err(|e| ConfirmError(format!("the client did not answer: {e}")))?;
        let approved = answer
            .content
            .as_ref()
            .and_then(|c| c.get("approve"))
            .and_then(Value::as_bool)
            == Some(true);
        Ok(match answer.action {
            rmcp::model::ElicitationAction::Accept if approved => ConfirmDecision::Approve,
            rmcp::model::ElicitationAction::Cancel => ConfirmDecision::Abort,
            _ => ConfirmDecision::Deny {
                reason: Some("declined by the user of the MCP client".into()),
            },
        })
    }
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new(self.shared.name.clone(), env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tool_list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, McpError> {
        let arguments = request.arguments.clone().unwrap_or_default();
        let result = match &*request.name {
            "agent" => self.run_agent(&arguments, false, &context).await,
            "reply" => self.run_agent(&arguments, true, &context).await,
            name => self.call_exposed(name, arguments, &context).await,
        };
        Ok(rmcp::model::CallToolResponse::Complete(result))
    }
}
