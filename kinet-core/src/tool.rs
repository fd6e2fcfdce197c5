//! Writing tools: the traits, what they return, how they are described and
//! scheduled, the context they run in, and toolsets.

pub use crate::ctx::{
    AgentHandle, Confinement, DirEntry, Editor, EditorFiles, EditorTerminal, EditorTerminals,
    EntryKind, EntryMetadata, EventSink, Extensions, PendingWrite, SubAgentReport, SubAgentRequest,
    SubAgentSpawner, TerminalCommand, TerminalExit, Terminals, ToolCaller, ToolCtx, WorkspaceDir,
    WorkspacePath, confinement,
};
pub use crate::data::output::{ToolError, ToolErrorKind, ToolOutput};
pub use crate::data::spec::{Scheduling, ToolAnnotations, ToolSpec};
pub use crate::data::truncate::TruncationPolicy;
pub use crate::tooldef::{
    DynTool, PreparedCall, Tool, default_scheduling, parse_arguments, schema_for, spec_of,
};
pub use crate::toolset::{ToolSnapshot, ToolSource, Toolset, is_valid_tool_name};
/// The cancellation token type of [`ToolCtx::cancellation`].
pub use tokio_util::sync::CancellationToken;
