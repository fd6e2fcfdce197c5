//! Sessions in SQLite: an append-only journal per session (WAL), in the
//! memory file or a file of their own.
//!
//! A host opens the store, creates or loads a session, hands the agent the
//! session's journal ([`AgentBuilder::journal`](kinet_core::AgentBuilder::journal))
//! and records its own input through it; every model turn and every tool
//! result is then written as it happens, with the tools' state after each
//! result. After a crash, [`load`](SqliteSessionStore::load) gives back
//! everything that completed, and the next request's repair answers the
//! call that was running with an "interrupted" result.

use std::path::Path;
use std::sync::{Arc, Mutex};

use kinet_core::session::{ForkPoint, Journal, JournalEntry, Session, SessionState};
use rusqlite::{Connection, OptionalExtension, params};

use crate::MemoryError;

/// A session as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// Sessions in a SQLite file (WAL). Cheap to clone.
#[derive(Clone)]
pub struct SqliteSessionStore {
    conn: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for SqliteSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSessionStore").finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn sql(error: rusqlite::Error) -> MemoryError {
    MemoryError::Sql(error.to_string())
}

impl SqliteSessionStore {
    /// Opens (creating and migrating) the file; it may be the memory file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MemoryError> {
        let conn = crate::db::open_at(path.as_ref(), crate::db::SCHEMA_VERSION)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    fn with<T>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, MemoryError>,
    ) -> Result<T, MemoryError> {
        let mut conn = self.conn.lock().map_err(|_| MemoryError::Closed)?;
        work(&mut conn)
    }

    /// Stores `session` (its messages, approvals and state become the
    /// journal's first entries).
    pub fn create(&self, session: &Session) -> Result<(), MemoryError> {
        self.with(|conn| {
            let tx = conn.transaction().map_err(sql)?;
            let now = now_ms();
            tx.execute(
                "INSERT INTO sessions (id, created_at, updated_at, forked_from, fork_at) VALUES (?1, ?2, ?2, ?3, ?4)",
                params![
                    session.id,
                    now,
                    session.forked_from.as_ref().map(|f| f.session.clone()),
                    session.forked_from.as_ref().map(|f| f.at as i64),
                ],
            )
            .map_err(sql)?;
            let mut seq = 0i64;
            let mut insert = |entry: JournalEntry| -> Result<(), MemoryError> {
                let body = serde_json::to_string(&entry).map_err(|e| MemoryError::Io(e.to_string()))?;
                tx.execute(
                    "INSERT INTO session_entries (session, seq, kind, body) VALUES (?1, ?2, ?3, ?4)",
                    params![session.id, seq, kind(&entry), body],
                )
                .map_err(sql)?;
                seq += 1;
                Ok(())
            };
            for message in &session.messages {
                insert(JournalEntry::Message {
                    message: message.clone(),
                })?;
            }
            for tool in &session.approvals {
                insert(JournalEntry::Approval { tool: tool.clone() })?;
            }
            for (key, value) in &session.state {
                insert(JournalEntry::State {
                    key: key.clone(),
                    value: value.clone(),
                })?;
            }
            tx.commit().map_err(sql)
        })
    }

    /// Appends one entry to a session's journal.
    pub fn append(&self, id: &str, entry: &JournalEntry) -> Result<(), MemoryError> {
        let body = serde_json::to_string(entry).map_err(|e| MemoryError::Io(e.to_string()))?;
        self.with(|conn| {
            let tx = conn.transaction().map_err(sql)?;
            let changed = tx
                .execute("UPDATE sessions SET updated_at = ?2 WHERE id = ?1", params![id, now_ms()])
                .map_err(sql)?;
            if changed == 0 {
                return Err(MemoryError::Invalid(format!("there is no session `{id}`")));
            }
            tx.execute(
                "INSERT INTO session_entries (session, seq, kind, body) VALUES (?1, \
                 (SELECT COALESCE(MAX(seq), -1) + 1 FROM session_entries WHERE session = ?1), ?2, ?3)",
                params![id, kind(entry), body],
            )
            .map_err(sql)?;
            tx.commit().map_err(sql)
        })
    }

    /// The session as its journal says, or `None` if there is none.
    pub fn load(&self, id: &str) -> Result<Option<Session>, MemoryError> {
        self.with(|conn| {
            let fork: Option<(Option<String>, Option<i64>)> = conn
                .query_row(
                    "SELECT forked_from, fork_at FROM sessions WHERE id = ?1",
                    params![id],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()
                .map_err(sql)?;
            let Some((forked_from, fork_at)) = fork else {
                return Ok(None);
            };
            let mut session = Session::empty(id);
            if let (Some(parent), Some(at)) = (forked_from, fork_at) {
                session.forked_from = Some(ForkPoint {
                    session: parent,
                    at: usize::try_from(at).unwrap_or(0),
                });
            }
            Ok(Some(session))
        })?
        .map(|mut session| {
            for entry in self.entries(id)? {
                session.apply(entry);
            }
            Ok(session)
        })
        .transpose()
    }

    /// The journal of `id` in order, for a host that re-renders a session
    /// step by step.
    pub fn entries(&self, id: &str) -> Result<Vec<JournalEntry>, MemoryError> {
        self.with(|conn| {
            let mut statement = conn
                .prepare("SELECT body FROM session_entries WHERE session = ?1 ORDER BY seq")
                .map_err(sql)?;
            let bodies = statement
                .query_map(params![id], |row| row.get::<_, String>(0))
                .map_err(sql)?;
            let mut entries = Vec::new();
            for body in bodies {
                let body = body.map_err(sql)?;
                entries.push(serde_json::from_str(&body).map_err(|e| {
                    MemoryError::Io(format!("a journal entry of `{id}` is unreadable: {e}"))
                })?);
            }
            Ok(entries)
        })
    }

    /// Every session, most recently updated first.
    pub fn list(&self) -> Result<Vec<SessionInfo>, MemoryError> {
        self.with(|conn| {
            let mut statement = conn
                .prepare(
                    "SELECT s.id, s.created_at, s.updated_at, \
                     (SELECT COUNT(*) FROM session_entries e WHERE e.session = s.id AND e.kind = 'message') \
                     FROM sessions s ORDER BY s.updated_at DESC, s.id",
                )
                .map_err(sql)?;
            let rows = statement
                .query_map([], |row| {
                    Ok(SessionInfo {
                        id: row.get(0)?,
                        created_at: row.get(1)?,
                        updated_at: row.get(2)?,
                        messages: usize::try_from(row.get::<_, i64>(3)?).unwrap_or(0),
                    })
                })
                .map_err(sql)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(sql)
        })
    }

    /// Deletes a session and its journal; whether there was one.
    pub fn delete(&self, id: &str) -> Result<bool, MemoryError> {
        self.with(|conn| {
            let tx = conn.transaction().map_err(sql)?;
            tx.execute(
                "DELETE FROM session_entries WHERE session = ?1",
                params![id],
            )
            .map_err(sql)?;
            let gone = tx
                .execute("DELETE FROM sessions WHERE id = ?1", params![id])
                .map_err(sql)?;
            tx.commit().map_err(sql)?;
            Ok(gone > 0)
        })
    }

    /// A new session sharing the first `at` messages of `id` (and its
    /// approvals and tool state); its id.
    pub fn fork(&self, id: &str, at: usize) -> Result<String, MemoryError> {
        let session = self
            .load(id)?
            .ok_or_else(|| MemoryError::Invalid(format!("there is no session `{id}`")))?;
        let fork = session.fork(at);
        self.create(&fork)?;
        Ok(fork.id)
    }

    /// The journal of session `id` for an agent: it writes each entry as it
    /// comes, and the state of `states` after every tool result.
    pub fn journal(&self, id: &str, states: Vec<Arc<dyn SessionState>>) -> Arc<SqliteJournal> {
        Arc::new(SqliteJournal {
            store: self.clone(),
            id: id.to_owned(),
            states,
            errors: Mutex::new(Vec::new()),
        })
    }
}

