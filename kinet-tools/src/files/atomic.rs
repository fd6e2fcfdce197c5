//! Atomic file replacement: write a temporary file next to the target,
//! flush it, then rename it over the target.

use std::io::Write;
use std::path::Path;

#[cfg(test)]
thread_local! {
    /// Test hook: fail after the temporary file is written, before the rename.
    pub(crate) static FAIL_BEFORE_RENAME: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Writes `bytes` to `path` atomically: readers see the old content or the
/// new, never a mix, and a failure leaves the old file as it was (and no
/// temporary file behind). Creates missing parent directories and keeps the
/// permissions of an existing file.
pub(crate) fn atomic_write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent)?;
    let permissions = std::fs::metadata(path).ok().map(|m| m.permissions());
    let mut temp = tempfile::Builder::new()
        .prefix(".kinet-write-")
        .suffix(".tmp")
        .tempfile_in(parent)?;
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    match permissions {
        Some(permissions) => temp.as_file().set_permissions(permissions)?,
        // Temporary files are created owner-only; a new file gets the usual
        // rw-r--r-- instead.
        #[cfg(unix)]
        None => {
            use std::os::unix::fs::PermissionsExt;
            temp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o644))?;
        }
        #[cfg(not(unix))]
        None => {}
    }
    #[cfg(test)]
    if FAIL_BEFORE_RENAME.with(|fail| fail.get()) {
        return Err(std::io::Error::other("injected failure before rename"));
    }
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_before_rename_keeps_the_old_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "old = true\n").unwrap();
        FAIL_BEFORE_RENAME.with(|f| f.set(true));
        let result = atomic_write(&path, b"new = true\n");
        FAIL_BEFORE_RENAME.with(|f| f.set(false));
        assert!(result.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old = true\n");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("config.toml")]);
    }

    #[cfg(unix)]
    #[test]
    fn permissions_are_kept_and_parents_created() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sh");
        std::fs::write(&path, "echo old\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o750)).unwrap();
        atomic_write(&path, b"echo new\n").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o750);
        let nested = dir.path().join("a/b/c.txt");
        atomic_write(&nested, b"x").unwrap();
        assert_eq!(std::fs::read(&nested).unwrap(), b"x");
        let mode = std::fs::metadata(&nested).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
    }
}
