//! Model-supplied paths inside the workspace roots.
//!
//! A path is first placed lexically: joined to the cwd, `.` and `..`
//! removed, and matched to the root it lies under, which leaves a relative
//! path of plain names. Every open then goes through the kernel from a
//! handle on that root: on Linux `openat2` with `RESOLVE_BENEATH` and
//! `RESOLVE_NO_MAGICLINKS`, so a symlink anywhere on the way (a chain of
//! any length, one swapped in during the call, an absolute one, a `/proc`
//! magic link) cannot lead outside the root: the kernel refuses the open.
//! Elsewhere (other systems, or a kernel older than 5.6) the path's
//! symlinks are resolved and checked in user space before each use, which
//! a concurrent swap can race; [`confinement`] says which is in force.

use std::fs::{File, Metadata};
use std::io;
use std::path::{Component, Path, PathBuf};

use super::dir::WorkspaceDir;
use super::paths::{Escape, escape, normalize, stopped};
use super::protected::{Protected, protected_in};
use crate::data::output::{ToolError, ToolErrorKind};

/// How workspace paths are confined on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Confinement {
    /// The kernel refuses escapes at open time (`openat2` beneath the root).
    Kernel,
    /// Symlinks are resolved and checked before each use; a concurrent
    /// swap between the check and the use is not prevented.
    Checked,
}

/// Which confinement workspace paths get on this machine.
pub fn confinement() -> Confinement {
    #[cfg(target_os = "linux")]
    if super::beneath::available() {
        return Confinement::Kernel;
    }
    Confinement::Checked
}

/// A model-supplied path placed inside one of the workspace roots (or
/// anywhere, when the context has no roots). Its methods are the only way
/// tools should touch it: each open is confined (see [`confinement`]).
/// They block: call them from `spawn_blocking`.
#[derive(Debug, Clone)]
pub struct WorkspacePath {
    shown: PathBuf,
    /// The given text, for messages.
    given: String,
    /// The root it lies under and the plain-name path below it; `None`
    /// without roots.
    beneath: Option<(PathBuf, PathBuf)>,
    /// The root, opened once and shared by the paths joined to this one.
    root_dir: RootCell,
    /// Directory names not to write beneath.
    protected: std::sync::Arc<[String]>,
}

/// The names protected by default ([`PROTECTED`](super::protected::PROTECTED)).
pub(crate) fn default_protected() -> std::sync::Arc<[String]> {
    super::protected::PROTECTED
        .iter()
        .map(|name| (*name).to_owned())
        .collect()
}

#[cfg(target_os = "linux")]
type RootCell = std::sync::Arc<std::sync::OnceLock<std::os::fd::OwnedFd>>;
#[cfg(not(target_os = "linux"))]
type RootCell = std::sync::Arc<()>;

/// Places `path` (relative to `cwd`) under one of `roots`.
pub(crate) fn place(cwd: &Path, roots: &[PathBuf], path: &str) -> Result<WorkspacePath, ToolError> {
    if path.is_empty() {
        return Err(ToolError::invalid_arguments("the path is empty"));
    }
    if path.contains('\0') {
        return Err(ToolError::invalid_arguments(format!(
            "the path `{}` contains a NUL byte",
            path.escape_debug()
        )));
    }
    // A relative cwd (or root) is taken from the process's directory, so a
    // root can never normalize to the empty path that prefixes everything.
    let absolute;
    let cwd = if cwd.is_absolute() {
        cwd
    } else {
        absolute = std::env::current_dir()
            .map(|dir| dir.join(cwd))
            .map_err(|e| ToolError::failed(format!("the working directory is unknown: {e}")))?;
        absolute.as_path()
    };
    let shown = normalize(&cwd.join(path));
    if roots.is_empty() {
        return Ok(WorkspacePath {
            shown,
            given: path.to_owned(),
            beneath: None,
            root_dir: Default::default(),
            protected: default_protected(),
        });
    }
    let beneath = root_of(cwd, roots, &shown)
        .or_else(|| {
            // The path may name a root through a symlinked ancestor (a cwd
            // given as `/var/tmp/x` where `/var/tmp` is a link): place its
            // real location instead. The open is confined all the same.
            let real = canonical_prefix(&shown)?;
            root_of(cwd, roots, &real)
        })
        .ok_or_else(|| outside(path, &shown, cwd, roots))?;
    Ok(WorkspacePath {
        shown,
        given: path.to_owned(),
        beneath: Some(beneath),
        root_dir: Default::default(),
        protected: default_protected(),
    })
}

