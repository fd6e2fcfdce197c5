//! Frames of other sites. Chrome runs such a frame in its own renderer
//! (site isolation), out of reach of the page script in the tab's document,
//! so each is read through its own DevTools target: the page script lists
//! the frame with its key (`f3`), the frame's element is resolved to its
//! frame id, the frame's target is attached over a second DevTools
//! connection of kinet's own (the driving library attaches pages only), and
//! the page script runs in it with refs prefixed by the key (`f3e12`). Clicks add the frame's offset in
//! its parent and are dispatched to the tab, whose input routing delivers
//! them into the frame, as a real mouse's would be.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chromiumoxide::Page;

use super::actions::{self, RemoteSlot, Snapshot, SnapshotOptions};
use super::browser_error;
use super::document::{Doc, Target};
use super::session::BrowserSession;
use crate::ComputerError;

/// A frame of another site seen in a snapshot.
#[derive(Clone)]
struct Remote {
    /// The key of the document the frame's element is in.
    parent: String,
    target: Target,
}

/// The frames of other sites seen in snapshots, by key. Keys are unique in
/// the process (they number on with the refs), so one map serves all tabs.
#[derive(Clone, Default)]
pub(crate) struct RemoteFrames {
    known: Arc<Mutex<HashMap<String, Remote>>>,
}

/// How deep frames of other sites inside each other are read.
const MAX_NESTING: usize = 4;

impl RemoteFrames {
    /// A snapshot of the tab with the frames of other sites read in at
    /// their places (indented under their `- iframe` line).
    pub(crate) async fn snapshot(
        &self,
        session: &BrowserSession,
        top: &Page,
        options: &SnapshotOptions,
    ) -> Result<Snapshot, ComputerError> {
        let mut options = options.clone();
        let doc = match options.root.clone() {
            Some(root) => {
                let doc = self.doc_for(top, &root, true).await?;
                if doc.key == root {
                    // The whole frame, read in full.
                    options.root = None;
                    options.max_block = None;
                }
                doc
            }
            None => Doc::top(top.clone()),
        };
        let (mut snapshot, slots) = actions::snapshot_doc(&doc, &options).await?;
        if !slots.is_empty() {
            let mut lines: Vec<String> = snapshot.body.lines().map(str::to_owned).collect();
            self.fill(session, &doc, &mut lines, slots, &options, 0)
                .await;
            snapshot.body = lines.join("\n");
        }
        Ok(snapshot)
    }

    /// Puts each slot's frame snapshot into `lines` (last slot first, so
    /// earlier positions stay valid).
    async fn fill(
        &self,
        session: &BrowserSession,
        parent: &Doc,
        lines: &mut Vec<String>,
        mut slots: Vec<RemoteSlot>,
        options: &SnapshotOptions,
        nesting: usize,
    ) {
        slots.sort_by_key(|slot| std::cmp::Reverse(slot.at));
        let inner = SnapshotOptions {
            root: None,
            ..options.clone()
        };
        for slot in slots {
            let pad = "  ".repeat(slot.indent);
            let read = if nesting >= MAX_NESTING {
                Err(ComputerError::Browser("frames nest too deep".into()))
            } else {
                self.read(session, parent, &slot.key, &inner, nesting).await
            };
            let frame_lines: Vec<String> = match read {
                Ok(body) => body.lines().map(|line| format!("{pad}{line}")).collect(),
                Err(error) => vec![format!(
                    "{pad}- (a frame of another site that could not be read: {error})"
                )],
            };
            let at = slot.at.min(lines.len());
            lines.splice(at..at, frame_lines);
        }
    }

    /// The snapshot lines of frame `key` of `parent`.
    async fn read(
        &self,
        session: &BrowserSession,
        parent: &Doc,
        key: &str,
        options: &SnapshotOptions,
        nesting: usize,
    ) -> Result<String, ComputerError> {
        let target = self.attach(session, parent, key).await?;
        let doc = Doc {
            target,
            top: parent.top.clone(),
            key: key.to_owned(),
            origin: (0.0, 0.0),
        };
        let (snapshot, slots) = actions::snapshot_doc(&doc, options).await?;
        let mut lines: Vec<String> = snapshot.body.lines().map(str::to_owned).collect();
        if !slots.is_empty() {
            Box::pin(self.fill(session, &doc, &mut lines, slots, options, nesting + 1)).await;
        }
        Ok(lines.join("\n"))
    }

    /// The frame's own target, attached, and remembered under `key`.
    async fn attach(
        &self,
        session: &BrowserSession,
        parent: &Doc,
        key: &str,
    ) -> Result<Target, ComputerError> {
        let frame_id = parent.frame_id_of(key).await?;
        let link = session.link().await?;
        let attached = link.session(&frame_id).await?;
        let target = Target::Frame {
            link,
            session: attached,
        };
        if let Ok(mut known) = self.known.lock() {
            known.insert(
                key.to_owned(),
                Remote {
                    parent: parent.key.clone(),
                    target: target.clone(),
                },
            );
        }
        Ok(target)
    }

    /// The document an element ref (or a frame key) belongs to: a frame of
    /// another site when the ref starts with the key of one seen in a
    /// snapshot, else the tab's own. Its origin in the tab's viewport is
    /// worked out now (the frame may have moved since).
    /// A frame key itself names the frame's element in its parent, or with
    /// `enter` the frame's own document.
    pub(crate) async fn doc_for(
        &self,
        top: &Page,
        element: &str,
        enter: bool,
    ) -> Result<Doc, ComputerError> {
        let chain = {
            let known = self.known.lock().map_err(|_| browser_error("frame list"))?;
            // The innermost known frame whose key the ref starts with, then
            // its parents up to the tab.
            let mut best: Option<&String> = None;
            for key in known.keys() {
                let owns = element
                    .strip_prefix(key.as_str())
                    .is_some_and(|rest| rest.starts_with(['e', 'f']) || rest.is_empty());
                if owns && best.is_none_or(|b| key.len() > b.len()) {
                    best = Some(key);
                }
            }
            let mut chain = Vec::new();
            let mut at = best.cloned();
            while let Some(key) = at {
                let Some(remote) = known.get(&key) else { break };
                at = (!remote.parent.is_empty()).then(|| remote.parent.clone());
                chain.push((key, remote.clone()));
                if chain.len() > MAX_NESTING {
                    break;
                }
            }
            chain
        };
        let mut doc = Doc::top(top.clone());
        // From the outermost frame inwards, adding each frame's offset.
        for (key, remote) in chain.into_iter().rev() {
            if element == key && !enter {
                return Ok(doc);
            }
            let (x, y) = actions::frame_origin(&doc, &key).await?;
            doc = Doc {
                target: remote.target,
                top: top.clone(),
                key,
                origin: (doc.origin.0 + x, doc.origin.1 + y),
            };
        }
        Ok(doc)
    }
}
