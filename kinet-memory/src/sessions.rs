//! Sessions in SQLite: an append-only journal per session (WAL), in the
//! memory file or a file of their own.
//!
//! A host opens the store, creates or loads a session, hands the agent the
//! session's journal ([`Sessions::journal`](kinet_core::builder::Sessions::journal))
//! and records its own input through it; every model turn and every tool
//! result is then written as it happens, with the tools' state after each
//! result. After a crash, `SessionStore::load` gives back
//! everything that completed, and the next request's repair answers the
//! call that was running with an "interrupted" result.

use std::path::Path;
use std::sync::{Arc, Mutex};

use kinet_core::session::{
    ForkPoint, JournalEntry, Session, SessionInfo, SessionState, SessionStore, StoreError,
    StoreJournal,
};
use rusqlite::{Connection, OptionalExtension, params};

use crate::MemoryError;

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

/// `ttl` after `now` (ms since the epoch), saturating.
fn after(now: i64, ttl: std::time::Duration) -> i64 {
    now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

fn sql(error: rusqlite::Error) -> MemoryError {
    MemoryError::Sql(error.to_string())
}

impl SqliteSessionStore {
    /// Opens (creating and migrating) the file; it may be the memory file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MemoryError> {
        let conn = crate::sqlite::db::open_at(path.as_ref(), crate::sqlite::db::SCHEMA_VERSION)?;
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
        let entries = initial_entries(session)?;
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
            for (seq, (kind, body)) in entries.iter().enumerate() {
                tx.execute(
                    "INSERT INTO session_entries (session, seq, kind, body) VALUES (?1, ?2, ?3, ?4)",
                    params![session.id, seq as i64, kind, body],
                )
                .map_err(sql)?;
            }
            tx.commit().map_err(sql)
        })
    }

    /// Appends one entry to a session's journal.
    pub fn append(&self, id: &str, entry: &JournalEntry) -> Result<(), MemoryError> {
        self.append_all(id, std::slice::from_ref(entry))
    }

    /// Appends entries to a session's journal in one transaction.
    pub fn append_all(&self, id: &str, entries: &[JournalEntry]) -> Result<(), MemoryError> {
        let rows = entries
            .iter()
            .map(|entry| {
                serde_json::to_string(entry)
                    .map(|body| (kind(entry), body))
                    .map_err(|e| MemoryError::Io(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.with(|conn| {
            let tx = conn.transaction().map_err(sql)?;
            let changed = tx
                .execute("UPDATE sessions SET updated_at = ?2 WHERE id = ?1", params![id, now_ms()])
                .map_err(sql)?;
            if changed == 0 {
                return Err(MemoryError::Invalid(format!("there is no session `{id}`")));
            }
            for (kind, body) in &rows {
                tx.execute(
                    "INSERT INTO session_entries (session, seq, kind, body) VALUES (?1, \
                     (SELECT COALESCE(MAX(seq), -1) + 1 FROM session_entries WHERE session = ?1), ?2, ?3)",
                    params![id, kind, body],
                )
                .map_err(sql)?;
            }
            tx.commit().map_err(sql)
        })
    }

    /// The journal of session `id` for an agent
    /// ([`Sessions::journal`](kinet_core::builder::Sessions::journal)): each
    /// entry written as it comes, and the state of `states` after every tool
    /// result.
    pub fn journal(&self, id: &str, states: Vec<Arc<dyn SessionState>>) -> Arc<StoreJournal> {
        StoreJournal::new(Arc::new(self.clone()), id, states)
    }
}

impl SessionStore for SqliteSessionStore {
    fn create(&self, session: &Session) -> Result<(), StoreError> {
        Ok(SqliteSessionStore::create(self, session)?)
    }

    fn append(&self, id: &str, entry: &JournalEntry) -> Result<(), StoreError> {
        Ok(SqliteSessionStore::append(self, id, entry)?)
    }

    fn append_all(&self, id: &str, entries: &[JournalEntry]) -> Result<(), StoreError> {
        Ok(SqliteSessionStore::append_all(self, id, entries)?)
    }

    fn entries(&self, id: &str) -> Result<Option<Vec<JournalEntry>>, StoreError> {
        Ok(self.with(|conn| {
            let exists = conn
                .query_row("SELECT 1 FROM sessions WHERE id = ?1", params![id], |_| {
                    Ok(())
                })
                .optional()
                .map_err(sql)?;
            if exists.is_none() {
                return Ok(None);
            }
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
            Ok(Some(entries))
        })?)
    }

    fn list(&self) -> Result<Vec<SessionInfo>, StoreError> {
        Ok(self.with(|conn| {
            let mut statement = conn
                .prepare(
                    "SELECT s.id, s.created_at, s.updated_at, \
                     (SELECT COUNT(*) FROM session_entries e WHERE e.session = s.id AND e.kind = 'message') \
                     FROM sessions s ORDER BY s.updated_at DESC, s.id",
                )
                .map_err(sql)?;
            let rows = statement
                .query_map([], |row| {
                    Ok(SessionInfo::new(
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        usize::try_from(row.get::<_, i64>(3)?).unwrap_or(0),
                    ))
                })
                .map_err(sql)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(sql)
        })?)
    }

    fn delete(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.with(|conn| {
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
        })?)
    }

    fn claim(&self, id: &str, holder: &str, ttl: std::time::Duration) -> Result<bool, StoreError> {
        let now = now_ms();
        let until = after(now, ttl);
        // One statement: SQLite's write lock makes the check and the claim
        // one step for every process sharing the file.
        Ok(self.with(|conn| {
            let granted = conn
                .execute(
                    "INSERT INTO session_claims (session, holder, expires_at) VALUES (?1, ?2, ?3) \
                     ON CONFLICT(session) DO UPDATE SET holder = excluded.holder, \
                     expires_at = excluded.expires_at \
                     WHERE session_claims.holder = excluded.holder OR session_claims.expires_at <= ?4",
                    params![id, holder, until, now],
                )
                .map_err(sql)?;
            Ok(granted == 1)
        })?)
    }

    fn renew(&self, id: &str, holder: &str, ttl: std::time::Duration) -> Result<bool, StoreError> {
        let until = after(now_ms(), ttl);
        Ok(self.with(|conn| {
            let renewed = conn
                .execute(
                    "UPDATE session_claims SET expires_at = ?3 WHERE session = ?1 AND holder = ?2",
                    params![id, holder, until],
                )
                .map_err(sql)?;
            Ok(renewed == 1)
        })?)
    }

    fn release(&self, id: &str, holder: &str) -> Result<(), StoreError> {
        Ok(self.with(|conn| {
            conn.execute(
                "DELETE FROM session_claims WHERE session = ?1 AND holder = ?2",
                params![id, holder],
            )
            .map_err(sql)?;
            Ok(())
        })?)
    }

    fn fork_point(&self, id: &str) -> Result<Option<ForkPoint>, StoreError> {
        let row: Option<(Option<String>, Option<i64>)> = self.with(|conn| {
            conn.query_row(
                "SELECT forked_from, fork_at FROM sessions WHERE id = ?1",
                params![id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(sql)
        })?;
        Ok(match row {
            Some((Some(session), Some(at))) => Some(ForkPoint {
                session,
                at: usize::try_from(at).unwrap_or(0),
            }),
            _ => None,
        })
    }
}

/// The first entries of a new session's journal, as (kind, JSON body).
pub(crate) fn initial_entries(
    session: &Session,
) -> Result<Vec<(&'static str, String)>, MemoryError> {
    session
        .journal_entries()
        .into_iter()
        .map(|entry| {
            let body = serde_json::to_string(&entry).map_err(|e| MemoryError::Io(e.to_string()))?;
            Ok((kind(&entry), body))
        })
        .collect()
}

/// The kind column of a journal entry.
pub(crate) fn kind(entry: &JournalEntry) -> &'static str {
    match entry {
        JournalEntry::Message { .. } => "message",
        JournalEntry::Approval { .. } => "approval",
        JournalEntry::State { .. } => "state",
        JournalEntry::Seen { .. } => "seen",
        JournalEntry::Deferred { .. } => "deferred",
        JournalEntry::RunKey { .. } => "run_key",
        _ => "other",
    }
}
