//! Supervising one server for the hub's lifetime: authorizing it when it
//! asks, connecting, serving the connection, and restarting it (within a
//! budget, after a backoff) when it drops.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::service::{
    Peer, QuitReason, RunningService, RunningServiceCancellationToken, Subscription,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::connect::connect;
use super::{Connection, Handler, ServerSlot, ServerState, kill_group, list_tools, listen};
use crate::config::ServerTransport;
use crate::errors::service_error;
use crate::settings::HubSettings;

/// A dropped connection's reason quotes stderr written this shortly
/// before (its last words, not what earlier failed calls printed).
const LAST_WORDS: Duration = Duration::from_secs(5);

/// A connection up this long resets the restart budget.
const STABLE_AFTER: Duration = Duration::from_secs(30);

/// At most this many authorizations of one server within
/// [`AUTHORIZATION_WINDOW`].
const MAX_AUTHORIZATIONS: usize = 3;

const AUTHORIZATION_WINDOW: Duration = Duration::from_secs(600);

/// A started connection and its client side.
type Service = RunningService<RoleClient, Handler>;

/// How a connection's course ended, short of connecting again after the
/// backoff.
enum Halt {
    /// Start over at once: authorize (when the server asked) and connect.
    Again,
    /// The hub is shutting down.
    Shutdown,
    /// Supervision is over; the server's state says why.
    Over,
}

/// Watches one server for the hub's lifetime.
pub(crate) async fn supervise(
    slot: Arc<ServerSlot>,
    settings: HubSettings,
    changed: watch::Sender<u64>,
    shutdown: CancellationToken,
) {
    let mut supervisor = Supervisor::new(slot, settings, changed, shutdown);
    loop {
        match supervisor.connect_and_serve().await {
            Ok(()) | Err(Halt::Again) => {}
            Err(Halt::Shutdown) => break,
            Err(Halt::Over) => return,
        }
    }
    kill_group(&supervisor.slot);
    supervisor.set_state(ServerState::Stopped);
}

/// What the connections of one server share, one after the other.
struct Supervisor {
    slot: Arc<ServerSlot>,
    settings: HubSettings,
    /// The hub's generation of server states and tool lists.
    changed: watch::Sender<u64>,
    shutdown: CancellationToken,
    /// How long a start, and its `tools/list`, may take.
    startup_timeout: Duration,
    /// Restarts since the last stable connection.
    failures: u32,
    /// Whether the server was ever ready (one that never was is not
    /// restarted).
    was_ready: bool,
    /// When the server last sent the user to authorize (a server that keeps
    /// asking is not sent back to the browser forever).
    authorizations: Vec<Instant>,
}

impl Supervisor {
    fn new(
        slot: Arc<ServerSlot>,
        settings: HubSettings,
        changed: watch::Sender<u64>,
        shutdown: CancellationToken,
    ) -> Self {
        let startup_timeout = slot
            .config
            .startup_timeout
            .unwrap_or(settings.startup_timeout);
        Self {
            slot,
            settings,
            changed,
            shutdown,
            startup_timeout,
            failures: 0,
            was_ready: false,
            authorizations: Vec::new(),
        }
    }

    /// Sets the server's state. The state and the generation change
    /// together, under the watch's lock: a reader that sees the new state
    /// always sees the new generation, so the hub never serves a tool list
    /// cached before it.
    fn set_state(&self, state: ServerState) {
        self.changed.send_modify(|generation| {
            if let Ok(mut current) = self.slot.state.lock() {
                *current = state;
            }
            *generation += 1;
        });
    }

    /// Gives up on the server for `reason`.
    fn fail(&self, reason: String) -> Halt {
        self.set_state(ServerState::Failed { reason });
        Halt::Over
    }

    /// One connection's course: an authorization when the server asked for
    /// one, the start, the tool list, serving it until it drops, and the
    /// backoff before the next. `Ok` to connect again.
    async fn connect_and_serve(&mut self) -> Result<(), Halt> {
        self.authorize_if_asked().await?;
        let (service, handler) = self.start().await?;
        let service = self.list_first_tools(service).await?;
        let peer = service.peer().clone();
        let connected_at = self.go_ready(Connection {
            peer: peer.clone(),
            handler: handler.clone(),
        });
        let cancel = service.cancellation_token();
        // The service lives in this future until the backoff after its
        // connection dropped is over.
        let mut waiting = std::pin::pin!(service.waiting());
        let reason = self
            .serve(&peer, &handler, cancel, waiting.as_mut())
            .await?;
        self.after_drop(reason, connected_at).await
    }

