//! One configured server: connecting, listing tools, supervising the
//! connection and restarting it when it drops.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, PaginatedRequestParams, ProtocolVersion, Tool,
};
use rmcp::service::{NotificationContext, Peer};
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::{Notify, watch};

mod connect;
mod listen;
mod run;

pub(crate) use connect::authorizer_for;
pub(crate) use listen::sessionless;
pub(crate) use run::supervise;

use crate::config::ServerConfig;
use crate::errors::service_error;

/// Where a server stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerState {
    /// Connecting for the first time.
    Starting,
    /// Connected; its tools are offered.
    Ready,
    /// The connection dropped and is being re-established.
    Restarting {
        /// Reconnection attempt, from 1.
        attempt: u32,
        /// Why the connection dropped.
        reason: String,
    },
    /// It could not be started (or restarted); the reason includes the tail
    /// of its stderr for stdio servers.
    Failed {
        /// What went wrong.
        reason: String,
    },
    /// The server wants OAuth authorization and the user has been sent to
    /// the authorization page ([`oauth`](crate::oauth)); it connects once
    /// they finish. Not settling: a turn does not wait for the user.
    Authorizing,
    /// Disabled in its configuration.
    Disabled,
    /// The hub was shut down.
    Stopped,
}

impl ServerState {
    /// Still on its way to `Ready` or `Failed`.
    pub fn is_settling(&self) -> bool {
        matches!(self, Self::Starting | Self::Restarting { .. })
    }
}

/// The client side of one connection: progress routing and list-changed
/// notifications.
#[derive(Clone, Default)]
pub(crate) struct Handler {
    pub(crate) progress: crate::progress::ProgressRouter,
    tools_changed: Arc<Notify>,
    client_name: Arc<str>,
    server: Arc<str>,
    elicitation: Option<Arc<dyn crate::elicit::Elicitation>>,
    updates: Option<tokio::sync::broadcast::Sender<crate::changes::ServerChange>>,
}

impl Handler {
    fn report(&self, change: crate::changes::ServerChange) {
        if let Some(updates) = &self.updates {
            let _ = updates.send(change);
        }
    }
}

impl Handler {
    /// Asks the host's elicitation handler (declined without one, and for
    /// anything but a form).
    async fn elicit(&self, request: rmcp::model::ElicitRequestParams) -> rmcp::model::ElicitResult {
        use crate::elicit::{ElicitationAnswer, ElicitationRequest};
        use rmcp::model::{ElicitResult, ElicitationAction};
        let decline = ElicitResult::new(ElicitationAction::Decline);
        let Some(handler) = &self.elicitation else {
            return decline;
        };
        let rmcp::model::ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return decline;
        };
        let answer = handler
            .elicit(ElicitationRequest {
                server: self.server.to_string(),
                message,
                schema: serde_json::to_value(&requested_schema).unwrap_or_default(),
            })
            .await;
        match answer {
            ElicitationAnswer::Accept(fields) => ElicitResult::new(ElicitationAction::Accept)
                .with_content(serde_json::Value::Object(fields)),
            ElicitationAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
            _ => ElicitResult::new(ElicitationAction::Decline),
        }
    }

    /// Answers the questions of a 2026-07-28 `input_required` result, by
    /// key. Only questions for the user are answered (kinet lends no model
    /// and lists no roots, and says so to servers); `Err` names what else
    /// was asked.
    pub(crate) async fn answer(
        &self,
        requests: rmcp::model::InputRequests,
    ) -> Result<rmcp::model::InputResponses, String> {
        use rmcp::model::InputRequest;
        let mut answers = rmcp::model::InputResponses::new();
        for (key, request) in requests {
            let answer = match request {
                InputRequest::Elicitation(request) => {
                    serde_json::to_value(self.elicit(request.params).await)
                        .map_err(|e| format!("a question whose answer cannot be sent: {e}"))?
                }
                InputRequest::CreateMessage(_) => {
                    return Err("a completion from the client's model (sampling), which kinet does not offer".into());
                }
                InputRequest::ListRoots(_) => {
                    return Err("the client's roots, which kinet does not offer".into());
                }
                _ => return Err("input of a kind kinet does not know".into()),
            };
            answers.insert(key, answer);
        }
        Ok(answers)
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        // No sampling or roots: kinet does not implement them, and servers
        // change their tools when a client claims them. Elicitation only
        // when the host can show a form.
        let mut capabilities = ClientCapabilities::default();
        // Tasks (2026-07-28): a server may answer a long call with a task,
        // which the hub polls to its end (see `remote_tool`).
        capabilities.extensions = Some(
            [(
                rmcp::model::TASKS_EXTENSION_ID.to_owned(),
                Default::default(),
            )]
            .into(),
        );
        if self.elicitation.is_some() {
            capabilities.elicitation = Some(
                rmcp::model::ElicitationCapability::new()
                    .with_form(rmcp::model::FormElicitationCapability::default()),
            );
        }
        ClientConfig::new(
            capabilities,
            Implementation::new(self.client_name.to_string(), env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        Ok(self.elicit(request).await)
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.report(crate::changes::ServerChange::ResourceUpdated {
            server: self.server.to_string(),
            uri: params.uri,
        });
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.report(crate::changes::ServerChange::ResourcesChanged {
            server: self.server.to_string(),
        });
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.report(crate::changes::ServerChange::PromptsChanged {
            server: self.server.to_string(),
        });
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.deliver(params);
    }
}

/// A live connection.
#[derive(Clone)]
pub(crate) struct Connection {
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) handler: Handler,
}

