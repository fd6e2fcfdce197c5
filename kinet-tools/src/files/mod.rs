//! `read_file`, `write_file` and `edit_file`, sharing a [`FileTracker`] so
//! an edit refuses a file that changed on disk since the agent read it.

mod edit;
mod read;
mod tracker;
mod write;

pub use edit::{EditFileArgs, EditFileTool};
pub use read::{ReadFileArgs, ReadFileTool, ReadLimits};
pub use tracker::FileTracker;
pub use write::{WriteFileArgs, WriteFileTool};

use std::fs::Metadata;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use kinet_core::editor::{Editor, EditorFiles};
use kinet_core::tool::workspace::WorkspacePath;
use kinet_core::{ToolCtx, ToolError};

/// Formats lines `cat -n` style: a right-aligned line number, a tab, the
/// line.
pub(crate) fn number_line(out: &mut String, number: usize, line: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "{number:>6}\t{line}");
}

/// Runs blocking file work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::failed(format!("file task failed: {e}")))?
}

/// The largest file the confirmation diff reads: over it the user sees
/// sizes, not a diff.
pub(crate) const SUMMARY_READ_CAP: u64 = 4 * 1024 * 1024;

/// The largest file `edit_file` loads.
pub(crate) const EDIT_READ_CAP: u64 = 64 * 1024 * 1024;

/// What is at a path a tool is about to write.
pub(crate) enum Existing {
    /// Nothing.
    Missing,
    /// A regular file, read whole.
    File { bytes: Vec<u8>, metadata: Metadata },
    /// A regular file over the cap, not read.
    TooLarge(Metadata),
    /// A directory, FIFO, socket or device: never read, never replaced.
    NotRegular(&'static str),
}

/// Looks at what `place` names without ever blocking on it: a FIFO or a
/// device is reported, not opened for reading; a file over `cap` bytes is
/// reported, not loaded.
pub(crate) fn existing(place: &WorkspacePath, cap: u64) -> std::io::Result<Existing> {
    let file = match place.open_read() {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Missing),
        Err(error) => return Err(error),
    };
    let metadata = file.metadata()?;
    if metadata.is_dir() {
        return Ok(Existing::NotRegular("a directory"));
    }
    if !metadata.is_file() {
        return Ok(Existing::NotRegular(
            "not a regular file (a pipe, socket or device)",
        ));
    }
    if metadata.len() > cap {
        return Ok(Existing::TooLarge(metadata));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Ok(Existing::TooLarge(metadata));
    }
    Ok(Existing::File { bytes, metadata })
}

/// Whether the file's permissions forbid writing it (checked by mode, not
/// by trying: a process running as root could write it anyway).
pub(crate) fn read_only(metadata: &Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        metadata.permissions().mode() & 0o222 == 0
    }
    #[cfg(not(unix))]
    {
        metadata.permissions().readonly()
    }
}

/// Asked just before a write replaces a file: the call was cancelled or
/// ran out of time, so the write must have no effect.
pub(crate) fn stop_check(ctx: &kinet_core::ToolCtx) -> impl Fn() -> bool + Send + 'static {
    let cancel = ctx.cancellation().clone();
    let deadline = ctx.deadline().map(tokio::time::Instant::into_std);
    move || cancel.is_cancelled() || deadline.is_some_and(|d| std::time::Instant::now() >= d)
}

/// The editor the agent runs in, if any (see [`Editor`]).
pub(crate) fn editor(ctx: &ToolCtx) -> Option<Arc<dyn EditorFiles>> {
    ctx.extension::<Editor>()
        .map(|editor| Arc::clone(&editor.0))
}

/// Whether results go to the editor rather than the disk: only when it
/// also gives the text, or a base read from disk could undo an edit the
/// editor has not saved yet.
pub(crate) fn writes_to(editor: Option<&Arc<dyn EditorFiles>>) -> bool {
    editor.is_some_and(|editor| editor.reads() && editor.writes())
}

