//! The embedded SQLite backend: [`MemoryStore`].
//!
//! One file (bundled SQLite, WAL, busy timeout): a writer thread and pooled
//! readers ([`db`]), vectors held in memory quantised for the scan
//! ([`vector`]), FTS5 for full text, bounded so frequent words cost little
//! ([`recall`]).

pub(crate) mod db;
mod recall;
mod triples;
pub(crate) mod vector;

use std::path::Path;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use crate::MemoryError;
use crate::backend::now;
use crate::backend::{MemoryBackend, embed_records};
use crate::embed::Embedder;
use crate::model::{
    Block, BlockEdit, BlockSpec, MemoryConfig, NewRecord, NewTriple, Recall, RecallQuery, Triple,
    TripleQuery, no_such_block,
};
use db::Db;
use vector::VectorIndex;

pub(crate) struct Inner {
    pub(crate) db: Arc<Db>,
    pub(crate) embedder: Option<Arc<dyn Embedder>>,
    pub(crate) index: RwLock<VectorIndex>,
}

/// The embedded memory backend: one SQLite file (WAL, busy timeout), safe
/// for several agents in one process (clone it) and several processes on
/// one file. Its API is the [`MemoryBackend`] trait.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use kinet_memory::{MemoryBackend, MemoryConfig, MemoryStore, RecallQuery};
///
/// let dir = tempfile::tempdir().unwrap();
/// let store = MemoryStore::open(dir.path().join("memory.db"), MemoryConfig::default()).await.unwrap();
/// store.add_record("s1", "user", "We deploy the API with blue-green releases.").await.unwrap();
/// let recall = store.recall(&RecallQuery::new("deployment")).await.unwrap();
/// assert_eq!(recall.hits.len(), 1);
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("path", &self.inner.db.path())
            .field(
                "embedder",
                &self.inner.embedder.as_ref().map(|e| e.name().to_owned()),
            )
            .finish()
    }
}

pub(crate) fn sql(error: rusqlite::Error) -> MemoryError {
    MemoryError::Sql(error.to_string())
}

impl MemoryStore {
    /// Opens (or creates, and migrates) the store at `path`.
    pub async fn open(path: impl AsRef<Path>, config: MemoryConfig) -> Result<Self, MemoryError> {
        let path = path.as_ref().to_path_buf();
        let db = tokio::task::spawn_blocking(move || Db::open(&path))
            .await
            .map_err(|e| MemoryError::Io(e.to_string()))??;
        let dims = config.embedder.as_ref().map_or(0, |e| e.dims());
        let name = config
            .embedder
            .as_ref()
            .map(|e| e.name().to_owned())
            .unwrap_or_default();
        let store = Self {
            inner: Arc::new(Inner {
                db,
                embedder: config.embedder,
                index: RwLock::new(VectorIndex::new(name, dims)),
            }),
        };
        for spec in config.blocks {
            store.define_block(spec).await?;
        }
        Ok(store)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.inner.db.path()
    }
}

