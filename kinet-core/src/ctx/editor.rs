//! Files as an editor holds them: its open buffers, unsaved changes
//! included. An agent that runs inside an editor (over ACP, say) gets an
//! [`EditorFiles`] as a [`ToolCtx`](super::ToolCtx) extension
//! ([`Editor`]); `read_file` then reads a file's text through it, after
//! its own confinement checks (the path is opened beneath the workspace
//! root first; only a regular file inside is asked of the editor).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

/// The editor's side: read a file's current text.
#[async_trait]
pub trait EditorFiles: Send + Sync {
    /// The text of the file at `path` (absolute), as the editor has it;
    /// an error says why not (the tool then reads the disk).
    async fn read_text(&self, path: &Path) -> Result<String, String>;
}

/// The [`ToolCtx`](super::ToolCtx) extension that carries the editor's
/// files (`AgentBuilder::extension(Editor(...))`, or
/// `Agent::with_extension`).
#[derive(Clone)]
pub struct Editor(pub Arc<dyn EditorFiles>);
