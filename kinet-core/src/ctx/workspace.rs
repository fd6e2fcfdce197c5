//! Resolving model-supplied paths inside the workspace roots.

use std::path::{Component, Path, PathBuf};

use crate::data::output::ToolError;

/// Joins `path` to `cwd`, removes `.` and `..` lexically, resolves symlinks in
/// the part that exists, and checks the result lies under one of `roots`
/// (no check when `roots` is empty). Returns the resolved path, which is the
/// one a tool must then use.
pub(crate) fn resolve(cwd: &Path, roots: &[PathBuf], path: &str) -> Result<PathBuf, ToolError> {
    if path.is_empty() {
        return Err(ToolError::invalid_arguments("the path is empty"));
    }
    if path.contains('\0') {
        return Err(ToolError::invalid_arguments(format!(
            "the path `{}` contains a NUL byte",
            path.escape_debug()
        )));
    }
    let joined = cwd.join(path);
    if roots.is_empty() {
        return Ok(normalize(&joined));
    }
    let resolved = resolve_symlinks(&joined);
    let inside = roots
        .iter()
        .any(|root| resolved.starts_with(resolve_symlinks(&cwd.join(root))));
    if inside {
        Ok(resolved)
    } else {
        let list = roots
            .iter()
            .map(|r| format!("`{}`", r.display()))
            .collect::<Vec<_>>()
            .join(", ");
        Err(ToolError::permission_denied(format!(
            "the path `{path}` resolves to `{}`, which is outside the workspace root{} {list}",
            resolved.display(),
            if roots.len() == 1 { "" } else { "s" },
        )))
    }
}

/// Removes `.` and `..` lexically (`..` at the root stays at the root).
fn normalize(path: &Path) -> PathBuf {
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

/// The most symlinks followed while resolving one path (as Linux's ELOOP).
const MAX_SYMLINK_HOPS: usize = 40;

/// Resolves `path` the way the OS would when opening it, except that the
/// tail need not exist: every existing symlink on the way is followed,
/// dangling ones included (a write through a dangling link creates its
/// target), and `..` applies to the resolved parent. The result is
/// absolute when `path` is.
fn resolve_symlinks(path: &Path) -> PathBuf {
    // Components still to walk, as a stack: a symlink's target components
    // are pushed on top and walked next.
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
                if is_link && hops < MAX_SYMLINK_HOPS {
                    hops += 1;
                    match std::fs::read_link(&candidate) {
                        Ok(target) => {
                            for component in target.components().rev() {
                                work.push(Step::from(component));
                            }
                        }
                        Err(_) => resolved = candidate,
                    }
                } else {
                    resolved = candidate;
                }
            }
        }
    }
    resolved
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = std::fs::canonicalize(dir.path()).unwrap();
        (dir, path)
    }

    #[test]
    fn relative_and_new_paths_inside_are_fine() {
        let (_guard, root) = tempdir();
        let got = resolve(&root, std::slice::from_ref(&root), "a/b/../c.txt").unwrap();
        assert_eq!(got, root.join("a/c.txt"));
    }

    #[test]
    fn dotdot_escape_is_refused_and_names_the_root() {
        let (_guard, root) = tempdir();
        let err = resolve(&root, std::slice::from_ref(&root), "../../etc/passwd").unwrap_err();
        assert_eq!(
            err.kind(),
            crate::data::output::ToolErrorKind::PermissionDenied
        );
        assert!(
            err.message().contains(&root.display().to_string()),
            "{}",
            err.message()
        );
    }

    #[cfg(unix)]
    #[test]
    fn symlink_escape_is_refused() {
        let (_guard, root) = tempdir();
        let (_guard2, outside) = tempdir();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let err = resolve(&root, std::slice::from_ref(&root), "link/secret.txt").unwrap_err();
        assert!(err.message().contains("outside the workspace root"));
        // Without roots there is no confinement.
        assert!(resolve(&root, &[], "link/secret.txt").is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn dangling_symlink_escape_is_refused() {
        let (_guard, root) = tempdir();
        let (_guard2, outside) = tempdir();
        std::os::unix::fs::symlink(outside.join("not-yet.txt"), root.join("notes.md")).unwrap();
        let err = resolve(&root, std::slice::from_ref(&root), "notes.md").unwrap_err();
        assert!(err.message().contains("not-yet.txt"), "{}", err.message());
        // A link that stays inside is fine, and resolves to its target.
        std::os::unix::fs::symlink(root.join("real.txt"), root.join("alias.txt")).unwrap();
        assert_eq!(
            resolve(&root, std::slice::from_ref(&root), "alias.txt").unwrap(),
            root.join("real.txt")
        );
    }

    #[cfg(unix)]
    #[test]
    fn dotdot_after_a_symlink_applies_to_its_target() {
        let (_guard, root) = tempdir();
        let (_guard2, outside) = tempdir();
        std::fs::create_dir(outside.join("deep")).unwrap();
        std::os::unix::fs::symlink(outside.join("deep"), root.join("link")).unwrap();
        // The OS reads link/../x as <outside>/x, not <root>/x.
        assert!(resolve(&root, std::slice::from_ref(&root), "link/../x").is_err());
    }

    #[test]
    fn relative_roots_are_taken_from_the_cwd() {
        let (_guard, base) = tempdir();
        std::fs::create_dir(base.join("ws")).unwrap();
        let roots = [PathBuf::from("ws")];
        assert!(resolve(&base, &roots, "ws/a.txt").is_ok());
        assert!(resolve(&base, &roots, "other.txt").is_err());
    }

    #[test]
    fn empty_and_nul_paths_are_invalid() {
        let (_guard, root) = tempdir();
        assert!(resolve(&root, &[], "").is_err());
        assert!(resolve(&root, &[], "a\0b").is_err());
    }
}
