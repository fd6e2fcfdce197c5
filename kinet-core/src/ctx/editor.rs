//! Files as an editor holds them: its open buffers, unsaved changes
//! included. An agent that runs inside an editor (over ACP, say) gets an
//! [`EditorFiles`] as a [`ToolCtx`](super::ToolCtx) extension
//! ([`Editor`]); the file tools then go through it, after their own
//! confinement checks on disk:
//!
//! - `read_file` opens the path beneath the workspace root first (a link
//!   out of it, a FIFO or a device is refused there); only a regular
//!   text file inside is asked of the editor, whose text is what the model
//!   sees.
//! - `edit_file` takes its base text from the editor (the model edits what
//!   it read, unsaved changes included) and, when the editor
//!   [`writes`](EditorFiles::writes), hands it the new text instead of
//!   writing the disk; `write_file` likewise. Before the editor is asked
//!   to write, the write is prepared beneath the root as a disk write
//!   would be (protected names refused, parent directories created) and
//!   the editor gets the path with its symlinks resolved, so it writes
//!   where kinet checked.
//!
//! The editor is a process of its own, outside kinet's kernel
//! confinement: a link swapped in by another process between the check
//! and the editor's write is not caught (kinet's own tools run one
//! mutating call at a time, so none of them can).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

/// The editor's side: read a file's current text, and (where the editor
/// offers it) replace it.
#[async_trait]
pub trait EditorFiles: Send + Sync {
    /// Whether the editor gives files' text. Default: yes.
    fn reads(&self) -> bool {
        true
    }

    /// The text of the file at `path` (absolute), as the editor has it;
    /// an error says why not (the tool then reads the disk).
    async fn read_text(&self, path: &Path) -> Result<String, String>;

    /// Whether the editor takes writes ([`write_text`](Self::write_text)).
    /// Default: no (the tools write the disk).
    fn writes(&self) -> bool {
        false
    }

    /// Replaces the text of the file at `path` (absolute, symlinks
    /// resolved, checked), creating it when missing; the editor saves it
    /// as its own settings say. An error says why not; the call then
    /// fails and nothing is written. Default: refused.
    async fn write_text(&self, path: &Path, text: &str) -> Result<(), String> {
        let _ = (path, text);
        Err("this editor does not take writes".into())
    }
}

/// The [`ToolCtx`](super::ToolCtx) extension that carries the editor's
/// files (`AgentBuilder::extension(Editor(...))`, or
/// `Agent::with_extension`).
#[derive(Clone)]
pub struct Editor(pub Arc<dyn EditorFiles>);