    /// Authorizes the server when it asked for (new) authorization: at
    /// start-up, or while connected (a revoked grant, a scope step-up). A
    /// server that keeps asking fails.
    async fn authorize_if_asked(&mut self) -> Result<(), Halt> {
        let Some(auth) = self.slot.auth.clone() else {
            return Ok(());
        };
        if !auth.challenged() {
            return Ok(());
        }
        self.authorizations
            .retain(|at| at.elapsed() < AUTHORIZATION_WINDOW);
        if self.authorizations.len() >= MAX_AUTHORIZATIONS {
            return Err(self.fail(format!(
                "{} asked for authorization {MAX_AUTHORIZATIONS} times in {} minutes: check the server's OAuth setup",
                self.slot.config.name,
                AUTHORIZATION_WINDOW.as_secs() / 60
            )));
        }
        self.authorizations.push(Instant::now());
        if auth.can_prompt() {
            self.set_state(ServerState::Authorizing);
        }
        let authorized = tokio::select! {
            _ = self.shutdown.cancelled() => return Err(Halt::Shutdown),
            authorized = auth.authorize() => authorized,
        };
        authorized.map_err(|reason| self.fail(reason))
    }

    /// Connects within the start-up timeout. A server that fails to start
    /// goes back to authorization when it asked for it; otherwise it is
    /// started again after the backoff if it was ready before and the
    /// restart budget lasts, and fails if not.
    async fn start(&mut self) -> Result<(Service, Handler), Halt> {
        let attempt = tokio::select! {
            _ = self.shutdown.cancelled() => return Err(Halt::Shutdown),
            attempt = tokio::time::timeout(self.startup_timeout, connect(&self.slot, &self.settings)) => attempt,
        };
        let reason = match attempt {
            Ok(Ok(connected)) => return Ok(connected),
            // Authorization comes first, at the start of the next course.
            Ok(Err(_)) if self.slot.wants_authorization() => return Err(Halt::Again),
            Ok(Err(reason)) => reason,
            Err(_) => format!(
                "it did not finish starting within {:.1} s",
                self.startup_timeout.as_secs_f64()
            ),
        };
        // Let the stderr reader catch the child's last words.
        tokio::time::sleep(Duration::from_millis(100)).await;
        kill_group(&self.slot);
        if !self.was_ready || self.failures >= self.settings.max_restarts {
            return Err(self.fail(self.slot.with_stderr(reason)));
        }
        self.failures += 1;
        self.set_state(ServerState::Restarting {
            attempt: self.failures,
            reason,
        });
        self.back_off().await?;
        Err(Halt::Again)
    }

