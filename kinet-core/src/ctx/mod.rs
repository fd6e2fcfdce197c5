//! `ToolCtx`: what a running tool can see and use.

mod editor;
mod engine;
mod events;
mod extensions;
mod nested;
mod spawn;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::confirm::{ConfirmDecision, ConfirmHandler, ConfirmRequest, DenyingHandler};
use crate::data::output::{ToolError, ToolOutput};
use crate::deferred::Resumption;
use crate::event::{AgentEvent, PackEvent};
use crate::provenance::Provenance;

pub use crate::confine::{
    Confinement, DirEntry, EntryKind, EntryMetadata, PendingWrite, WorkspaceDir, WorkspacePath,
    confinement,
};
use crate::confine::{paths, workspace};
pub use editor::{
    Editor, EditorFiles, EditorTerminal, EditorTerminals, TerminalCommand, TerminalExit, Terminals,
};
pub use engine::EngineCtx;
pub use events::EventSink;
pub use extensions::Extensions;
pub use nested::ToolCaller;
pub use spawn::{AgentHandle, ExternalEngine, SubAgentReport, SubAgentRequest, SubAgentSpawner};

#[derive(Clone)]
struct Shared {
    cwd: PathBuf,
    roots: Vec<PathBuf>,
    confirm: Arc<dyn ConfirmHandler>,
    confirm_timeout: Duration,
    events: EventSink,
    spawner: Option<Arc<dyn SubAgentSpawner>>,
    extensions: Extensions,
    depth: u32,
    protected: Arc<[String]>,
}

/// The context a tool call runs in: working directory and workspace roots,
/// the confirmation handler, cancellation, a deadline, an event sink, a
/// sub-agent spawner and typed host extensions.
///
/// The engine builds one per call. Tool authors can build one for tests:
///
/// ```
/// use kinet_core::ToolCtx;
///
/// let ctx = ToolCtx::new("/tmp").with_roots(vec!["/tmp".into()]);
/// assert_eq!(ctx.cwd(), std::path::Path::new("/tmp"));
/// assert!(!ctx.is_cancelled());
/// ```
#[derive(Clone)]
pub struct ToolCtx {
    shared: Arc<Shared>,
    cancel: CancellationToken,
    deadline: Option<Instant>,
    call_id: Arc<str>,
    tool_name: Arc<str>,
    /// The run's key, for idempotency keys (empty outside a run).
    run_key: Arc<str>,
    /// The turn's tools, for tools that call tools.
    caller: Option<Arc<dyn ToolCaller>>,
    /// What the conversation's model has read (the injection defence's
    /// ledger), as of the start of the turn.
    provenance: Provenance,
    /// Set while a turn whose calls waited is finished: the decisions and
    /// what stopped calls saved.
    resumption: Option<Arc<Resumption>>,
}

