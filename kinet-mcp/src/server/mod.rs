//! `McpServer`: a kinet agent (and chosen tools) served over MCP.

mod conversations;
// Logging is deprecated by the 2026-07-28 revision; kept for 2025-11-25
// clients.
#[allow(deprecated)]
mod exposed;
mod gate;
pub(crate) mod input;
mod tasks;
// Logging is deprecated by the 2026-07-28 revision; kept for 2025-11-25
// clients.
#[allow(deprecated)]
mod session;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use kinet_core::pipeline::Pipeline;
use kinet_core::tool::{DynTool, ToolSnapshot};
use kinet_core::{Agent, ApprovalPolicy, Tool, Toolset};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
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
    /// Both a static bearer token and an OAuth resource server were given.
    #[error(
        "both a bearer token and OAuth are set: an OAuth resource server checks the tokens itself; pass no bearer token"
    )]
    TwoAuthorities,
}

/// Makes the agent that serves one principal.
type AgentFor = Arc<dyn Fn(&crate::oauth::Principal) -> Agent + Send + Sync>;

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
    origins: Arc<[String]>,
    store: Option<Arc<dyn kinet_core::session::SessionStore>>,
    /// Stateless conversations a reply runs on in this process.
    busy: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    oauth: Option<Arc<crate::oauth::ResourceServer>>,
    agent_for: Option<AgentFor>,
    claim_ttl: Duration,
    /// Agents made by `agent_for`, by principal (at most 1,024 kept).
    agents: std::sync::Mutex<std::collections::HashMap<crate::oauth::Principal, Agent>>,
    /// Seals the answers a 2026-07-28 client gathered over rounds.
    request_state: rmcp::model::RequestStateCodec,
    /// Without a store: the conversations of clients that have no session
    /// (2026-07-28), kept for the life of the server.
    sessionless: conversations::Conversations,
    /// The declared output schemas of served tools, compiled.
    shapes: std::collections::HashMap<String, Arc<crate::structured::OutputShape>>,
    /// Served tools whose calls run as tasks for clients that support them.
    task_tools: std::collections::HashMap<String, TaskSupport>,
    /// Their tasks: in the store when stateless, else in memory.
    tasks: Arc<tasks::Tasks>,
    /// The listed tools, described once (see `Session::tool_list`).
    described: std::sync::OnceLock<(
        Vec<rmcp::model::Tool>,
        std::collections::HashMap<String, usize>,
    )>,
}

impl Shared {
    /// The agent that serves `principal`: made by `agent_for` (once per
    /// principal while kept) or the server's own, with the principal as a
    /// tool-context extension.
    pub(super) fn agent(&self, principal: Option<&crate::oauth::Principal>) -> Agent {
        let Some(principal) = principal else {
            return self.agent.clone();
        };
        let Some(make) = &self.agent_for else {
            return self.agent.to_builder().extension(principal.clone()).build();
        };
        if let Ok(agents) = self.agents.lock()
            && let Some(agent) = agents.get(principal)
        {
            return agent.clone();
        }
        let agent = make(principal)
            .to_builder()
            .extension(principal.clone())
            .build();
        if let Ok(mut agents) = self.agents.lock() {
            if agents.len() >= 1024 {
                agents.clear();
            }
            agents.insert(principal.clone(), agent.clone());
        }
        agent
    }
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
    origins: Vec<String>,
    store: Option<Arc<dyn kinet_core::session::SessionStore>>,
    oauth: Option<Arc<crate::oauth::ResourceServer>>,
    agent_for: Option<AgentFor>,
    claim_ttl: Duration,
    request_state_key: Option<Vec<u8>>,
    task_tools: std::collections::HashMap<String, TaskSupport>,
}

/// Whether a served tool runs as a task.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum TaskSupport {
    /// For clients that declared the Tasks extension.
    Optional,
    /// Only as a task (other 2026-07-28 clients are refused).
    Required,
}

impl McpServerBuilder {
    /// Runs calls of the served tool `name` as tasks (the Tasks extension
    /// of MCP 2026-07-28) when the calling client supports them. The call
    /// starts as usual: questions the tool asks first are asked in
    /// `input_required` rounds, and a call that finishes without waiting
    /// answers at once. When it first waits on other work (or calls
    /// [`ClientInput::escalate_to_task`](crate::served::ClientInput::escalate_to_task))
    /// it becomes a task: the client gets its handle, polls it
    /// (`tasks/get`), answers its later questions (`tasks/update`) and may
    /// cancel it (`tasks/cancel`), on any replica of a stateless server
    /// (the task lives in its store; a task whose replica died is reported
    /// failed). Other clients' calls run as usual. Default: no tool runs
    /// as a task.
    pub fn run_as_task(mut self, name: impl Into<String>) -> Self {
        self.task_tools.insert(name.into(), TaskSupport::Optional);
        self
    }

