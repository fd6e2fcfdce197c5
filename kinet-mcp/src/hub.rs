//! `McpHub`: every configured server, supervised, as one tool source.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use kinet_core::tool::{DynTool, PreparedCall, ToolErrorKind, ToolSource};
use kinet_core::{ToolCtx, ToolError, ToolOutput};
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, RequestId,
    ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient};
use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{ConfigSource, Discovered, ServerConfig};
use crate::content::{normalize_result, normalize_schema};
use crate::naming::assign_names;
use crate::server::{ServerSlot, ServerState, supervise};

/// Hub-wide settings. Every field documents its default; a server's own
/// `startup_timeout` / `tool_timeout` win over these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSettings {
    /// How long `initialize` may take. Default 30 s.
    pub startup_timeout: Duration,
    /// How long one `tools/call` may take. Default 120 s.
    pub tool_timeout: Duration,
    /// Consecutive restarts after a dropped connection before the server is
    /// marked failed. Default 5.
    pub max_restarts: u32,
    /// First restart delay, doubled per attempt. Default 250 ms.
    pub restart_backoff: Duration,
    /// Longest restart delay. Default 10 s.
    pub max_restart_backoff: Duration,
    /// The client name sent in `initialize`. Default `kinet`.
    pub client_name: String,
}

impl Default for HubSettings {
    fn default() -> Self {
        Self {
            startup_timeout: Duration::from_secs(30),
            tool_timeout: Duration::from_secs(120),
            max_restarts: 5,
            restart_backoff: Duration::from_millis(250),
            max_restart_backoff: Duration::from_secs(10),
            client_name: "kinet".into(),
        }
    }
}

impl HubSettings {
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        self.restart_backoff
            .saturating_mul(1 << attempt.saturating_sub(1).min(16))
            .min(self.max_restart_backoff)
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
}

struct HubInner {
    slots: Vec<Arc<ServerSlot>>,
    settings: HubSettings,
    changed: watch::Sender<u64>,
    shutdown: CancellationToken,
    /// The named tools as of a change generation (rebuilt only when a
    /// server's state or tool list changes).
    tool_cache: std::sync::Mutex<Option<(u64, Vec<Arc<McpTool>>)>>,
}

impl Drop for HubInner {
    fn drop(&mut self) {
        self.shutdown.cancel();
        // The supervisors may never run again (the runtime may be ending):
        // stop the children now.
        for slot in &self.slots {
            crate::server::kill_group(slot);
        }
    }
}

/// The MCP client hub: one supervised connection per configured server,
/// started concurrently, restarted when it drops. It is a [`ToolSource`]:
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
/// let agent = kinet_core::Agent::builder(provider).tool_source(Arc::new(hub.clone())).build();
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
    /// Starts every enabled server concurrently (needs a tokio runtime).
    /// Returns at once; servers become ready in the background.
    pub fn start(servers: Vec<ServerConfig>, settings: HubSettings) -> Self {
        let (changed, _) = watch::channel(0u64);
        let shutdown = CancellationToken::new();
        let slots: Vec<Arc<ServerSlot>> = servers
            .into_iter()
            .map(|config| Arc::new(ServerSlot::new(config)))
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
            }),
        }
    }

    /// Starts the servers discovery found.
    pub fn from_discovery(found: &Discovered, settings: HubSettings) -> Self {
        Self::start(found.servers.clone(), settings)
    }

    /// Every server's name, source, state and tools.
    pub fn status(&self) -> Vec<ServerStatus> {
        let tools = self.named_tools();
        self.inner
            .slots
            .iter()
            .map(|slot| ServerStatus {
                name: slot.config.name.clone(),
                source: slot.config.source.clone(),
                state: slot.state(),
                tools: tools
                    .iter()
                    .filter(|t| Arc::ptr_eq(&t.slot, slot))
                    .map(|t| t.name.clone())
                    .collect(),
                pid: slot.pid.lock().ok().and_then(|p| *p),
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

    async fn wait_until(&self, deadline: Instant) -> bool {
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
    fn named_tools(&self) -> Vec<Arc<McpTool>> {
        let generation = *self.inner.changed.borrow();
        if let Ok(cache) = self.inner.tool_cache.lock()
            && let Some((cached, tools)) = cache.as_ref()
            && *cached == generation
        {
            return tools.clone();
        }
        let tools = self.build_named_tools();
        if let Ok(mut cache) = self.inner.tool_cache.lock() {
            *cache = Some((generation, tools.clone()));
        }
        tools
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
                    read_only: tool
                        .annotations
                        .as_ref()
                        .and_then(|a| a.read_only_hint)
                        .unwrap_or(false),
                    tool: tool.name.to_string(),
                    slot,
                    timeout,
                })
            })
            .collect()
    }

    /// Calls a tool directly, outside an agent run.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Value,
    ) -> Result<ToolOutput, ToolError> {
        let found = self
            .named_tools()
            .into_iter()
            .find(|t| t.slot.config.name == server && t.tool == tool)
            .ok_or_else(|| {
                ToolError::not_found(format!("no ready server `{server}` with a tool `{tool}`"))
            })?;
        let arguments = match arguments {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(ToolError::invalid_arguments(format!(
                    "arguments must be a JSON object, not {other}"
                )));
            }
        };
        found.invoke(arguments, &ToolCtx::new(".")).await
    }
}

