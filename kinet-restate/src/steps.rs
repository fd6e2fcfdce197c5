//! The bridge between a kinet run and the Restate handler that journals
//! its steps.
//!
//! The run goes on in its own task; its model calls (through
//! [`JournaledProvider`]) and tool calls (through [`JournalLayer`]) each
//! ask the handler for a step. The handler opens a journaled step
//! (`ctx.run`) whose body tells the caller to do the work and waits for
//! its result, which Restate records. When the invocation is replayed
//! after a crash, the step's body does not run: the handler hands the
//! caller the recorded result instead, and the work is not done again.
//!
//! Calls made while a step runs (a sub-agent's model calls inside
//! `dispatch_agent`, a Code Mode script's tool calls inside `run_code`)
//! belong to that step: they run directly and its recorded result covers
//! them.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use futures::StreamExt;
use kinet_core::deferred::Suspension;
use kinet_core::layer::{Invocation, Next, ToolLayer};
use kinet_core::provider::{ChatRequest, ProviderError, ProviderStream, StreamEvent};
use kinet_core::tool::ToolErrorKind;
use kinet_core::{Provider, ToolError, ToolOutput};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

/// What the handler tells a step's caller.
pub(crate) enum Go {
    /// Do the work and send its result (as JSON) back here.
    Run(oneshot::Sender<serde_json::Value>),
    /// The step was done before: its recorded result.
    Replayed(serde_json::Value),
}

/// A step asked for by the run.
pub(crate) struct Request {
    /// The step's name in the journal.
    pub name: String,
    pub go: oneshot::Sender<Go>,
}

/// The run's side of the bridge.
#[derive(Clone)]
pub(crate) struct Steps {
    requests: mpsc::UnboundedSender<Request>,
    /// Set while a step's work runs (from its start to its result, not
    /// until Restate has recorded it: the run may go on before that).
    busy: Arc<AtomicBool>,
}

/// The handler's side: the steps asked for.
pub(crate) struct Journal {
    pub requests: mpsc::UnboundedReceiver<Request>,
}

/// The step could not be journaled: the invocation ended first.
const LOST: &str = "the durable run ended before this step could be recorded";

impl Steps {
    pub(crate) fn new() -> (Self, Journal) {
        let (requests, incoming) = mpsc::unbounded_channel();
        (
            Self {
                requests,
                busy: Arc::new(AtomicBool::new(false)),
            },
            Journal { requests: incoming },
        )
    }

    /// Runs `work` as the step `name`, or returns its recorded result.
    /// Inside a running step, `work` simply runs.
    async fn step<T, F>(&self, name: String, work: F) -> Result<T, String>
    where
        T: Serialize + DeserializeOwned,
        F: Future<Output = T>,
    {
        if self.busy.load(Ordering::SeqCst) {
            return Ok(work.await);
        }
        let (go, told) = oneshot::channel();
        self.requests
            .send(Request { name, go })
            .map_err(|_| LOST.to_owned())?;
        match told.await.map_err(|_| LOST.to_owned())? {
            Go::Run(done) => {
                let value = {
                    let _busy = Busy::set(&self.busy);
                    work.await
                };
                let json = serde_json::to_value(&value)
                    .map_err(|e| format!("the step's result cannot be recorded: {e}"))?;
                let _ = done.send(json);
                Ok(value)
            }
            Go::Replayed(json) => serde_json::from_value(json)
                .map_err(|e| format!("the step's recorded result cannot be read: {e}")),
        }
    }
}

/// Marks a step's work as running until dropped (also when the work is
/// dropped half-way, with its run).
struct Busy<'a>(&'a AtomicBool);

impl<'a> Busy<'a> {
    fn set(flag: &'a AtomicBool) -> Self {
        flag.store(true, Ordering::SeqCst);
        Self(flag)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// A provider whose calls are journaled steps.
pub(crate) struct JournaledProvider {
    pub inner: Arc<dyn Provider>,
    pub steps: Steps,
}

/// A model call's failure, as recorded.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum ModelFailure {
    Auth { message: String },
    BadRequest { status: u16, message: String },
    Server { status: u16, message: String },
    ContextLengthExceeded { message: String },
    Other { message: String },
}

impl From<&ProviderError> for ModelFailure {
    fn from(error: &ProviderError) -> Self {
        match error {
            ProviderError::Auth(message) => Self::Auth {
                message: message.clone(),
            },
            ProviderError::BadRequest { status, message } => Self::BadRequest {
                status: *status,
                message: message.clone(),
            },
            ProviderError::Server { status, message } => Self::Server {
                status: *status,
                message: message.clone(),
            },
            ProviderError::ContextLengthExceeded { message, .. } => Self::ContextLengthExceeded {
                message: message.clone(),
            },
            other => Self::Other {
                message: other.to_string(),
            },
        }
    }
}

impl From<ModelFailure> for ProviderError {
    fn from(failure: ModelFailure) -> Self {
        match failure {
            ModelFailure::Auth { message } => Self::Auth(message),
            ModelFailure::BadRequest { status, message } => Self::BadRequest { status, message },
            ModelFailure::Server { status, message } => Self::Server { status, message },
            ModelFailure::ContextLengthExceeded { message } => Self::ContextLengthExceeded {
                message,
                limit: None,
                requested: None,
            },
            ModelFailure::Other { message } => Self::Transport(message),
        }
    }
}

/// Reads a model call's whole stream: its events, or how it failed.
async fn collect(
    provider: &dyn Provider,
    request: ChatRequest<'_>,
) -> Result<Vec<StreamEvent>, ModelFailure> {
    let mut stream = provider
        .stream(request)
        .await
        .map_err(|e| ModelFailure::from(&e))?;
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event.map_err(|e| ModelFailure::from(&e))?);
    }
    Ok(events)
}

#[async_trait]
impl Provider for JournaledProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let recorded = self
            .steps
            .step("model call".to_owned(), collect(&*self.inner, request))
            .await
            .map_err(ProviderError::Transport)?;
        let events = recorded.map_err(ProviderError::from)?;
        Ok(futures::stream::iter(events.into_iter().map(Ok)).boxed())
    }
}

/// A tool call's failure, as recorded.
#[derive(Serialize, Deserialize)]
struct ToolFailure {
    kind: ToolErrorKind,
    message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    suspension: Option<Suspension>,
}

impl From<ToolFailure> for ToolError {
    fn from(failure: ToolFailure) -> Self {
        match failure.suspension {
            Some(suspension) => ToolError::deferred(suspension),
            None => ToolError::new(failure.kind, failure.message),
        }
    }
}

/// The layer that makes each tool call a journaled step (innermost of the
/// agent's layers, around the tool and its timeout).
pub(crate) struct JournalLayer {
    pub steps: Steps,
}

#[async_trait]
impl ToolLayer for JournalLayer {
    async fn call(&self, call: Invocation, next: Next<'_>) -> Result<ToolOutput, ToolError> {
        let name = format!("tool {} ({})", call.name(), call.ctx().call_id());
        let work = async move {
            next.run(call).await.map_err(|error| ToolFailure {
                kind: error.kind(),
                message: error.message().to_owned(),
                suspension: error.suspension().cloned(),
            })
        };
        match self.steps.step(name, work).await {
            Ok(result) => result.map_err(ToolError::from),
            Err(lost) => Err(ToolError::new(ToolErrorKind::Fatal, lost)),
        }
    }
}