/// The most specific root `abs` lies under, with the rest of the path.
fn root_of(cwd: &Path, roots: &[PathBuf], abs: &Path) -> Option<(PathBuf, PathBuf)> {
    roots
        .iter()
        .flat_map(|root| {
            let given = normalize(&cwd.join(root));
            let real = std::fs::canonicalize(&given).ok();
            [Some(given), real].into_iter().flatten()
        })
        .filter_map(|root| {
            let rel = abs.strip_prefix(&root).ok()?.to_path_buf();
            Some((root, rel))
        })
        .max_by_key(|(root, _)| root.components().count())
}

/// `path` with its longest existing ancestor canonicalized.
fn canonical_prefix(path: &Path) -> Option<PathBuf> {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return Some(
                rest.iter()
                    .rev()
                    .fold(real, |acc: PathBuf, name| acc.join(name)),
            );
        }
        rest.push(existing.file_name()?.to_owned());
        existing = existing.parent()?;
    }
}

fn outside(path: &str, shown: &Path, cwd: &Path, roots: &[PathBuf]) -> ToolError {
    let list = roots
        .iter()
        .map(|r| format!("`{}`", normalize(&cwd.join(r)).display()))
        .collect::<Vec<_>>()
        .join(", ");
    ToolError::permission_denied(format!(
        "the path `{path}` resolves to `{}`, which is outside the workspace root{} {list}",
        shown.display(),
        if roots.len() == 1 { "" } else { "s" },
    ))
}