impl ToolCtx {
    /// A context rooted at `cwd` with no workspace confinement, a handler
    /// that denies, no deadline and a discarding event sink.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        Self {
            shared: Arc::new(Shared {
                cwd: cwd.into(),
                roots: Vec::new(),
                confirm: Arc::new(DenyingHandler),
                confirm_timeout: Duration::from_secs(300),
                events: EventSink::discard(),
                spawner: None,
                extensions: Extensions::new(),
                depth: 0,
                protected: workspace::default_protected(),
            }),
            cancel: CancellationToken::new(),
            deadline: None,
            call_id: Arc::from(""),
            tool_name: Arc::from(""),
            run_key: Arc::from(""),
            caller: None,
            provenance: Provenance::new(),
            resumption: None,
        }
    }

    fn shared_mut(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.shared)
    }

    /// Confines file tools to these roots (empty: no confinement).
    pub fn with_roots(mut self, roots: Vec<PathBuf>) -> Self {
        self.shared_mut().roots = roots;
        self
    }

    /// Adds one extension to this context's (a call's own value, such as
    /// its checked command line).
    pub(crate) fn with_extension_arc<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.shared_mut().extensions.insert_arc(value);
        self
    }

    /// Sets the run's key (the engine does, per run; a resumed run keeps
    /// the key of the run it continues).
    pub(crate) fn with_run_key(mut self, key: &str) -> Self {
        self.run_key = Arc::from(key);
        self
    }

    /// Sets the decisions and saved states of a resumed turn (the engine
    /// does, on [`Agent::resume`](crate::Agent::resume)).
    pub(crate) fn with_resumption(mut self, resumption: Option<Arc<Resumption>>) -> Self {
        self.resumption = resumption;
        self
    }

    pub(crate) fn resumption(&self) -> Option<&Resumption> {
        self.resumption.as_deref()
    }

    /// What this call saved when it stopped while running, when it runs
    /// again after [`Agent::resume`](crate::Agent::resume) (see
    /// [`Suspension`](crate::deferred::Suspension)); `None` on a first run.
    pub fn saved_state(&self) -> Option<&serde_json::Value> {
        self.resumption
            .as_ref()
            .and_then(|r| r.saved.get(&*self.call_id))
    }

    /// Calls another of the run's tools from inside this call, through
    /// the whole pipeline as if the model had called it: the approval
    /// policy and the host's handler (an approval for the session counts
    /// for one call here), the injection defence, hooks, layers, events
    /// (`ToolCallStarted`/`Finished` with `id`) and spans. Fails when this
    /// context is not a run's, or the tool is unknown, denied or fails.
    /// When the call's approval is deferred, the result is a
    /// [`ToolErrorKind::Deferred`](crate::tool::ToolErrorKind::Deferred)
    /// error: return a [`ToolError::deferred`] with what you need to go on,
    /// and the run stops and resumes this call later (see
    /// [`deferred`](crate::deferred)).
    pub async fn call_tool(
        &self,
        id: impl Into<String>,
        name: &str,
        arguments: &serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        let Some(caller) = &self.caller else {
            return Err(ToolError::failed(format!(
                "`{name}` cannot be called from here: this tool runs outside an agent's run"
            )));
        };
        caller
            .call(self, id.into(), name, arguments.to_string())
            .await
    }

    /// A key naming this call for good: the same every time this call is
    /// run, in any process. A call whose approval was deferred runs after
    /// [`Agent::resume`](crate::Agent::resume) with the key it had when it
    /// was deferred, and a resume after a crash runs the turn's unfinished
    /// calls with theirs, so a tool with effects outside kinet can record
    /// the key with the effect (an `Idempotency-Key` header, a unique
    /// column) and recognise a second attempt. `None` outside a run's call.
    pub fn idempotency_key(&self) -> Option<String> {
        (!self.run_key.is_empty() && !self.call_id.is_empty())
            .then(|| format!("{}/{}", self.run_key, self.call_id))
    }

    /// The working directory relative paths resolve against.
    pub fn cwd(&self) -> &Path {
        &self.shared.cwd
    }

    /// The workspace roots; empty means no confinement.
    pub fn roots(&self) -> &[PathBuf] {
        &self.shared.roots
    }

    /// Places a model-supplied path (absolute, or relative to the working
    /// directory) inside a workspace root; its methods open it so the
    /// kernel refuses any escape (see [`WorkspacePath`]). Fails when the
    /// path lies outside every root. The path need not exist yet.
    pub fn workspace_path(&self, path: &str) -> Result<WorkspacePath, ToolError> {
        workspace::place(&self.shared.cwd, &self.shared.roots, path)
            .map(|placed| placed.with_protected(Arc::clone(&self.shared.protected)))
    }

    /// [`workspace_path`](Self::workspace_path) for an optional path
    /// argument: no path means the working directory.
    pub fn workspace_path_or_cwd(&self, path: Option<&str>) -> Result<WorkspacePath, ToolError> {
        self.workspace_path(path.unwrap_or("."))
    }

    /// The absolute path a model-supplied path names, checked to lie
    /// inside a workspace root, symlinks included: for showing it, or for
    /// handing it to a program. Open files through
    /// [`workspace_path`](Self::workspace_path) instead, which is immune to
    /// a symlink swapped in after this check.
    pub fn resolve_path(&self, path: &str) -> Result<PathBuf, ToolError> {
        let placed = self.workspace_path(path)?;
        match placed.metadata() {
            Err(error) if paths::is_escape(&error) => Err(placed.error("use", error)),
            _ => Ok(placed.path().to_path_buf()),
        }
    }

    /// Asks the confirmation handler directly (the engine already asks before
    /// mutating calls; use this for a second, specific question). Errors,
    /// timeouts and cancellation deny.
    pub async fn confirm(&self, request: ConfirmRequest) -> ConfirmDecision {
        let timeout = self.shared.confirm_timeout;
        let ask = self.shared.confirm.confirm(request);
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => ConfirmDecision::Deny { reason: Some("the run was cancelled".into()) },
            answer = tokio::time::timeout(timeout, ask) => match answer {
                Ok(Ok(decision)) => decision,
                Ok(Err(error)) => ConfirmDecision::Deny { reason: Some(error.to_string()) },
                Err(_) => ConfirmDecision::Deny {
                    reason: Some(format!("no answer to the confirmation within {} s", timeout.as_secs())),
                },
            },
        }
    }

    /// The run's cancellation token: long-running tools should watch it.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the run was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// When this call must be done by: the one source of a call's time
    /// limit, set by the pipeline's [timeout layer](crate::layer::TimeoutLayer)
    /// from the agent's tool timeout and the tool's own
    /// [`timeout`](crate::Tool::timeout). Tools bound their own work by it
    /// (a process, an HTTP request, a remote call), for example with
    /// [`bounded`](Self::bounded).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Runs `work` until it finishes, the call is cancelled, or its
    /// deadline passes; `what` names the work in the error ("git", "the
    /// request to example.com"). Dropping `work` must stop it (a child
    /// process spawned with `kill_on_drop`, an HTTP request).
    pub async fn bounded<F: std::future::Future>(
        &self,
        what: &str,
        work: F,
    ) -> Result<F::Output, ToolError> {
        let deadline = self.deadline;
        let expired = async move {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(ToolError::cancelled(format!(
                "{what} was stopped: the call was cancelled"
            ))),
            _ = expired => Err(ToolError::timeout(format!(
                "{what} was stopped: `{}` ran out of time",
                self.tool_name
            ))),
            out = work => Ok(out),
        }
    }

    /// The id of the call being run.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The name of the tool being run.
    pub fn tool_name(&self) -> &str {
        &self.tool_name
    }

    /// Sends a progress chunk for this call (e.g. shell output as it comes).
    pub fn progress(&self, text: impl Into<String>) {
        self.emit(AgentEvent::ToolProgress {
            call_id: self.call_id.to_string(),
            name: self.tool_name.to_string(),
            text: text.into(),
        });
    }

    /// Sends a tool pack's own event to the host (see [`PackEvent`]).
    pub fn emit_pack<T: Serialize + Send + Sync + 'static>(&self, pack: &'static str, value: T) {
        self.emit(AgentEvent::Pack(PackEvent::new(pack, value)));
    }

    /// Host state of type `T`.
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.shared.extensions.get::<T>()
    }
}

