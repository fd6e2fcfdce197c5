//! One configured server: connecting, listing tools, supervising the
//! connection and restarting it when it drops.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, PaginatedRequestParams, ProtocolVersion, Tool,
};
use rmcp::service::{NotificationContext, Peer};
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

mod connect;
mod listen;

pub(crate) use connect::authorizer_for;
use connect::connect;
pub(crate) use listen::sessionless;

use crate::config::{ServerConfig, ServerTransport};
use crate::errors::service_error;
use crate::settings::HubSettings;

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

/// A dropped connection's reason quotes stderr written this shortly
/// before (its last words, not what earlier failed calls printed).
const LAST_WORDS: Duration = Duration::from_secs(5);

/// A connection up this long resets the restart budget.
const STABLE_AFTER: Duration = Duration::from_secs(30);

/// At most this many authorizations of one server within
/// [`AUTHORIZATION_WINDOW`].
const MAX_AUTHORIZATIONS: usize = 3;

const AUTHORIZATION_WINDOW: Duration = Duration::from_secs(600);

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

/// Watches one server for the hub's lifetime.
pub(crate) async fn supervise(
    slot: Arc<ServerSlot>,
    settings: HubSettings,
    changed: watch::Sender<u64>,
    shutdown: CancellationToken,
) {
    // The state and the generation change together, under the watch's
    // lock: a reader that sees the new state always sees the new
    // generation, so the hub never serves a tool list cached before it.
    let set_state = |state: ServerState| {
        changed.send_modify(|generation| {
            if let Ok(mut current) = slot.state.lock() {
                *current = state;
            }
            *generation += 1;
        });
    };
    let startup_timeout = slot
        .config
        .startup_timeout
        .unwrap_or(settings.startup_timeout);
    let mut failures: u32 = 0;
    let mut was_ready = false;
    // When the server last sent the user to authorize (a server that keeps
    // asking is not sent back to the browser forever).
    let mut authorizations: Vec<Instant> = Vec::new();
    loop {
        // The server asked for (new) authorization: at start-up, or while
        // connected (a revoked grant, a scope step-up).
        if let Some(auth) = slot.auth.clone()
            && auth.challenged()
        {
            authorizations.retain(|at| at.elapsed() < AUTHORIZATION_WINDOW);
            if authorizations.len() >= MAX_AUTHORIZATIONS {
                set_state(ServerState::Failed {
                    reason: format!(
                        "{} asked for authorization {MAX_AUTHORIZATIONS} times in {} minutes: check the server's OAuth setup",
                        slot.config.name,
                        AUTHORIZATION_WINDOW.as_secs() / 60
                    ),
                });
                return;
            }
            authorizations.push(Instant::now());
            if auth.can_prompt() {
                set_state(ServerState::Authorizing);
            }
            let authorized = tokio::select! {
                _ = shutdown.cancelled() => break,
                authorized = auth.authorize() => authorized,
            };
            if let Err(reason) = authorized {
                set_state(ServerState::Failed { reason });
                return;
            }
        }
        let attempt = tokio::select! {
            _ = shutdown.cancelled() => break,
            attempt = tokio::time::timeout(startup_timeout, connect(&slot, &settings)) => attempt,
        };
        let (service, handler) = match attempt {
            Ok(Ok(connected)) => connected,
            // Authorization comes first, at the top of the loop.
            Ok(Err(_)) if slot.wants_authorization() => continue,
            failed => {
                let reason = match failed {
                    Ok(Err(reason)) => reason,
                    _ => format!(
                        "it did not finish starting within {:.1} s",
                        startup_timeout.as_secs_f64()
                    ),
                };
                // Let the stderr reader catch the child's last words.
                tokio::time::sleep(Duration::from_millis(100)).await;
                kill_group(&slot);
                if !was_ready || failures >= settings.max_restarts {
                    set_state(ServerState::Failed {
                        reason: slot.with_stderr(reason),
                    });
                    return;
                }
                failures += 1;
                set_state(ServerState::Restarting {
                    attempt: failures,
                    reason,
                });
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(settings.backoff(failures)) => continue,
                }
            }
        };
        let peer = service.peer().clone();
        let connection = Connection {
            peer: peer.clone(),
            handler: handler.clone(),
        };
        let listed = match tokio::time::timeout(startup_timeout, list_tools(&peer)).await {
            Ok(listed) => listed,
            Err(_) => Err(format!(
                "it did not answer tools/list within {:.1} s",
                startup_timeout.as_secs_f64()
            )),
        };
        match listed {
            Ok(tools) => {
                if let Ok(mut slot_tools) = slot.tools.lock() {
                    *slot_tools = tools;
                }
            }
            // A server that let the connection start without a token and
            // wants one for its tools: authorize, then connect again.
            Err(_) if slot.wants_authorization() => {
                let _ = service.cancel().await;
                kill_group(&slot);
                continue;
            }
            Err(reason) => {
                let _ = service.cancel().await;
                kill_group(&slot);
                set_state(ServerState::Failed {
                    reason: slot.with_stderr(format!("tools/list failed: {reason}")),
                });
                return;
            }
        }
        if let Ok(mut current) = slot.connection.lock() {
            *current = Some(connection);
        }
        was_ready = true;
        let connected_at = tokio::time::Instant::now();
        set_state(ServerState::Ready);
        // Renew the host's resource subscriptions on the new connection:
        // with `resources/subscribe` on revisions with `initialize`, on a
        // listen stream (with the lists that change) on 2026-07-28.
        let sessionless = listen::sessionless(&peer);
        let subscribed = if sessionless {
            Vec::new()
        } else {
            slot.subscribed()
        };
        for uri in subscribed {
            let peer = peer.clone();
            #[allow(deprecated)]
            tokio::spawn(async move {
                let _ = peer
                    .subscribe(rmcp::model::SubscribeRequestParams::new(uri))
                    .await;
            });
        }
        let mut listening = if sessionless {
            listen::open(&peer, &slot, startup_timeout).await
        } else {
            None
        };
        // The stream ended: open it again (not after a refusal).
        let mut relisten = false;

        // Connected: refresh on list_changed until the connection drops or
        // the hub shuts down.
        let cancel = service.cancellation_token();
        let mut waiting = std::pin::pin!(service.waiting());
        // A remote server can go away without closing anything the client
        // holds (streamable HTTP keeps no connection open): ping it, so
        // `status()` stops saying Ready and the tools leave the next turn.
        let remote = !matches!(slot.config.transport, ServerTransport::Stdio { .. });
        let mut health =
            tokio::time::interval(settings.health_check.max(Duration::from_millis(10)));
        health.tick().await;
        let reason = loop {
            tokio::select! {
                // Only while idle: a busy server shows it is alive by
                // answering its calls, and may be slow to answer a ping.
                _ = health.tick(), if remote && slot.in_flight.load(std::sync::atomic::Ordering::SeqCst) == 0 => {
                    let ping = peer.send_request(rmcp::model::ClientRequest::PingRequest(
                        rmcp::model::PingRequest::default(),
                    ));
                    match tokio::time::timeout(startup_timeout.min(Duration::from_secs(10)), ping).await {
                        // An error reply (say, "method not found") is an
                        // answer: the server is there.
                        Ok(Ok(_)) | Ok(Err(rmcp::ServiceError::McpError(_))) => {}
                        Ok(Err(error)) => break format!("it stopped answering (ping: {})", service_error(&error)),
                        Err(_) => break "it stopped answering (no reply to a ping)".to_owned(),
                    }
                }
                _ = shutdown.cancelled() => {
                    cancel.cancel();
                    let _ = tokio::time::timeout(Duration::from_secs(2), &mut waiting).await;
                    kill_group(&slot);
                    set_state(ServerState::Stopped);
                    if let Ok(mut current) = slot.connection.lock() {
                        *current = None;
                    }
                    return;
                }
                _ = handler.tools_changed.notified() => {
                    let refreshed = tokio::time::timeout(startup_timeout, list_tools(&peer)).await;
                    changed.send_modify(|generation| {
                        if let Ok(Ok(tools)) = refreshed
                            && let Ok(mut slot_tools) = slot.tools.lock()
                        {
                            *slot_tools = tools;
                        }
                        *generation += 1;
                    });
                }
                notification = listen::next(&mut listening) => match notification {
                    Some(notification) => listen::deliver(&handler, notification),
                    None => {
                        listening = None;
                        relisten = true;
                    }
                },
                // Listen again for a new set of resources, or a second
                // after a stream ended.
                _ = slot.subscriptions_changed.notified(), if sessionless => {
                    listening = listen::open(&peer, &slot, startup_timeout).await;
                }
                _ = tokio::time::sleep(Duration::from_secs(1)), if relisten => {
                    relisten = false;
                    listening = listen::open(&peer, &slot, startup_timeout).await;
                }
                _ = slot.challenge_raised() => {
                    if slot.wants_authorization() {
                        break "the server asked for a new authorization".to_owned();
                    }
                }
                quit = &mut waiting => break match quit {
                    Ok(rmcp::service::QuitReason::Cancelled) => "the connection was cancelled".to_owned(),
                    Ok(_) => "the connection closed".to_owned(),
                    Err(error) => format!("the connection ended: {error}"),
                },
            }
        };
        // A connection that lasted a while earns a fresh restart budget; one
        // that dies right after starting does not (no endless crash loop).
        // One ended for a new authorization is no failure.
        let wants_authorization = slot.wants_authorization();
        if connected_at.elapsed() >= STABLE_AFTER {
            failures = 0;
        }
        if !wants_authorization {
            failures += 1;
        }
        let gave_up = failures > settings.max_restarts;
        // Let the stderr reader catch the child's last words.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let connected = connected_at.into_std();
        let since = Some(
            Instant::now()
                .checked_sub(LAST_WORDS)
                .map_or(connected, |recent| recent.max(connected)),
        );
        let next = if gave_up {
            ServerState::Failed {
                reason: slot.with_stderr_since(
                    format!("{reason}; gave up after {} restarts", settings.max_restarts),
                    since,
                ),
            }
        } else {
            ServerState::Restarting {
                attempt: failures,
                reason: slot.with_stderr_since(reason, since),
            }
        };
        // Leave `Ready` and drop the connection in one step, before anything
        // else a reader could see (the process group going away): a server
        // reported ready always has a connection.
        changed.send_modify(|generation| {
            if let Ok(mut current) = slot.connection.lock() {
                *current = None;
            }
            if let Ok(mut current) = slot.state.lock() {
                *current = next;
            }
            *generation += 1;
        });
        kill_group(&slot);
        if gave_up {
            return;
        }
        if wants_authorization {
            continue;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(settings.backoff(failures)) => {}
        }
    }
    kill_group(&slot);
    set_state(ServerState::Stopped);
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