#[async_trait]
impl ToolSource for McpHub {
    fn name(&self) -> &str {
        "mcp"
    }

    async fn tools(&self, ready_by: Instant) -> Vec<Arc<dyn DynTool>> {
        self.wait_until(ready_by).await;
        self.named_tools()
            .into_iter()
            .map(|tool| tool as Arc<dyn DynTool>)
            .collect()
    }
}

/// One MCP tool as a kinet tool.
pub(crate) struct McpTool {
    name: String,
    description: String,
    parameters: Value,
    read_only: bool,
    tool: String,
    slot: Arc<ServerSlot>,
    timeout: Duration,
}

impl McpTool {
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
        let params = CallToolRequestParams::new(self.tool.clone()).with_arguments(arguments);
        // The timeout is enforced here (rmcp's own timeout option costs a
        // watcher per request); on timeout the server is told to cancel.
        let options = PeerRequestOptions::no_options();
        let deadline = tokio::time::sleep(self.timeout);
        let handle = connection
            .peer
            .send_request_with_option(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                options,
            )
            .await
            .map_err(|e| call_error(server, &self.tool, e, self.timeout))?;
        let id = handle.id.clone();
        let peer = handle.peer.clone();
        let mut progress = connection
            .handler
            .progress
            .subscribe(handle.progress_token.clone())
            .await;
        let mut response = std::pin::pin!(handle.await_response());
        let mut deadline = std::pin::pin!(deadline);
        let result = loop {
            tokio::select! {
                biased;
                result = &mut response => break result,
                _ = &mut deadline => {
                    tell_cancelled(&peer, id, "timed out").await;
                    break Err(ServiceError::Timeout { timeout: self.timeout });
                }
                _ = ctx.cancellation().cancelled() => {
                    tell_cancelled(&peer, id, "cancelled by the client").await;
                    return Err(ToolError::new(ToolErrorKind::Cancelled, format!("the call to `{}` was cancelled", self.tool)));
                }
                update = progress.next() => if let Some(update) = update {
                    report_progress(ctx, update);
                },
            }
        };
        // Progress sent just before the result may still be on its way
        // through the notification handler.
        tokio::task::yield_now().await;
        while let Some(Some(update)) = progress.next().now_or_never() {
            report_progress(ctx, update);
        }
        match result {
            Ok(ServerResult::CallToolResult(result)) => normalize_result(server, result),
            Ok(_) => Err(ToolError::failed(format!(
                "the MCP server `{server}` answered tools/call with something else"
            ))),
            Err(error) => Err(call_error(server, &self.tool, error, self.timeout)),
        }
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

fn call_error(server: &str, tool: &str, error: ServiceError, timeout: Duration) -> ToolError {
    match error {
        ServiceError::Timeout { .. } => ToolError::new(
            ToolErrorKind::Timeout,
            format!(
                "the MCP tool `{tool}` on `{server}` did not answer within {:.0} s",
                timeout.as_secs_f64()
            ),
        ),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
            ToolError::failed(format!(
                "the MCP server `{server}` closed the connection during the call; it is being restarted, try the call again"
            ))
        }
        ServiceError::McpError(error) => ToolError::failed(format!(
            "the MCP server `{server}` rejected the call to `{tool}`: {} (code {})",
            error.message, error.code.0
        )),
        other => ToolError::failed(format!("calling `{tool}` on `{server}` failed: {other}")),
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
    fn read_only(&self) -> bool {
        self.tool.read_only
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
