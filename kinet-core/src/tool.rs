//! Writing tools: the [`Tool`] trait, what a tool returns, how it is
//! described and scheduled, the [`ToolCtx`] it runs in and the workspace
//! files it opens through it, and toolsets.
//!
//! Two submodules hold what tool authors rarely need: [`engine`] (setting
//! up a context as the engine does, sub-agent plumbing) and
//! [`workspace`] (the confined file handles [`ToolCtx::workspace_path`]
//! returns).

pub use crate::ctx::ToolCtx;
pub use crate::data::output::{ToolError, ToolErrorKind, ToolOutput};
pub use crate::data::spec::{Scheduling, ToolAnnotations, ToolSpec};
pub use crate::data::truncate::TruncationPolicy;
pub use crate::tooldef::{
    DynTool, PreparedCall, Tool, default_scheduling, parse_arguments, schema_for, spec_of,
};
pub use crate::toolset::{ToolSnapshot, ToolSource, Toolset, is_valid_tool_name};
/// The cancellation token type of [`ToolCtx::cancellation`].
pub use tokio_util::sync::CancellationToken;

/// The engine-facing side of a tool context: [`EngineCtx`](engine::EngineCtx)
/// (building a context and reading its plumbing), host extensions, the
/// event sink, tools calling tools, and sub-agents.
pub mod engine {
    pub use crate::ctx::{
        AgentHandle, EngineCtx, EventSink, Extensions, ExternalEngine, SubAgentReport,
        SubAgentRequest, SubAgentSpawner, ToolCaller,
    };
}

/// Files opened beneath the workspace roots, with the kernel's help (see
/// [`ToolCtx::workspace_path`](crate::ToolCtx::workspace_path)).
pub mod workspace {
    pub use crate::ctx::{
        Confinement, DirEntry, EntryKind, EntryMetadata, PendingWrite, WorkspaceDir, WorkspacePath,
        confinement,
    };
}
