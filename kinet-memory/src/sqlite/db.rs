//! The SQLite file: schema migrations, a writer thread, pooled readers.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::{mpsc, oneshot};

use crate::MemoryError;

/// Schema migrations, in order; `PRAGMA user_version` is how many ran.
const MIGRATIONS: &[&str] = &[
    // 1: facts, blocks, history records with full-text search.
    "
    CREATE TABLE facts (
        session TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (session, key)
    );
    CREATE TABLE blocks (
        label TEXT PRIMARY KEY,
        value TEXT NOT NULL,
        char_limit INTEGER NOT NULL,
        read_only INTEGER NOT NULL DEFAULT 0,
        description TEXT NOT NULL DEFAULT '',
        updated_at INTEGER NOT NULL
    );
    CREATE TABLE records (
        id INTEGER PRIMARY KEY,
        session TEXT NOT NULL,
        role TEXT NOT NULL,
        text TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        embedding BLOB,
        embedder TEXT
    );
    CREATE INDEX records_created ON records(created_at);
    CREATE VIRTUAL TABLE records_fts USING fts5(
        text, content='records', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER records_ai AFTER INSERT ON records BEGIN
        INSERT INTO records_fts(rowid, text) VALUES (new.id, new.text);
    END;
    CREATE TRIGGER records_ad AFTER DELETE ON records BEGIN
        INSERT INTO records_fts(records_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END;
    ",
    // 2: knowledge-graph triples with validity intervals.
    "
    CREATE TABLE triples (
        id INTEGER PRIMARY KEY,
        subject TEXT NOT NULL,
        predicate TEXT NOT NULL,
        object TEXT NOT NULL,
        source TEXT NOT NULL DEFAULT '',
        valid_from INTEGER NOT NULL,
        valid_to INTEGER,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX triples_subject ON triples(subject, predicate);
    CREATE INDEX triples_object ON triples(object);
    ",
    // 3: sessions and their journals (kinet_memory::SqliteSessionStore).
    "
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        forked_from TEXT,
        fork_at INTEGER
    );
    CREATE TABLE session_entries (
        session TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session, seq)
    );
    ",
    // 4: the turn a record was made in, so recall can leave out the turn
    // in progress; per-term document counts for bounding full-text recall.
    "
    ALTER TABLE records ADD COLUMN turn TEXT;
    CREATE VIRTUAL TABLE records_vocab USING fts5vocab(records_fts, 'row');
    ",
    // 5: claims on sessions, so processes sharing the file continue a
    // session one at a time.
    "
    CREATE TABLE session_claims (
        session TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_at INTEGER NOT NULL
    );
    ",
    // 6: scopes (user, agent, conversation; '' when unset) on facts,
    // blocks, records and triples: rows written before stay in the empty
    // scope. Records carry their scope's key as a second full-text column,
    // so a scoped full-text query is one FTS5 intersection; the full-text
    // index is rebuilt with it.
    "
    CREATE TABLE facts_scoped (
        scope_user TEXT NOT NULL DEFAULT '',
        scope_agent TEXT NOT NULL DEFAULT '',
        scope_conv TEXT NOT NULL DEFAULT '',
        session TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (scope_user, scope_agent, scope_conv, session, key)
    );
    INSERT INTO facts_scoped(session, key, value, updated_at)
        SELECT session, key, value, updated_at FROM facts;
    DROP TABLE facts;
    ALTER TABLE facts_scoped RENAME TO facts;
    CREATE TABLE blocks_scoped (
        scope_user TEXT NOT NULL DEFAULT '',
        scope_agent TEXT NOT NULL DEFAULT '',
        scope_conv TEXT NOT NULL DEFAULT '',
        label TEXT NOT NULL,
        value TEXT NOT NULL,
        char_limit INTEGER NOT NULL,
        read_only INTEGER NOT NULL DEFAULT 0,
        description TEXT NOT NULL DEFAULT '',
        shared INTEGER NOT NULL DEFAULT 0,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (scope_user, scope_agent, scope_conv, label)
    );
    INSERT INTO blocks_scoped(label, value, char_limit, read_only, description, updated_at)
        SELECT label, value, char_limit, read_only, description, updated_at FROM blocks;
    DROP TABLE blocks;
    ALTER TABLE blocks_scoped RENAME TO blocks;
    CREATE INDEX blocks_label ON blocks(label);
    ALTER TABLE records ADD COLUMN scope_user TEXT NOT NULL DEFAULT '';
    ALTER TABLE records ADD COLUMN scope_agent TEXT NOT NULL DEFAULT '';
    ALTER TABLE records ADD COLUMN scope_conv TEXT NOT NULL DEFAULT '';
    ALTER TABLE records ADD COLUMN scope_key TEXT NOT NULL DEFAULT 'k0';
    CREATE INDEX records_scope ON records(scope_key, id);
    DROP TRIGGER records_ai;
    DROP TRIGGER records_ad;
    DROP TABLE records_vocab;
    DROP TABLE records_fts;
    CREATE VIRTUAL TABLE records_fts USING fts5(
        text, scope_key, content='records', content_rowid='id',
        tokenize='unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER records_ai AFTER INSERT ON records BEGIN
        INSERT INTO records_fts(rowid, text, scope_key) VALUES (new.id, new.text, new.scope_key);
    END;
    CREATE TRIGGER records_ad AFTER DELETE ON records BEGIN
        INSERT INTO records_fts(records_fts, rowid, text, scope_key)
            VALUES ('delete', old.id, old.text, old.scope_key);
    END;
    INSERT INTO records_fts(records_fts) VALUES ('rebuild');
    ALTER TABLE triples ADD COLUMN scope_user TEXT NOT NULL DEFAULT '';
    ALTER TABLE triples ADD COLUMN scope_agent TEXT NOT NULL DEFAULT '';
    ALTER TABLE triples ADD COLUMN scope_conv TEXT NOT NULL DEFAULT '';
    DROP INDEX triples_subject;
    DROP INDEX triples_object;
    CREATE INDEX triples_subject ON triples(scope_user, scope_agent, scope_conv, subject, predicate);
    CREATE INDEX triples_object ON triples(scope_user, scope_agent, scope_conv, object);
    ",
];

/// The schema version this build writes.
pub(crate) const SCHEMA_VERSION: usize = MIGRATIONS.len();

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

/// Opens (creating if needed) and migrates up to `version`.
///
/// While another process is creating the file or switching it to WAL,
/// SQLite can answer "database is locked" at once, without waiting for the
/// busy timeout (it refuses to wait where waiting could deadlock); such
/// opens are tried again for up to 10 s.
pub(crate) fn open_at(path: &Path, version: usize) -> Result<Connection, MemoryError> {
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        match try_open(path, version) {
            Err(error) if is_busy(&error) && started.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            result => return result.map_err(|e| MemoryError::open(path, e)),
        }
    }
}

fn try_open(path: &Path, version: usize) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    configure(&conn)?;
    migrate(&conn, version)?;
    Ok(conn)
}

