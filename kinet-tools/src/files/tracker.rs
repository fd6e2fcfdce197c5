//! Which files the agent has read, and what they looked like then.

use std::collections::HashMap;
use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use kinet_core::ToolError;

/// Size and modification time of a file when the agent last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl FileStamp {
    pub(crate) fn of(metadata: &Metadata) -> Self {
        Self {
            len: metadata.len(),
            modified: metadata.modified().ok(),
        }
    }
}

/// Remembers the files the agent read or wrote, so `edit_file` can insist
/// on a fresh read: it refuses a file never read, and one changed on disk
/// (by the user, a build, another agent) since the last read.
///
/// Share one tracker between the file tools of an agent (as
/// [`crate::default_tools`] does).
#[derive(Debug, Default)]
pub struct FileTracker {
    seen: Mutex<HashMap<PathBuf, FileStamp>>,
}

/// Kept in a [`Session`](kinet_core::session::Session) as `"files"`: each
/// file read, with its size and modification time then, so `edit_file`
/// accepts a file read before a restart as long as it has not changed.
impl kinet_core::session::SessionState for FileTracker {
    fn key(&self) -> &str {
        "files"
    }

    fn save(&self) -> serde_json::Value {
        let seen = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        let entries: Vec<serde_json::Value> = seen
            .iter()
            .map(|(path, stamp)| {
                let modified = stamp
                    .modified
                    .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok());
                serde_json::json!({
                    "path": path,
                    "len": stamp.len,
                    "modified": modified.map(|d| (d.as_secs(), d.subsec_nanos())),
                })
            })
            .collect();
        serde_json::Value::Array(entries)
    }

    fn restore(&self, state: &serde_json::Value) -> Result<(), String> {
        let entries = state.as_array().ok_or("the file state is not a list")?;
        let mut seen = self
            .seen
            .lock()
            .map_err(|_| "the file tracker is poisoned".to_owned())?;
        for entry in entries {
            let path = entry["path"].as_str().ok_or("an entry without a path")?;
            let modified = entry["modified"].as_array().and_then(|pair| {
                let secs = pair.first()?.as_u64()?;
                let nanos = u32::try_from(pair.get(1)?.as_u64()?).ok()?;
                std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(secs, nanos))
            });
            seen.insert(
                PathBuf::from(path),
                FileStamp {
                    len: entry["len"].as_u64().unwrap_or(0),
                    modified,
                },
            );
        }
        Ok(())
    }
}

impl FileTracker {
    /// An empty tracker.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Whether `path` was read (or written) by the agent.
    pub fn was_read(&self, path: &Path) -> bool {
        self.seen
            .lock()
            .map(|seen| seen.contains_key(path))
            .unwrap_or(false)
    }

    pub(crate) fn record(&self, path: &Path, stamp: FileStamp) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert(path.to_path_buf(), stamp);
        }
    }

    pub(crate) fn stamp(&self, path: &Path) -> Option<FileStamp> {
        self.seen
            .lock()
            .ok()
            .and_then(|seen| seen.get(path).copied())
    }

    /// Checks that `path` was read and has not changed since.
    pub(crate) fn check_fresh(&self, path: &Path, now: FileStamp) -> Result<(), ToolError> {
        match self.stamp(path) {
            None => Err(ToolError::invalid_arguments(format!(
                "read `{}` with read_file before editing it",
                path.display()
            ))),
            Some(seen) if seen != now => Err(ToolError::invalid_arguments(format!(
                "`{}` changed on disk since you last read it; read it again before editing",
                path.display()
            ))),
            Some(_) => Ok(()),
        }
    }
}
