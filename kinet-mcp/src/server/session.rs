//! One client session of an [`McpServer`](super::McpServer): the tool
//! list, the `agent` and `reply` runs, and served tool calls through the
//! pipeline.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use kinet_core::builder::Workspace;
use kinet_core::confirm::{ConfirmError, ConfirmRequest};
use kinet_core::{
    Agent, AgentEvent, ConfirmDecision, ConfirmHandler, Conversation, Message, RunOutcome, RunStop,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelTaskParams, ContentBlock, GetTaskParams,
    GetTaskResult, Implementation, ListToolsResult, LoggingLevel, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig, SetLevelRequestParams,
    ToolAnnotations, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use super::Shared;
use super::conversations::Conversations;
use super::input::{ClientInput, ElicitAction, Rounds};

/// One client session.
#[derive(Clone)]
pub(super) struct Session {
    pub(super) shared: Arc<Shared>,
    pub(super) conversations: Conversations,
    pub(super) counter: Arc<AtomicU64>,
    /// The level a 2025-11-25 client set with `logging/setLevel`.
    pub(super) log_level: Arc<std::sync::Mutex<Option<LoggingLevel>>>,
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

/// What `request_id` is for, as the tools' schemas say it.
const REQUEST_ID: &str = "An id unique to this request; sent again (after an answer was lost), \
     the answer already given is returned instead of running again.";

pub(super) fn error_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text.into())])
}

impl Session {
    /// The tools this server lists, described once per server (the
    /// schemas are generated once, not on every request).
    fn tool_list(&self) -> Vec<rmcp::model::Tool> {
        self.described().0.clone()
    }

    /// The listed tools and where each is in the list, by name.
    fn described(
        &self,
    ) -> &(
        Vec<rmcp::model::Tool>,
        std::collections::HashMap<String, usize>,
    ) {
        self.shared.described.get_or_init(|| {
            let list = self.describe_tools();
            let by_name = list
                .iter()
                .enumerate()
                .map(|(at, tool)| (tool.name.to_string(), at))
                .collect();
            (list, by_name)
        })
    }

    fn describe_tools(&self) -> Vec<rmcp::model::Tool> {
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
        tools.extend(
            self.shared
                .tools
                .names()
                .filter_map(|name| self.served_tool(name)),
        );
        tools
    }

