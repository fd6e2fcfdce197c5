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
    if beneath::available() {
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
    let shown = normalize(&cwd.join(path));
    if roots.is_empty() {
        return Ok(WorkspacePath {
            shown,
            given: path.to_owned(),
            beneath: None,
            root_dir: Default::default(),
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

/// Removes `.` and `..` lexically (`..` at the root stays at the root).
pub(crate) fn normalize(path: &Path) -> PathBuf {
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
struct Escape {
    root: PathBuf,
    looped: bool,
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

fn escape(root: &Path, looped: bool) -> io::Error {
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
pub(crate) fn stopped() -> io::Error {
    io::Error::new(
        io::ErrorKind::Interrupted,
        "the write was stopped before the file was replaced",
    )
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
        })
    }

    /// The workspace root the path lies under, when the context has roots.
    pub fn root(&self) -> Option<&Path> {
        self.beneath.as_ref().map(|(root, _)| root.as_path())
    }

    /// Turns an I/O error from one of the methods into a tool error naming
    /// the path (and the root, for an escape); `action` is a verb ("read").
    pub fn error(&self, action: &str, error: io::Error) -> ToolError {
        let shown = self.shown.display();
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
            return beneath::open_read(&root?);
        }
        open_read_std(&self.checked()?)
    }

    /// The metadata of what the path names, following symlinks (inside
    /// the root).
    pub fn metadata(&self) -> io::Result<Metadata> {
        #[cfg(target_os = "linux")]
        if let Some(root) = self.kernel() {
            return beneath::metadata(&root?);
        }
        std::fs::metadata(self.checked()?)
    }

    /// Opens the path as a directory (to list it, or to run a program in
    /// it with `fchdir`).
    pub fn open_dir(&self) -> io::Result<File> {
        #[cfg(target_os = "linux")]
        if let Some(root) = self.kernel() {
            return beneath::open_dir(&root?);
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

    /// Replaces the file with `bytes` atomically: a temporary file in the
    /// same directory, flushed, then renamed over the target (through a
    /// symlink to its target, when that is inside the root). Missing parent
    /// directories are created; an existing file keeps its permissions, a
    /// new one gets `rw-r--r--`. `stop` is asked just before the rename:
    /// when it says stop, nothing is replaced and the temporary file is
    /// removed (a call cancelled or out of time has no later effect).
    pub fn write_atomic(&self, bytes: &[u8], stop: &dyn Fn() -> bool) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        if let Some(root) = self.kernel() {
            return beneath::write_atomic(&root?, bytes, stop);
        }
        write_atomic_std(&self.checked()?, bytes, stop)
    }

    /// The root (opened) and the relative path, when the kernel confines
    /// opens here.
    #[cfg(target_os = "linux")]
    fn kernel(&self) -> Option<io::Result<beneath::Root<'_>>> {
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
        let resolved = resolve_symlinks(&self.shown).ok_or_else(|| escape(root, true))?;
        let real_root = resolve_symlinks(root).ok_or_else(|| escape(root, true))?;
        if resolved.starts_with(&real_root) {
            Ok(resolved)
        } else {
            Err(escape(root, false))
        }
    }
}

fn open_read_std(path: &Path) -> io::Result<File> {
    // A FIFO opened for reading would wait for a writer.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a pipe, socket or device)",
        ));
    }
    File::open(path)
}

/// Atomic replacement through `std::fs`, for where the kernel does not
/// confine.
fn write_atomic_std(path: &Path, bytes: &[u8], stop: &dyn Fn() -> bool) -> io::Result<()> {
    use std::io::Write;
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent)?;
    let permissions = std::fs::metadata(path).ok().map(|m| m.permissions());
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let (temp_path, mut temp) = (0..64)
        .find_map(|_| {
            let temp = parent.join(temp_name(name));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&temp)
            {
                Ok(file) => Some(Ok((temp, file))),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => None,
                Err(e) => Some(Err(e)),
            }
        })
        .unwrap_or_else(|| Err(io::Error::other("no free temporary file name")))?;
    let result = (|| {
        temp.write_all(bytes)?;
        temp.sync_all()?;
        match permissions {
            Some(permissions) => temp.set_permissions(permissions)?,
            #[cfg(unix)]
            None => {
                use std::os::unix::fs::PermissionsExt;
                temp.set_permissions(std::fs::Permissions::from_mode(0o644))?;
            }
            #[cfg(not(unix))]
            None => {}
        }
        drop(temp);
        if stop() {
            return Err(stopped());
        }
        std::fs::rename(&temp_path, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp_path);
    }
    result
}

