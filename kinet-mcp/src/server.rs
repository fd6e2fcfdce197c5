//! `McpServer`: a kinet agent (and chosen tools) served over MCP.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kinet_core::confirm::{ConfirmError, ConfirmRequest};
use kinet_core::message::{ContentPart, ToolCall};
use kinet_core::pipeline::Pipeline;
use kinet_core::tool::{DynTool, EventSink, ToolSnapshot};
use kinet_core::{
    Agent, AgentEvent, ApprovalPolicy, ConfirmDecision, ConfirmHandler, Conversation, Message,
    RunStop, Tool, Toolset,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Serving failed to start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// Binding to anything but loopback needs a bearer token.
    #[error(
        "binding to {0} exposes the agent to the network: set a bearer token, or bind to 127.0.0.1"
    )]
    TokenRequired(SocketAddr),
    /// The socket could not be bound, or the transport failed.
    #[error("cannot serve: {0}")]
    Io(String),
}

struct Shared {
    agent: Agent,
    tools: Arc<ToolSnapshot>,
    pipeline: Pipeline,
    cwd: PathBuf,
    roots: Vec<PathBuf>,
    runs: Arc<Semaphore>,
    max_runs: usize,
    name: String,
    calls: AtomicU64,
}

/// Builds an [`McpServer`]. Every setter documents its default.
pub struct McpServerBuilder {
    agent: Agent,
    tools: Toolset,
    max_runs: usize,
    name: String,
    cwd: Option<PathBuf>,
    roots: Vec<PathBuf>,
    policy: ApprovalPolicy,
    tool_timeout: Option<Duration>,
}

impl McpServerBuilder {
    /// Also serves this tool directly: its schema and annotations become
    /// the MCP tool's, and clients' calls run through the agent's pipeline
    /// (its hooks and layers) with this server's working directory, roots,
    /// policy and timeout. Default: only `agent` and `reply`.
    pub fn expose_tool(mut self, tool: impl Tool) -> Self {
        self.tools.add(tool);
        self
    }

    /// Serves a tool in its dynamic form.
    pub fn expose_dyn(mut self, tool: Arc<dyn DynTool>) -> Self {
        self.tools.add_dyn(tool);
        self
    }

    /// The working directory served tools resolve paths against. Default:
    /// the process's current directory.
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Adds a root served tools are confined to (relative roots are taken
    /// from the working directory). Default: the working directory alone;
    /// paths outside the roots are refused.
    pub fn workspace_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.roots.push(root.into());
        self
    }

    /// Which client calls of served tools run: calls that are not mutating
    /// always run (unless a rule denies them); mutating ones are asked
    /// about (through MCP elicitation when the client supports it,
    /// otherwise the agent's confirmation handler), run, or are refused as
    /// the policy says. Default: [`ApprovalPolicy::deny_all`] — clients
    /// change nothing through served tools.
    pub fn tool_policy(mut self, policy: ApprovalPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// A time limit for each call of a served tool. Default: the agent's
    /// tool timeout (and each tool's own).
    pub fn tool_timeout(mut self, timeout: Duration) -> Self {
        self.tool_timeout = Some(timeout);
        self
    }

    /// How many agent runs may be in progress at once (over all sessions);
    /// more get a "busy" error. Default 4.
    pub fn max_concurrent_runs(mut self, runs: usize) -> Self {
        self.max_runs = runs.max(1);
        self
    }

    /// The server name clients see. Default `kinet`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Finishes the server.
    pub fn build(self) -> McpServer {
        let cwd = self
            .cwd
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("."));
        let roots = if self.roots.is_empty() {
            vec![cwd.clone()]
        } else {
            self.roots.iter().map(|root| cwd.join(root)).collect()
        };
        let mut pipeline = self.agent.pipeline().clone().with_policy(self.policy);
        if let Some(timeout) = self.tool_timeout {
            pipeline = pipeline.with_tool_timeout(Some(timeout));
        }
        McpServer {
            shared: Arc::new(Shared {
                tools: Arc::new(self.tools.static_tools().clone()),
                agent: self.agent,
                pipeline,
                cwd,
                roots,
                runs: Arc::new(Semaphore::new(self.max_runs)),
                max_runs: self.max_runs,
                name: self.name,
                calls: AtomicU64::new(1),
            }),
        }
    }
}

/// Serves a kinet agent over MCP: an `agent` tool (a prompt, optionally a
/// conversation id to continue and a working directory) that runs the agent
/// to completion and returns its answer and a conversation id, a `reply`
/// tool to continue a conversation, and optionally the host's own tools.
/// Tool calls of a run are reported as progress notifications; a client's
/// `notifications/cancelled` cancels the run. Each session has its own
/// conversations.
///
/// ```no_run
/// # async fn demo() -> Result<(), kinet_mcp::ServeError> {
/// use kinet_core::Agent;
/// use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
/// use kinet_mcp::McpServer;
///
/// let agent = Agent::builder(ScriptedProvider::new([ScriptedTurn::text("hi")])).build();
/// let server = McpServer::builder(agent).build();
/// let handle = server.serve_http("127.0.0.1:0".parse().unwrap(), None).await?;
/// println!("serving on http://{}/mcp", handle.local_addr());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