    /// Lists a new connection's tools into the slot. A server that let the
    /// connection start without a token and wants one for its tools is
    /// disconnected, authorized, and connected again; any other failure to
    /// list them fails the server.
    async fn list_first_tools(&self, service: Service) -> Result<Service, Halt> {
        let listed = tokio::time::timeout(self.startup_timeout, list_tools(service.peer()))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "it did not answer tools/list within {:.1} s",
                    self.startup_timeout.as_secs_f64()
                ))
            });
        let reason = match listed {
            Ok(tools) => {
                if let Ok(mut slot_tools) = self.slot.tools.lock() {
                    *slot_tools = tools;
                }
                return Ok(service);
            }
            Err(reason) => reason,
        };
        let wants_authorization = self.slot.wants_authorization();
        let _ = service.cancel().await;
        kill_group(&self.slot);
        if wants_authorization {
            return Err(Halt::Again);
        }
        Err(self.fail(
            self.slot
                .with_stderr(format!("tools/list failed: {reason}")),
        ))
    }

    /// Offers a new connection: kept in the slot, the server `Ready`.
    /// Returns when it connected.
    fn go_ready(&mut self, connection: Connection) -> tokio::time::Instant {
        if let Ok(mut current) = self.slot.connection.lock() {
            *current = Some(connection);
        }
        self.was_ready = true;
        let connected_at = tokio::time::Instant::now();
        self.set_state(ServerState::Ready);
        connected_at
    }

    /// Serves a connection until it drops, and says why: refreshes the
    /// tools when they change, hands on what the listen stream brings (and
    /// opens it again as needed), pings a remote server while it is idle,
    /// and ends the connection when the server asks for a new
    /// authorization. When the hub shuts down, the connection is closed
    /// and the server `Stopped`.
    async fn serve<W>(
        &self,
        peer: &Peer<RoleClient>,
        handler: &Handler,
        cancel: RunningServiceCancellationToken,
        mut waiting: Pin<&mut W>,
    ) -> Result<String, Halt>
    where
        W: Future<Output = Result<QuitReason, tokio::task::JoinError>>,
    {
        let slot = &self.slot;
        let sessionless = listen::sessionless(peer);
        let mut listening = self.renew_subscriptions(peer, sessionless).await;
        // The stream ended: open it again (not after a refusal).
        let mut relisten = false;
        // A remote server can go away without closing anything the client
        // holds (streamable HTTP keeps no connection open): ping it, so
        // `status()` stops saying Ready and the tools leave the next turn.
        let remote = !matches!(slot.config.transport, ServerTransport::Stdio { .. });
        let mut health =
            tokio::time::interval(self.settings.health_check.max(Duration::from_millis(10)));
        health.tick().await;
        loop {
            tokio::select! {
                // Only while idle: a busy server shows it is alive by
                // answering its calls, and may be slow to answer a ping.
                _ = health.tick(), if remote && slot.in_flight.load(Ordering::SeqCst) == 0 => {
                    if let Err(reason) = self.ping(peer).await {
                        return Ok(reason);
                    }
                }
                _ = self.shutdown.cancelled() => {
                    self.close(cancel, waiting).await;
                    return Err(Halt::Over);
                }
                _ = handler.tools_changed.notified() => self.refresh_tools(peer).await,
                notification = listen::next(&mut listening) => match notification {
                    Some(notification) => listen::deliver(handler, notification),
                    None => {
                        listening = None;
                        relisten = true;
                    }
                },
                // Listen again for a new set of resources, or a second
                // after a stream ended.
                _ = slot.subscriptions_changed.notified(), if sessionless => {
                    listening = listen::open(peer, slot, self.startup_timeout).await;
                }
                _ = tokio::time::sleep(Duration::from_secs(1)), if relisten => {
                    relisten = false;
                    listening = listen::open(peer, slot, self.startup_timeout).await;
                }
                _ = slot.challenge_raised() => {
                    if slot.wants_authorization() {
                        return Ok("the server asked for a new authorization".to_owned());
                    }
                }
                quit = &mut waiting => return Ok(match quit {
                    Ok(QuitReason::Cancelled) => "the connection was cancelled".to_owned(),
                    Ok(_) => "the connection closed".to_owned(),
                    Err(error) => format!("the connection ended: {error}"),
                }),
            }
        }
    }

    /// Renews the host's resource subscriptions on a new connection: with
    /// `resources/subscribe` on revisions with `initialize`, or on a listen
    /// stream (with the lists that change) on 2026-07-28, which is
    /// returned.
    async fn renew_subscriptions(
        &self,
        peer: &Peer<RoleClient>,
        sessionless: bool,
    ) -> Option<Subscription> {
        if sessionless {
            return listen::open(peer, &self.slot, self.startup_timeout).await;
        }
        for uri in self.slot.subscribed() {
            let peer = peer.clone();
            #[allow(deprecated)]
            tokio::spawn(async move {
                let _ = peer
                    .subscribe(rmcp::model::SubscribeRequestParams::new(uri))
                    .await;
            });
        }
        None
    }

    /// Pings a remote server; `Err` says how it stopped answering. An
    /// error reply (say, "method not found") is an answer: the server is
    /// there.
    async fn ping(&self, peer: &Peer<RoleClient>) -> Result<(), String> {
        let ping = peer.send_request(rmcp::model::ClientRequest::PingRequest(
            rmcp::model::PingRequest::default(),
        ));
        match tokio::time::timeout(self.startup_timeout.min(Duration::from_secs(10)), ping).await {
            Ok(Ok(_)) | Ok(Err(rmcp::ServiceError::McpError(_))) => Ok(()),
            Ok(Err(error)) => Err(format!(
                "it stopped answering (ping: {})",
                service_error(&error)
            )),
            Err(_) => Err("it stopped answering (no reply to a ping)".to_owned()),
        }
    }

    /// Lists the tools again after the server said they changed. The
    /// generation moves on either way; a failed listing keeps the old
    /// tools.
    async fn refresh_tools(&self, peer: &Peer<RoleClient>) {
        let refreshed = tokio::time::timeout(self.startup_timeout, list_tools(peer)).await;
        self.changed.send_modify(|generation| {
            if let Ok(Ok(tools)) = refreshed
                && let Ok(mut slot_tools) = self.slot.tools.lock()
            {
                *slot_tools = tools;
            }
            *generation += 1;
        });
    }

    /// Closes the connection as the hub shuts down: the service gets two
    /// seconds to end, the process group is killed, the server is
    /// `Stopped` and its connection gone.
    async fn close<W: Future>(
        &self,
        cancel: RunningServiceCancellationToken,
        waiting: Pin<&mut W>,
    ) {
        cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), waiting).await;
        kill_group(&self.slot);
        self.set_state(ServerState::Stopped);
        if let Ok(mut current) = self.slot.connection.lock() {
            *current = None;
        }
    }

    /// After a connection dropped for `reason`: counts the drop against the
    /// restart budget, leaves `Ready` with the reason and the server's last
    /// words on stderr, and waits out the backoff. A connection that
    /// lasted a while earns a fresh budget; one that dies right after
    /// starting does not (no endless crash loop). One ended for a new
    /// authorization is no failure, and goes back to authorize at once.
    async fn after_drop(
        &mut self,
        reason: String,
        connected_at: tokio::time::Instant,
    ) -> Result<(), Halt> {
        let wants_authorization = self.slot.wants_authorization();
        if connected_at.elapsed() >= STABLE_AFTER {
            self.failures = 0;
        }
        if !wants_authorization {
            self.failures += 1;
        }
        let gave_up = self.failures > self.settings.max_restarts;
        // Let the stderr reader catch the child's last words.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let since = Some(last_words_start(connected_at.into_std()));
        let next = if gave_up {
            ServerState::Failed {
                reason: self.slot.with_stderr_since(
                    format!(
                        "{reason}; gave up after {} restarts",
                        self.settings.max_restarts
                    ),
                    since,
                ),
            }
        } else {
            ServerState::Restarting {
                attempt: self.failures,
                reason: self.slot.with_stderr_since(reason, since),
            }
        };
        self.leave_ready(next);
        kill_group(&self.slot);
        if gave_up {
            return Err(Halt::Over);
        }
        if wants_authorization {
            return Err(Halt::Again);
        }
        self.back_off().await
    }

    /// Leaves `Ready` for `next` and drops the connection in one step,
    /// before anything else a reader could see (the process group going
    /// away): a server reported ready always has a connection.
    fn leave_ready(&self, next: ServerState) {
        self.changed.send_modify(|generation| {
            if let Ok(mut current) = self.slot.connection.lock() {
                *current = None;
            }
            if let Ok(mut current) = self.slot.state.lock() {
                *current = next;
            }
            *generation += 1;
        });
    }

    /// Waits out the backoff before restart number `failures`.
    async fn back_off(&self) -> Result<(), Halt> {
        tokio::select! {
            _ = self.shutdown.cancelled() => Err(Halt::Shutdown),
            _ = tokio::time::sleep(self.settings.backoff(self.failures)) => Ok(()),
        }
    }
}

/// Where a dropped connection's last words on stderr start: [`LAST_WORDS`]
/// ago, but not before it connected.
fn last_words_start(connected: Instant) -> Instant {
    Instant::now()
        .checked_sub(LAST_WORDS)
        .map_or(connected, |recent| recent.max(connected))
}