impl WorkspacePath {
    /// The absolute path, with `.` and `..` removed: for messages, and for
    /// handing to a program that takes a path.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// A path below this one (a directory walk's entry): `rel` must be
    /// relative and made of plain names.
    pub fn join(&self, rel: &Path) -> Result<WorkspacePath, ToolError> {
        if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(ToolError::invalid_arguments(format!(
                "`{}` is not a plain relative path",
                rel.display()
            )));
        }
        Ok(WorkspacePath {
            shown: self.shown.join(rel),
            given: Path::new(&self.given).join(rel).display().to_string(),
            beneath: self
                .beneath
                .as_ref()
                .map(|(root, below)| (root.clone(), below.join(rel))),
            root_dir: std::sync::Arc::clone(&self.root_dir),
            protected: std::sync::Arc::clone(&self.protected),
        })
    }

    /// The same path with these protected names (see
    /// [`ToolCtx::with_protected_names`](crate::ToolCtx::with_protected_names)).
    pub(crate) fn with_protected(mut self, protected: std::sync::Arc<[String]>) -> Self {
        self.protected = protected;
        self
    }

    /// The workspace root the path lies under, when the context has roots.
    pub fn root(&self) -> Option<&Path> {
        self.beneath.as_ref().map(|(root, _)| root.as_path())
    }

    /// Turns an I/O error from one of the methods into a tool error naming
    /// the path (and the root, for an escape); `action` is a verb ("read").
    pub fn error(&self, action: &str, error: io::Error) -> ToolError {
        let shown = self.shown.display();
        if let Some(protected) = error.get_ref().and_then(|e| e.downcast_ref::<Protected>()) {
            return ToolError::permission_denied(format!(
                "cannot {action} `{}`: {protected}",
                self.given
            ));
        }
        if let Some(escape) = error.get_ref().and_then(|e| e.downcast_ref::<Escape>()) {
            let kind = if escape.looped {
                ToolErrorKind::InvalidArguments
            } else {
                ToolErrorKind::PermissionDenied
            };
            return ToolError::new(kind, format!("cannot {action} `{}`: {escape}", self.given));
        }
        match error.kind() {
            io::ErrorKind::NotFound => ToolError::not_found(format!("`{shown}` does not exist")),
            io::ErrorKind::PermissionDenied => {
                ToolError::permission_denied(format!("permission denied to {action} `{shown}`"))
            }
            io::ErrorKind::Interrupted => ToolError::cancelled(format!("`{shown}`: {error}")),
            _ => {
                ToolError::failed(format!("cannot {action} `{shown}`: {error}")).with_source(error)
            }
        }
    }

    /// Opens the file for reading without blocking on a FIFO or device
    /// (check the type with `File::metadata` before reading).
    pub fn open_read(&self) -> io::Result<File> {
        #[cfg(target_os = "linux")]
        if let Some(root) = self.kernel() {
            return super::beneath::open_read(&root?);
        }
        super::checked::open_read(&self.checked()?)
    }

    /// The metadata of what the path names, following symlinks (inside
    /// the root).
    pub fn metadata(&self) -> io::Result<Metadata> {
        #[cfg(target_os = "linux")]
        if let Some(root) = self.kernel() {
            return super::beneath::metadata(&root?);
        }
        std::fs::metadata(self.checked()?)
    }

    /// Opens the path as a directory (to list it, or to run a program in
    /// it with `fchdir`).
    pub fn open_dir(&self) -> io::Result<File> {
        #[cfg(target_os = "linux")]
        if let Some(root) = self.kernel() {
            return super::beneath::open_dir(&root?);
        }
        let path = self.checked()?;
        if !std::fs::metadata(&path)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            ));
        }
        File::open(path)
    }

    /// Opens the path as a directory to walk: its entries are listed from
    /// the handle and opened by name from it (see [`WorkspaceDir`]), so a
    /// directory swapped for a symlink mid-walk leads nowhere outside.
    pub fn open_walk(&self) -> io::Result<WorkspaceDir> {
        #[cfg(target_os = "linux")]
        {
            self.open_dir().map(WorkspaceDir::from_file)
        }
        #[cfg(not(target_os = "linux"))]
        {
            self.open_dir()?;
            Ok(WorkspaceDir::from_path(self.checked()?))
        }
    }

    /// The directory this path is in, while that is still inside its
    /// workspace root (without roots: up to `/`); `None` at the root.
    pub fn parent(&self) -> Option<WorkspacePath> {
        let shown = self.shown.parent()?.to_path_buf();
        let beneath = match &self.beneath {
            Some((root, rel)) => {
                if rel.as_os_str().is_empty() {
                    return None;
                }
                Some((root.clone(), rel.parent()?.to_path_buf()))
            }
            None => None,
        };
        Some(WorkspacePath {
            given: shown.display().to_string(),
            shown,
            beneath,
            root_dir: std::sync::Arc::clone(&self.root_dir),
            protected: std::sync::Arc::clone(&self.protected),
        })
    }

    /// Replaces the file with `bytes` atomically: a temporary file in the
    /// same directory, flushed, then renamed over the target (through a
    /// symlink to its target, when that is inside the root). Missing parent
    /// directories are created; an existing file keeps its permissions, a
    /// new one gets `rw-r--r--`. `stop` is asked just before the rename:
    /// when it says stop, nothing is replaced and the temporary file is
    /// removed (a call cancelled or out of time has no later effect).
    pub fn write_atomic(&self, bytes: &[u8], stop: &dyn Fn() -> bool) -> io::Result<()> {
        use std::io::Write;
        let mut pending = self.begin_write()?;
        pending.file().write_all(bytes)?;
        pending.commit_unless(true, stop)
    }

    /// Starts an atomic write to stream content into (see
    /// [`PendingWrite`]); parent directories are created.
    pub fn begin_write(&self) -> io::Result<PendingWrite> {
        if let Some((_, rel)) = &self.beneath {
            protected_in(rel, &self.protected)?;
        }
        #[cfg(target_os = "linux")]
        if let Some(root) = self.kernel() {
            let (pending, file) = super::beneath::begin_write(&root?, &self.protected)?;
            return Ok(PendingWrite {
                file,
                target: Pending::Beneath(pending),
                done: false,
            });
        }
        let resolved = self.checked()?;
        if let Some((root, _)) = &self.beneath
            && let Some(real_root) = super::checked::resolve_symlinks(root)
            && let Ok(rel) = resolved.strip_prefix(&real_root)
        {
            protected_in(rel, &self.protected)?;
        }
        let (pending, file) = super::checked::begin_write(&resolved)?;
        Ok(PendingWrite {
            file,
            target: Pending::Checked(pending),
            done: false,
        })
    }

    /// The root (opened) and the relative path, when the kernel confines
    /// opens here.
    #[cfg(target_os = "linux")]
    fn kernel(&self) -> Option<io::Result<super::beneath::Root<'_>>> {
        use super::beneath;
        let (root, rel) = self.beneath.as_ref()?;
        if !beneath::available() {
            return None;
        }
        let dir = match self.root_dir.get() {
            Some(dir) => dir,
            None => match beneath::open_root(root) {
                Ok(dir) => {
                    let _ = self.root_dir.set(dir);
                    self.root_dir.get()?
                }
                Err(error) => return Some(Err(error)),
            },
        };
        Some(Ok(beneath::Root {
            dir,
            path: root,
            rel,
        }))
    }

    /// The path to use with `std::fs` where the kernel does not confine:
    /// its symlinks resolved and checked to stay inside the root.
    fn checked(&self) -> io::Result<PathBuf> {
        let Some((root, _)) = &self.beneath else {
            return Ok(self.shown.clone());
        };
        use super::checked::resolve_symlinks;
        let resolved = resolve_symlinks(&self.shown).ok_or_else(|| escape(root, true))?;
        let real_root = resolve_symlinks(root).ok_or_else(|| escape(root, true))?;
        if resolved.starts_with(&real_root) {
            Ok(resolved)
        } else {
            Err(escape(root, false))
        }
    }
}

