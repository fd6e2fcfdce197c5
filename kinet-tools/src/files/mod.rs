//! `read_file`, `write_file` and `edit_file`, sharing a [`FileTracker`] so
//! an edit refuses a file that changed on disk since the agent read it.

mod atomic;
mod edit;
mod read;
mod tracker;
mod write;

pub use edit::{EditFileArgs, EditFileTool};
pub use read::{ReadFileArgs, ReadFileTool, ReadLimits};
pub use tracker::FileTracker;
pub use write::{WriteFileArgs, WriteFileTool};

use std::path::Path;

use kinet_core::ToolError;

use kinet_core::tool::ToolErrorKind;

/// Formats lines `cat -n` style: a right-aligned line number, a tab, the
/// line.
pub(crate) fn number_line(out: &mut String, number: usize, line: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "{number:>6}\t{line}");
}

/// Maps an I/O error on `path` to a tool error that names the path.
pub(crate) fn io_error(path: &Path, action: &str, error: std::io::Error) -> ToolError {
    let shown = path.display();
    match error.kind() {
        std::io::ErrorKind::NotFound => ToolError::not_found(format!("`{shown}` does not exist")),
        std::io::ErrorKind::PermissionDenied => ToolError::new(
            ToolErrorKind::PermissionDenied,
            format!("permission denied to {action} `{shown}`"),
        ),
        _ => ToolError::failed(format!("cannot {action} `{shown}`: {error}")).with_source(error),
    }
}

/// Runs blocking file work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::failed(format!("file task failed: {e}")))?
}
