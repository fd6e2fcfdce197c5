//! Model-supplied paths confined to the workspace roots by the kernel:
//! every open goes through a handle on the root (`openat2` with
//! `RESOLVE_BENEATH` on Linux), so no symlink leads outside. Tools reach
//! it through [`WorkspacePath`] ([`ToolCtx::workspace_path`](crate::ToolCtx::workspace_path));
//! the command planner expands globs through [`WorkspaceDir`].

#[cfg(target_os = "linux")]
pub(crate) mod beneath;
mod checked;
mod dir;
pub(crate) mod paths;
pub(crate) mod protected;
pub(crate) mod workspace;

pub use dir::{DirEntry, EntryKind, EntryMetadata, WorkspaceDir};
pub(crate) use protected::PROTECTED;
pub(crate) use workspace::place;
pub use workspace::{Confinement, PendingWrite, WorkspacePath, confinement};

/// The temp directories everyone may write: the process's temp directory
/// (`$TMPDIR`), `/tmp`, `/var/tmp`, `/dev/shm`. A sandbox allows writes
/// there; a program found there is never a system program.
pub(crate) fn temp_dirs() -> Vec<std::path::PathBuf> {
    let mut dirs = vec![std::env::temp_dir()];
    dirs.extend(["/tmp", "/var/tmp", "/dev/shm"].map(std::path::PathBuf::from));
    dirs
}

/// The path of an opened file or directory, its symlinks resolved, as the
/// kernel knows it (`/proc/self/fd`): for handing a checked file to
/// another process (an editor, a launcher's check) by a name that leads to
/// that file. Linux only; elsewhere `Unsupported`.
#[cfg(target_os = "linux")]
pub fn opened_path(file: impl std::os::fd::AsFd) -> std::io::Result<std::path::PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_fd().as_raw_fd()))
}

/// The path of an opened file: not known on this system.
#[cfg(not(target_os = "linux"))]
pub fn opened_path(file: &std::fs::File) -> std::io::Result<std::path::PathBuf> {
    let _ = file;
    Err(std::io::ErrorKind::Unsupported.into())
}
