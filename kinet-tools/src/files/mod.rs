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

use kinet_core::ToolError;
use kinet_core::tool::WorkspacePath;

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
