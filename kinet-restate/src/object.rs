//! The agent as a Restate virtual object: one object per conversation.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use kinet_core::builder::Calls;
use kinet_core::confirm::{ConfirmError, ConfirmRequest};
use kinet_core::deferred::Decisions;
use kinet_core::session::Session;
use kinet_core::{
    AgentBuilder, AgentEvent, AgentRun, ConfirmDecision, ConfirmHandler, Conversation, Provider,
    RunOutcome, RunStop,
};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::steps::{Go, JournalLayer, JournaledProvider, Request, Steps};

/// State: the conversation as its last run left it.
const CONVERSATION: &str = "conversation";
/// State: the approvals a run waits for, while it waits.
const WAITING: &str = "waiting";

/// Builds the agent of one run from the journaled model (the host's own
/// builder, called once per run).
type Build = dyn Fn(Arc<dyn Provider>) -> AgentBuilder + Send + Sync;

/// A kinet agent served as a Restate virtual object (service name
/// `KinetAgent`), keyed by conversation: Restate runs one invocation per
/// key at a time, so a conversation gets one reply at a time, and
/// different conversations run in parallel.
///
/// Handlers (call them through Restate's ingress, or with
/// [`Client`](crate::Client)):
/// - `prompt` (`{"text": ...}` → [`Reply`]): one user message and the run
///   it starts, to its end. Each model call and each tool call is a
///   journaled step: after a crash Restate replays the invocation, the
///   finished steps give their recorded results without running again,
///   and the run goes on from the first unfinished one (a tool that was
///   running runs again, with the same
///   [`idempotency_key`](kinet_core::ToolCtx::idempotency_key)). Every
///   approval question defers: the run waits on an awakeable, durably,
///   until a host resolves it with [`Decisions`] (`pending` gives its id).
/// - `pending` (shared) → [`Waiting`] or `null`: what a run waits for.
/// - `session` (shared) → the conversation as a kinet
///   [`Session`] (id: the key), to resume, fork or store in plain kinet.
///
/// Within a run, a turn's tool calls run one at a time in the model's
/// order ([`Calls::one_at_a_time`]), so the journal's order
/// never depends on timing; calls made inside a call (a sub-agent's, a
/// Code Mode script's) belong to that call's step.
pub struct AgentObject {
    provider: Arc<dyn Provider>,
    build: Arc<Build>,
    events: broadcast::Sender<ConversationEvent>,
}

/// An event of a conversation's run, for hosts that watch runs in the
/// service process ([`AgentObject::events`]). A replayed invocation sends
/// the events of its replayed steps again.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConversationEvent {
    /// The conversation (the object's key).
    pub conversation: String,
    /// The event.
    pub event: AgentEvent,
}

/// What `prompt` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Reply {
    /// The last assistant text of the run, if any.
    pub text: Option<String>,
    /// How the run ended ("completed", "cancelled", "failed: ...").
    pub stop: String,
    /// The messages of the conversation after the run.
    pub messages: usize,
}

/// What a run waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Waiting {
    /// The awakeable to resolve with [`Decisions`] (JSON), through
    /// Restate's ingress: `POST /restate/awakeables/{id}/resolve`.
    pub awakeable: String,
    /// The calls waiting, with what the user is to see.
    pub pending: Vec<ConfirmRequest>,
}

/// `prompt`'s input.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Prompt {
    pub text: String,
}

/// The stored conversation (its session approvals included). State
/// written before conversations kept their approvals held them beside it,
/// in `approvals`: still read.
#[derive(Serialize, Deserialize, Default)]
struct Stored {
    conversation: Conversation,
    #[serde(default, skip_serializing)]
    approvals: BTreeSet<String>,
}

impl Stored {
    fn of(conversation: &Conversation) -> Self {
        Self {
            conversation: conversation.clone(),
            approvals: BTreeSet::new(),
        }
    }

    fn into_conversation(self) -> Conversation {
        let mut conversation = self.conversation;
        conversation.session_approvals.extend(self.approvals);
        conversation
    }
}

/// Every question is answered later, through the awakeable.
struct DeferAll;

#[async_trait]
impl ConfirmHandler for DeferAll {
    async fn confirm(&self, _request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        Ok(ConfirmDecision::Defer)
    }
}

impl AgentObject {
    /// Serves the agent `build` makes from the model: `build` gets the
    /// journaled model (wrapping `provider`) and returns the agent's
    /// builder with its tools, policy, layers and the rest; it is called
    /// once per run. Its confirmation handler is replaced: every question
    /// waits for a host's decisions.
    ///
    /// An `Arc` of a provider is one too, for sharing it.
    pub fn new(
        provider: impl Provider + 'static,
        build: impl Fn(Arc<dyn Provider>) -> AgentBuilder + Send + Sync + 'static,
    ) -> Self {
        Self {
            provider: Arc::new(provider),
            build: Arc::new(build),
            events: broadcast::channel(1024).0,
        }
    }

