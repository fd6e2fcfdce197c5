//! Path helpers shared by the workspace confinement's two ways of opening.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Removes `.` and `..` lexically (`..` at the root stays at the root).
pub(super) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The error an escape attempt gets, recognised by [`WorkspacePath::error`].
#[derive(Debug)]
pub(super) struct Escape {
    pub(super) root: PathBuf,
    pub(super) looped: bool,
}

impl std::fmt::Display for Escape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.looped {
            write!(
                f,
                "it goes through too many symlinks, a symlink loop or a /proc magic link inside the workspace root `{}`",
                self.root.display()
            )
        } else {
            write!(
                f,
                "a symlink on the way leads outside the workspace root `{}`",
                self.root.display()
            )
        }
    }
}

impl std::error::Error for Escape {}

pub(super) fn escape(root: &Path, looped: bool) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        Escape {
            root: root.to_path_buf(),
            looped,
        },
    )
}

/// Whether `error` is an escape refused by the confinement.
pub(crate) fn is_escape(error: &io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|e| e.downcast_ref::<Escape>().is_some())
}

/// What `write_atomic` was asked to stop by.
pub(super) fn stopped() -> io::Error {
    io::Error::new(
        io::ErrorKind::Interrupted,
        "the write was stopped before the file was replaced",
    )
}

/// A fresh hidden temporary name next to `name`.
pub(super) fn temp_name(name: &std::ffi::OsStr) -> std::ffi::OsString {
    let mut temp = std::ffi::OsString::from(".");
    temp.push(name);
    temp.push(format!(
        ".kinet-{:06}.tmp",
        (crate::random::unit() * 1_000_000.0) as u64 ^ u64::from(std::process::id() % 1000)
    ));
    temp
}

/// The most symlinks followed while resolving one path (as Linux's ELOOP).
pub(super) const MAX_SYMLINK_HOPS: usize = 40;
