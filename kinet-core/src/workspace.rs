//! Resolving model-supplied paths inside the workspace roots.

use std::path::{Component, Path, PathBuf};

use crate::tool::ToolError;

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
    let normalized = normalize(&joined);
    if roots.is_empty() {
        return Ok(normalized);
    }
    let resolved = resolve_existing_prefix(&normalized);
    let inside = roots.iter().any(|root| {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| normalize(root));
        resolved.starts_with(&root)
    });
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

/// Canonicalises the longest existing ancestor (following symlinks) and
/// appends the rest, which does not exist and so holds no symlinks.
fn resolve_existing_prefix(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(canonical) = std::fs::canonicalize(&existing) {
            let mut out = canonical;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
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
        assert_eq!(err.kind(), crate::ToolErrorKind::PermissionDenied);
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

    #[test]
    fn empty_and_nul_paths_are_invalid() {
        let (_guard, root) = tempdir();
        assert!(resolve(&root, &[], "").is_err());
        assert!(resolve(&root, &[], "a\0b").is_err());
    }
}
