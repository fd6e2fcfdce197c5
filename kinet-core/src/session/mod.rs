//! Sessions: a conversation with everything needed to continue it in
//! another process: the approvals granted for the session and the state of
//! stateful tools (the file tracker behind read-before-edit, the todo list,
//! ...), in a versioned format.
//!
//! ```
//! use kinet_core::session::Session;
//! use kinet_core::{Conversation, Message};
//!
//! let mut conversation = Conversation::new();
//! conversation.push(Message::user("hello"));
//! conversation.session_approvals.insert("shell".into());
//! let session = Session::capture(&conversation, &[]);
//! let json = session.to_json();
//! let (restored, _) = Session::from_json(&json).unwrap().resume(&[]).unwrap();
//! assert!(restored.session_approvals.contains("shell"));
//! ```

mod recorder;
mod store;

pub(crate) use recorder::Recorder;

pub use store::{AsyncClaims, Claimed, SessionInfo, SessionStore, StoreError, StoreJournal};

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::data::conversation::Conversation;
use crate::message::Message;

/// The format [`Session::to_json`] writes. Older formats are migrated on
/// reading: 0 is a bare serialised [`Conversation`].
pub const SESSION_FORMAT: u32 = 1;

/// State a tool or pack keeps between calls and wants kept across
/// processes (implemented by kinet-tools' file tracker and todo list).
pub trait SessionState: Send + Sync {
    /// A stable name for this state in the session ("files", "todo").
    fn key(&self) -> &str;
    /// The state as JSON.
    fn save(&self) -> serde_json::Value;
    /// Puts back what [`save`](Self::save) wrote.
    fn restore(&self, state: &serde_json::Value) -> Result<(), String>;
}

/// One step of a session's journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum JournalEntry {
    /// A message joined the history: the input, a model turn, a tool result.
    Message {
        /// The message.
        message: Message,
    },
    /// A tool was approved for the rest of the session.
    Approval {
        /// The tool.
        tool: String,
    },
    /// Text the model read, for the injection defence's ledger
    /// ([`Provenance`](crate::provenance::Provenance)); written before the
    /// tool result it comes from.
    Seen {
        /// What was read and who wrote it.
        seen: crate::provenance::Seen,
    },
    /// A tool's state, replacing the earlier one under that key.
    State {
        /// [`SessionState::key`].
        key: String,
        /// [`SessionState::save`].
        value: serde_json::Value,
    },
    /// The run stopped at approvals to be given later (`Some`: the turn and
    /// its pending calls), or a resumed run finished that turn (`None`).
    Deferred {
        /// The turn waiting, if any.
        deferred: Option<crate::deferred::DeferredTurn>,
    },
    /// The key of the conversation's runs, written by its first run
    /// ([`Conversation::run_key`]).
    RunKey {
        /// The key.
        key: String,
    },
}

/// Where a run writes its steps as they happen, so a process killed
/// mid-run resumes from its last completed step. The engine calls
/// [`record`](Self::record) for every message as it joins the history
/// (each tool result as its call finishes, not at the end of the turn) and
/// for every approval granted for the session; it must be quick (a local
/// append), and it must not fail the run: report errors another way.
pub trait Journal: Send + Sync {
    /// Appends one entry.
    fn record(&self, entry: &JournalEntry);

    /// Appends a message (the host records its own input this way).
    fn message(&self, message: &Message) {
        self.record(&JournalEntry::Message {
            message: message.clone(),
        });
    }

    /// Called when a run starts with its input: a journal that knows how
    /// many messages it holds records the ones past them (the new user
    /// message). Default: nothing.
    fn begin(&self, messages: &[Message]) {
        let _ = messages;
    }
}

impl Conversation {
    /// Applies one journal entry about the run state (a tool's
    /// [`JournalEntry::State`] belongs to a [`Session`] and is ignored).
    pub fn apply(&mut self, entry: JournalEntry) {
        match entry {
            JournalEntry::Message { message } => self.messages.push(message),
            JournalEntry::Approval { tool } => {
                self.session_approvals.insert(tool);
            }
            JournalEntry::Seen { seen } => self.provenance.record(seen),
            JournalEntry::Deferred { deferred } => self.deferred = deferred,
            JournalEntry::RunKey { key } => self.run_key = Some(key),
            JournalEntry::State { .. } => {}
        }
    }

