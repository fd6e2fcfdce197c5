//! Opening beneath a root with `openat2` (Linux 5.6+): the kernel resolves
//! every component from the root's descriptor and refuses, with `EXDEV`,
//! any step that would leave it (`..`, an absolute or escaping symlink, a
//! `/proc` magic link), however many links the path goes through.

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, ResolveFlags};
use rustix::io::Errno;

use super::opened_path;

use super::paths::{MAX_SYMLINK_HOPS, escape, normalize, temp_name};

/// Whether this kernel has `openat2` and lets us call it (probed from `/`,
/// which always exists, unlike the process's working directory).
pub(super) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let Ok(root) = open_root(Path::new("/")) else {
            return false;
        };
        rustix::fs::openat2(
            &root,
            ".",
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH,
        )
        .is_ok()
    })
}

/// An opened root and a path below it (plain names only).
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

/// `openat2` beneath `dir`, retrying the kernel's EAGAIN (a rename raced
/// the lookup) and mapping escapes to the escape error.
fn open(dir: &OwnedFd, root: &Path, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
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
            Mode::empty(),
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
    let fd = open(
        root.dir,
        root.path,
        root.rel,
        OFlags::RDONLY | OFlags::NONBLOCK,
    )?;
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
    Ok(File::from(fd))
}

pub(super) fn metadata(root: &Root<'_>) -> io::Result<Metadata> {
    let fd = open(root.dir, root.path, root.rel, OFlags::PATH)?;
    File::from(fd).metadata()
}

pub(super) fn open_dir(root: &Root<'_>) -> io::Result<File> {
    let fd = open(
        root.dir,
        root.path,
        root.rel,
        OFlags::RDONLY | OFlags::DIRECTORY,
    )?;
    Ok(File::from(fd))
}

/// The directory a write of `rel` lands in (created as needed) and the name
/// in it, after following a symlink at the end of `rel` as long as it
/// stays inside the root. A relative link target is taken from the
/// directory the link really is in (as the kernel would), which the kernel
/// reports for the opened directory.
fn parent_for_write(place: &Root<'_>, protected: &[String]) -> io::Result<(OwnedFd, PathBuf)> {
    let (dir, root) = (place.dir, place.path);
    let real_root = opened_path(dir)?;
    let mut rel = place.rel.to_path_buf();
    for _ in 0..=MAX_SYMLINK_HOPS {
        // Every hop's target is checked: a link to `.git/config` is a
        // write to `.git/config`.
        super::protected::protected_in(&rel, protected)?;
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
                // Relative to the link's real directory, or absolute.
                let next = normalize(&opened_path(&parent_fd)?.join(target));
                rel = next
                    .strip_prefix(&real_root)
                    .or_else(|_| next.strip_prefix(root))
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
    match open(root_fd, root, rel, flags) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        other => return other,
    }
    let mut so_far = PathBuf::new();
    let mut current = open(root_fd, root, &so_far, flags)?;
    for name in rel.iter() {
        so_far.push(name);
        match rustix::fs::mkdirat(&current, name, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(errno) => return Err(errno.into()),
        }
        current = open(root_fd, root, &so_far, flags)?;
    }
    Ok(current)
}

/// A temporary file next to the target, in a directory held open.
pub(super) struct Pending {
    dir: OwnedFd,
    temp: OsString,
    name: PathBuf,
    mode: u32,
}

/// Creates the temporary file for a write of `root.rel`.
pub(super) fn begin_write(root: &Root<'_>, protected: &[String]) -> io::Result<(Pending, File)> {
    let (dir, name) = parent_for_write(root, protected)?;
    let mode = match rustix::fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => {
            if rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Directory
            {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    "is a directory",
                ));
            }
            // Set-id bits are not carried over to new content.
            stat.st_mode & 0o777
        }
        Err(Errno::NOENT) => 0o644,
        Err(errno) => return Err(errno.into()),
    };
    for _ in 0..64 {
        let temp = temp_name(name.as_os_str());
        match rustix::fs::openat(
            &dir,
            temp.as_os_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => {
                return Ok((
                    Pending {
                        dir,
                        temp,
                        name,
                        mode,
                    },
                    File::from(fd),
                ));
            }
            Err(Errno::EXIST) => continue,
            Err(errno) => return Err(errno.into()),
        }
    }
    Err(io::Error::other("no free temporary file name"))
}

impl Pending {
    /// The file a commit replaces, its directory's symlinks resolved.
    pub(super) fn target(&self) -> io::Result<PathBuf> {
        Ok(opened_path(&self.dir)?.join(&self.name))
    }

    /// Gives the file its mode and renames it over the target (or, when
    /// `replace` is false, only where there is no target).
    pub(super) fn commit(&self, file: &File, replace: bool) -> io::Result<()> {
        rustix::fs::fchmod(file, Mode::from_raw_mode(self.mode))?;
        let flags = if replace {
            RenameFlags::empty()
        } else {
            RenameFlags::NOREPLACE
        };
        match rustix::fs::renameat_with(&self.dir, &self.temp, &self.dir, &self.name, flags) {
            Ok(()) => Ok(()),
            // A filesystem without RENAME_NOREPLACE: link, which never
            // replaces, then drop the temporary name.
            Err(Errno::INVAL) if !replace => {
                rustix::fs::linkat(
                    &self.dir,
                    &self.temp,
                    &self.dir,
                    &self.name,
                    AtFlags::empty(),
                )?;
                self.discard();
                Ok(())
            }
            Err(errno) => Err(errno.into()),
        }
    }

    /// Removes the temporary file.
    pub(super) fn discard(&self) {
        let _ = rustix::fs::unlinkat(&self.dir, &self.temp, AtFlags::empty());
    }
}
