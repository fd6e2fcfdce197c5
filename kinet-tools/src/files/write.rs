//! `write_file`: create or replace a file atomically.

use std::sync::Arc;

use async_trait::async_trait;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use super::atomic::atomic_write;
use super::tracker::{FileStamp, FileTracker};
use super::{blocking, io_error};

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
#[derive(Debug, Clone)]
pub struct WriteFileTool {
    tracker: Arc<FileTracker>,
}

impl WriteFileTool {
    /// A tool recording writes in `tracker`.
    pub fn new(tracker: Arc<FileTracker>) -> Self {
        Self { tracker }
    }
}

const DESCRIPTION: &str = "\
Writes a file to the local filesystem, replacing it if it exists and creating \
parent directories as needed.
- Give the complete content: the file is replaced whole, atomically.
- To change part of an existing file, prefer edit_file, which sends only the change.
- If the file exists and you have read it, it must not have changed on disk since; \
read it again if told so.";

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

    async fn confirm_summary(&self, args: &WriteFileArgs, ctx: &ToolCtx) -> Option<String> {
        let path = ctx.resolve_path(&args.path).ok()?;
        let shown = path.display().to_string();
        let content = args.content.clone();
        tokio::task::spawn_blocking(move || match std::fs::read(&path) {
            Ok(old) => {
                let old = String::from_utf8_lossy(&old);
                format!(
                    "overwrite {shown}\n{}",
                    diff_summary(&shown, &old, &content, 400)
                )
            }
            Err(_) => format!(
                "create {shown} ({} lines, {} bytes)\n{}",
                content.lines().count(),
                content.len(),
                diff_summary(&shown, "", &content, 400)
            ),
        })
        .await
        .ok()
    }

    async fn call(&self, args: WriteFileArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let path = ctx.resolve_path(&args.path)?;
        let tracker = Arc::clone(&self.tracker);
        blocking(move || {
            let shown = path.display().to_string();
            let existing = std::fs::metadata(&path).ok();
            if let Some(metadata) = &existing {
                if metadata.is_dir() {
                    return Err(ToolError::invalid_arguments(format!(
                        "`{shown}` is a directory; give a file path"
                    )));
                }
                if tracker.was_read(&path) {
                    tracker.check_fresh(&path, FileStamp::of(metadata))?;
                }
            }
            atomic_write(&path, args.content.as_bytes())
                .map_err(|e| io_error(&path, "write", e))?;
            let metadata = std::fs::metadata(&path).map_err(|e| io_error(&path, "write", e))?;
            tracker.record(&path, FileStamp::of(&metadata));
            let verb = if existing.is_some() {
                "Overwrote"
            } else {
                "Created"
            };
            Ok(ToolOutput::text(format!(
                "{verb} `{shown}` ({} lines, {} bytes).",
                args.content.lines().count(),
                args.content.len()
            )))
        })
        .await
    }
}