    /// The journal entries that make this run state again when applied in
    /// order to an empty one: messages, the run key, approvals, what was
    /// read, the deferred turn.
    pub fn journal_entries(&self) -> Vec<JournalEntry> {
        let messages = self.messages.iter().map(|message| JournalEntry::Message {
            message: message.clone(),
        });
        let key = self
            .run_key
            .iter()
            .map(|key| JournalEntry::RunKey { key: key.clone() });
        let approvals = self
            .session_approvals
            .iter()
            .map(|tool| JournalEntry::Approval { tool: tool.clone() });
        let seen = self
            .provenance
            .seen()
            .iter()
            .map(|seen| JournalEntry::Seen { seen: seen.clone() });
        let deferred = self.deferred.iter().map(|turn| JournalEntry::Deferred {
            deferred: Some(turn.clone()),
        });
        messages
            .chain(key)
            .chain(approvals)
            .chain(seen)
            .chain(deferred)
            .collect()
    }
}

impl Session {
    /// Applies one journal entry (what a store does when it reads a
    /// journal back).
    pub fn apply(&mut self, entry: JournalEntry) {
        match entry {
            JournalEntry::State { key, value } => {
                self.state.insert(key, value);
            }
            entry => self.conversation.apply(entry),
        }
    }

    /// The journal entries that make this session again when applied in
    /// order to an empty one: its conversation's
    /// ([`Conversation::journal_entries`]) and its tools' state (a store's
    /// `create` writes these).
    pub fn journal_entries(&self) -> Vec<JournalEntry> {
        let state = self.state.iter().map(|(key, value)| JournalEntry::State {
            key: key.clone(),
            value: value.clone(),
        });
        let mut entries = self.conversation.journal_entries();
        // Before what was read and the deferred turn, as always written.
        let at = entries
            .iter()
            .position(|entry| {
                matches!(
                    entry,
                    JournalEntry::Seen { .. } | JournalEntry::Deferred { .. }
                )
            })
            .unwrap_or(entries.len());
        entries.splice(at..at, state);
        entries
    }

    /// An empty session with this id.
    pub fn empty(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            format: SESSION_FORMAT,
            conversation: Conversation::new(),
            state: BTreeMap::new(),
            forked_from: None,
        }
    }
}

/// Where a forked session came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkPoint {
    /// The session it was forked from.
    pub session: String,
    /// How many messages it shares with that session.
    pub at: usize,
}

/// A conversation and what continuing it needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// The session's id.
    pub id: String,
    /// The format this was written in ([`SESSION_FORMAT`]).
    pub format: u32,
    /// The run state: messages, session approvals, the provenance ledger,
    /// a deferred turn and the run key (one type with
    /// [`Conversation`], so a field added there is saved here too).
    #[serde(flatten)]
    pub conversation: Conversation,
    /// Tool state by [`SessionState::key`].
    #[serde(default)]
    pub state: BTreeMap<String, serde_json::Value>,
    /// Set on a fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkPoint>,
}

/// A session that cannot be read or restored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The text is not a session of a known format.
    #[error("not a session: {0}")]
    Format(String),
    /// The session was written by a newer kinet.
    #[error(
        "session format {found} is newer than this kinet reads ({SESSION_FORMAT}); upgrade kinet"
    )]
    TooNew {
        /// The format found.
        found: u32,
    },
    /// A tool's state could not be put back.
    #[error("the state `{key}` could not be restored: {message}")]
    State {
        /// The state's key.
        key: String,
        /// Why.
        message: String,
    },
}

/// A fresh, random session id.
pub fn new_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "s-{now:x}-{:04x}",
        (crate::random::unit() * 65_536.0) as u32 ^ (std::process::id() & 0xffff)
    )
}

impl Session {
    /// A session of `conversation` (its messages and session approvals) and
    /// the current state of `states`, with a new id.
    pub fn capture(conversation: &Conversation, states: &[Arc<dyn SessionState>]) -> Self {
        Self {
            id: new_id(),
            format: SESSION_FORMAT,
            conversation: conversation.clone(),
            state: states
                .iter()
                .map(|s| (s.key().to_owned(), s.save()))
                .collect(),
            forked_from: None,
        }
    }

    /// Updates this session from a later point of the same conversation,
    /// keeping its id.
    pub fn update(&mut self, conversation: &Conversation, states: &[Arc<dyn SessionState>]) {
        self.conversation = conversation.clone();
        for state in states {
            self.state.insert(state.key().to_owned(), state.save());
        }
    }

    /// The conversation to run next (approvals included), after putting
    /// back every state in `states` that the session has. The history is
    /// repaired before the next request as always (a call interrupted by a
    /// crash gets an "interrupted" result), unless the run is continued
    /// with [`Agent::resume`](crate::Agent::resume), which runs such calls
    /// (and finishes a turn waiting for approvals).
    pub fn resume(
        &self,
        states: &[Arc<dyn SessionState>],
    ) -> Result<(Conversation, Self), SessionError> {
        for state in states {
            if let Some(saved) = self.state.get(state.key()) {
                state
                    .restore(saved)
                    .map_err(|message| SessionError::State {
                        key: state.key().to_owned(),
                        message,
                    })?;
            }
        }
        Ok((self.conversation.clone(), self.clone()))
    }

