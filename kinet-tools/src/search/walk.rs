//! The directory walk of grep and glob: ripgrep's default filtering
//! (`.gitignore`, `.ignore`, `.git/info/exclude` and the global git
//! excludes, also outside a repository; hidden files skipped; symlinks not
//! followed) over directories opened by handle.
//!
//! Every directory is listed from its own descriptor and every entry is
//! opened by its plain name from its parent's descriptor
//! ([`WorkspaceDir`]: `openat2` beneath it, no symlinks), never by path. So
//! a symlinked directory is never entered, and a directory swapped for a
//! symlink mid-walk yields nothing from outside: no name, no content, no
//! ignore file. Ignore files of the directories above the search directory
//! are read the same way, up to the workspace root and not beyond it.
//!
//! The walk runs on `threads` threads sharing a stack of directories still
//! to list (depth first, as ripgrep's walker); a directory's subdirectories
//! are handed out before its files are visited, so the other threads have
//! work at once.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::Override;
use ignore::types::Types;
use kinet_core::tool::workspace::{DirEntry, EntryKind, WorkspaceDir, WorkspacePath};

/// The largest ignore file read (a bigger one is not a real ignore file).
const MAX_IGNORE_FILE: u64 = 4 * 1024 * 1024;

/// What decides which entries are walked besides the ignore files.
pub(crate) struct Rules {
    /// `--glob` patterns: the highest precedence.
    pub(crate) overrides: Override,
    /// `--type` selection.
    pub(crate) types: Types,
    /// The user's global git excludes.
    pub(crate) global: Gitignore,
}

impl Rules {
    /// Rules with the user's global git excludes.
    pub(crate) fn new(overrides: Override, types: Types) -> Self {
        Self {
            overrides,
            types,
            global: Gitignore::global().0,
        }
    }
}

/// One directory's ignore files, chained to its parent's.
pub(crate) struct IgnoreDir {
    ignore: Gitignore,
    git: Gitignore,
    exclude: Gitignore,
    parent: Option<Arc<IgnoreDir>>,
}

/// A matcher from an ignore file's bytes, as if read from `file`.
fn gitignore(dir: &Path, file: &Path, bytes: Option<Vec<u8>>) -> Gitignore {
    let Some(bytes) = bytes else {
        return Gitignore::empty();
    };
    let text = String::from_utf8_lossy(&bytes);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut builder = GitignoreBuilder::new(dir);
    for line in text.lines() {
        // A bad line is skipped, as ripgrep does (it warns).
        let _ = builder.add_line(Some(file.to_path_buf()), line);
    }
    builder.build().unwrap_or_else(|_| Gitignore::empty())
}

impl IgnoreDir {
    /// Reads the ignore files of `dir` (at `path`); `entries`, when
    /// listed already, say which exist.
    fn load(
        dir: &WorkspaceDir,
        path: &Path,
        entries: Option<&[DirEntry]>,
        parent: Option<Arc<IgnoreDir>>,
    ) -> Arc<Self> {
        let has = |name: &str| entries.is_none_or(|e| e.iter().any(|e| e.name() == name));
        let read = |name: &str| {
            has(name)
                .then(|| dir.read_small_file(OsStr::new(name), MAX_IGNORE_FILE))
                .flatten()
        };
        let ignore = gitignore(path, &path.join(".ignore"), read(".ignore"));
        let git = gitignore(path, &path.join(".gitignore"), read(".gitignore"));
        let git_dir = has(".git")
            .then(|| dir.open_dir(OsStr::new(".git")).ok())
            .flatten();
        let exclude = git_dir
            .as_ref()
            .and_then(|git| git.open_dir(OsStr::new("info")).ok())
            .and_then(|info| info.read_small_file(OsStr::new("exclude"), MAX_IGNORE_FILE));
        let exclude = gitignore(path, &path.join(".git/info/exclude"), exclude);
        Arc::new(Self {
            ignore,
            git,
            exclude,
            parent,
        })
    }

