//! Finding programs without a `stat` per `PATH` entry per program: each
//! directory's executable names are listed once and kept while the
//! directory is unchanged (same device, inode, modification and change
//! times, checked with one `stat` per directory per line planned), and
//! the links of each found program resolved once.
//!
//! A directory gains or loses a name only by changing its modification
//! time, so a listing that is still valid answers as a fresh lookup would.
//! A program whose mode changed since (no longer executable) is still
//! found and then fails to start, as a shell would report.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// One directory's executable files.
#[derive(Debug)]
pub(crate) struct Listing {
    key: DirKey,
    /// Whether the directory is writable by anyone.
    pub(crate) world_writable: bool,
    names: HashMap<OsString, Program>,
}

#[derive(Debug)]
struct Program {
    /// The file with its links resolved, once asked for.
    real: OnceLock<Option<PathBuf>>,
}

/// What identifies a directory's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DirKey {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn key_of(dir: &Path) -> Option<(DirKey, bool)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(dir).ok()?;
        if !meta.is_dir() {
            return None;
        }
        Some((
            DirKey {
                dev: meta.dev(),
                ino: meta.ino(),
                mtime: (meta.mtime(), meta.mtime_nsec()),
                ctime: (meta.ctime(), meta.ctime_nsec()),
            },
            meta.mode() & 0o002 != 0,
        ))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

/// Listings of directories, for the whole process.
fn cache() -> &'static Mutex<HashMap<PathBuf, Arc<Listing>>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Arc<Listing>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The most directories kept (a `PATH` rarely has more than twenty).
const MAX_DIRS: usize = 256;

/// The listing of `dir`, fresh or still valid; `None` when it is not a
/// directory that can be read.
fn listing(dir: &Path) -> Option<Arc<Listing>> {
    let (key, world_writable) = key_of(dir)?;
    if let Ok(cache) = cache().lock()
        && let Some(listing) = cache.get(dir)
        && listing.key == key
    {
        return Some(Arc::clone(listing));
    }
    let mut names = HashMap::new();
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        if executable(&entry.path()) {
            names.insert(
                entry.file_name(),
                Program {
                    real: OnceLock::new(),
                },
            );
        }
    }
    let listing = Arc::new(Listing {
        key,
        world_writable,
        names,
    });
    if let Ok(mut cache) = cache().lock() {
        if cache.len() >= MAX_DIRS {
            cache.clear();
        }
        cache.insert(dir.to_path_buf(), Arc::clone(&listing));
    }
    Some(listing)
}

fn executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(path).is_ok_and(|m| m.is_file())
    }
}

/// The directories checked while planning one line: each is checked
/// once; each `PATH` value split once.
#[derive(Debug, Default)]
pub(crate) struct Lookups {
    checked: HashMap<PathBuf, Option<Arc<Listing>>>,
    paths: Vec<(String, SearchPath)>,
}

/// A `PATH` value's directories, absolute, each with whether it was
/// written absolute.
pub(crate) type SearchPath = Arc<[(PathBuf, bool)]>;

/// A program found in a directory.
pub(crate) struct Hit {
    /// Its path with its links resolved (`None`: a dangling link).
    pub(crate) real: Option<PathBuf>,
    /// Whether its directory is writable by anyone.
    pub(crate) world_writable: bool,
}

impl Lookups {
    /// The directories of a `PATH` value, made absolute from `cwd`
    /// (empty entries are `cwd`), each with whether it was written
    /// absolute.
    pub(crate) fn dirs(&mut self, path: &str, cwd: &Path) -> SearchPath {
        if let Some((_, dirs)) = self.paths.iter().find(|(p, _)| p == path) {
            return Arc::clone(dirs);
        }
        let dirs: SearchPath = path
            .split(':')
            .map(|entry| {
                let dir = if entry.is_empty() {
                    cwd.to_path_buf()
                } else {
                    super::normalize(&cwd.join(entry))
                };
                (dir, entry.starts_with('/'))
            })
            .collect();
        self.paths.push((path.to_owned(), Arc::clone(&dirs)));
        dirs
    }

    /// `name` in `dir`, when it is an executable file there.
    pub(crate) fn find(&mut self, dir: &Path, name: &str) -> Option<Hit> {
        let listing = self
            .checked
            .entry(dir.to_path_buf())
            .or_insert_with(|| listing(dir))
            .as_ref()?;
        let program = listing.names.get(std::ffi::OsStr::new(name))?;
        let real = program
            .real
            .get_or_init(|| std::fs::canonicalize(dir.join(name)).ok())
            .clone();
        Some(Hit {
            real,
            world_writable: listing.world_writable,
        })
    }

    /// Whether `dir` is writable by anyone (a directory that cannot be
    /// read counts as such).
    pub(crate) fn world_writable(&mut self, dir: &Path) -> bool {
        self.checked
            .entry(dir.to_path_buf())
            .or_insert_with(|| listing(dir))
            .as_ref()
            .is_none_or(|l| l.world_writable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_follows_its_directory() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let mut lookups = Lookups::default();
        assert!(lookups.find(&bin, "tool").is_none());
        let tool = bin.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        // The next line planned sees it (a new set of lookups).
        let mut lookups = Lookups::default();
        assert!(lookups.find(&bin, "tool").is_some());
        std::fs::remove_file(&tool).unwrap();
        let mut lookups = Lookups::default();
        assert!(lookups.find(&bin, "tool").is_none());
        // Not executable: not a program.
        std::fs::write(bin.join("data"), "").unwrap();
        assert!(Lookups::default().find(&bin, "data").is_none());
    }
}