    /// A new session sharing the first `at` messages (at most all of them),
    /// the approvals, the tool state and the provenance ledger (all of it:
    /// a store's [`fork`](SessionStore::fork) keeps only what was read
    /// before the fork point).
    pub fn fork(&self, at: usize) -> Self {
        let run = &self.conversation;
        let at = at.min(run.messages.len());
        Self {
            id: new_id(),
            format: SESSION_FORMAT,
            conversation: Conversation {
                messages: run.messages[..at].to_vec(),
                session_approvals: run.session_approvals.clone(),
                provenance: run.provenance.clone(),
                // A fork before the deferred turn's calls does not wait for it.
                deferred: run.deferred.clone().filter(|_| at == run.messages.len()),
                // The fork's calls are its own: their keys must differ.
                run_key: None,
            },
            state: self.state.clone(),
            forked_from: Some(ForkPoint {
                session: self.id.clone(),
                at,
            }),
        }
    }

    /// The session as JSON ([`SESSION_FORMAT`]).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a session of any known format, migrating older ones.
    pub fn from_json(text: &str) -> Result<Self, SessionError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| SessionError::Format(e.to_string()))?;
        let format = value.get("format").and_then(serde_json::Value::as_u64);
        match format {
            Some(found) if found > u64::from(SESSION_FORMAT) => Err(SessionError::TooNew {
                found: u32::try_from(found).unwrap_or(u32::MAX),
            }),
            Some(_) => {
                serde_json::from_value(value).map_err(|e| SessionError::Format(e.to_string()))
            }
            // Format 0: a serialised Conversation, `{"messages": [...]}`.
            None => {
                let conversation: Conversation = serde_json::from_value(value)
                    .map_err(|e| SessionError::Format(e.to_string()))?;
                Ok(Self::capture(&conversation, &[]))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Counter(Mutex<u64>);

    impl SessionState for Counter {
        fn key(&self) -> &str {
            "counter"
        }
        fn save(&self) -> serde_json::Value {
            serde_json::json!(*self.0.lock().unwrap())
        }
        fn restore(&self, state: &serde_json::Value) -> Result<(), String> {
            *self.0.lock().unwrap() = state.as_u64().ok_or("not a number")?;
            Ok(())
        }
    }

    #[test]
    fn state_approvals_and_messages_survive_json() {
        let counter: Arc<dyn SessionState> = Arc::new(Counter(Mutex::new(7)));
        let mut conversation = Conversation::new();
        conversation.push(Message::user("hi"));
        conversation.session_approvals.insert("shell".into());
        let session = Session::capture(&conversation, std::slice::from_ref(&counter));
        let read = Session::from_json(&session.to_json()).unwrap();
        assert_eq!(read, session);
        let fresh = Arc::new(Counter(Mutex::new(0)));
        let states: Vec<Arc<dyn SessionState>> = vec![fresh.clone()];
        let (conversation, _) = read.resume(&states).unwrap();
        assert_eq!(*fresh.0.lock().unwrap(), 7);
        assert!(conversation.session_approvals.contains("shell"));
        assert_eq!(conversation.messages.len(), 1);
    }

    #[test]
    fn a_bare_conversation_is_migrated_and_a_newer_format_refused() {
        let mut conversation = Conversation::new();
        conversation.push(Message::user("old"));
        let old = serde_json::to_string(&conversation).unwrap();
        let session = Session::from_json(&old).unwrap();
        assert_eq!(session.format, SESSION_FORMAT);
        assert_eq!(session.conversation.messages, conversation.messages);
        let newer = r#"{"format": 99, "id": "x", "messages": []}"#;
        assert!(matches!(
            Session::from_json(newer),
            Err(SessionError::TooNew { found: 99 })
        ));
    }

    #[test]
    fn a_fork_shares_the_prefix_and_names_its_parent() {
        let mut conversation = Conversation::new();
        for n in 0..5 {
            conversation.push(Message::user(format!("m{n}")));
        }
        let session = Session::capture(&conversation, &[]);
        let fork = session.fork(3);
        assert_ne!(fork.id, session.id);
        assert_eq!(
            fork.conversation.messages,
            session.conversation.messages[..3]
        );
        assert_eq!(
            fork.forked_from,
            Some(ForkPoint {
                session: session.id.clone(),
                at: 3
            })
        );
    }
}