    /// The chain from the workspace root (or `/` without roots) down to
    /// the directory above `start`.
    pub(crate) fn parents_of(start: &WorkspacePath) -> Option<Arc<IgnoreDir>> {
        let mut above = Vec::new();
        let mut at = start.parent();
        while let Some(place) = at {
            at = place.parent();
            above.push(place);
        }
        let mut chain = None;
        for place in above.iter().rev() {
            if let Ok(dir) = place.open_walk() {
                chain = Some(Self::load(&dir, place.path(), None, chain));
            }
        }
        chain
    }

    /// What the ignore files say of `path`, as ripgrep decides without
    /// requiring a git repository (`--no-require-git`): the deepest
    /// `.ignore` match, else the deepest `.gitignore`, else the deepest
    /// `.git/info/exclude`, else the global excludes.
    fn matched(&self, path: &Path, is_dir: bool, global: &Gitignore) -> Match<()> {
        let (mut ignore, mut git, mut exclude) = (Match::None, Match::None, Match::None);
        let mut at = Some(self);
        while let Some(dir) = at {
            if ignore.is_none() {
                ignore = dir.ignore.matched(path, is_dir).map(|_| ());
            }
            if git.is_none() {
                git = dir.git.matched(path, is_dir).map(|_| ());
            }
            if exclude.is_none() {
                exclude = dir.exclude.matched(path, is_dir).map(|_| ());
            }
            at = dir.parent.as_deref();
        }
        ignore
            .or(git)
            .or(exclude)
            .or(global.matched(path, is_dir).map(|_| ()))
    }
}

impl Rules {
    /// Whether the entry `name` at `path` is left out.
    fn skips(&self, ignores: &IgnoreDir, path: &Path, name: &OsStr, is_dir: bool) -> bool {
        if !self.overrides.is_empty() {
            let found = self.overrides.matched(path, is_dir);
            if found.is_ignore() {
                return true;
            }
            if found.is_whitelist() {
                return false;
            }
        }
        let mut whitelisted = false;
        let found = ignores.matched(path, is_dir, &self.global);
        if found.is_ignore() {
            return true;
        }
        whitelisted |= found.is_whitelist();
        if !self.types.is_empty() {
            let found = self.types.matched(path, is_dir);
            if found.is_ignore() {
                return true;
            }
            whitelisted |= found.is_whitelist();
        }
        !whitelisted && name.as_encoded_bytes().first() == Some(&b'.')
    }
}

/// A file the walk found.
pub(crate) struct FileEntry<'a> {
    /// The directory it is in, to open it from by name.
    pub(crate) dir: &'a WorkspaceDir,
    /// Its name there.
    pub(crate) name: &'a OsStr,
    /// Its path as shown (the search directory's path joined with the
    /// names walked).
    pub(crate) path: PathBuf,
}

/// Whether the walk goes on after a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Quit,
}

/// A directory still to list.
struct Job {
    parent: Arc<WorkspaceDir>,
    name: std::ffi::OsString,
    path: PathBuf,
    ignores: Arc<IgnoreDir>,
}

struct Queue {
    state: Mutex<State>,
    ready: Condvar,
    quit: AtomicBool,
}

struct State {
    jobs: Vec<Job>,
    /// Threads listing a directory (which may add jobs).
    busy: usize,
}