/// A fresh hidden temporary name next to `name`.
pub(crate) fn temp_name(name: &std::ffi::OsStr) -> std::ffi::OsString {
    let mut temp = std::ffi::OsString::from(".");
    temp.push(name);
    temp.push(format!(
        ".kinet-{:06}.tmp",
        (crate::random::unit() * 1_000_000.0) as u64 ^ u64::from(std::process::id() % 1000)
    ));
    temp
}

/// The most symlinks followed while resolving one path (as Linux's ELOOP).
const MAX_SYMLINK_HOPS: usize = 40;

/// Resolves `path` the way the OS would when opening it, except that the
/// tail need not exist: every existing symlink on the way is followed,
/// dangling ones included, and `..` applies to the resolved parent.
/// `None` when more than 40 links are met (the OS would refuse with ELOOP).
fn resolve_symlinks(path: &Path) -> Option<PathBuf> {
    let mut work: Vec<Step> = path.components().rev().map(Step::from).collect();
    let mut resolved = PathBuf::new();
    let mut hops = 0;
    while let Some(step) = work.pop() {
        match step {
            Step::Root(root) => resolved = root,
            Step::Current => {}
            Step::Parent => {
                resolved.pop();
            }
            Step::Normal(name) => {
                let candidate = resolved.join(&name);
                let is_link = std::fs::symlink_metadata(&candidate)
                    .map(|m| m.file_type().is_symlink())
                    .unwrap_or(false);
                if !is_link {
                    resolved = candidate;
                    continue;
                }
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return None;
                }
                match std::fs::read_link(&candidate) {
                    Ok(target) => {
                        for component in target.components().rev() {
                            work.push(Step::from(component));
                        }
                    }
                    Err(_) => resolved = candidate,
                }
            }
        }
    }
    Some(resolved)
}

/// One path component, owned.
enum Step {
    Root(PathBuf),
    Current,
    Parent,
    Normal(std::ffi::OsString),
}

impl From<Component<'_>> for Step {
    fn from(component: Component<'_>) -> Self {
        match component {
            Component::Prefix(prefix) => Step::Root(PathBuf::from(prefix.as_os_str())),
            Component::RootDir => Step::Root(PathBuf::from(std::path::MAIN_SEPARATOR_STR)),
            Component::CurDir => Step::Current,
            Component::ParentDir => Step::Parent,
            Component::Normal(name) => Step::Normal(name.to_os_string()),
        }
    }
}

/// Opens beneath a root with `openat2`.
#[cfg(target_os = "linux")]
mod beneath {
    use std::ffi::OsStr;
    use std::fs::{File, Metadata};
    use std::io::{self, Write};
    use std::os::fd::OwnedFd;
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;

    use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
    use rustix::io::Errno;

    use super::{MAX_SYMLINK_HOPS, escape, normalize, stopped, temp_name};