fn kind(entry: &JournalEntry) -> &'static str {
    match entry {
        JournalEntry::Message { .. } => "message",
        JournalEntry::Approval { .. } => "approval",
        JournalEntry::State { .. } => "state",
        _ => "other",
    }
}

/// One session's journal (see [`SqliteSessionStore::journal`]).
pub struct SqliteJournal {
    store: SqliteSessionStore,
    id: String,
    states: Vec<Arc<dyn SessionState>>,
    errors: Mutex<Vec<String>>,
}

impl std::fmt::Debug for SqliteJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteJournal")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl SqliteJournal {
    /// The session's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Records the host's own input (a user message) before a run.
    pub fn input(&self, message: &kinet_core::Message) {
        self.record(&JournalEntry::Message {
            message: message.clone(),
        });
    }

    /// Writes that failed since the last call (a full disk, say).
    pub fn take_errors(&self) -> Vec<String> {
        self.errors
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default()
    }
}

impl Journal for SqliteJournal {
    fn record(&self, entry: &JournalEntry) {
        let mut failed = Vec::new();
        if let Err(error) = self.store.append(&self.id, entry) {
            failed.push(error.to_string());
        }
        if matches!(
            entry,
            JournalEntry::Message {
                message: kinet_core::Message::Tool { .. }
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
