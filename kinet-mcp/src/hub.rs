//! `McpHub`: every configured server, supervised, as one tool source.

use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};

use kinet_core::confirm::ApprovalPolicy;
use kinet_core::message::ToolCall;
use kinet_core::pipeline::{CallRecord, Pipeline};
use kinet_core::tool::{DynTool, ToolSnapshot};
use kinet_core::{ToolCtx, ToolError, ToolOutput, Toolset};
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{ConfigSource, Discovered, ServerConfig};
use crate::content::normalize_schema;
use crate::naming::assign_names;
use crate::remote_tool::{McpTool, annotations_of};
use crate::settings::HubSettings;
use crate::supervisor::{ServerSlot, ServerState, supervise};

/// A hub before it starts ([`McpHub::builder`]).
#[must_use = "call start() to start the servers"]
pub struct HubBuilder {
    servers: Vec<ServerConfig>,
    settings: HubSettings,
    elicitation: Option<Arc<dyn crate::elicit::Elicitation>>,
    oauth: Option<crate::oauth::OAuth>,
}

impl std::fmt::Debug for HubBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubBuilder")
            .field("servers", &self.servers.len())
            .field("settings", &self.settings)
            .field("elicitation", &self.elicitation.is_some())
            .field("oauth", &self.oauth)
            .finish()
    }
}

