//! The engine-facing side of [`ToolCtx`]: building a context the way the
//! engine does, and reading what only the engine and tool packs need.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{EventSink, Extensions, SubAgentSpawner, ToolCaller, ToolCtx};
use crate::confirm::ConfirmHandler;
use crate::data::output::ToolError;
use crate::event::AgentEvent;
use crate::provenance::Provenance;

/// Setting up a [`ToolCtx`] as the engine does, and the plumbing only the
/// engine, servers and tool packs read (events, sub-agents, the
/// provenance ledger). Tool authors need none of it: the pipeline builds
/// each call's context. Import it to run tools outside an agent (an MCP
/// server, an editor's terminal) or to write a tool that starts
/// sub-agents.
///
/// ```
/// use kinet_core::ToolCtx;
/// use kinet_core::tool::engine::EngineCtx;
/// use kinet_core::tool::CancellationToken;
///
/// let cancel = CancellationToken::new();
/// let ctx = ToolCtx::new("/tmp").with_cancellation(cancel.clone()).for_call("c1", "shell");
/// cancel.cancel();
/// assert!(ctx.is_cancelled());
/// ```
pub trait EngineCtx: Sized + sealed::Sealed {
    /// Sets the working directory relative paths resolve against.
    fn with_cwd(self, cwd: impl Into<PathBuf>) -> Self;

    /// The directory names that tools may not write beneath, at any depth
    /// of the workspace (through a symlink too). Default: `.git` (a hook or
    /// a config written there runs later, outside the agent's control) and
    /// `.kinet`. An empty list allows writes everywhere in the roots.
    fn with_protected_names(self, names: Vec<String>) -> Self;

    /// Sets the confirmation handler and how long to wait for it.
    fn with_confirm_handler(self, handler: Arc<dyn ConfirmHandler>, timeout: Duration) -> Self;

    /// Sets the cancellation token.
    fn with_cancellation(self, cancel: CancellationToken) -> Self;

    /// Sets the deadline.
    fn with_deadline(self, deadline: Option<Instant>) -> Self;

    /// Sets the event sink.
    fn with_events(self, events: EventSink) -> Self;

    /// Sets the sub-agent spawner.
    fn with_spawner(self, spawner: Option<Arc<dyn SubAgentSpawner>>) -> Self;

    /// Sets the host extensions.
    fn with_extensions(self, extensions: Extensions) -> Self;

    /// Sets the sub-agent nesting depth (0 for a top-level agent).
    fn with_depth(self, depth: u32) -> Self;

    /// Sets what the conversation's model has read (the engine does, each
    /// turn; a sub-agent inherits it, see [`Provenance::inherit`]).
    fn with_provenance(self, provenance: Provenance) -> Self;

    /// What the conversation's model had read when this turn started.
    fn provenance(&self) -> &Provenance;

    /// Names the call this context belongs to. The pipeline does this for
    /// every call it runs; call it yourself only to test a tool alone.
    fn for_call(&self, call_id: &str, tool_name: &str) -> Self;

    /// The decisions given on resume for the calls this call made (ids
    /// `<this call's id>.<id>`), under their own ids (see
    /// [`Decisions::within`](crate::deferred::Decisions::within)); empty on
    /// a first run.
    fn decisions_within(&self) -> crate::deferred::Decisions;

    /// Lets tools of this context call the turn's tools (the engine does,
    /// per turn).
    fn with_tool_caller(self, caller: Option<Arc<dyn ToolCaller>>) -> Self;

    /// [`resolve_path`](ToolCtx::resolve_path) for an optional path argument:
    /// no path means the working directory.
    fn resolve_path_or_cwd(&self, path: Option<&str>) -> Result<PathBuf, ToolError>;

    /// Sends an event to the host.
    fn emit(&self, event: AgentEvent);

    /// The event sink (to hand to a sub-agent).
    fn events(&self) -> &EventSink;

    /// The sub-agent spawner, when sub-agents are allowed at this depth.
    fn spawner(&self) -> Option<&Arc<dyn SubAgentSpawner>>;

    /// How deeply nested this agent is (0 = top level).
    fn depth(&self) -> u32;

    /// All host extensions.
    fn extensions(&self) -> &Extensions;
}

mod sealed {
    /// Only [`ToolCtx`](super::ToolCtx) is an engine context: methods can be added.
    pub trait Sealed {}
    impl Sealed for super::ToolCtx {}
}

impl EngineCtx for ToolCtx {
    fn with_cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.shared_mut().cwd = cwd.into();
        self
    }

    fn with_protected_names(mut self, names: Vec<String>) -> Self {
        self.shared_mut().protected = names.into();
        self
    }

    fn with_confirm_handler(mut self, handler: Arc<dyn ConfirmHandler>, timeout: Duration) -> Self {
        let shared = self.shared_mut();
        shared.confirm = handler;
        shared.confirm_timeout = timeout;
        self
    }

    fn with_cancellation(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    fn with_deadline(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    fn with_events(mut self, events: EventSink) -> Self {
        self.shared_mut().events = events;
        self
    }

    fn with_spawner(mut self, spawner: Option<Arc<dyn SubAgentSpawner>>) -> Self {
        self.shared_mut().spawner = spawner;
        self
    }

    fn with_extensions(mut self, extensions: Extensions) -> Self {
        self.shared_mut().extensions = extensions;
        self
    }

    fn with_depth(mut self, depth: u32) -> Self {
        self.shared_mut().depth = depth;
        self
    }

    fn with_provenance(mut self, provenance: Provenance) -> Self {
        self.provenance = provenance;
        self
    }

    fn provenance(&self) -> &Provenance {
        &self.provenance
    }

    fn for_call(&self, call_id: &str, tool_name: &str) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            cancel: self.cancel.clone(),
            deadline: self.deadline,
            call_id: Arc::from(call_id),
            tool_name: Arc::from(tool_name),
            run_key: Arc::clone(&self.run_key),
            caller: self.caller.clone(),
            provenance: self.provenance.clone(),
            resumption: self.resumption.clone(),
        }
    }

    fn decisions_within(&self) -> crate::deferred::Decisions {
        self.resumption
            .as_ref()
            .map(|r| r.decisions.within(&self.call_id))
            .unwrap_or_default()
    }

    fn with_tool_caller(mut self, caller: Option<Arc<dyn ToolCaller>>) -> Self {
        self.caller = caller;
        self
    }

    fn resolve_path_or_cwd(&self, path: Option<&str>) -> Result<PathBuf, ToolError> {
        self.resolve_path(path.unwrap_or("."))
    }

    fn emit(&self, event: AgentEvent) {
        self.shared.events.emit(event);
    }

    fn events(&self) -> &EventSink {
        &self.shared.events
    }

    fn spawner(&self) -> Option<&Arc<dyn SubAgentSpawner>> {
        self.shared.spawner.as_ref()
    }

    fn depth(&self) -> u32 {
        self.shared.depth
    }

    fn extensions(&self) -> &Extensions {
        &self.shared.extensions
    }
}
