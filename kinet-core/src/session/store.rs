//! Where sessions are kept: a store behind a trait (kinet-memory has the
//! SQLite one), and a journal that writes a run's steps into any store.

use std::sync::{Arc, Mutex};

use super::{Journal, JournalEntry, Session, SessionState};
use crate::message::Message;

/// A store failure, in words a user can act on.
pub type StoreError = Box<dyn std::error::Error + Send + Sync>;

/// A session as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionInfo {
    /// The id.
    pub id: String,
    /// When it was created (ms since the epoch).
    pub created_at: i64,
    /// When its journal last grew (ms since the epoch).
    pub updated_at: i64,
    /// Messages in it.
    pub messages: usize,
}

impl SessionInfo {
    /// A listing entry.
    pub fn new(id: String, created_at: i64, updated_at: i64, messages: usize) -> Self {
        Self {
            id,
            created_at,
            updated_at,
            messages,
        }
    }
}

/// Sessions kept as append-only journals. Calls are quick local writes
/// and reads; they block.
pub trait SessionStore: Send + Sync {
    /// Stores a new session (its messages, approvals and state become the
    /// journal's first entries).
    fn create(&self, session: &Session) -> Result<(), StoreError>;
    /// Appends one entry to a session's journal.
    fn append(&self, id: &str, entry: &JournalEntry) -> Result<(), StoreError>;
    /// Appends `entries` to a session's journal in order, all or none (the
    /// stores kinet ships write them in one transaction; the default
    /// appends one at a time).
    fn append_all(&self, id: &str, entries: &[JournalEntry]) -> Result<(), StoreError> {
        for entry in entries {
            self.append(id, entry)?;
        }
        Ok(())
    }
    /// The journal of `id`, in order (a host re-renders a session from it).
    fn entries(&self, id: &str) -> Result<Option<Vec<JournalEntry>>, StoreError>;
    /// Every session, most recently updated first.
    fn list(&self) -> Result<Vec<SessionInfo>, StoreError>;
    /// Deletes a session; whether there was one.
    fn delete(&self, id: &str) -> Result<bool, StoreError>;
    /// Where `id` was forked from, if it was.
    fn fork_point(&self, id: &str) -> Result<Option<super::ForkPoint>, StoreError>;

    /// The session as its journal says, or `None` if there is none.
    fn load(&self, id: &str) -> Result<Option<Session>, StoreError> {
        let Some(entries) = self.entries(id)? else {
            return Ok(None);
        };
        let mut session = Session::empty(id);
        session.forked_from = self.fork_point(id)?;
        for entry in entries {
            session.apply(entry);
        }
        Ok(Some(session))
    }

    /// A new session sharing the first `at` messages of `id` (and its
    /// approvals and tool state); its id.
    /// The approvals and tool state are those the journal held when its
    /// `at`-th message was written.
    fn fork(&self, id: &str, at: usize) -> Result<String, StoreError> {
        let entries = self
            .entries(id)?
            .ok_or_else(|| format!("there is no session `{id}`"))?;
        let mut upto = Session::empty(id);
        for entry in entries {
            if upto.conversation.messages.len() == at
                && matches!(entry, JournalEntry::Message { .. })
            {
                break;
            }
            upto.apply(entry);
        }
        let fork = upto.fork(at);
        self.create(&fork)?;
        Ok(fork.id)
    }

    /// Claims session `id` for `holder` until `ttl` has passed, so that
    /// processes sharing the store continue a session one at a time;
    /// whether it was granted (the session was free, its claim had expired,
    /// or `holder` already held it). A claim is advisory: writes do not
    /// check it. The default grants every claim, which is right for a
    /// store one process uses alone (the MCP server also keeps its own
    /// in-process set); a store shared between processes (the SQLite one)
    /// keeps claims in the store.
    fn claim(&self, id: &str, holder: &str, ttl: std::time::Duration) -> Result<bool, StoreError> {
        let _ = (id, holder, ttl);
        Ok(true)
    }

    /// Extends `holder`'s claim on `id` to `ttl` from now; whether it
    /// still held it. Never creates a claim (a renewal racing a release
    /// leaves none behind). The default says it does.
    fn renew(&self, id: &str, holder: &str, ttl: std::time::Duration) -> Result<bool, StoreError> {
        let _ = (id, holder, ttl);
        Ok(true)
    }

    /// Gives up `holder`'s claim on `id` (nothing if it holds none).
    fn release(&self, id: &str, holder: &str) -> Result<(), StoreError> {
        let _ = (id, holder);
        Ok(())
    }

