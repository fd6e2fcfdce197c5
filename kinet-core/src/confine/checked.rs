//! Where the kernel cannot confine opens (other systems, Linux before 5.6):
//! the path's symlinks are resolved and checked in user space before each
//! use, then `std::fs` opens the resolved path. A symlink swapped in
//! between the check and the open is not prevented.

use std::fs::{File, Permissions};
use std::io;
use std::path::{Component, Path, PathBuf};

use super::paths::{MAX_SYMLINK_HOPS, temp_name};

/// Resolves `path` the way the OS would when opening it, except that the
/// tail need not exist: every existing symlink on the way is followed,
/// dangling ones included, and `..` applies to the resolved parent.
/// `None` when more than 40 links are met (the OS would refuse with ELOOP).
pub(super) fn resolve_symlinks(path: &Path) -> Option<PathBuf> {
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

/// Opens for reading, refusing what is not a regular file or directory (a
/// FIFO opened for reading would wait for a writer).
pub(super) fn open_read(path: &Path) -> io::Result<File> {
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a pipe, socket or device)",
        ));
    }
    File::open(path)
}

/// A temporary file next to the target.
pub(super) struct Pending {
    temp: PathBuf,
    path: PathBuf,
    permissions: Option<Permissions>,
}

pub(super) fn begin_write(path: &Path) -> io::Result<(Pending, File)> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent)?;
    let existing = std::fs::metadata(path).ok();
    if existing.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory",
        ));
    }
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    for _ in 0..64 {
        let temp = parent.join(temp_name(name));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
        {
            Ok(file) => {
                return Ok((
                    Pending {
                        temp,
                        path: path.to_path_buf(),
                        permissions: existing.map(|m| m.permissions()),
                    },
                    file,
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("no free temporary file name"))
}

impl Pending {
    pub(super) fn target(&self) -> io::Result<PathBuf> {
        Ok(self.path.clone())
    }

    pub(super) fn commit(&self, file: &File, replace: bool) -> io::Result<()> {
        match &self.permissions {
            Some(permissions) => {
                #[cfg(unix)]
                {
                    // Set-id bits are not carried over to new content.
                    use std::os::unix::fs::PermissionsExt;
                    file.set_permissions(Permissions::from_mode(permissions.mode() & 0o777))?;
                }
                #[cfg(not(unix))]
                file.set_permissions(permissions.clone())?;
            }
            #[cfg(unix)]
            None => {
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(Permissions::from_mode(0o644))?;
            }
            #[cfg(not(unix))]
            None => {}
        }
        if replace {
            std::fs::rename(&self.temp, &self.path)
        } else {
            // A hard link never replaces.
            std::fs::hard_link(&self.temp, &self.path)?;
            self.discard();
            Ok(())
        }
    }

    pub(super) fn discard(&self) {
        let _ = std::fs::remove_file(&self.temp);
    }
}