/// Shared state of one server, read by tools and the status API.
pub(crate) struct ServerSlot {
    pub(crate) config: ServerConfig,
    pub(crate) state: Mutex<ServerState>,
    pub(crate) tools: Mutex<Vec<Tool>>,
    pub(crate) connection: Mutex<Option<Connection>>,
    pub(crate) pid: Mutex<Option<u32>>,
    /// The last lines the server wrote to stderr, with when.
    pub(crate) stderr: Arc<Mutex<VecDeque<(Instant, String)>>>,
    /// The hub is shutting down: a call cut off now will not be retried.
    pub(crate) stopping: std::sync::atomic::AtomicBool,
    /// Calls waiting for the server's answer (pings wait while any do).
    pub(crate) in_flight: std::sync::atomic::AtomicUsize,
    /// The host's form UI for the server's questions.
    pub(crate) elicitation: Option<Arc<dyn crate::elicit::Elicitation>>,
    /// Where resource updates go.
    pub(crate) updates: Option<tokio::sync::broadcast::Sender<crate::changes::ServerChange>>,
    /// Resources subscribed to (renewed after a reconnect).
    pub(crate) subscriptions: Mutex<std::collections::BTreeSet<String>>,
    /// Woken when `subscriptions` changed (a 2026-07-28 connection then
    /// listens again, for the new set).
    pub(crate) subscriptions_changed: Notify,
    /// The subscribed resources the server's listen stream accepted
    /// (2026-07-28; `None` until a stream was opened).
    pub(crate) listening: watch::Sender<Option<std::collections::BTreeSet<String>>>,
    /// OAuth for a remote server without credentials of its own.
    pub(crate) auth: Option<Arc<crate::oauth::Authorizer>>,
}

const STDERR_LINES: usize = 50;

/// Longest stderr line kept, in characters.
const STDERR_LINE_CHARS: usize = 1000;

impl ServerSlot {
    /// The server asked for a (new) OAuth authorization that has not
    /// happened yet.
    pub(crate) fn wants_authorization(&self) -> bool {
        self.auth.as_ref().is_some_and(|a| a.challenged())
    }

    /// Resolves when the server's OAuth notes a challenge; never without
    /// OAuth.
    async fn challenge_raised(&self) {
        match &self.auth {
            Some(auth) => auth.raised().await,
            None => std::future::pending().await,
        }
    }

    pub(crate) fn new(config: ServerConfig) -> Self {
        let state = if config.enabled {
            ServerState::Starting
        } else {
            ServerState::Disabled
        };
        Self {
            config,
            state: Mutex::new(state),
            tools: Mutex::new(Vec::new()),
            connection: Mutex::new(None),
            pid: Mutex::new(None),
            stderr: Arc::new(Mutex::new(VecDeque::new())),
            stopping: std::sync::atomic::AtomicBool::new(false),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            elicitation: None,
            updates: None,
            subscriptions: Mutex::new(std::collections::BTreeSet::new()),
            subscriptions_changed: Notify::new(),
            listening: watch::Sender::new(None),
            auth: None,
        }
    }

    /// The resources the host subscribed to.
    pub(crate) fn subscribed(&self) -> Vec<String> {
        self.subscriptions
            .lock()
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(crate) fn state(&self) -> ServerState {
        self.state
            .lock()
            .map(|s| s.clone())
            .unwrap_or(ServerState::Failed {
                reason: "state lock poisoned".into(),
            })
    }

    pub(crate) fn connection(&self) -> Option<Connection> {
        self.connection.lock().ok().and_then(|c| c.clone())
    }

    /// The last `lines` lines written at or after `since`.
    fn stderr_tail(&self, lines: usize, since: Option<Instant>) -> String {
        let tail: Vec<String> = self
            .stderr
            .lock()
            .map(|t| {
                t.iter()
                    .filter(|(at, _)| since.is_none_or(|since| *at >= since))
                    .map(|(_, line)| line.clone())
                    .collect()
            })
            .unwrap_or_default();
        let skip = tail.len().saturating_sub(lines);
        tail[skip..].join("\n")
    }

    /// `reason` with everything stderr got since this start attempt.
    fn with_stderr(&self, reason: String) -> String {
        self.with_stderr_since(reason, None)
    }

    /// `reason` with what stderr got at or after `since`.
    fn with_stderr_since(&self, reason: String, since: Option<Instant>) -> String {
        let tail = self.stderr_tail(10, since);
        if tail.is_empty() {
            reason
        } else {
            format!("{reason}; stderr ends with:\n{tail}")
        }
    }
}

/// `tools/list`, following cursors (at most 100 pages).
pub(crate) async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<Tool>, String> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..100 {
        let page = peer
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .map_err(|e| service_error(&e))?;
        tools.extend(page.tools);
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    Ok(tools)
}

/// Kills a stdio server's whole process group.
pub(crate) fn kill_group(slot: &ServerSlot) {
    let pid = slot.pid.lock().ok().and_then(|mut pid| pid.take());
    #[cfg(unix)]
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    #[cfg(not(unix))]
    let _ = pid;
}