    /// Claims `id` for `holder` (as [`claim`](Self::claim)) and, when
    /// granted, reads it (as [`load`](Self::load)): what a replica does
    /// before continuing a session. A store on a network server answers
    /// both in one round trip (the PostgreSQL store does); the default
    /// claims, then loads.
    fn claim_and_load(
        &self,
        id: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<Claimed, StoreError> {
        if !self.claim(id, holder, ttl)? {
            return Ok(Claimed::Busy);
        }
        Ok(Claimed::Held(self.load(id)?))
    }

    /// Appends `entries` (as [`append_all`](Self::append_all)) and then
    /// gives up `holder`'s claim on `id` (as [`release`](Self::release)):
    /// what a replica does when it has continued a session. The claim is
    /// given up only once the entries are stored; a store on a network
    /// server does both in one round trip (the PostgreSQL store does); the
    /// default appends, then releases.
    fn append_and_release(
        &self,
        id: &str,
        entries: &[JournalEntry],
        holder: &str,
    ) -> Result<(), StoreError> {
        self.append_all(id, entries)?;
        self.release(id, holder)
    }

    /// The same store's claim calls for an async caller, when the store can
    /// wait for them without blocking a thread (the PostgreSQL store can:
    /// its calls then wait on the caller's runtime instead of on a
    /// blocking thread that waits for the store's own). The MCP server's
    /// stateless turns use them for their claim, renewals, save and
    /// release. `None` (the default) has callers run the blocking calls
    /// on their runtime's blocking threads.
    fn nonblocking(&self) -> Option<&dyn AsyncClaims> {
        None
    }
}

/// [`SessionStore`]'s claim calls without blocking a thread, for a store
/// on a network server (see [`SessionStore::nonblocking`]). Each means
/// what the blocking call of the same name means.
#[async_trait::async_trait]
pub trait AsyncClaims: Send + Sync {
    /// As [`SessionStore::claim_and_load`].
    async fn claim_and_load(
        &self,
        id: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<Claimed, StoreError>;
    /// As [`SessionStore::renew`].
    async fn renew(
        &self,
        id: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<bool, StoreError>;
    /// As [`SessionStore::release`].
    async fn release(&self, id: &str, holder: &str) -> Result<(), StoreError>;
    /// As [`SessionStore::append_and_release`].
    async fn append_and_release(
        &self,
        id: &str,
        entries: &[JournalEntry],
        holder: &str,
    ) -> Result<(), StoreError>;
}

/// What [`SessionStore::claim_and_load`] found.
// A value returned once per claim and matched at once: not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Claimed {
    /// The claim is the caller's: the session as its journal says, or
    /// `None` when there is no such session.
    Held(Option<Session>),
    /// Another holder's unexpired claim is on the session.
    Busy,
}

/// A run's journal into a [`SessionStore`]: each entry written as it comes,
/// and the state of the given tools after every tool result. Writes that
/// fail do not stop the run; [`take_errors`](Self::take_errors) reports them.
pub struct StoreJournal {
    store: Arc<dyn SessionStore>,
    id: String,
    states: Vec<Arc<dyn SessionState>>,
    errors: Mutex<Vec<String>>,
    /// Messages the session's journal holds.
    messages: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for StoreJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreJournal")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl StoreJournal {
    /// The journal of session `id` in `store`, saving `states` after each
    /// tool result.
    pub fn new(
        store: Arc<dyn SessionStore>,
        id: impl Into<String>,
        states: Vec<Arc<dyn SessionState>>,
    ) -> Arc<Self> {
        let id = id.into();
        let messages = match store.entries(&id) {
            Ok(Some(entries)) => entries
                .iter()
                .filter(|e| matches!(e, JournalEntry::Message { .. }))
                .count(),
            _ => 0,
        };
        Arc::new(Self {
            store,
            id,
            states,
            errors: Mutex::new(Vec::new()),
            messages: std::sync::atomic::AtomicUsize::new(messages),
        })
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Writes that failed since the last call (a full disk, say).
    pub fn take_errors(&self) -> Vec<String> {
        self.errors
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default()
    }
}

impl Journal for StoreJournal {
    fn begin(&self, messages: &[Message]) {
        let held = self.messages.load(std::sync::atomic::Ordering::SeqCst);
        for message in messages.iter().skip(held) {
            self.message(message);
        }
    }

    fn record(&self, entry: &JournalEntry) {
        let mut failed = Vec::new();
        if let Err(error) = self.store.append(&self.id, entry) {
            failed.push(error.to_string());
        } else if matches!(entry, JournalEntry::Message { .. }) {
            self.messages
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        if matches!(
            entry,
            JournalEntry::Message {
                message: Message::Tool { .. }
            }
        ) {
            for state in &self.states {
                let entry = JournalEntry::State {
                    key: state.key().to_owned(),
                    value: state.save(),
                };
                if let Err(error) = self.store.append(&self.id, &entry) {
                    failed.push(error.to_string());
                }
            }
        }
        if !failed.is_empty()
            && let Ok(mut errors) = self.errors.lock()
        {
            errors.extend(failed);
        }
    }
}