    /// Whether this kernel has `openat2` (5.6+) and lets us call it.
    pub(super) fn available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            rustix::fs::openat2(
                rustix::fs::CWD,
                ".",
                OFlags::PATH | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::BENEATH,
            )
            .is_ok()
        })
    }

    /// An opened root and a path below it.
    pub(super) struct Root<'a> {
        pub(super) dir: &'a OwnedFd,
        pub(super) path: &'a Path,
        pub(super) rel: &'a Path,
    }

    pub(super) fn open_root(root: &Path) -> io::Result<OwnedFd> {
        Ok(rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// `openat2` beneath `dir`, retrying the kernel's EAGAIN (a rename
    /// raced the lookup) and mapping escapes to [`escape`] errors.
    fn open(
        dir: &OwnedFd,
        root: &Path,
        rel: &Path,
        flags: OFlags,
        mode: Mode,
    ) -> io::Result<OwnedFd> {
        let rel: &Path = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        // openat2 refuses O_PATH mixed with other flags.
        let flags = if flags.contains(OFlags::PATH) {
            flags | OFlags::CLOEXEC
        } else {
            flags | OFlags::CLOEXEC | OFlags::NOCTTY
        };
        let mut attempts = 0;
        loop {
            match rustix::fs::openat2(
                dir,
                rel,
                flags,
                mode,
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            ) {
                Ok(fd) => return Ok(fd),
                Err(Errno::AGAIN | Errno::INTR) if attempts < 64 => attempts += 1,
                Err(Errno::XDEV) => return Err(escape(root, false)),
                Err(Errno::LOOP) => return Err(escape(root, true)),
                Err(errno) => return Err(errno.into()),
            }
        }
    }

    pub(super) fn open_read(root: &Root<'_>) -> io::Result<File> {
        // Non-blocking, so a FIFO opens at once instead of waiting for a
        // writer; blocking reads again afterwards.
        let flags = OFlags::RDONLY | OFlags::NONBLOCK;
        let fd = open(root.dir, root.path, root.rel, flags, Mode::empty())?;
        let flags = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
        Ok(File::from(fd))
    }

    pub(super) fn metadata(root: &Root<'_>) -> io::Result<Metadata> {
        let fd = open(root.dir, root.path, root.rel, OFlags::PATH, Mode::empty())?;
        File::from(fd).metadata()
    }

    pub(super) fn open_dir(root: &Root<'_>) -> io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        let fd = open(root.dir, root.path, root.rel, flags, Mode::empty())?;
        Ok(File::from(fd))
    }

    /// The directory a write of `rel` lands in (created as needed) and the
    /// name in it, after following a symlink at the end of `rel` as long as
    /// it stays inside the root.
    fn parent_for_write(place: &Root<'_>) -> io::Result<(OwnedFd, PathBuf)> {
        let (dir, root) = (place.dir, place.path);
        let mut rel = place.rel.to_path_buf();
        for _ in 0..=MAX_SYMLINK_HOPS {
            let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    "the workspace root is a directory",
                ));
            };
            let parent = parent.to_path_buf();
            let name = PathBuf::from(name);
            let parent_fd = make_dirs(dir, root, &parent)?;
            match rustix::fs::readlinkat(&parent_fd, &name, Vec::new()) {
                Ok(target) => {
                    let target = Path::new(OsStr::from_bytes(target.as_bytes()));
                    // Relative to the link's directory, or absolute.
                    let next = normalize(&root.join(&parent).join(target));
                    rel = next
                        .strip_prefix(root)
                        .map_err(|_| escape(root, false))?
                        .to_path_buf();
                }
                // Not a symlink (or not there): write here.
                Err(Errno::INVAL | Errno::NOENT) => return Ok((parent_fd, name)),
                Err(errno) => return Err(errno.into()),
            }
        }
        Err(escape(root, true))
    }

    /// Opens `rel` (a directory) beneath the root, creating what is missing.
    fn make_dirs(root_fd: &OwnedFd, root: &Path, rel: &Path) -> io::Result<OwnedFd> {
        let flags = OFlags::PATH | OFlags::DIRECTORY;
        match open(root_fd, root, rel, flags, Mode::empty()) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => return other,
        }
        let mut so_far = PathBuf::new();
        let mut current = open(root_fd, root, &so_far, flags, Mode::empty())?;
        for name in rel.iter() {
            so_far.push(name);
            match rustix::fs::mkdirat(&current, name, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(errno) => return Err(errno.into()),
            }
            current = open(root_fd, root, &so_far, flags, Mode::empty())?;
        }
        Ok(current)
    }

    pub(super) fn write_atomic(
        root: &Root<'_>,
        bytes: &[u8],
        stop: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        let (dir, name) = parent_for_write(root)?;
        let existing = match rustix::fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Some(stat),
            Err(Errno::NOENT) => None,
            Err(errno) => return Err(errno.into()),
        };
        if let Some(stat) = &existing
            && rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Directory
        {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory",
            ));
        }
        let (temp, fd) = (0..64)
            .find_map(|_| {
                let temp = temp_name(name.as_os_str());
                match rustix::fs::openat(
                    &dir,
                    temp.as_os_str(),
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                ) {
                    Ok(fd) => Some(Ok((temp, fd))),
                    Err(Errno::EXIST) => None,
                    Err(errno) => Some(Err(io::Error::from(errno))),
                }
            })
            .unwrap_or_else(|| Err(io::Error::other("no free temporary file name")))?;
        let result = (|| {
            let mut file = File::from(fd);
            file.write_all(bytes)?;
            file.sync_all()?;
            let mode = existing.map_or(0o644, |stat| stat.st_mode & 0o7777);
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
            drop(file);
            if stop() {
                return Err(stopped());
            }
            rustix::fs::renameat(&dir, temp.as_os_str(), &dir, &name)?;
            Ok(())
        })();
        if result.is_err() {
            let _ = rustix::fs::unlinkat(&dir, temp.as_os_str(), AtFlags::empty());
        }
        result
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