    /// [`run_as_task`](Self::run_as_task) for a tool too long to run
    /// within one request: a 2026-07-28 client that did not declare the
    /// Tasks extension is refused (-32021, naming the extension). Clients
    /// of 2025-11-25 and older, which have no tasks and hold their
    /// connection open, call it as usual.
    pub fn run_only_as_task(mut self, name: impl Into<String>) -> Self {
        self.task_tools.insert(name.into(), TaskSupport::Required);
        self
    }

    /// The key (at least 32 bytes) that seals the answers a served tool
    /// gathered from a 2026-07-28 client over rounds of `input_required`
    /// (the `requestState` the client sends back). Replicas behind one
    /// address need the same key, so that a round answered on one is
    /// continued on another. Default: a random key per process.
    pub fn request_state_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.request_state_key = Some(key.into());
        self
    }

    /// How long a stateless reply's claim on its conversation lasts
    /// without renewal: a replica that dies mid-reply holds its
    /// conversation that long before another replica may continue it (a
    /// running reply renews every quarter of it). Default: 2 minutes.
    pub fn claim_ttl(mut self, ttl: Duration) -> Self {
        self.claim_ttl = ttl.max(Duration::from_millis(400));
        self
    }

    /// Serves HTTP as an OAuth 2.1 resource server: each request's access
    /// token is checked by `resource` (see
    /// [`ResourceServer`](crate::oauth::ResourceServer)), the metadata is
    /// served at `/.well-known/oauth-protected-resource` (and with the
    /// resource's path appended), and the token's subject is the request's
    /// [`Principal`](crate::oauth::Principal): a conversation belongs to
    /// the principal that started it, and any other principal asking for
    /// it is told there is no such conversation, on every replica. Give
    /// [`serve_http`](McpServer::serve_http) no bearer token then. Default:
    /// no OAuth (a static bearer token, or none on loopback).
    pub fn oauth(mut self, resource: crate::oauth::ResourceServer) -> Self {
        self.oauth = Some(Arc::new(resource));
        self
    }

    /// Serves each principal with the agent `make` returns for it (made
    /// once per principal and kept): the place to give each user their
    /// own memory, e.g. a `MemoryPack` scoped to
    /// `Scope::user(&principal.subject)`. The principal is also in every
    /// tool call's context (`ctx.extension::<Principal>()`). Default: the
    /// agent given to [`McpServer::builder`] serves everyone.
    pub fn agent_for(
        mut self,
        make: impl Fn(&crate::oauth::Principal) -> Agent + Send + Sync + 'static,
    ) -> Self {
        self.agent_for = Some(Arc::new(make));
        self
    }

    /// Serves HTTP statelessly: no session lives in this process between
    /// requests, and conversations are kept in `store` under unguessable
    /// ids, so several replicas behind a load balancer serve one client
    /// (any of them continues any conversation). A reply claims its
    /// conversation in the store ([`SessionStore::claim`](kinet_core::session::SessionStore::claim),
    /// renewed while it runs, expiring 2 minutes after a replica dies), so
    /// a second reply to the same conversation meanwhile is refused as busy
    /// instead of interleaving its messages. Served tools ask 2026-07-28
    /// clients their questions in `input_required` rounds (any replica
    /// continues a round, given the same
    /// [`request_state_key`](Self::request_state_key)); 2025-11-25
    /// clients cannot be asked in this mode (their requests need a
    /// session), so the tool policy and the agent's handler decide for
    /// them. Tasks ([`run_as_task`](Self::run_as_task)) live in `store`
    /// too. Default: stateful,
    /// each client session with its own conversations in memory.
    pub fn stateless(mut self, store: Arc<dyn kinet_core::session::SessionStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Lets browser pages from `origin` (`https://app.example.com`, or
    /// `http://localhost:*` for any port) call the HTTP endpoint. Default:
    /// loopback origins only; requests without an `Origin` header (not from
    /// a browser) are not affected.
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.origins.push(origin.into());
        self
    }

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
        let key = self
            .request_state_key
            .filter(|key| key.len() >= rmcp::model::RequestStateCodec::MIN_KEY_LENGTH)
            .unwrap_or_else(|| {
                let mut key = vec![0; 32];
                // Without the system's randomness (never seen on Linux),
                // a key from what only this process knows.
                if getrandom::fill(&mut key).is_err() {
                    let seed = format!(
                        "{:p}{}{:?}",
                        &key,
                        std::process::id(),
                        std::time::SystemTime::now()
                    );
                    key = <sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes()).to_vec();
                }
                key
            });
        let tools = Arc::new(self.tools.static_tools().clone());
        let shapes = tools
            .names()
            .filter_map(|name| {
                let schema = tools.get(name)?.output_schema()?;
                Some((
                    name.to_owned(),
                    Arc::new(crate::structured::OutputShape::new(&schema)),
                ))
            })
            .collect();
        let tasks = Arc::new(tasks::Tasks::new(self.store.clone(), self.claim_ttl));
        McpServer {
            shared: Arc::new(Shared {
                shapes,
                task_tools: self.task_tools,
                tasks,
                described: std::sync::OnceLock::new(),
                request_state: rmcp::model::RequestStateCodec::new_unchecked(key),
                tools,
                agent: self.agent,
                pipeline,
                cwd,
                roots,
                runs: Arc::new(Semaphore::new(self.max_runs)),
                max_runs: self.max_runs,
                name: self.name,
                calls: AtomicU64::new(1),
                origins: self.origins.into(),
                store: self.store,
                busy: Arc::default(),
                oauth: self.oauth,
                agent_for: self.agent_for,
                claim_ttl: self.claim_ttl,
                agents: std::sync::Mutex::default(),
                sessionless: conversations::Conversations::sessionless(),
            }),
        }
    }
}

