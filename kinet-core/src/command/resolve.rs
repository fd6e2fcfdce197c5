//! Where a line runs, and finding its programs as a shell would.

use std::path::{Component, Path, PathBuf};

use super::beneath;

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
        }
    }

    /// The workspace roots (absolute; default: the directory alone). Globs
    /// expand beneath them only, and redirections outside them are marked.
    pub fn roots(mut self, roots: Vec<PathBuf>) -> Self {
        if !roots.is_empty() {
            self.roots = roots.iter().map(|r| normalize(&self.cwd.join(r))).collect();
        }
        self
    }

    /// The environment the commands get (default: none): `PATH` finds
    /// programs, `HOME` expands `~`.
    pub fn env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }

    /// Other directories the commands may write (a sandbox's), besides the
    /// roots and the temp directories, which are never system directories.
    pub fn writable(mut self, dirs: Vec<PathBuf>) -> Self {
        self.writable = dirs;
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

    /// Finds `word` as a shell would, through `path` (a `PATH` value).
    pub(crate) fn find(&self, word: &str, path: &str) -> Found {
        if word.contains('/') {
            let absolute = normalize(&self.cwd.join(word));
            let system = word.starts_with('/') && self.is_system(&absolute);
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
        for entry in path.split(':') {
            let dir = if entry.is_empty() {
                self.cwd.clone()
            } else {
                self.cwd.join(entry)
            };
            let candidate = dir.join(word);
            if executable(&candidate) {
                let system = entry.starts_with('/') && self.is_system(&candidate);
                return Found {
                    path: Some(normalize(&candidate)),
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
    /// where its links lead, in a directory that is not world-writable.
    fn is_system(&self, file: &Path) -> bool {
        let written = normalize(file);
        if self.examples {
            return !beneath(&written, Path::new(EXAMPLE_ROOT));
        }
        let writable = self.writable_dirs();
        let outside = |path: &Path| !writable.iter().any(|dir| beneath(path, dir));
        if !outside(&written) {
            return false;
        }
        let Ok(real) = std::fs::canonicalize(&written) else {
            return false;
        };
        if !outside(&real) {
            return false;
        }
        written.parent().is_some_and(|dir| !world_writable(dir))
            && real.parent().is_some_and(|dir| !world_writable(dir))
    }

    /// The roots, the other writable directories and the temp directories,
    /// as written and with their links resolved.
    fn writable_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self.roots.clone();
        dirs.extend(self.writable.iter().map(|d| normalize(&self.cwd.join(d))));
        dirs.extend(["/tmp", "/var/tmp", "/dev/shm"].map(PathBuf::from));
        dirs.push(std::env::temp_dir());
        if let Some(tmp) = self.var("TMPDIR").filter(|t| t.starts_with('/')) {
            dirs.push(PathBuf::from(tmp));
        }
        let real: Vec<PathBuf> = dirs
            .iter()
            .filter_map(|d| std::fs::canonicalize(d).ok())
            .collect();
        dirs.extend(real);
        dirs
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
        let real_roots: Vec<PathBuf> = self
            .roots
            .iter()
            .filter_map(|r| std::fs::canonicalize(r).ok())
            .collect();
        let real = resolve_existing(&written);
        !(inside(&real) || real_roots.iter().any(|root| beneath(&real, root)))
    }
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
    for name in ["bash", "sh"] {
        let found = context.find(name, path);
        if let (Some(path), true) = (found.path, found.system) {
            return path;
        }
    }
    PathBuf::from("/bin/sh")
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

fn world_writable(dir: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(dir).map_or(true, |m| m.permissions().mode() & 0o002 != 0)
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        false
    }
}

/// Folds `.` and `..` without touching the file system.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `path` with the links of its longest existing ancestor resolved.
fn resolve_existing(path: &Path) -> PathBuf {
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
        let found = context.find("ls", &path);
        assert_eq!(found.path.as_deref(), Some(tool.as_path()));
        assert!(!found.system, "a program in the workspace");
        let found = context.find("ls", "/usr/bin:/bin");
        assert!(found.system, "{:?}", found.path);
        // Written as a path: never a system program when relative.
        assert!(!context.find("./bin/ls", "").system);
        assert!(
            !context
                .find("../../../../../../usr/bin/ls", "/usr/bin")
                .system
        );
        assert!(context.find("/usr/bin/env", "").system);
        // Relative PATH entries are never system directories.
        let inside = Context::new("/usr");
        assert!(!inside.find("ls", "bin").system);
        assert!(
            context
                .find("no-such-program-here", "/usr/bin")
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
