//! Directories opened beneath a workspace root, for walks that must not
//! leave it (grep, glob): each directory is listed from its own handle, and
//! each entry is opened by its plain name from that handle, never by path.
//!
//! On Linux every open is `openat2` with `RESOLVE_BENEATH`,
//! `RESOLVE_NO_SYMLINKS` and `RESOLVE_NO_MAGICLINKS` on the parent's
//! descriptor (`openat` with `O_NOFOLLOW` on kernels before 5.6, which for
//! one plain name is just as tight): a symlinked directory is never
//! entered, a symlinked file never opened, and a directory swapped for a
//! symlink after it was listed yields nothing, because nothing is looked up
//! by path again. Elsewhere the names are checked not to be symlinks before
//! each open, which a concurrent swap can race.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::time::SystemTime;

/// What a directory entry is, as listed (symlinks are not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed by the walk).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// One entry of a [`WorkspaceDir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    name: OsString,
    kind: EntryKind,
}

impl DirEntry {
    /// Its name in the directory (one plain component).
    pub fn name(&self) -> &OsStr {
        &self.name
    }

    /// What it is, symlinks not followed.
    pub fn kind(&self) -> EntryKind {
        self.kind
    }
}

/// The size and modification time of an entry, symlinks not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryMetadata {
    /// What it is.
    pub kind: EntryKind,
    /// Its size in bytes.
    pub len: u64,
    /// When its content last changed (`UNIX_EPOCH` where unknown).
    pub modified: SystemTime,
}

/// A directory opened beneath a workspace root (see
/// [`WorkspacePath::open_walk`](super::WorkspacePath::open_walk)): list it,
/// and open what it holds by name. Its methods block.
#[derive(Debug)]
pub struct WorkspaceDir {
    #[cfg(target_os = "linux")]
    fd: std::os::fd::OwnedFd,
    #[cfg(not(target_os = "linux"))]
    path: std::path::PathBuf,
}