impl HubBuilder {
    /// Hub-wide settings. Default: [`HubSettings::default`].
    pub fn settings(mut self, settings: HubSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Lets servers ask the user for input (MCP elicitation; the
    /// capability is advertised only with a handler). Default: none, and
    /// servers cannot ask.
    pub fn elicitation(mut self, handler: Arc<dyn crate::elicit::Elicitation>) -> Self {
        self.elicitation = Some(handler);
        self
    }

    /// Authorizes remote servers that answer 401 with OAuth 2.1 (see
    /// [`oauth`](crate::oauth)). Default: none; such servers fail with a
    /// message saying they want authorization.
    pub fn oauth(mut self, oauth: crate::oauth::OAuth) -> Self {
        self.oauth = Some(oauth);
        self
    }

    /// Starts every enabled server concurrently (needs a tokio runtime).
    /// Returns at once; servers become ready in the background.
    pub fn start(self) -> McpHub {
        McpHub::start_inner(self)
    }
}

/// One server, as a host's "MCP" panel shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    /// The server's name.
    pub name: String,
    /// Where it was configured.
    pub source: ConfigSource,
    /// Where it stands.
    pub state: ServerState,
    /// Its tools as the model sees them (`mcp__<server>__<tool>`), when ready.
    pub tools: Vec<String>,
    /// The process id of a stdio server.
    pub pid: Option<u32>,
    /// The protocol revision spoken with it while connected
    /// (`2026-07-28`, or `2025-11-25` and older for a server that needs
    /// the `initialize` handshake).
    pub protocol: Option<String>,
}

struct HubInner {
    slots: Vec<Arc<ServerSlot>>,
    settings: HubSettings,
    changed: watch::Sender<u64>,
    shutdown: CancellationToken,
    /// The named tools as of a change generation (rebuilt only when a
    /// server's state or tool list changes).
    tool_cache: std::sync::Mutex<Option<Arc<NamedTools>>>,
    /// The pipeline and context of the host's direct calls (`call`).
    direct: (Pipeline, ToolCtx),
    /// Tools the model found with `mcp_tool_search`.
    loaded: Arc<crate::search::Loaded>,
    /// Changes of subscribed resources.
    updates: tokio::sync::broadcast::Sender<crate::changes::ServerChange>,
}

impl Drop for HubInner {
    fn drop(&mut self) {
        self.shutdown.cancel();
        // The supervisors may never run again (the runtime may be ending):
        // stop the children now.
        for slot in &self.slots {
            crate::supervisor::kill_group(slot);
        }
    }
}

/// The MCP client hub: one supervised connection per configured server,
/// started concurrently, restarted when it drops. It is a [`ToolSource`](kinet_core::tool::ToolSource):
/// add it to an agent and each turn offers the tools of the servers ready
/// by the readiness deadline, named `mcp__<server>__<tool>`.
///
/// ```no_run
/// # async fn demo() {
/// use std::sync::Arc;
/// use kinet_mcp::{Discovery, HubSettings, McpHub};
///
/// let hub = McpHub::start(Discovery::new().discover().servers, HubSettings::default());
/// # let provider = kinet_core::testing::ScriptedProvider::new([]);
/// let agent = kinet_core::Agent::builder(provider)
///     .tools(kinet_core::Toolset::new().with_source(Arc::new(hub.clone())))
///     .build();
/// for server in hub.status() {
///     println!("{}: {:?} ({} tools)", server.name, server.state, server.tools.len());
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct McpHub {
    inner: Arc<HubInner>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub")
            .field(
                "servers",
                &self
                    .inner
                    .slots
                    .iter()
                    .map(|s| &s.config.name)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl McpHub {
    pub(crate) fn slots(&self) -> &[Arc<ServerSlot>] {
        &self.inner.slots
    }

    pub(crate) fn loaded(&self) -> &Arc<crate::search::Loaded> {
        &self.inner.loaded
    }

    pub(crate) fn settings(&self) -> &HubSettings {
        &self.inner.settings
    }

    pub(crate) fn updates(&self) -> &tokio::sync::broadcast::Sender<crate::changes::ServerChange> {
        &self.inner.updates
    }

    /// Starts every enabled server concurrently (needs a tokio runtime).
    /// Returns at once; servers become ready in the background. For
    /// elicitation or OAuth, use [`builder`](Self::builder).
    pub fn start(servers: Vec<ServerConfig>, settings: HubSettings) -> Self {
        Self::builder(servers).settings(settings).start()
    }

    /// [`start`](Self::start), with servers able to ask the user for input
    /// through `handler` (MCP elicitation: the capability is advertised
    /// only here).
    pub fn start_with_elicitation(
        servers: Vec<ServerConfig>,
        settings: HubSettings,
        handler: Arc<dyn crate::elicit::Elicitation>,
    ) -> Self {
        Self::builder(servers)
            .settings(settings)
            .elicitation(handler)
            .start()
    }

    /// A hub to configure before it starts.
    pub fn builder(servers: Vec<ServerConfig>) -> HubBuilder {
        HubBuilder {
            servers,
            settings: HubSettings::default(),
            elicitation: None,
            oauth: None,
        }
    }

    fn start_inner(builder: HubBuilder) -> Self {
        let HubBuilder {
            servers,
            settings,
            elicitation,
            oauth,
        } = builder;
        let (changed, _) = watch::channel(0u64);
        let shutdown = CancellationToken::new();
        let (updates, _) = tokio::sync::broadcast::channel(256);
        let slots: Vec<Arc<ServerSlot>> = servers
            .into_iter()
            .map(|config| {
                let auth = oauth
                    .as_ref()
                    .and_then(|oauth| crate::supervisor::authorizer_for(&config, oauth));
                let mut slot = ServerSlot::new(config);
                slot.elicitation = elicitation.clone();
                slot.updates = Some(updates.clone());
                slot.auth = auth;
                Arc::new(slot)
            })
            .collect();
        for slot in &slots {
            if slot.config.enabled {
                tokio::spawn(supervise(
                    Arc::clone(slot),
                    settings.clone(),
                    changed.clone(),
                    shutdown.clone(),
                ));
            }
        }
        Self {
            inner: Arc::new(HubInner {
                slots,
                settings,
                changed,
                shutdown,
                tool_cache: std::sync::Mutex::new(None),
                loaded: Arc::default(),
                updates,
                direct: (
                    Pipeline::new().with_policy(ApprovalPolicy::never()),
                    ToolCtx::new(std::env::current_dir().unwrap_or_else(|_| ".".into())),
                ),
            }),
        }
    }

    /// Starts the servers discovery found.
    pub fn from_discovery(found: &Discovered, settings: HubSettings) -> Self {
        Self::start(found.servers.clone(), settings)
    }

    /// Every server's name, source, state and tools.
    pub fn status(&self) -> Vec<ServerStatus> {
        // Read under the generation's lock: a supervisor changes a server's
        // state under it, so state, tools and pid are read as of one moment.
        let generation = self.inner.changed.borrow();
        let named = self.named_tools_at(*generation);
        self.inner
            .slots
            .iter()
            .map(|slot| ServerStatus {
                name: slot.config.name.clone(),
                source: slot.config.source.clone(),
                state: slot.state(),
                tools: named
                    .tools
                    .iter()
                    .filter(|t| Arc::ptr_eq(&t.slot, slot))
                    .map(|t| t.name.clone())
                    .collect(),
                pid: slot.pid.lock().ok().and_then(|p| *p),
                protocol: slot
                    .connection()
                    .and_then(|c| c.peer.peer_info())
                    .map(|info| info.protocol_version.to_string()),
            })
            .collect()
    }

    /// Waits until no server is starting or restarting, or `timeout`
    /// passes; returns whether all settled.
    pub async fn wait_settled(&self, timeout: Duration) -> bool {
        let now = Instant::now();
        let deadline = now
            .checked_add(timeout)
            .unwrap_or(now + Duration::from_secs(100 * 365 * 24 * 3600));
        self.wait_until(deadline).await
    }

    pub(crate) async fn wait_until(&self, deadline: Instant) -> bool {
        let mut changes = self.inner.changed.subscribe();
        loop {
            if self.inner.slots.iter().all(|s| !s.state().is_settling()) {
                return true;
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return false },
                _ = tokio::time::sleep_until(deadline) => return false,
            }
        }
    }

    /// Stops every server (their process groups are killed).
    pub async fn shutdown(&self) {
        for slot in &self.inner.slots {
            slot.stopping
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.inner.shutdown.cancel();
        let _ = self
            .wait_until(Instant::now() + Duration::from_secs(5))
            .await;
        let mut changes = self.inner.changed.subscribe();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.inner.slots.iter().any(|s| {
            s.config.enabled
                && !matches!(s.state(), ServerState::Stopped | ServerState::Failed { .. })
        }) {
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { break },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
    }

    /// The tools of the ready servers, with their qualified names; cached
    /// until the next state or tool-list change.
    pub(crate) fn named_tools(&self) -> Arc<NamedTools> {
        let generation = *self.inner.changed.borrow();
        self.named_tools_at(generation)
    }

    /// [`named_tools`](Self::named_tools) as of `generation`.
    fn named_tools_at(&self, generation: u64) -> Arc<NamedTools> {
        if let Ok(cache) = self.inner.tool_cache.lock()
            && let Some(named) = cache.as_ref()
            && named.generation == generation
        {
            return Arc::clone(named);
        }
        let tools = self.build_named_tools();
        let mut toolset = Toolset::new();
        for tool in &tools {
            toolset.add_dyn(Arc::clone(tool) as Arc<dyn DynTool>);
        }
        let named = Arc::new(NamedTools {
            generation,
            tokens: tools.iter().map(|t| crate::search::spec_tokens(t)).sum(),
            tools,
            snapshot: Arc::new(toolset.static_tools().clone()),
        });
        if let Ok(mut cache) = self.inner.tool_cache.lock() {
            *cache = Some(Arc::clone(&named));
        }
        named
    }

    fn build_named_tools(&self) -> Vec<Arc<McpTool>> {
        let mut entries: Vec<(Arc<ServerSlot>, rmcp::model::Tool)> = Vec::new();
        for slot in &self.inner.slots {
            if slot.state() != ServerState::Ready {
                continue;
            }
            let tools = slot.tools.lock().map(|t| t.clone()).unwrap_or_default();
            for tool in tools {
                if slot.config.exposes(&tool.name) {
                    entries.push((Arc::clone(slot), tool));
                }
            }
        }
        let pairs: Vec<(String, String)> = entries
            .iter()
            .map(|(slot, tool)| (slot.config.name.clone(), tool.name.to_string()))
            .collect();
        let names = assign_names(&pairs);
        entries
            .into_iter()
            .zip(names)
            .map(|((slot, tool), name)| {
                let timeout = slot
                    .config
                    .tool_timeout
                    .unwrap_or(self.inner.settings.tool_timeout);
                Arc::new(McpTool {
                    name,
                    description: tool.description.as_deref().unwrap_or_default().to_owned(),
                    parameters: normalize_schema(&tool.input_schema),
                    annotations: annotations_of(&tool),
                    tool: tool.name.to_string(),
                    output: tool.output_schema.as_ref().map(|schema| {
                        Arc::new(crate::structured::OutputShape::new(&Value::Object(
                            (**schema).clone(),
                        )))
                    }),
                    slot,
                    timeout,
                })
            })
            .collect()
    }

    /// Calls a tool directly, outside an agent run: the host's own call,
    /// so it is not confirmed, but it runs through a [`Pipeline`] like
    /// every call (the tool's timeout, panic guard, events). Use
    /// [`call_with`](Self::call_with) to run it through an agent's
    /// pipeline instead.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Value,
    ) -> Result<ToolOutput, ToolError> {
        let (pipeline, base) = &self.inner.direct;
        self.call_with(pipeline, base, server, tool, arguments)
            .await
            .result
    }

    /// Calls a tool through `pipeline` (its policy, hooks, layers and
    /// timeout), in a context derived from `base`.
    pub async fn call_with(
        &self,
        pipeline: &Pipeline,
        base: &ToolCtx,
        server: &str,
        tool: &str,
        arguments: Value,
    ) -> CallRecord {
        let named = self.named_tools();
        let name = named
            .tools
            .iter()
            .find(|t| t.slot.config.name == server && t.tool == tool)
            .map(|found| found.name.clone())
            // The pipeline reports the unknown tool.
            .unwrap_or_else(|| format!("mcp__{server}__{tool}"));
        let arguments = match arguments {
            Value::Null => "{}".to_owned(),
            other => other.to_string(),
        };
        let call = ToolCall {
            id: format!("host-{}", HOST_CALLS.fetch_add(1, Ordering::Relaxed)),
            name,
            arguments,
        };
        pipeline.call(&named.snapshot, call, base).await
    }
}

/// The named tools of one generation, and the same as a snapshot for
/// direct calls.
pub(crate) struct NamedTools {
    generation: u64,
    pub(crate) tools: Vec<Arc<McpTool>>,
    /// What their specs cost a request, in estimated tokens.
    pub(crate) tokens: usize,
    snapshot: Arc<ToolSnapshot>,
}

/// Numbers the host's direct calls.
static HOST_CALLS: AtomicU64 = AtomicU64::new(1);