    /// The MCP description of the served tool `name`.
    fn served_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        let tool = self.shared.tools.get(name)?;
        let hints = tool.annotations();
        let mut served = rmcp::model::Tool::new(
            tool.name().to_owned(),
            tool.description().to_owned(),
            schema(tool.parameters()),
        );
        served.output_schema = tool.output_schema().map(schema);
        Some(
            served.annotate(
                ToolAnnotations::new()
                    .read_only(hints.read_only)
                    .destructive(hints.destructive)
                    .idempotent(hints.idempotent)
                    .open_world(hints.open_world),
            ),
        )
    }

    /// Runs the agent for an `agent` call, or for a `reply`
    /// (`continuing`) to a conversation, and saves the conversation for
    /// the next reply.
    async fn run_agent(
        &self,
        arguments: &Map<String, Value>,
        continuing: bool,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let request = match AgentRequest::parse(arguments, continuing) {
            Ok(request) => request,
            Err(missing) => return error_result(missing),
        };
        let conversations = self.conversations_for(context);
        let Ok(_permit) = Arc::clone(&self.shared.runs).try_acquire_owned() else {
            return error_result(format!(
                "busy: {} agent runs are in progress; try again shortly",
                self.shared.max_runs
            ));
        };
        // A reply holds its conversation until it is saved: another reply
        // to it (here or on another replica) is refused meanwhile.
        // Who asked (with OAuth): a conversation is theirs alone.
        let principal = principal(context);
        let owner = principal.as_ref().map(crate::oauth::Principal::owner);
        let (mut claim, loaded) = match request.conversation_id.as_deref() {
            Some(id) => match conversations.claim(id, owner.as_deref()).await {
                Ok((claim, loaded)) => (Some(claim), loaded),
                Err(error) => return error_result(error),
            },
            None => (None, None),
        };
        let (id, mut conversation, saved) = match self.open(conversations, &request, loaded) {
            Ok(Opened::Run {
                id,
                conversation,
                saved,
            }) => (id, conversation, saved),
            Ok(Opened::Repeated { id, answer }) => return answer_in(&id, answer),
            Err(error) => return error_result(error),
        };
        conversation.push_user(request.prompt);
        let agent = self.agent_for(principal.as_ref(), request.cwd, context);
        let outcome = run_reporting_progress(&agent, conversation, context).await;
        let answer = outcome.final_text().unwrap_or_default();
        if claim
            .as_ref()
            .is_some_and(super::conversations::Claim::lost)
        {
            return error_result(format!(
                "conversation `{id}` was taken over by another reply while this one ran (its claim expired); this reply was not saved: send it again"
            ));
        }
        if let Err(error) = conversations
            .save(
                &id,
                owner.as_deref(),
                request
                    .request_id
                    .as_deref()
                    .map(|request| (request, answer.as_str())),
                &outcome.conversation,
                saved
                    .as_ref()
                    .map(|(messages, seen)| (&messages[..], *seen)),
                claim.as_mut(),
            )
            .await
        {
            return error_result(error);
        }
        match &outcome.stop {
            RunStop::Completed | RunStop::MaxTurns => answer_in(&id, answer),
            RunStop::Cancelled => error_result("the run was cancelled"),
            other => error_result(format!("the agent's run {other}")),
        }
    }

    /// Where the conversations of a call live: a client without a session
    /// (2026-07-28) names conversations the server keeps across its
    /// requests.
    fn conversations_for(&self, context: &RequestContext<RoleServer>) -> &Conversations {
        if self.shared.store.is_none() && asks_in_rounds(context) {
            &self.shared.sessionless
        } else {
            &self.conversations
        }
    }

    /// Opens the conversation a request continues (`loaded`, as its
    /// claim read it: the caller's alone, with OAuth), or starts a new one.
    fn open(
        &self,
        conversations: &Conversations,
        request: &AgentRequest,
        loaded: Option<super::conversations::Loaded>,
    ) -> Result<Opened, String> {
        let Some(id) = &request.conversation_id else {
            return Ok(Opened::Run {
                id: conversations.new_id(self.counter.fetch_add(1, Ordering::Relaxed)),
                conversation: Conversation::new(),
                saved: None,
            });
        };
        let Some(loaded) = loaded else {
            return Err(format!("no conversation `{id}` in this session"));
        };
        if let (Some(request), Some((last, answer))) = (&request.request_id, &loaded.last_request)
            && request == last
        {
            return Ok(Opened::Repeated {
                id: id.clone(),
                answer: answer.clone(),
            });
        }
        let conversation = loaded.conversation;
        let saved = (
            conversation.messages.clone(),
            conversation.provenance.seen().len(),
        );
        Ok(Opened::Run {
            id: id.clone(),
            conversation,
            saved: Some(saved),
        })
    }

    /// The agent a run uses: the caller's, in `cwd` when given.
    /// Confirmations go to the client's user when the client can be asked
    /// while the run waits (2025-11-25 and older); otherwise the agent's
    /// own handler and policy decide. (A 2026-07-28 question would end the
    /// call and run it again from the start: a whole agent run is not
    /// repeated for it.)
    fn agent_for(
        &self,
        principal: Option<&crate::oauth::Principal>,
        cwd: Option<String>,
        context: &RequestContext<RoleServer>,
    ) -> Agent {
        let served = self.shared.agent(principal);
        let mut agent = match cwd {
            Some(cwd) => served
                .to_builder()
                .workspace(Workspace::new().cwd(PathBuf::from(cwd)))
                .build(),
            None => served,
        };
        if !asks_in_rounds(context) {
            let input = ClientInput::direct(
                context.peer.clone(),
                context.client_capabilities().unwrap_or_default(),
            );
            if input.can_elicit() {
                agent = agent
                    .to_builder()
                    .confirm_handler(ElicitingConfirm { input })
                    .build();
            }
        }
        agent
    }
}

/// What an `agent` or `reply` call asks for.
struct AgentRequest {
    prompt: String,
    /// The conversation to continue (required by `reply`).
    conversation_id: Option<String>,
    /// The run's working directory.
    cwd: Option<String>,
    /// The client's id of the request: sent again, it gets the answer
    /// already given.
    request_id: Option<String>,
}

impl AgentRequest {
    /// Reads a call's arguments; `Err` says what is missing.
    fn parse(arguments: &Map<String, Value>, continuing: bool) -> Result<Self, &'static str> {
        let text = |key: &str| {
            arguments
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let Some(prompt) = text("prompt").filter(|p| !p.trim().is_empty()) else {
            return Err("`prompt` is required");
        };
        let conversation_id = text("conversation_id");
        if continuing && conversation_id.is_none() {
            return Err("`conversation_id` is required");
        }
        Ok(Self {
            prompt,
            conversation_id,
            cwd: text("cwd"),
            request_id: text("request_id").filter(|r| !r.is_empty()),
        })
    }
}

/// The conversation a run goes on with.
enum Opened {
    /// Run the agent on `conversation`; `saved` is what the store held of
    /// it (its messages and how many ledger entries), `None` when new.
    Run {
        id: String,
        conversation: Conversation,
        saved: Option<(Vec<Message>, usize)>,
    },
    /// The same request again (its answer was lost): the answer given, not
    /// a second run.
    Repeated { id: String, answer: String },
}

/// The agent's `answer` in conversation `id`, as the call's result.
fn answer_in(id: &str, answer: String) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(answer)]);
    result.structured_content = Some(json!({"conversation_id": id}));
    result
}