    /// The events of every run this process serves (a bounded channel: a
    /// receiver that falls 1,024 events behind misses the oldest).
    pub fn events(&self) -> broadcast::Receiver<ConversationEvent> {
        self.events.subscribe()
    }

    /// A Restate endpoint serving this object, with kinet's invocation
    /// settings: a crashed invocation is retried after 100 ms, then at
    /// most every 2 s, 10,000 times (more than 5 hours), then paused
    /// (Restate's CLI or admin API resumes it); an invocation may go 10 minutes
    /// without a journal entry before Restate asks it to suspend
    /// (a long model call or tool call), and 15 before it is aborted.
    pub fn endpoint(self) -> restate_sdk::endpoint::Endpoint {
        let options = restate_sdk::endpoint::ServiceOptions::new()
            .retry_policy_initial_interval(Duration::from_millis(100))
            .retry_policy_max_interval(Duration::from_secs(2))
            .retry_policy_exponentiation_factor(2.0)
            .retry_policy_max_attempts(10_000)
            .retry_policy_pause_on_max_attempts()
            .inactivity_timeout(Duration::from_secs(600))
            .abort_timeout(Duration::from_secs(900));
        use restate_sdk::service::IntoServiceDefinition as _;
        restate_sdk::endpoint::Endpoint::builder()
            .bind(self.into_service_definition().options(options))
            .build()
    }

    /// Serves [`endpoint`](Self::endpoint) on `listener` (HTTP/2 without
    /// TLS, as Restate's server calls it) until `shutdown` completes, then
    /// gives open requests up to 10 s to end. Each connection sends its
    /// frames at once (no Nagle delay): a step's record is a small message
    /// each way, and waiting for the peer's delayed acknowledgement would
    /// cost tens of milliseconds per step.
    pub async fn serve_on(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future,
    ) {
        let endpoint = restate_sdk::hyper::HyperEndpoint::new(self.endpoint());
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, remote)) = accepted else { continue };
                    let _ = stream.set_nodelay(true);
                    let connection = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), endpoint.clone());
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        if let Err(error) = connection.await {
                            tracing::debug!(%remote, %error, "a Restate connection ended with an error");
                        }
                    });
                }
                _ = &mut shutdown => break,
            }
        }
        tokio::select! {
            _ = graceful.shutdown() => {}
            _ = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
    }

    /// The agent of one run, and the handler's side of its steps.
    fn agent(&self, key: &str) -> (kinet_core::Agent, crate::steps::Journal) {
        let (steps, journal) = Steps::new();
        let model = Arc::new(JournaledProvider {
            inner: Arc::clone(&self.provider),
            steps: steps.clone(),
        });
        let agent = (self.build)(model)
            .calls(Calls::new().layer(JournalLayer { steps }).one_at_a_time())
            .confirm_handler(DeferAll)
            .build();
        tracing::debug!(conversation = key, "durable run starts");
        (agent, journal)
    }

    /// Drives a run: journals the steps it asks for and forwards its
    /// events, to its end. When Restate cancels the invocation, the run is
    /// cancelled as a kinet run is (its calls get "cancelled" results) and
    /// ends; the steps it still asks for are held unanswered until then.
    async fn drive(
        &self,
        ctx: &ObjectContext<'_>,
        mut run: AgentRun,
        journal: &mut crate::steps::Journal,
    ) -> Result<RunOutcome, HandlerError> {
        let key = ctx.key().to_owned();
        let cancel = run.cancellation_token();
        let mut held = Vec::new();
        loop {
            tokio::select! {
                biased;
                Some(request) = journal.requests.recv() => {
                    if cancel.is_cancelled() {
                        held.push(request.go);
                        continue;
                    }
                    match record(ctx, request).await {
                        Ok(()) => {}
                        Err(Interrupted::Cancelled(go)) => {
                            cancel.cancel();
                            held.extend(go);
                        }
                        Err(Interrupted::Failed(error)) => return Err(error),
                    }
                }
                event = run.next() => match event {
                    Some(event) => {
                        let _ = self.events.send(ConversationEvent {
                            conversation: key.clone(),
                            event,
                        });
                    }
                    None => break,
                },
            }
        }
        let outcome = run.finish().await;
        drop(held);
        Ok(outcome)
    }
}