/// Walks `start` (opened at `path`) on `threads` threads; each thread makes
/// its visitor with `visitor` and drops it when the walk ends.
pub(crate) fn walk<F, V>(
    start: WorkspaceDir,
    path: &Path,
    parents: Option<Arc<IgnoreDir>>,
    rules: &Rules,
    threads: usize,
    visitor: F,
) where
    F: Fn() -> V + Sync,
    V: FnMut(FileEntry<'_>) -> Flow,
{
    let queue = Queue {
        state: Mutex::new(State {
            jobs: Vec::new(),
            busy: 1,
        }),
        ready: Condvar::new(),
        quit: AtomicBool::new(false),
    };
    std::thread::scope(|scope| {
        for _ in 1..threads.max(1) {
            scope.spawn(|| worker(&queue, rules, visitor(), None));
        }
        let first = (start, path.to_path_buf(), parents);
        worker(&queue, rules, visitor(), Some(first));
    });
}

fn worker<V>(
    queue: &Queue,
    rules: &Rules,
    mut visit: V,
    first: Option<(WorkspaceDir, PathBuf, Option<Arc<IgnoreDir>>)>,
) where
    V: FnMut(FileEntry<'_>) -> Flow,
{
    if let Some((dir, path, parents)) = first {
        list(queue, rules, &mut visit, dir, path, parents);
        finish(queue);
    }
    while let Some(job) = next(queue) {
        let opened = job.parent.open_dir(&job.name);
        drop(job.parent);
        if let Ok(dir) = opened {
            list(queue, rules, &mut visit, dir, job.path, Some(job.ignores));
        }
        finish(queue);
    }
}

/// The next directory, or `None` when the walk is over.
fn next(queue: &Queue) -> Option<Job> {
    let Ok(mut state) = queue.state.lock() else {
        return None;
    };
    loop {
        if queue.quit.load(Ordering::Relaxed) {
            return None;
        }
        if let Some(job) = state.jobs.pop() {
            state.busy += 1;
            return Some(job);
        }
        if state.busy == 0 {
            return None;
        }
        state = match queue.ready.wait(state) {
            Ok(state) => state,
            Err(_) => return None,
        };
    }
}

/// Hands out a directory's subdirectories.
fn push(queue: &Queue, jobs: Vec<Job>) {
    if let Ok(mut state) = queue.state.lock() {
        state.jobs.extend(jobs);
        queue.ready.notify_all();
    }
}

/// Marks one listing finished.
fn finish(queue: &Queue) {
    if let Ok(mut state) = queue.state.lock() {
        state.busy -= 1;
        if state.busy == 0 {
            queue.ready.notify_all();
        }
    }
}

/// Stops every thread (under the lock, so no thread misses the wake-up).
fn stop(queue: &Queue) {
    let _state = queue.state.lock();
    queue.quit.store(true, Ordering::Relaxed);
    queue.ready.notify_all();
}

/// Lists one directory: its subdirectories go on the stack, its files to
/// the visitor.
fn list<V>(
    queue: &Queue,
    rules: &Rules,
    visit: &mut V,
    dir: WorkspaceDir,
    path: PathBuf,
    parents: Option<Arc<IgnoreDir>>,
) where
    V: FnMut(FileEntry<'_>) -> Flow,
{
    let Ok(entries) = dir.entries() else {
        return;
    };
    let ignores = IgnoreDir::load(&dir, &path, Some(&entries), parents);
    let dir = Arc::new(dir);
    let mut subdirs = Vec::new();
    let mut files = Vec::new();
    for entry in &entries {
        let is_dir = match entry.kind() {
            EntryKind::Dir => true,
            EntryKind::File => false,
            // Symlinks are not followed; FIFOs, sockets and devices are
            // not searched.
            _ => continue,
        };
        let entry_path = path.join(entry.name());
        if rules.skips(&ignores, &entry_path, entry.name(), is_dir) {
            continue;
        }
        if is_dir {
            subdirs.push(Job {
                parent: Arc::clone(&dir),
                name: entry.name().to_owned(),
                path: entry_path,
                ignores: Arc::clone(&ignores),
            });
        } else {
            files.push((entry.name(), entry_path));
        }
    }
    if !subdirs.is_empty() {
        push(queue, subdirs);
    }
    for (name, path) in files {
        if queue.quit.load(Ordering::Relaxed) {
            return;
        }
        let flow = visit(FileEntry {
            dir: &dir,
            name,
            path,
        });
        if flow == Flow::Quit {
            stop(queue);
            return;
        }
    }
}