#[async_trait]
impl MemoryBackend for MemoryStore {
    fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.inner.embedder.as_ref()
    }

    async fn set_fact(&self, session: &str, key: &str, value: &str) -> Result<(), MemoryError> {
        let (session, key, value) = (session.to_owned(), key.to_owned(), value.to_owned());
        self.inner
            .db
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO facts(session, key, value, updated_at) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(session, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                    params![session, key, value, now()],
                )
                .map_err(sql)?;
                Ok(())
            })
            .await
    }

    async fn fact(&self, session: &str, key: &str) -> Result<Option<String>, MemoryError> {
        let (session, key) = (session.to_owned(), key.to_owned());
        self.inner
            .db
            .read(move |conn| {
                conn.query_row(
                    "SELECT value FROM facts WHERE session = ?1 AND key = ?2",
                    params![session, key],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql)
            })
            .await
    }

    async fn facts(&self, session: &str) -> Result<Vec<(String, String)>, MemoryError> {
        let session = session.to_owned();
        self.inner
            .db
            .read(move |conn| {
                let mut statement = conn
                    .prepare("SELECT key, value FROM facts WHERE session = ?1 ORDER BY key")
                    .map_err(sql)?;
                let rows = statement
                    .query_map(params![session], |row| Ok((row.get(0)?, row.get(1)?)))
                    .map_err(sql)?;
                rows.collect::<Result<Vec<_>, _>>().map_err(sql)
            })
            .await
    }

    async fn define_block(&self, spec: BlockSpec) -> Result<(), MemoryError> {
        self.inner
            .db
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO blocks(label, value, char_limit, read_only, description, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT(label) DO UPDATE SET char_limit = excluded.char_limit,
                        read_only = excluded.read_only, description = excluded.description",
                    params![spec.label, spec.initial, spec.limit as i64, spec.read_only, spec.description, now()],
                )
                .map_err(sql)?;
                Ok(())
            })
            .await
    }

    async fn blocks(&self) -> Result<Vec<Block>, MemoryError> {
        self.inner
            .db
            .read(|conn| {
                let mut statement = conn
                    .prepare("SELECT label, value, char_limit, read_only, description FROM blocks ORDER BY label")
                    .map_err(sql)?;
                let rows = statement
                    .query_map([], block_from_row)
                    .map_err(sql)?;
                rows.collect::<Result<Vec<_>, _>>().map_err(sql)
            })
            .await
    }

    async fn edit_block(&self, label: &str, edit: BlockEdit) -> Result<Block, MemoryError> {
        let label = label.to_owned();
        self.inner
            .db
            .write(move |conn| {
                let tx = conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .map_err(sql)?;
                let block = tx
                    .query_row(
                        "SELECT label, value, char_limit, read_only, description FROM blocks WHERE label = ?1",
                        params![label],
                        block_from_row,
                    )
                    .optional()
                    .map_err(sql)?;
                let Some(mut block) = block else {
                    let known: Vec<String> = tx
                        .prepare("SELECT label FROM blocks ORDER BY label")
                        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
                        .unwrap_or_default();
                    return Err(no_such_block(&label, &known));
                };
                let value = edit.apply(&block)?;
                tx.execute(
                    "UPDATE blocks SET value = ?2, updated_at = ?3 WHERE label = ?1",
                    params![label, value, now()],
                )
                .map_err(sql)?;
                tx.commit().map_err(sql)?;
                block.value = value;
                Ok(block)
            })
            .await
    }

    async fn add_records(&self, records: &[NewRecord]) -> Result<Vec<i64>, MemoryError> {
        let texts: Vec<String> = records.iter().map(|r| r.text.clone()).collect();
        let embedded = embed_records(self.inner.embedder.as_ref(), &texts).await;
        let records = records.to_vec();
        let created = now();
        self.inner
            .db
            .write(move |conn| {
                let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql)?;
                let mut ids = Vec::with_capacity(records.len());
                {
                    let mut insert = tx
                        .prepare_cached(
                            "INSERT INTO records(session, role, text, created_at, embedding, embedder, turn)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        )
                        .map_err(sql)?;
                    for (index, record) in records.iter().enumerate() {
                        let (blob, embedder) = match &embedded {
                            Some((vectors, name)) => (
                                Some(vectors[index].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()),
                                Some(name.as_str()),
                            ),
                            None => (None, None),
                        };
                        insert
                            .execute(params![record.session, record.role, record.text, created, blob, embedder, record.turn])
                            .map_err(sql)?;
                        ids.push(tx.last_insert_rowid());
                    }
                }
                tx.commit().map_err(sql)?;
                Ok(ids)
            })
            .await
    }

    async fn record_count(&self) -> Result<i64, MemoryError> {
        self.inner
            .db
            .read(|conn| {
                conn.query_row("SELECT count(*) FROM records", [], |r| r.get(0))
                    .map_err(sql)
            })
            .await
    }

    async fn recall(&self, query: &RecallQuery) -> Result<Recall, MemoryError> {
        self.recall_records(query).await
    }

    async fn add_triple(&self, triple: NewTriple) -> Result<(Triple, Vec<String>), MemoryError> {
        self.insert_triple(triple).await
    }

    async fn invalidate_triple(&self, id: i64) -> Result<bool, MemoryError> {
        self.end_triple(id).await
    }

    async fn query_triples(&self, query: TripleQuery) -> Result<Vec<Triple>, MemoryError> {
        self.select_triples(query).await
    }
}

pub(crate) fn row_to_triple(row: &rusqlite::Row<'_>) -> rusqlite::Result<Triple> {
    Ok(Triple {
        id: row.get(0)?,
        subject: row.get(1)?,
        predicate: row.get(2)?,
        object: row.get(3)?,
        source: row.get(4)?,
        valid_from: row.get(5)?,
        valid_to: row.get(6)?,
    })
}

/// A `blocks` row selected as `label, value, char_limit, read_only,
/// description`.
fn block_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Block> {
    Ok(Block {
        label: row.get(0)?,
        value: row.get(1)?,
        limit: usize::try_from(row.get::<_, i64>(2)?).unwrap_or(0),
        read_only: row.get(3)?,
        description: row.get(4)?,
    })
}
