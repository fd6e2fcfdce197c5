//! Where a line runs, and finding its programs as a shell would.

use std::path::{Path, PathBuf};

use super::pathcache::Lookups;
use super::{beneath, normalize};

/// Where a command line runs: its directory, the workspace roots, the
/// environment its commands get, and the other directories they may
/// write. Programs are found and globs expanded against it.
#[derive(Debug, Clone)]
pub struct Context {
    cwd: PathBuf,
    roots: Vec<PathBuf>,
    env: Vec<(String, String)>,
    writable: Vec<PathBuf>,
    examples: bool,
    /// The writable directories as written and with their links resolved,
    /// and the roots' resolved forms: found once, when first needed.
    resolved: std::sync::OnceLock<Resolved>,
}

#[derive(Debug, Clone)]
struct Resolved {
    writable: Vec<PathBuf>,
    real_roots: Vec<PathBuf>,
}

/// Where examples are placed: a root that exists nowhere.
const EXAMPLE_ROOT: &str = "/root-of-the-examples";

/// The search path of a program run with no `PATH` (glibc's `execvp`).
pub(crate) const DEFAULT_PATH: &str = "/bin:/usr/bin";

impl Context {
    /// Commands run in `cwd` (absolute), which is also their only root;
    /// an empty environment; nothing else writable.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        let cwd = normalize(&cwd.into());
        Self {
            roots: vec![cwd.clone()],
            cwd,
            env: Vec::new(),
            writable: Vec::new(),
            examples: false,
            resolved: std::sync::OnceLock::new(),
        }
    }

    /// The workspace roots (absolute; default: the directory alone). Globs
    /// expand beneath them only, and redirections outside them are marked.
    pub fn roots(mut self, roots: Vec<PathBuf>) -> Self {
        if !roots.is_empty() {
            self.roots = roots.iter().map(|r| normalize(&self.cwd.join(r))).collect();
        }
        self.resolved = std::sync::OnceLock::new();
        self
    }

    /// The environment the commands get (default: none): `PATH` finds
    /// programs, `HOME` expands `~`.
    pub fn env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self.resolved = std::sync::OnceLock::new();
        self
    }

    /// Other directories the commands may write (a sandbox's), besides the
    /// roots and the temp directories, which are never system directories.
    pub fn writable(mut self, dirs: Vec<PathBuf>) -> Self {
        self.writable = dirs;
        self.resolved = std::sync::OnceLock::new();
        self
    }

    /// The context a rules file's examples are checked in, with nothing
    /// looked up on this machine: a program named without `/` is a system
    /// program in `/usr/bin`, a relative path lies in a workspace root,
    /// globs match nothing, `HOME` is `/home/user`.
    pub fn examples() -> Self {
        Self {
            cwd: PathBuf::from(EXAMPLE_ROOT),
            roots: vec![PathBuf::from(EXAMPLE_ROOT)],
            env: vec![
                ("PATH".into(), "/usr/bin".into()),
                ("HOME".into(), "/home/user".into()),
            ],
            writable: Vec::new(),
            examples: true,
            resolved: std::sync::OnceLock::new(),
        }
    }

    /// The directory the commands run in.
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// The workspace roots.
    pub fn workspace_roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// The environment the commands get.
    pub fn environment(&self) -> &[(String, String)] {
        &self.env
    }

    /// A variable of the commands' environment.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn is_examples(&self) -> bool {
        self.examples
    }

    /// Finds `word` as a shell would, through `path` (a `PATH` value);
    /// `lookups` holds the directories already checked for this line.
    pub(crate) fn find(&self, word: &str, path: &str, lookups: &mut Lookups) -> Found {
        if word.contains('/') {
            let absolute = normalize(&self.cwd.join(word));
            let system = word.starts_with('/')
                && self.is_system(&absolute, std::fs::canonicalize(&absolute).ok(), lookups);
            return Found {
                path: Some(absolute),
                system,
            };
        }
        if self.examples {
            return Found {
                path: Some(Path::new("/usr/bin").join(word)),
                system: true,
            };
        }
        let dirs = lookups.dirs(path, &self.cwd);
        for (dir, absolute) in dirs.iter() {
            if let Some(hit) = lookups.find(dir, word) {
                let candidate = dir.join(word);
                let system = *absolute
                    && !hit.world_writable
                    && self.is_system(&candidate, hit.real, lookups);
                return Found {
                    path: Some(candidate),
                    system,
                };
            }
        }
        Found {
            path: None,
            system: false,
        }
    }

    /// Outside every directory the commands may write, by its path and by
    /// where its links lead (`real`), in directories that are not
    /// world-writable.
    fn is_system(&self, file: &Path, real: Option<PathBuf>, lookups: &mut Lookups) -> bool {
        let written = normalize(file);
        if self.examples {
            return !beneath(&written, Path::new(EXAMPLE_ROOT));
        }
        let writable = &self.resolved().writable;
        let outside = |path: &Path| !writable.iter().any(|dir| beneath(path, dir));
        let Some(real) = real else {
            return false;
        };
        outside(&written)
            && outside(&real)
            && written
                .parent()
                .is_some_and(|dir| !lookups.world_writable(dir))
            && real
                .parent()
                .is_some_and(|dir| !lookups.world_writable(dir))
    }

    /// The roots, the other writable directories and the temp
    /// directories, as written and with their links resolved; the roots'
    /// resolved forms.
    fn resolved(&self) -> &Resolved {
        self.resolved.get_or_init(|| {
            let mut writable: Vec<PathBuf> = self.roots.clone();
            writable.extend(self.writable.iter().map(|d| normalize(&self.cwd.join(d))));
            if let Some(tmp) = self.var("TMPDIR").filter(|t| t.starts_with('/')) {
                writable.push(PathBuf::from(tmp));
            }
            let mut real: Vec<PathBuf> = writable
                .iter()
                .filter_map(|d| std::fs::canonicalize(d).ok())
                .collect();
            writable.append(&mut real);
            writable.extend(temp_dirs().iter().cloned());
            Resolved {
                writable,
                real_roots: self
                    .roots
                    .iter()
                    .filter_map(|r| std::fs::canonicalize(r).ok())
                    .collect(),
            }
        })
    }

    /// Whether `path` (as written, relative to the directory) lies outside
    /// the roots, as written or with its links resolved.
    pub(crate) fn outside_roots(&self, path: &str) -> bool {
        if path == "/dev/null" {
            return false;
        }
        let written = normalize(&self.cwd.join(path));
        let inside = |p: &Path| self.roots.iter().any(|root| beneath(p, root));
        if !inside(&written) {
            return true;
        }
        if self.examples {
            return false;
        }
        let real = resolve_existing(&written);
        !(inside(&real)
            || self
                .resolved()
                .real_roots
                .iter()
                .any(|root| beneath(&real, root)))
    }
}