/// Serves a kinet agent over MCP: an `agent` tool (a prompt, optionally a
/// conversation id to continue and a working directory) that runs the agent
/// to completion and returns its answer and a conversation id, a `reply`
/// tool to continue a conversation, and optionally the host's own tools.
/// Tool calls of a run are reported as progress notifications; a client's
/// `notifications/cancelled` cancels the run. Each 2025-11-25 session has
/// its own conversations; 2026-07-28 clients have no session, so their
/// conversations are the server's, under unguessable ids (and their
/// principal's, with OAuth).
///
/// For a service with many users on several machines: serve
/// [statelessly](McpServerBuilder::stateless) on a shared store (SQLite for
/// one machine, `kinet_memory::postgres::PostgresSessionStore` for many),
/// as an [OAuth resource server](McpServerBuilder::oauth) so each request
/// names its principal (a conversation is found only by the principal who
/// started it), with [`agent_for`](McpServerBuilder::agent_for) giving
/// each principal its own memory scope. `agent` and `reply` take a
/// `request_id`: a request sent again after its answer was lost gets that
/// answer instead of a second run, so clients may retry on any replica.
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
            origins: Vec::new(),
            store: None,
            oauth: None,
            agent_for: None,
            claim_ttl: conversations::CLAIM_TTL,
            request_state_key: None,
            task_tools: std::collections::HashMap::new(),
        }
    }

    fn session(&self) -> Session {
        Session {
            shared: Arc::clone(&self.shared),
            conversations: match &self.shared.store {
                Some(store) => conversations::Conversations::store(
                    Arc::clone(store),
                    Arc::clone(&self.shared.busy),
                    self.shared.claim_ttl,
                ),
                None => conversations::Conversations::memory(),
            },
            counter: Arc::new(AtomicU64::new(1)),
            log_level: Arc::default(),
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
    /// requires `bearer_token` or [OAuth](McpServerBuilder::oauth); when a
    /// token is set, requests without it (or with another) get 401 (the
    /// `Bearer` scheme in any case); with OAuth, each request's access
    /// token is checked and names its principal. A
    /// request with an `Origin` header (a browser page) gets 403 unless the
    /// origin is a loopback one or was allowed with
    /// [`McpServerBuilder::allow_origin`].
    pub async fn serve_http(
        &self,
        addr: SocketAddr,
        bearer_token: Option<String>,
    ) -> Result<HttpServerHandle, ServeError> {
        let oauth = self.shared.oauth.clone();
        if oauth.is_some() && bearer_token.is_some() {
            return Err(ServeError::TwoAuthorities);
        }
        if !addr.ip().is_loopback() && bearer_token.is_none() && oauth.is_none() {
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
        // Answers to requests without a session (2026-07-28) as plain JSON
        // rather than an event stream; sessions keep theirs.
        config = config.with_json_response(true);
        if self.shared.store.is_some() {
            config = config.with_legacy_session_mode(false);
        }
        let server = self.clone();
        let service = StreamableHttpService::new(
            move || Ok(server.session()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let checks = Arc::new(gate::Gate {
            token: bearer_token.map(Arc::<str>::from),
            oauth: oauth.clone(),
            origins: self.shared.origins.clone(),
        });
        let mut router =
            axum::Router::new()
                .nest_service("/mcp", service)
                .layer(axum::middleware::from_fn(
                    move |request: axum::extract::Request, next: axum::middleware::Next| {
                        gate::check(checks.clone(), request, next)
                    },
                ));
        // The resource metadata is public (RFC 9728), at the well-known
        // path and with the resource's path appended.
        if let Some(oauth) = oauth {
            let document = oauth.metadata().to_string();
            let mut paths = vec!["/.well-known/oauth-protected-resource".to_owned()];
            if !paths.contains(&oauth.metadata_path()) {
                paths.push(oauth.metadata_path());
            }
            for path in paths {
                let document = document.clone();
                router = router.route(
                    &path,
                    axum::routing::get(move || {
                        let document = document.clone();
                        async move {
                            (
                                [(http::header::CONTENT_TYPE, "application/json")],
                                document,
                            )
                        }
                    }),
                );
            }
        }
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

use session::Session;
