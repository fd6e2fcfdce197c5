//! `write_file`: create or replace a file atomically.

use std::sync::Arc;

use async_trait::async_trait;
use kinet_core::tool::workspace::WorkspacePath;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use super::tracker::{EditorCopy, FileStamp, FileTracker};
use super::{
    Existing, SUMMARY_READ_CAP, blocking, editor, editor_copy, existing, put_result, read_only,
    stop_check, writes_to,
};

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteFileArgs {
    /// The file to write: absolute, or relative to the working directory.
    pub path: String,
    /// The complete new content of the file.
    pub content: String,
}

/// Creates or replaces a file atomically (temporary file + rename), keeping
/// the permissions of a replaced file and creating parent directories. The
/// confirmation shows a diff against the current content.
///
/// Refused: directories, FIFOs, sockets and devices (never opened for
/// reading, so a FIFO cannot hang the call), files whose mode forbids
/// writing, and, by default, an existing file the agent has not read in
/// this session ([`overwrite_unread`](Self::overwrite_unread) allows it).
/// A call cancelled or out of time before the rename changes nothing.
///
/// Inside an editor that takes writes ([`Editor`](kinet_core::editor::Editor)),
/// the new content goes to the editor (its buffer; the editor saves it)
/// after the same checks on disk, and a file read through the editor must
/// still hold the text the agent read there.
#[derive(Debug, Clone)]
pub struct WriteFileTool {
    tracker: Arc<FileTracker>,
    overwrite_unread: bool,
}

impl WriteFileTool {
    /// A tool recording writes in `tracker`.
    pub fn new(tracker: Arc<FileTracker>) -> Self {
        Self {
            tracker,
            overwrite_unread: false,
        }
    }

    /// Lets the model replace an existing file it has not read (default:
    /// refused, so a file is never replaced blind).
    pub fn overwrite_unread(mut self, allow: bool) -> Self {
        self.overwrite_unread = allow;
        self
    }
}

const DESCRIPTION: &str = "\
Writes a file to the local filesystem, replacing it if it exists and creating \
parent directories as needed.
- Give the complete content: the file is replaced whole, atomically.
- To change part of an existing file, prefer edit_file, which sends only the change.
- To replace an existing file, read it with read_file first; it must not have changed \
on disk since.";

/// A unified diff of `old` → `new`, at most `max_lines` lines.
pub(crate) fn diff_summary(path: &str, old: &str, new: &str, max_lines: usize) -> String {
    const MAX_DIFF_BYTES: usize = 4 * 1024 * 1024;
    if old.len() + new.len() > MAX_DIFF_BYTES {
        return format!(
            "(the file is too large for a diff: {} bytes now, {} bytes after)\n",
            old.len(),
            new.len()
        );
    }
    let diff = similar::TextDiff::configure()
        .timeout(std::time::Duration::from_millis(500))
        .diff_lines(old, new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(path, path)
        .to_string();
    let total = text.lines().count();
    if total <= max_lines {
        return text;
    }
    let mut kept: String = text
        .lines()
        .take(max_lines)
        .flat_map(|l| [l, "\n"])
        .collect();
    kept.push_str(&format!("… ({} more diff lines)\n", total - max_lines));
    kept
}

#[async_trait]
impl Tool for WriteFileTool {
    type Args = WriteFileArgs;

    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn annotations(&self) -> kinet_core::ToolAnnotations {
        // Writes a file in the workspace, nothing outside the machine; the
        // same content twice leaves the same file.
        kinet_core::ToolAnnotations::default()
            .idempotent(true)
            .open_world(false)
    }

    async fn confirm_summary(&self, args: &WriteFileArgs, ctx: &ToolCtx) -> Option<String> {
        let place = ctx.workspace_path(&args.path).ok()?;
        let content = args.content.clone();
        let in_editor = editor_copy(editor(ctx).as_ref(), &place).await;
        tokio::task::spawn_blocking(move || {
            let shown = place.path().display().to_string();
            match existing(&place, SUMMARY_READ_CAP) {
                Ok(Existing::File { bytes, .. }) => {
                    let old = match &in_editor {
                        Some(text) => std::borrow::Cow::Borrowed(text.as_str()),
                        None => String::from_utf8_lossy(&bytes),
                    };
                    format!(
                        "overwrite {shown}\n{}",
                        diff_summary(&shown, &old, &content, 400)
                    )
                }
                Ok(Existing::TooLarge(metadata)) => format!(
                    "overwrite {shown} ({} bytes now, {} bytes after; too large for a diff)",
                    metadata.len(),
                    content.len()
                ),
                Ok(Existing::NotRegular(what)) => {
                    format!("write {shown}: it is {what}, so the call will be refused")
                }
                Ok(Existing::Missing) | Err(_) => format!(
                    "create {shown} ({} lines, {} bytes)\n{}",
                    content.lines().count(),
                    content.len(),
                    diff_summary(&shown, "", &content, 400)
                ),
            }
        })
        .await
        .ok()
    }

    async fn call(&self, args: WriteFileArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let place = ctx.workspace_path(&args.path)?;
        let tracker = Arc::clone(&self.tracker);
        let overwrite_unread = self.overwrite_unread;
        let stop = stop_check(ctx);
        let editor = editor(ctx);
        let to_editor = writes_to(editor.as_ref());
        let path = place.path().to_path_buf();
        let shown = path.display().to_string();
        // The checks on disk come first, editor or not.
        let before = {
            let place = place.clone();
            blocking(move || before_write(&place)).await?
        };
        if let Some(metadata) = &before {
            let stamp = FileStamp::of(metadata);
            if tracker.was_read(&path) {
                match editor_copy(editor.as_ref(), &place).await {
                    Some(text) => {
                        let copy = EditorCopy {
                            text: &text,
                            disk: None,
                            to_disk: !to_editor,
                        };
                        tracker.check_fresh_text(&path, stamp, copy)?;
                    }
                    None => tracker.check_fresh(&path, stamp)?,
                }
            } else if !overwrite_unread {
                return Err(ToolError::invalid_arguments(format!(
                    "`{shown}` already exists and you have not read it; read it with read_file \
                     first (or use edit_file to change part of it)"
                )));
            }
        }
        let content = args.content;
        let content = put_result(editor.as_ref(), place, tracker, content, stop, "write").await?;
        let verb = if before.is_some() {
            "Overwrote"
        } else {
            "Created"
        };
        Ok(ToolOutput::text(format!(
            "{verb} `{shown}` ({} lines, {} bytes).",
            content.lines().count(),
            content.len()
        )))
    }
}

/// What `write_file` replaces: nothing, or a regular file whose mode
/// allows writing (its metadata).
fn before_write(place: &WorkspacePath) -> Result<Option<std::fs::Metadata>, ToolError> {
    let shown = place.path().display();
    let metadata = match existing(place, 0).map_err(|e| place.error("write", e))? {
        Existing::Missing => return Ok(None),
        Existing::NotRegular(what) => {
            return Err(ToolError::invalid_arguments(format!(
                "`{shown}` is {what}; write_file only writes regular files"
            )));
        }
        Existing::File { metadata, .. } | Existing::TooLarge(metadata) => metadata,
    };
    if read_only(&metadata) {
        return Err(ToolError::permission_denied(format!(
            "`{shown}` is read-only; it was not changed"
        )));
    }
    Ok(Some(metadata))
}