/// A running HTTP server.
#[derive(Debug)]
pub struct HttpServerHandle {
    local_addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl HttpServerHandle {
    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting and ends the sessions.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }
}

impl McpServer {
    /// Starts building a server for `agent`.
    pub fn builder(agent: Agent) -> McpServerBuilder {
        McpServerBuilder {
            agent,
            tools: Toolset::new(),
            max_runs: 4,
            name: "kinet".into(),
            cwd: None,
            roots: Vec::new(),
            policy: ApprovalPolicy::deny_all(),
            tool_timeout: None,
        }
    }

    fn session(&self) -> Session {
        Session {
            shared: Arc::clone(&self.shared),
            conversations: Arc::new(Mutex::new(HashMap::new())),
            counter: Arc::new(AtomicU64::new(1)),
        }
    }

    /// Serves one client on stdin/stdout until it disconnects.
    pub async fn serve_stdio(&self) -> Result<(), ServeError> {
        let service = self
            .session()
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| ServeError::Io(e.to_string()))?;
        service
            .waiting()
            .await
            .map_err(|e| ServeError::Io(e.to_string()))?;
        Ok(())
    }

    /// Serves streamable HTTP at `http://<addr>/mcp`, each client session
    /// with its own conversations. Binding to anything but loopback
    /// requires `bearer_token`; when a token is set, requests without it
    /// (or with another) get 401.
    pub async fn serve_http(
        &self,
        addr: SocketAddr,
        bearer_token: Option<String>,
    ) -> Result<HttpServerHandle, ServeError> {
        if !addr.ip().is_loopback() && bearer_token.is_none() {
            return Err(ServeError::TokenRequired(addr));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| ServeError::Io(format!("{addr}: {e}")))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| ServeError::Io(e.to_string()))?;
        let shutdown = CancellationToken::new();
        let mut config = StreamableHttpServerConfig::default();
        config.cancellation_token = shutdown.child_token();
        if !addr.ip().is_loopback() {
            // Reachable under any name; the bearer token guards it.
            config = config.disable_allowed_hosts();
        }
        let server = self.clone();
        let service = StreamableHttpService::new(
            move || Ok(server.session()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let token = bearer_token.map(Arc::<str>::from);
        let router =
            axum::Router::new()
                .nest_service("/mcp", service)
                .layer(axum::middleware::from_fn(
                    move |request: axum::extract::Request, next: axum::middleware::Next| {
                        let token = token.clone();
                        async move {
                            if let Some(token) = token {
                                let given = request
                                    .headers()
                                    .get(http::header::AUTHORIZATION)
                                    .and_then(|v| v.to_str().ok())
                                    .and_then(|v| v.strip_prefix("Bearer "));
                                if given != Some(&*token) {
                                    return axum::response::IntoResponse::into_response((
                                        http::StatusCode::UNAUTHORIZED,
                                        [(http::header::WWW_AUTHENTICATE, "Bearer")],
                                        "a valid bearer token is required",
                                    ));
                                }
                            }
                            next.run(request).await
                        }
                    },
                ));
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
        });
        Ok(HttpServerHandle {
            local_addr,
            shutdown,
            task,
        })
    }
}

/// One client session.
#[derive(Clone)]
struct Session {
    shared: Arc<Shared>,
    conversations: Arc<Mutex<HashMap<String, Conversation>>>,
    counter: Arc<AtomicU64>,
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

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
                        "cwd": {"type": "string", "description": "Working directory for this run."}
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
                        "prompt": {"type": "string"}
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
        let (id, mut conversation) = match id {
            Some(id) => {
                let stored = self
                    .conversations
                    .lock()
                    .ok()
                    .and_then(|c| c.get(&id).cloned());
                match stored {
                    Some(conversation) => (id, conversation),
                    None => return error_result(format!("no conversation `{id}` in this session")),
                }
            }
            None => (
                format!("conv-{}", self.counter.fetch_add(1, Ordering::Relaxed)),
                Conversation::new(),
            ),
        };
        conversation.push_user(prompt);
        let mut agent = match text("cwd") {
            Some(cwd) => self.shared.agent.with_cwd(PathBuf::from(cwd)),
            None => self.shared.agent.clone(),
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
        if let Ok(mut conversations) = self.conversations.lock() {
            conversations.insert(id.clone(), outcome.conversation);
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
            "message": format!("The agent wants to run `{}`:\n{}", request.tool, request.summary),
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
