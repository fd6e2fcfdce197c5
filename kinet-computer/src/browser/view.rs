//! What the model reads of a page: after an action, the change since the
//! last snapshot of the tab (what appeared, disappeared or changed, with
//! refs) rather than the whole page; a snapshot too large for a tool result
//! is saved to a file and shown in part, with the path and how to ask for
//! a part.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use chromiumoxide::cdp::browser_protocol::target::TargetId;

use super::actions::Snapshot;
use crate::ComputerError;

/// The last whole-page snapshot of each tab, and where large snapshots go.
#[derive(Clone, Default)]
pub(super) struct Views {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    last: Mutex<HashMap<TargetId, Snapshot>>,
    spilled: AtomicUsize,
    /// Made on first use when the host set no directory; removed with the
    /// tools.
    temp: Mutex<Option<tempfile::TempDir>>,
}

impl Views {
    /// Remembers `snapshot` (of the whole page) as the tab's latest.
    pub(super) fn remember(&self, tab: &TargetId, snapshot: &Snapshot) {
        if let Ok(mut last) = self.inner.last.lock() {
            last.insert(tab.clone(), snapshot.clone());
        }
    }

    /// The change from the tab's latest snapshot to `snapshot`, when both
    /// show the same document and the change is the shorter text; then
    /// `snapshot` becomes the latest.
    pub(super) fn change(&self, tab: &TargetId, snapshot: &Snapshot) -> Option<String> {
        let previous = self.inner.last.lock().ok()?.get(tab).cloned();
        self.remember(tab, snapshot);
        let previous = previous?;
        if previous.url != snapshot.url {
            return None;
        }
        let diff = similar::TextDiff::from_lines(&previous.body, &snapshot.body);
        let mut changed = String::new();
        let mut count = 0usize;
        for change in diff.iter_all_changes() {
            let marker = match change.tag() {
                similar::ChangeTag::Equal => continue,
                similar::ChangeTag::Delete => "removed: ",
                similar::ChangeTag::Insert => "added:   ",
            };
            count += 1;
            let _ = writeln!(changed, "{marker}{}", change.value().trim_end_matches('\n'));
        }
        let total = snapshot.body.lines().count();
        let mut text = if count == 0 {
            format!(
                "Page: {}\nURL: {}\nNothing changed on the page.",
                snapshot.title, snapshot.url
            )
        } else {
            format!(
                "Page: {}\nURL: {}\nChanged since the last snapshot ({count} of {total} lines; \
browser_snapshot shows the whole page):\n{changed}",
                snapshot.title, snapshot.url
            )
        };
        if previous.title != snapshot.title {
            let _ = write!(text, "\nThe title was {:?}.", previous.title);
        }
        (text.len() < snapshot.render().len() / 2).then_some(text)
    }

    /// `text` as it fits a tool result: whole up to `limit` characters;
    /// beyond, the first part (cut at a line end), the file the whole text
    /// was saved to and how to ask for a part.
    pub(super) fn sized(&self, text: String, limit: usize, dir: Option<&PathBuf>) -> String {
        if text.chars().count() <= limit {
            return text;
        }
        let path = match self.save(&text, dir) {
            Ok(path) => format!("The whole snapshot is saved at {}. ", path.display()),
            Err(error) => format!("(It could not be saved to a file: {error}.) "),
        };
        let keep = limit.saturating_sub(400);
        let cut = text
            .char_indices()
            .nth(keep)
            .map_or(text.len(), |(index, _)| index);
        let head = &text[..cut];
        let head = head.rfind('\n').map_or(head, |end| &head[..end]);
        let shown = head.lines().count();
        let total = text.lines().count();
        format!(
            "{head}\n- … {} more lines not shown ({} characters in all). {path}Ask for a part with \
browser_snapshot: root (a ref or CSS selector), depth, or mode \"interactive\" or \"text\".",
            total.saturating_sub(shown),
            text.chars().count()
        )
    }

    fn save(&self, text: &str, dir: Option<&PathBuf>) -> Result<PathBuf, ComputerError> {
        let dir = match dir {
            Some(dir) => dir.clone(),
            None => {
                let mut temp = self
                    .inner
                    .temp
                    .lock()
                    .map_err(|_| ComputerError::Browser("snapshot directory".into()))?;
                if temp.is_none() {
                    *temp = Some(
                        tempfile::Builder::new()
                            .prefix("kinet-snapshots-")
                            .tempdir()
                            .map_err(|e| {
                                ComputerError::Browser(format!("a snapshot directory: {e}"))
                            })?,
                    );
                }
                temp.as_ref()
                    .map(|t| t.path().to_path_buf())
                    .ok_or_else(|| ComputerError::Browser("snapshot directory".into()))?
            }
        };
        let n = self.inner.spilled.fetch_add(1, Ordering::Relaxed) + 1;
        let path = dir.join(format!("snapshot-{n}.txt"));
        // Written whole under a temporary name, then renamed.
        let partial = dir.join(format!(".snapshot-{n}.txt.partial"));
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&partial, text))
            .and_then(|()| std::fs::rename(&partial, &path))
            .map_err(|e| ComputerError::Browser(format!("{}: {e}", path.display())))?;
        Ok(path)
    }
}