impl fmt::Debug for ToolCtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolCtx")
            .field("cwd", &self.shared.cwd)
            .field("roots", &self.shared.roots)
            .field("call_id", &self.call_id)
            .field("tool_name", &self.tool_name)
            .field("depth", &self.shared.depth)
            .field("cancelled", &self.cancel.is_cancelled())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    #[tokio::test]
    async fn tagged_sink_wraps_events() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sink = EventSink::new(tx).tagged("sub-1");
        sink.emit(AgentEvent::Warning {
            message: "x".into(),
        });
        match rx.recv().await.unwrap() {
            AgentEvent::SubAgent { agent_id, event } => {
                assert_eq!(agent_id, "sub-1");
                assert!(matches!(*event, AgentEvent::Warning { .. }));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn confirm_denies_on_cancel_and_on_default_handler() {
        let ctx = ToolCtx::new("/");
        let request = ConfirmRequest::new("t", "1", serde_json::Value::Null, "");
        assert!(matches!(
            ctx.confirm(request.clone()).await,
            ConfirmDecision::Deny { .. }
        ));
        let cancel = CancellationToken::new();
        cancel.cancel();
        let (handler, _rx) = crate::confirm::ChannelConfirmHandler::new(1);
        let ctx = ctx
            .with_cancellation(cancel)
            .with_confirm_handler(Arc::new(handler), Duration::from_secs(60));
        assert!(matches!(
            ctx.confirm(request).await,
            ConfirmDecision::Deny { .. }
        ));
    }
}