/// Why a step was not recorded.
enum Interrupted {
    /// Restate cancelled the invocation; the step's caller, if it was not
    /// told yet.
    Cancelled(Option<tokio::sync::oneshot::Sender<Go>>),
    /// Anything else: the invocation fails (and Restate retries it).
    Failed(HandlerError),
}

/// Whether `error` is Restate's cancellation of the invocation.
fn is_cancellation(error: &TerminalError) -> bool {
    error.code() == 409
}

/// Runs one step: the caller does the work inside a journaled step, or
/// gets the recorded result when the step was done before.
async fn record(ctx: &ObjectContext<'_>, request: Request) -> Result<(), Interrupted> {
    let Request { name, go } = request;
    let go = Arc::new(std::sync::Mutex::new(Some(go)));
    let for_step = Arc::clone(&go);
    let recorded = ctx
        .run(|| async move {
            let go = for_step.lock().ok().and_then(|mut go| go.take());
            let go = go.ok_or_else(|| HandlerError::from("the step's caller is gone"))?;
            let (done, result) = tokio::sync::oneshot::channel();
            go.send(Go::Run(done))
                .map_err(|_| HandlerError::from("the step's caller is gone"))?;
            let value = result
                .await
                .map_err(|_| HandlerError::from("the step ended without a result"))?;
            Ok(Json(value))
        })
        .name(name)
        .await;
    let untold = || go.lock().ok().and_then(|mut go| go.take());
    let value = match recorded {
        Ok(value) => value.into_inner(),
        Err(error) if is_cancellation(&error) => return Err(Interrupted::Cancelled(untold())),
        Err(error) => return Err(Interrupted::Failed(error.into())),
    };
    // Not asked to run: the step was replayed.
    if let Some(go) = untold() {
        let _ = go.send(Go::Replayed(value));
    }
    Ok(())
}

fn reply(outcome: &RunOutcome) -> Reply {
    Reply {
        text: outcome.final_text(),
        stop: outcome.stop.to_string(),
        messages: outcome.conversation.messages.len(),
    }
}

#[restate_sdk::object(name = "KinetAgent")]
impl AgentObject {
    /// One user message and its run.
    #[handler]
    async fn prompt(
        &self,
        ctx: ObjectContext<'_>,
        input: Json<Prompt>,
    ) -> Result<Json<Reply>, HandlerError> {
        let key = ctx.key().to_owned();
        let stored = ctx.get::<Json<Stored>>(CONVERSATION).await?;
        let mut conversation = stored
            .map(|s| s.into_inner().into_conversation())
            .unwrap_or_default();
        if conversation.run_key.is_none() {
            conversation.run_key = Some(format!("restate/{key}"));
        }
        conversation.push_user(input.into_inner().text);
        let (agent, mut journal) = self.agent(&key);
        let mut outcome = self
            .drive(&ctx, agent.run(conversation), &mut journal)
            .await?;
        while let RunStop::AwaitingApproval { pending } = &outcome.stop {
            let (awakeable, decided) = ctx.awakeable::<Json<Decisions>>();
            ctx.set(
                WAITING,
                Json(Waiting {
                    awakeable,
                    pending: pending.clone(),
                }),
            );
            ctx.set(CONVERSATION, Json(Stored::of(&outcome.conversation)));
            let decisions = match decided.await {
                Ok(decisions) => decisions.into_inner(),
                // Cancelled while waiting: the run ends there, its calls
                // still waiting (a later prompt answers them as not run).
                Err(error) if is_cancellation(&error) => {
                    ctx.clear(WAITING);
                    return Ok(Json(Reply {
                        stop: RunStop::Cancelled.to_string(),
                        ..reply(&outcome)
                    }));
                }
                Err(error) => return Err(error.into()),
            };
            ctx.clear(WAITING);
            let run = agent.resume(outcome.conversation, decisions);
            outcome = self.drive(&ctx, run, &mut journal).await?;
        }
        ctx.set(CONVERSATION, Json(Stored::of(&outcome.conversation)));
        Ok(Json(reply(&outcome)))
    }

    /// What the conversation's run waits for, if it waits.
    #[handler]
    async fn pending(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<Option<Waiting>>, HandlerError> {
        let waiting = ctx.get::<Json<Waiting>>(WAITING).await?;
        Ok(Json(waiting.map(Json::into_inner)))
    }

    /// The conversation as a kinet session (id: the key).
    #[handler]
    async fn session(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<Option<Session>>, HandlerError> {
        let stored = ctx.get::<Json<Stored>>(CONVERSATION).await?;
        Ok(Json(stored.map(|stored| {
            let mut session = Session::capture(&stored.into_inner().into_conversation(), &[]);
            session.id = ctx.key().to_owned();
            session
        })))
    }
}