/// Refuses anything but one plain name.
fn plain(name: &OsStr) -> io::Result<()> {
    let bytes = name.as_encoded_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{}` is not a plain file name", name.to_string_lossy()),
        ));
    }
    Ok(())
}

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::OsStr;
    use std::fs::File;
    use std::io;
    use std::os::fd::OwnedFd;
    use std::os::unix::ffi::OsStrExt;
    use std::time::{Duration, SystemTime};

    use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
    use rustix::io::Errno;

    use super::{DirEntry, EntryKind, EntryMetadata, WorkspaceDir, plain};

    fn kind(file_type: FileType) -> EntryKind {
        match file_type {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        }
    }

    impl WorkspaceDir {
        pub(in crate::confine) fn from_file(dir: File) -> Self {
            Self { fd: dir.into() }
        }

        /// Opens one name from this directory, never through a symlink.
        fn open_name(&self, name: &OsStr, flags: OFlags) -> io::Result<OwnedFd> {
            plain(name)?;
            let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
            let mut attempts = 0;
            loop {
                let opened = if crate::confine::beneath::available() {
                    rustix::fs::openat2(
                        &self.fd,
                        name,
                        flags,
                        Mode::empty(),
                        ResolveFlags::BENEATH
                            | ResolveFlags::NO_SYMLINKS
                            | ResolveFlags::NO_MAGICLINKS,
                    )
                } else {
                    rustix::fs::openat(&self.fd, name, flags, Mode::empty())
                };
                match opened {
                    Ok(fd) => return Ok(fd),
                    Err(Errno::AGAIN | Errno::INTR) if attempts < 64 => attempts += 1,
                    Err(Errno::LOOP) => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!("`{}` is a symlink", name.to_string_lossy()),
                        ));
                    }
                    Err(errno) => return Err(errno.into()),
                }
            }
        }

        /// The entries, `.` and `..` left out, symlinks not followed.
        pub fn entries(&self) -> io::Result<Vec<DirEntry>> {
            // A descriptor of its own (`.` opened from the handle), so
            // listings from several threads never share a position.
            let mut dir = rustix::fs::Dir::read_from(&self.fd)?;
            let mut entries = Vec::new();
            while let Some(entry) = dir.read() {
                let entry = entry?;
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                let name = OsStr::from_bytes(name);
                let kind = match entry.file_type() {
                    FileType::Unknown => {
                        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                            Ok(stat) => kind(FileType::from_raw_mode(stat.st_mode)),
                            // Gone since it was listed.
                            Err(Errno::NOENT) => continue,
                            Err(errno) => return Err(errno.into()),
                        }
                    }
                    known => kind(known),
                };
                entries.push(DirEntry {
                    name: name.to_owned(),
                    kind,
                });
            }
            Ok(entries)
        }

        /// Opens the directory `name` (a plain name; a symlink is refused).
        pub fn open_dir(&self, name: &OsStr) -> io::Result<WorkspaceDir> {
            let fd = self.open_name(name, OFlags::RDONLY | OFlags::DIRECTORY)?;
            Ok(Self { fd })
        }

        /// Opens the file `name` for reading (a plain name; a symlink is
        /// refused; a FIFO opens at once without waiting for a writer, so
        /// check the type before reading).
        pub fn open_file(&self, name: &OsStr) -> io::Result<File> {
            let fd = self.open_name(name, OFlags::RDONLY | OFlags::NONBLOCK)?;
            let flags = rustix::fs::fcntl_getfl(&fd)?;
            rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
            Ok(File::from(fd))
        }

        /// The kind, size and modification time of `name`, symlinks not
        /// followed.
        pub fn metadata(&self, name: &OsStr) -> io::Result<EntryMetadata> {
            plain(name)?;
            let stat = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
            let modified = u64::try_from(stat.st_mtime)
                .ok()
                .map(|secs| {
                    SystemTime::UNIX_EPOCH
                        + Duration::new(secs, u32::try_from(stat.st_mtime_nsec).unwrap_or(0))
                })
                .unwrap_or(SystemTime::UNIX_EPOCH);
            Ok(EntryMetadata {
                kind: kind(FileType::from_raw_mode(stat.st_mode)),
                len: u64::try_from(stat.st_size).unwrap_or(0),
                modified,
            })
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::ffi::OsStr;
    use std::fs::File;
    use std::io;

    use super::{DirEntry, EntryKind, EntryMetadata, WorkspaceDir, plain};

    fn kind(file_type: std::fs::FileType) -> EntryKind {
        if file_type.is_symlink() {
            EntryKind::Symlink
        } else if file_type.is_dir() {
            EntryKind::Dir
        } else if file_type.is_file() {
            EntryKind::File
        } else {
            EntryKind::Other
        }
    }

    impl WorkspaceDir {
        pub(in crate::confine) fn from_path(path: std::path::PathBuf) -> Self {
            Self { path }
        }

        /// The entries, `.` and `..` left out, symlinks not followed.
        pub fn entries(&self) -> io::Result<Vec<DirEntry>> {
            let mut entries = Vec::new();
            for entry in std::fs::read_dir(&self.path)? {
                let entry = entry?;
                let Ok(file_type) = entry.file_type() else {
                    continue;
                };
                entries.push(DirEntry {
                    name: entry.file_name(),
                    kind: kind(file_type),
                });
            }
            Ok(entries)
        }

        /// The path of `name`, checked not to be a symlink (racy: see the
        /// module's documentation).
        fn checked(&self, name: &OsStr, want: EntryKind) -> io::Result<std::path::PathBuf> {
            plain(name)?;
            let path = self.path.join(name);
            let found = kind(std::fs::symlink_metadata(&path)?.file_type());
            if found == EntryKind::Symlink {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("`{}` is a symlink", name.to_string_lossy()),
                ));
            }
            if want == EntryKind::Dir && found != EntryKind::Dir {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "not a directory",
                ));
            }
            Ok(path)
        }

        /// Opens the directory `name` (a plain name; a symlink is refused).
        pub fn open_dir(&self, name: &OsStr) -> io::Result<WorkspaceDir> {
            Ok(Self {
                path: self.checked(name, EntryKind::Dir)?,
            })
        }

        /// Opens the file `name` for reading (a plain name; a symlink is
        /// refused).
        pub fn open_file(&self, name: &OsStr) -> io::Result<File> {
            File::open(self.checked(name, EntryKind::File)?)
        }

        /// The kind, size and modification time of `name`, symlinks not
        /// followed.
        pub fn metadata(&self, name: &OsStr) -> io::Result<EntryMetadata> {
            plain(name)?;
            let metadata = std::fs::symlink_metadata(self.path.join(name))?;
            Ok(EntryMetadata {
                kind: kind(metadata.file_type()),
                len: metadata.len(),
                modified: metadata
                    .modified()
                    .unwrap_or(std::time::SystemTime::UNIX_EPOCH),
            })
        }
    }
}

impl WorkspaceDir {
    /// Reads the regular file `name` whole when it is at most `limit`
    /// bytes (an ignore file, say); `None` when it is missing, not a
    /// regular file, too large or unreadable.
    pub fn read_small_file(&self, name: &OsStr, limit: u64) -> Option<Vec<u8>> {
        use std::io::Read;
        let file: File = self.open_file(name).ok()?;
        let metadata = file.metadata().ok()?;
        if !metadata.is_file() || metadata.len() > limit {
            return None;
        }
        let mut bytes = Vec::with_capacity(metadata.len() as usize);
        file.take(limit).read_to_end(&mut bytes).ok()?;
        Some(bytes)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn symlinks_are_listed_but_never_opened() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("s")).unwrap();
        let root = WorkspaceDir::from_file(File::open(dir.path()).unwrap());
        let mut entries = root.entries().unwrap();
        entries.sort_by(|a, b| a.name().cmp(b.name()));
        let kinds: Vec<_> = entries.iter().map(|e| (e.name(), e.kind())).collect();
        assert_eq!(
            kinds,
            [
                (OsStr::new("out"), EntryKind::Symlink),
                (OsStr::new("s"), EntryKind::Symlink),
                (OsStr::new("sub"), EntryKind::Dir),
            ]
        );
        assert!(root.open_dir(OsStr::new("out")).is_err());
        assert!(root.open_file(OsStr::new("s")).is_err());
        assert!(root.open_file(OsStr::new("../x")).is_err());
        assert!(root.open_dir(OsStr::new("..")).is_err());
        let sub = root.open_dir(OsStr::new("sub")).unwrap();
        assert_eq!(
            sub.read_small_file(OsStr::new("a.txt"), 10).as_deref(),
            Some(&b"a"[..])
        );
        assert_eq!(sub.read_small_file(OsStr::new("a.txt"), 0), None);
        let meta = sub.metadata(OsStr::new("a.txt")).unwrap();
        assert_eq!((meta.kind, meta.len), (EntryKind::File, 1));
    }
}