/// Runs `agent` on `conversation` to its end (cancelled with the
/// request), telling a client that asked for progress of each tool call.
async fn run_reporting_progress(
    agent: &Agent,
    conversation: Conversation,
    context: &RequestContext<RoleServer>,
) -> RunOutcome {
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
    run.finish().await
}

/// Who may see a task (its owner, with OAuth): only a client that
/// declared the Tasks extension asks about tasks.
fn task_caller(context: &RequestContext<RoleServer>) -> Result<Option<String>, McpError> {
    if !context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks())
    {
        return Err(tasks_required());
    }
    Ok(principal(context).map(|p| p.owner()))
}

/// The -32021 error naming the Tasks extension: for a client that did not
/// declare it and asks about tasks or calls a tool that runs only as one.
pub(super) fn tasks_required() -> McpError {
    let mut required = rmcp::model::ClientCapabilities::default();
    let mut extensions = rmcp::model::ExtensionCapabilities::new();
    extensions.insert(rmcp::model::TASKS_EXTENSION_ID.into(), Default::default());
    required.extensions = Some(extensions);
    McpError::missing_required_client_capability(required)
}

/// Who called, with OAuth.
pub(super) fn principal(context: &RequestContext<RoleServer>) -> Option<crate::oauth::Principal> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<crate::oauth::Principal>())
        .cloned()
}

/// Whether questions to this client go in rounds of `input_required`
/// (2026-07-28 and later) rather than as requests on the connection.
pub(super) fn asks_in_rounds(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| !version.has_initialize())
}

/// Resolves when a served tool asks something in a round; never without
/// rounds.
pub(super) async fn raised(rounds: Option<&Rounds>) {
    match rounds {
        Some(rounds) => rounds.raised.notified().await,
        None => std::future::pending().await,
    }
}

/// Asks the MCP client's user to confirm a tool call (MCP elicitation).
pub(super) struct ElicitingConfirm {
    pub(super) input: ClientInput,
}

#[async_trait::async_trait]
impl ConfirmHandler for ElicitingConfirm {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        let message = match &request.concern {
            Some(concern) => format!(
                "The agent wants to run `{}`:\n{}\n\nWarning, possible prompt injection: {concern}",
                request.tool, request.summary
            ),
            None => format!(
                "The agent wants to run `{}`:\n{}",
                request.tool, request.summary
            ),
        };
        let schema = json!({
            "type": "object",
            "properties": {
                "approve": {"type": "boolean", "title": "Allow this call?"}
            },
            "required": ["approve"]
        });
        let answer = self
            .input
            .elicit(&format!("kinet.approve.{}", request.tool), message, schema)
            .await
            .map_err(|e| ConfirmError(e.to_string()))?;
        let approved = answer
            .content
            .as_ref()
            .and_then(|c| c.get("approve"))
            .and_then(Value::as_bool)
            == Some(true);
        Ok(match answer.action {
            ElicitAction::Accept if approved => ConfirmDecision::Allow,
            ElicitAction::Cancel => ConfirmDecision::Abort,
            _ => ConfirmDecision::Deny {
                reason: Some("declined by the user of the MCP client".into()),
            },
        })
    }
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        // Logging is deprecated by the 2026-07-28 revision; kept for
        // 2025-11-25 clients (what served tools report reaches them).
        #[allow(deprecated)]
        let builder = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging();
        let capabilities = if self.shared.task_tools.is_empty() {
            builder.build()
        } else {
            builder.enable_tasks().build()
        };
        ServerConfig::new(capabilities).with_server_info(Implementation::new(
            self.shared.name.clone(),
            env!("CARGO_PKG_VERSION"),
        ))
    }

    /// The tool a `tools/call` names, for the transport's check of its
    /// `Mcp-Param-*` headers against the arguments (2026-07-28).
    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        let (list, by_name) = self.described();
        by_name.get(name).map(|&at| list[at].clone())
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
        Ok(match &*request.name {
            "agent" => self.run_agent(&arguments, false, &context).await.into(),
            "reply" => self.run_agent(&arguments, true, &context).await.into(),
            _ => return self.call_exposed(&request, arguments, &context).await,
        })
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let owner = task_caller(&context)?;
        let task = self.shared.tasks.get(&request.task_id, owner.as_deref())?;
        Ok(GetTaskResult::new(task))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let owner = task_caller(&context)?;
        self.shared
            .tasks
            .update(&request.task_id, owner.as_deref(), request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let owner = task_caller(&context)?;
        self.shared.tasks.cancel(&request.task_id, owner.as_deref())
    }

    /// `subscriptions/listen` (2026-07-28): acknowledged, with nothing
    /// accepted. A served tool list does not change while the server runs
    /// and it has no resources or prompts, so there is nothing to notify
    /// (and the server advertises no `listChanged`); the stream stays open
    /// until the client cancels it.
    fn accepted_subscription_filter(
        &self,
        _requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(rmcp::model::SubscriptionFilter::new())
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if let Ok(mut level) = self.log_level.lock() {
            *level = Some(request.level);
        }
        Ok(())
    }
}