/// The editor's text of the file at `place`, when the editor gives it:
/// asked by the path of the file opened beneath the root (its symlinks
/// resolved), after the checks on disk; `None` sends the tool to the disk.
pub(crate) async fn editor_copy(
    editor: Option<&Arc<dyn EditorFiles>>,
    place: &WorkspacePath,
) -> Option<String> {
    let editor = editor.filter(|editor| editor.reads())?;
    let checked = place.clone();
    let path = tokio::task::spawn_blocking(move || {
        let file = checked.open_read().ok()?;
        file.metadata()
            .ok()?
            .is_file()
            .then(|| kinet_core::sandbox::opened_path(&file).ok())?
    })
    .await
    .ok()
    .flatten()?;
    editor_text(&**editor, &path).await
}

/// The editor's text of `path` (checked, resolved), when it gives it (the
/// callers ask only an editor that [`reads`](EditorFiles::reads)).
pub(crate) async fn editor_text(editor: &dyn EditorFiles, path: &Path) -> Option<String> {
    match editor.read_text(path).await {
        Ok(text) => Some(text),
        Err(why) => {
            tracing::debug!(path = %path.display(), %why, "the editor did not give the file's text; read from disk");
            None
        }
    }
}

/// Hands `text` to the editor as the new content of `place`. The write is
/// prepared beneath the root as a disk write would be (protected names
/// refused, parent directories created, a final symlink followed only
/// inside the root) and the editor is given the path so checked; `stop`
/// is asked just before (a call cancelled before then writes nothing; once
/// sent, the text is the editor's, and parent directories made for it
/// stay). Returns the
/// disk's stamp afterwards (the editor may not have saved yet, or not
/// created a new file).
pub(crate) async fn editor_write(
    editor: &dyn EditorFiles,
    place: &WorkspacePath,
    text: &str,
    stop: &(dyn Fn() -> bool + Send + Sync),
) -> Result<tracker::FileStamp, ToolError> {
    let checked = place.clone();
    let target = blocking(move || {
        let pending = checked
            .begin_write()
            .map_err(|e| checked.error("write", e))?;
        pending.target().map_err(|e| checked.error("write", e))
    })
    .await?;
    if stop() {
        return Err(ToolError::cancelled(format!(
            "`{}` was not written: the call was cancelled or ran out of time",
            place.path().display()
        )));
    }
    editor.write_text(&target, text).await.map_err(|why| {
        ToolError::failed(format!(
            "the editor did not write `{}`: {why}",
            target.display()
        ))
    })?;
    let place = place.clone();
    Ok(tokio::task::spawn_blocking(move || place.metadata().ok())
        .await
        .ok()
        .flatten()
        .map_or(tracker::FileStamp::ABSENT, |metadata| {
            tracker::FileStamp::of(&metadata)
        }))
}

/// Puts a file tool's result where it goes: to the editor when it takes
/// writes ([`writes_to`]), else to the disk, atomically; then records what
/// the agent now knows of the file (the text too, when the editor gives
/// files' text, so the next edit checks the editor's copy against it).
/// `action` names the call in a disk error ("edit", "write"). Returns the
/// text.
pub(crate) async fn put_result(
    editor: Option<&Arc<dyn EditorFiles>>,
    place: WorkspacePath,
    tracker: Arc<tracker::FileTracker>,
    text: String,
    stop: impl Fn() -> bool + Send + Sync + 'static,
    action: &'static str,
) -> Result<String, ToolError> {
    if writes_to(editor)
        && let Some(editor) = editor
    {
        let stamp = editor_write(&**editor, &place, &text, &stop).await?;
        tracker.record_text(place.path(), stamp, &text);
        return Ok(text);
    }
    let seen_in_editor = editor.is_some_and(|editor| editor.reads());
    blocking(move || {
        place
            .write_atomic(text.as_bytes(), &stop)
            .map_err(|e| place.error("write", e))?;
        let metadata = place.metadata().map_err(|e| place.error(action, e))?;
        let stamp = tracker::FileStamp::of(&metadata);
        if seen_in_editor {
            tracker.record_text(place.path(), stamp, &text);
        } else {
            tracker.record(place.path(), stamp);
        }
        Ok(text)
    })
    .await
}