/// The temp directories, as written and with their links resolved (found
/// once per process).
fn temp_dirs() -> &'static [PathBuf] {
    static TEMP: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    TEMP.get_or_init(|| {
        let mut dirs = crate::confine::temp_dirs();
        let real: Vec<PathBuf> = dirs
            .iter()
            .filter_map(|d| std::fs::canonicalize(d).ok())
            .collect();
        dirs.extend(real);
        dirs
    })
}

/// Where a program was found.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) path: Option<PathBuf>,
    pub(crate) system: bool,
}

/// The shell a line kinet cannot plan runs under once approved: bash
/// where the commands' `PATH` finds it in a system directory, else sh
/// (likewise), else `/bin/sh`.
pub fn named_shell(context: &Context) -> PathBuf {
    let path = context.var("PATH").unwrap_or(DEFAULT_PATH);
    let mut lookups = Lookups::default();
    for name in ["bash", "sh"] {
        let found = context.find(name, path, &mut lookups);
        if let (Some(path), true) = (found.path, found.system) {
            return path;
        }
    }
    PathBuf::from("/bin/sh")
}

/// `path` with the links of its longest existing ancestor resolved.
pub(crate) fn resolve_existing(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            return rest
                .iter()
                .rev()
                .fold(real, |acc: PathBuf, name| acc.join(name));
        }
        match (
            existing.file_name().map(ToOwned::to_owned),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_in_the_workspace_or_temp_are_not_system_programs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let bin = root.join("bin");
        std::fs::create_dir(&bin).unwrap();
        let tool = bin.join("ls");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let context = Context::new(&root);
        let path = format!("{}:/usr/bin:/bin", bin.display());
        let found = context.find("ls", &path, &mut Lookups::default());
        assert_eq!(found.path.as_deref(), Some(tool.as_path()));
        assert!(!found.system, "a program in the workspace");
        let found = context.find("ls", "/usr/bin:/bin", &mut Lookups::default());
        assert!(found.system, "{:?}", found.path);
        // Written as a path: never a system program when relative.
        assert!(!context.find("./bin/ls", "", &mut Lookups::default()).system);
        assert!(
            !context
                .find(
                    "../../../../../../usr/bin/ls",
                    "/usr/bin",
                    &mut Lookups::default()
                )
                .system
        );
        assert!(
            context
                .find("/usr/bin/env", "", &mut Lookups::default())
                .system
        );
        // Relative PATH entries are never system directories.
        let inside = Context::new("/usr");
        assert!(!inside.find("ls", "bin", &mut Lookups::default()).system);
        assert!(
            context
                .find("no-such-program-here", "/usr/bin", &mut Lookups::default())
                .path
                .is_none()
        );
    }

    #[test]
    fn redirections_outside_the_roots_are_seen_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
        let context = Context::new(&root);
        assert!(!context.outside_roots("out.txt"));
        assert!(!context.outside_roots("/dev/null"));
        assert!(context.outside_roots("../x"));
        assert!(context.outside_roots("/etc/passwd"));
        assert!(context.outside_roots("etc/passwd"));
        assert!(context.outside_roots("etc/new-file"));
    }
}