/// Whether SQLite said the file is busy or locked by another connection.
fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn migrate(conn: &Connection, target: usize) -> rusqlite::Result<()> {
    // IMMEDIATE: two processes opening a new file do not both migrate.
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
        let current = usize::try_from(version).map_err(|_| unknown_version(version))?;
        if current > MIGRATIONS.len() {
            return Err(unknown_version(version));
        }
        for (index, sql) in MIGRATIONS.iter().enumerate().take(target).skip(current) {
            conn.execute_batch(sql)?;
            conn.pragma_update(None, "user_version", (index + 1) as i64)?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT"),
        Err(error) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(error)
        }
    }
}

fn unknown_version(version: i64) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(std::io::Error::other(format!(
        "the file has schema version {version}; this build knows versions up to {}: \
         it was written by a newer kinet",
        MIGRATIONS.len()
    ))))
}

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// One writer connection on its own thread (SQLite allows one writer at a
/// time; a single thread keeps transactions short and ordered) and a pool
/// of reader connections used from `spawn_blocking`.
pub(crate) struct Db {
    path: PathBuf,
    writer: mpsc::UnboundedSender<Job>,
    readers: Mutex<Vec<Connection>>,
}

impl Db {
    pub(crate) fn open(path: &Path) -> Result<Arc<Self>, MemoryError> {
        let conn = open_at(path, SCHEMA_VERSION)?;
        let (writer, mut jobs) = mpsc::unbounded_channel::<Job>();
        std::thread::Builder::new()
            .name("kinet-memory-writer".into())
            .spawn(move || {
                let mut conn = conn;
                while let Some(job) = jobs.blocking_recv() {
                    job(&mut conn);
                }
            })
            .map_err(|e| MemoryError::Io(format!("cannot start the writer thread: {e}")))?;
        Ok(Arc::new(Self {
            path: path.to_path_buf(),
            writer,
            readers: Mutex::new(Vec::new()),
        }))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `work` on the writer connection.
    pub(crate) async fn write<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, MemoryError> + Send + 'static,
    ) -> Result<T, MemoryError> {
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(Box::new(move |conn| {
                let _ = reply.send(work(conn));
            }))
            .map_err(|_| MemoryError::Closed)?;
        answer.await.map_err(|_| MemoryError::Closed)?
    }

    /// Runs `work` on a reader connection.
    pub(crate) async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Connection) -> Result<T, MemoryError> + Send + 'static,
    ) -> Result<T, MemoryError> {
        let db = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let pooled = db.readers.lock().ok().and_then(|mut pool| pool.pop());
            let conn = match pooled {
                Some(conn) => conn,
                None => {
                    let conn = Connection::open_with_flags(
                        &db.path,
                        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                    )
                    .map_err(|e| MemoryError::open(&db.path, e))?;
                    conn.busy_timeout(Duration::from_secs(10))
                        .map_err(|e| MemoryError::open(&db.path, e))?;
                    conn
                }
            };
            let result = work(&conn);
            if let Ok(mut pool) = db.readers.lock()
                && pool.len() < 8
            {
                pool.push(conn);
            }
            result
        })
        .await
        .map_err(|e| MemoryError::Io(format!("reader task failed: {e}")))?
    }
}