/// A replacement file being written: a temporary file next to the target
/// (in the directory opened beneath the root), renamed over the target by
/// [`commit`](Self::commit). Dropped without a commit, it removes the
/// temporary file and changes nothing.
pub struct PendingWrite {
    file: File,
    target: Pending,
    done: bool,
}

enum Pending {
    #[cfg(target_os = "linux")]
    Beneath(super::beneath::Pending),
    Checked(super::checked::Pending),
}

impl std::fmt::Debug for PendingWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingWrite")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl PendingWrite {
    /// The temporary file, to write the new content into.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// The file the commit replaces: the path with its symlinks resolved,
    /// checked to be inside the root. A writer outside this process (an
    /// editor, say) that is handed this path writes where kinet checked.
    pub fn target(&self) -> io::Result<PathBuf> {
        match &self.target {
            #[cfg(target_os = "linux")]
            Pending::Beneath(pending) => pending.target(),
            Pending::Checked(pending) => pending.target(),
        }
    }

    /// Flushes the file to disk, gives it the target's permissions (a new
    /// file gets `rw-r--r--`) and renames it over the target. With
    /// `replace` false an existing target is kept and the commit fails
    /// with `AlreadyExists`.
    pub fn commit(self, replace: bool) -> io::Result<()> {
        self.commit_unless(replace, &|| false)
    }

    /// [`commit`](Self::commit), unless `stop` says stop once the file is
    /// on disk, just before the rename (a call cancelled or out of time
    /// then changes nothing).
    pub fn commit_unless(mut self, replace: bool, stop: &dyn Fn() -> bool) -> io::Result<()> {
        self.file.sync_all()?;
        if stop() {
            return Err(stopped());
        }
        let result = match &self.target {
            #[cfg(target_os = "linux")]
            Pending::Beneath(pending) => pending.commit(&self.file, replace),
            Pending::Checked(pending) => pending.commit(&self.file, replace),
        };
        self.done = result.is_ok();
        result
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if !self.done {
            match &self.target {
                #[cfg(target_os = "linux")]
                Pending::Beneath(pending) => pending.discard(),
                Pending::Checked(pending) => pending.discard(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = std::fs::canonicalize(dir.path()).unwrap();
        (dir, path)
    }

    fn at(root: &Path, path: &str) -> Result<WorkspacePath, ToolError> {
        place(root, std::slice::from_ref(&root.to_path_buf()), path)
    }

    #[test]
    fn relative_and_new_paths_inside_are_fine() {
        let (_guard, root) = tempdir();
        let got = at(&root, "a/b/../c.txt").unwrap();
        assert_eq!(got.path(), root.join("a/c.txt"));
        got.write_atomic(b"x", &|| false).unwrap();
        assert_eq!(std::fs::read(root.join("a/c.txt")).unwrap(), b"x");
    }

    #[test]
    fn dotdot_escape_is_refused_and_names_the_root() {
        let (_guard, root) = tempdir();
        let err = at(&root, "../../etc/passwd").unwrap_err();
        assert_eq!(err.kind(), ToolErrorKind::PermissionDenied);
        assert!(
            err.message().contains(&root.display().to_string()),
            "{}",
            err.message()
        );
    }

    #[cfg(unix)]
    #[test]
    fn symlink_escape_is_refused_at_open() {
        let (_guard, root) = tempdir();
        let (_guard2, outside) = tempdir();
        std::fs::write(outside.join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let path = at(&root, "link/secret.txt").unwrap();
        let err = path.open_read().unwrap_err();
        let err = path.error("read", err);
        assert_eq!(err.kind(), ToolErrorKind::PermissionDenied);
        assert!(
            err.message().contains("outside the workspace root"),
            "{}",
            err.message()
        );
        assert!(path.write_atomic(b"x", &|| false).is_err());
        assert!(!outside.join("x").exists());
        // Without roots there is no confinement.
        let free = place(&root, &[], "link/secret.txt").unwrap();
        assert!(free.open_read().is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn dangling_symlink_writes_stay_inside() {
        let (_guard, root) = tempdir();
        let (_guard2, outside) = tempdir();
        std::os::unix::fs::symlink(outside.join("not-yet.txt"), root.join("notes.md")).unwrap();
        let path = at(&root, "notes.md").unwrap();
        assert!(path.write_atomic(b"x", &|| false).is_err());
        assert!(!outside.join("not-yet.txt").exists());
        // A link that stays inside writes its target.
        std::os::unix::fs::symlink("real.txt", root.join("alias.txt")).unwrap();
        at(&root, "alias.txt")
            .unwrap()
            .write_atomic(b"y", &|| false)
            .unwrap();
        assert_eq!(std::fs::read(root.join("real.txt")).unwrap(), b"y");
        assert!(
            std::fs::symlink_metadata(root.join("alias.txt"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_final_link_is_followed_from_its_real_directory() {
        // d -> sub/deep, and sub/deep/f -> ../x: the kernel reads d/f as
        // sub/x, not as x.
        let (_guard, root) = tempdir();
        std::fs::create_dir_all(root.join("sub/deep")).unwrap();
        std::os::unix::fs::symlink("sub/deep", root.join("d")).unwrap();
        std::os::unix::fs::symlink("../x", root.join("sub/deep/f")).unwrap();
        at(&root, "d/f")
            .unwrap()
            .write_atomic(b"y", &|| false)
            .unwrap();
        assert_eq!(std::fs::read(root.join("sub/x")).unwrap(), b"y");
        assert!(!root.join("x").exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_chain_of_41_links_cannot_leave() {
        let (_guard, root) = tempdir();
        let (_guard2, outside) = tempdir();
        std::fs::write(outside.join("secret.txt"), "secret").unwrap();
        // d40 -> outside, d39 -> d40, ..., d0 -> d1.
        std::os::unix::fs::symlink(&outside, root.join("d40")).unwrap();
        for i in (0..40).rev() {
            std::os::unix::fs::symlink(format!("d{}", i + 1), root.join(format!("d{i}"))).unwrap();
        }
        let path = at(&root, "d0/secret.txt").unwrap();
        assert!(path.open_read().is_err());
        assert!(
            at(&root, "d0/pwned.txt")
                .unwrap()
                .write_atomic(b"x", &|| false)
                .is_err()
        );
        assert!(!outside.join("pwned.txt").exists());
    }

    #[test]
    fn a_stopped_write_leaves_nothing() {
        let (_guard, root) = tempdir();
        let path = at(&root, "late.txt").unwrap();
        let err = path.write_atomic(b"x", &|| true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Interrupted);
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
    }

    #[cfg(unix)]
    #[test]
    fn permissions_are_kept_and_new_files_are_rw_r_r() {
        use std::os::unix::fs::PermissionsExt;
        let (_guard, root) = tempdir();
        std::fs::write(root.join("run.sh"), "echo old\n").unwrap();
        std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        at(&root, "run.sh")
            .unwrap()
            .write_atomic(b"echo new\n", &|| false)
            .unwrap();
        let mode = |p: &str| {
            std::fs::metadata(root.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("run.sh"), 0o750);
        at(&root, "a/b/c.txt")
            .unwrap()
            .write_atomic(b"x", &|| false)
            .unwrap();
        assert_eq!(mode("a/b/c.txt"), 0o644);
    }

    #[test]
    fn a_pending_write_replaces_only_on_commit() {
        use std::io::Write;
        let (_guard, root) = tempdir();
        std::fs::write(root.join("taken.txt"), "old").unwrap();
        let place = at(&root, "taken.txt").unwrap();
        // Dropped: nothing changes, no temporary file is left.
        let mut pending = place.begin_write().unwrap();
        pending.file().write_all(b"new").unwrap();
        drop(pending);
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1);
        // Without replace, an existing target stays.
        let mut pending = place.begin_write().unwrap();
        pending.file().write_all(b"new").unwrap();
        let err = pending.commit(false).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(
            std::fs::read_to_string(root.join("taken.txt")).unwrap(),
            "old"
        );
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1);
        // A new name is created either way.
        let mut pending = at(&root, "fresh.txt").unwrap().begin_write().unwrap();
        pending.file().write_all(b"fresh").unwrap();
        pending.commit(false).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("fresh.txt")).unwrap(),
            "fresh"
        );
    }

    #[test]
    fn relative_roots_are_taken_from_the_cwd() {
        let (_guard, base) = tempdir();
        std::fs::create_dir(base.join("ws")).unwrap();
        let roots = [PathBuf::from("ws")];
        assert!(place(&base, &roots, "ws/a.txt").is_ok());
        assert!(place(&base, &roots, "other.txt").is_err());
    }

    #[test]
    fn empty_and_nul_paths_are_invalid() {
        let (_guard, root) = tempdir();
        assert!(place(&root, &[], "").is_err());
        assert!(place(&root, &[], "a\0b").is_err());
    }
}
