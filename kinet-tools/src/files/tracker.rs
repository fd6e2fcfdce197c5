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
    /// No file on disk.
    pub(crate) const ABSENT: Self = Self {
        len: 0,
        modified: None,
    };

    pub(crate) fn of(metadata: &Metadata) -> Self {
        Self {
            len: metadata.len(),
            modified: metadata.modified().ok(),
        }
    }
}

/// The editor's copy of a file, for a freshness check.
pub(crate) struct EditorCopy<'a> {
    /// The editor's text now.
    pub text: &'a str,
    /// The disk's bytes now, when loaded.
    pub disk: Option<&'a [u8]>,
    /// Whether the result is written to disk (not handed to the editor).
    pub to_disk: bool,
}

/// A text's SHA-256: what the agent saw of a file an editor gave it.
type Digest = [u8; 32];

fn digest(text: &str) -> Digest {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes()).into()
}

/// What the agent last saw of a file: its stamp on disk, and, when the
/// text came from an editor's buffer, that text's digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    disk: FileStamp,
    text: Option<Digest>,
}

/// Remembers the files the agent read or wrote, so `edit_file` can insist
/// on a fresh read: it refuses a file never read, and one changed on disk
/// (by the user, a build, another agent) since the last read. Inside an
/// editor ([`Editor`](kinet_core::editor::Editor)), what counts is the text
/// the editor gave: a buffer changed since the read (typed into, unsaved)
/// is refused the same way.
///
/// Share one tracker between the file tools of an agent (as
/// [`crate::default_tools`] does).
#[derive(Debug, Default)]
pub struct FileTracker {
    seen: Mutex<HashMap<PathBuf, Seen>>,
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
            .map(|(path, seen)| {
                let modified = seen
                    .disk
                    .modified
                    .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok());
                let mut entry = serde_json::json!({
                    "path": path,
                    "len": seen.disk.len,
                    "modified": modified.map(|d| (d.as_secs(), d.subsec_nanos())),
                });
                if let Some(text) = seen.text {
                    entry["text_sha256"] = hex(&text).into();
                }
                entry
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
            let text = entry["text_sha256"].as_str().and_then(unhex);
            seen.insert(
                PathBuf::from(path),
                Seen {
                    disk: FileStamp {
                        len: entry["len"].as_u64().unwrap_or(0),
                        modified,
                    },
                    text,
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

    /// Records that the agent saw the disk's copy of `path`.
    pub(crate) fn record(&self, path: &Path, stamp: FileStamp) {
        self.insert(
            path,
            Seen {
                disk: stamp,
                text: None,
            },
        );
    }

    /// Records that the agent saw `text`, the editor's copy of `path`
    /// (`stamp`: the disk's copy then).
    pub(crate) fn record_text(&self, path: &Path, stamp: FileStamp, text: &str) {
        self.insert(
            path,
            Seen {
                disk: stamp,
                text: Some(digest(text)),
            },
        );
    }

    fn insert(&self, path: &Path, seen: Seen) {
        if let Ok(mut map) = self.seen.lock() {
            map.insert(path.to_path_buf(), seen);
        }
    }

    fn seen(&self, path: &Path) -> Option<Seen> {
        self.seen
            .lock()
            .ok()
            .and_then(|seen| seen.get(path).copied())
    }

    /// Checks that `path` was read and has not changed on disk since.
    pub(crate) fn check_fresh(&self, path: &Path, now: FileStamp) -> Result<(), ToolError> {
        self.check(path, now, None)
    }

    /// Checks that `path` was read and that the editor's text of it,
    /// `text`, is what the agent saw: the same text when the read came
    /// from the editor; the unchanged disk copy, and the editor holding
    /// just that (`disk`, when it was loaded), when it came from disk.
    /// When the result goes to disk (`to_disk`), the disk must not have
    /// changed since the read either (a change the editor has not reloaded
    /// would be overwritten).
    pub(crate) fn check_fresh_text(
        &self,
        path: &Path,
        now: FileStamp,
        editor: EditorCopy<'_>,
    ) -> Result<(), ToolError> {
        self.check(path, now, Some(editor))
    }

    fn check(
        &self,
        path: &Path,
        now: FileStamp,
        editor: Option<EditorCopy<'_>>,
    ) -> Result<(), ToolError> {
        let Some(seen) = self.seen(path) else {
            return Err(ToolError::invalid_arguments(format!(
                "read `{}` with read_file before editing it",
                path.display()
            )));
        };
        let (buffer_fresh, disk_fresh) = match (&editor, seen.text) {
            (Some(copy), Some(saw)) => {
                (digest(copy.text) == saw, !copy.to_disk || seen.disk == now)
            }
            (Some(copy), None) => (
                copy.disk.is_none_or(|disk| disk == copy.text.as_bytes()),
                seen.disk == now,
            ),
            (None, _) => (true, seen.disk == now),
        };
        let place = match (buffer_fresh, disk_fresh) {
            (true, true) => return Ok(()),
            (false, _) => "in the editor",
            (true, false) => "on disk",
        };
        Err(ToolError::invalid_arguments(format!(
            "`{}` changed {place} since you last read it; read it again before editing",
            path.display()
        )))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Digest> {
    let mut out = [0u8; 32];
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    for (at, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[at * 2..at * 2 + 2], 16).ok()?;
    }
    Some(out)
}
