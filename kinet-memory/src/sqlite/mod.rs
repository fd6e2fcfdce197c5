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
use rusqlite::{OptionalExtension, named_params, params};

use crate::MemoryError;
use crate::backend::now;
use crate::backend::{MemoryBackend, embed_records};
use crate::embed::Embedder;
use crate::model::{
    Block, BlockEdit, BlockSpec, MemoryConfig, NewRecord, NewTriple, Recall, RecallQuery, Triple,
    TripleQuery, no_such_block,
};
use crate::scope::{Scope, StoredBlock, visible_blocks};
use db::Db;
use triples::SCOPED;
use vector::VectorIndex;

pub(crate) struct Inner {
    pub(crate) db: Arc<Db>,
    pub(crate) embedder: Option<Arc<dyn Embedder>>,
    pub(crate) index: RwLock<VectorIndex>,
    /// The unshared blocks of [`MemoryConfig::blocks`]: every scope's own.
    pub(crate) templates: Vec<BlockSpec>,
}

/// The embedded memory backend: one SQLite file (WAL, busy timeout), safe
/// for several agents in one process (clone it) and several processes on
/// one file. Its API is the [`MemoryBackend`] trait.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use kinet_memory::{MemoryBackend, MemoryConfig, MemoryStore, RecallQuery, Scope};
///
/// let dir = tempfile::tempdir().unwrap();
/// let store = MemoryStore::open(dir.path().join("memory.db"), MemoryConfig::default()).await.unwrap();
/// let alice = Scope::user("alice");
/// store.add_record(&alice, "s1", "user", "We deploy the API with blue-green releases.").await.unwrap();
/// let recall = store.recall(&alice, &RecallQuery::new("deployment")).await.unwrap();
/// assert_eq!(recall.hits.len(), 1);
/// let bob = store.recall(&Scope::user("bob"), &RecallQuery::new("deployment")).await.unwrap();
/// assert!(bob.hits.is_empty());
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
        let (shared, templates): (Vec<BlockSpec>, Vec<BlockSpec>) =
            config.blocks.into_iter().partition(|spec| spec.shared);
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
                templates,
            }),
        };
        for spec in shared {
            store.define_block(&Scope::default(), spec).await?;
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

    async fn set_fact(
        &self,
        scope: &Scope,
        session: &str,
        key: &str,
        value: &str,
    ) -> Result<(), MemoryError> {
        let [su, sa, sc] = scope.columns().map(str::to_owned);
        let (session, key, value) = (session.to_owned(), key.to_owned(), value.to_owned());
        self.inner
            .db
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO facts(scope_user, scope_agent, scope_conv, session, key, value, updated_at)
                     VALUES (:su, :sa, :sc, :session, :key, :value, :at)
                     ON CONFLICT(scope_user, scope_agent, scope_conv, session, key)
                     DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                    named_params! {":su": su, ":sa": sa, ":sc": sc, ":session": session, ":key": key,
                                   ":value": value, ":at": now()},
                )
                .map_err(sql)?;
                Ok(())
            })
            .await
    }

    async fn fact(
        &self,
        scope: &Scope,
        session: &str,
        key: &str,
    ) -> Result<Option<String>, MemoryError> {
        let [su, sa, sc] = scope.columns().map(str::to_owned);
        let (session, key) = (session.to_owned(), key.to_owned());
        self.inner
            .db
            .read(move |conn| {
                conn.query_row(
                    &format!("SELECT value FROM facts WHERE {SCOPED} AND session = :session AND key = :key"),
                    named_params! {":su": su, ":sa": sa, ":sc": sc, ":session": session, ":key": key},
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql)
            })
            .await
    }

    async fn facts(
        &self,
        scope: &Scope,
        session: &str,
    ) -> Result<Vec<(String, String)>, MemoryError> {
        let [su, sa, sc] = scope.columns().map(str::to_owned);
        let session = session.to_owned();
        self.inner
            .db
            .read(move |conn| {
                let mut statement = conn
                    .prepare(&format!(
                        "SELECT key, value FROM facts WHERE {SCOPED} AND session = :session ORDER BY key"
                    ))
                    .map_err(sql)?;
                let rows = statement
                    .query_map(
                        named_params! {":su": su, ":sa": sa, ":sc": sc, ":session": session},
                        |row| Ok((row.get(0)?, row.get(1)?)),
                    )
                    .map_err(sql)?;
                rows.collect::<Result<Vec<_>, _>>().map_err(sql)
            })
            .await
    }

    async fn define_block(&self, scope: &Scope, spec: BlockSpec) -> Result<(), MemoryError> {
        let [su, sa, sc] = scope.columns().map(str::to_owned);
        self.inner
            .db
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO blocks(scope_user, scope_agent, scope_conv, label, value, char_limit, read_only,
                                        description, shared, updated_at)
                     VALUES (:su, :sa, :sc, :label, :value, :limit, :ro, :description, :shared, :at)
                     ON CONFLICT(scope_user, scope_agent, scope_conv, label) DO UPDATE SET
                        char_limit = excluded.char_limit, read_only = excluded.read_only,
                        description = excluded.description, shared = excluded.shared",
                    named_params! {":su": su, ":sa": sa, ":sc": sc, ":label": spec.label, ":value": spec.initial,
                                   ":limit": i64::try_from(spec.limit).unwrap_or(i64::MAX), ":ro": spec.read_only,
                                   ":description": spec.description, ":shared": spec.shared, ":at": now()},
                )
                .map_err(sql)?;
                Ok(())
            })
            .await
    }

    async fn blocks(&self, scope: &Scope) -> Result<Vec<Block>, MemoryError> {
        let reader = scope.clone();
        let rows = self
            .inner
            .db
            .read(move |conn| visible_rows(conn, &reader, None))
            .await?;
        Ok(visible_blocks(scope, rows, &self.inner.templates)
            .into_iter()
            .map(|stored| stored.block)
            .collect())
    }

    async fn edit_block(
        &self,
        scope: &Scope,
        label: &str,
        edit: BlockEdit,
    ) -> Result<Block, MemoryError> {
        let label = label.to_owned();
        let reader = scope.clone();
        let templates = self.inner.templates.clone();
        self.inner
            .db
            .write(move |conn| {
                let tx = conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .map_err(sql)?;
                let rows = visible_rows(&tx, &reader, Some(&label))?;
                let visible = visible_blocks(&reader, rows, &templates);
                let Some(mut stored) = visible.into_iter().find(|b| b.block.label == label) else {
                    let known: Vec<String> = visible_blocks(&reader, visible_rows(&tx, &reader, None)?, &templates)
                        .into_iter()
                        .map(|b| b.block.label)
                        .collect();
                    return Err(no_such_block(&label, &known));
                };
                let value = edit.apply(&stored.block)?;
                let [su, sa, sc] = stored.scope.columns().map(str::to_owned);
                let block = &stored.block;
                // The row of a template's first edit is written here.
                tx.execute(
                    "INSERT INTO blocks(scope_user, scope_agent, scope_conv, label, value, char_limit, read_only,
                                        description, shared, updated_at)
                     VALUES (:su, :sa, :sc, :label, :value, :limit, :ro, :description, :shared, :at)
                     ON CONFLICT(scope_user, scope_agent, scope_conv, label) DO UPDATE SET
                        value = excluded.value, updated_at = excluded.updated_at",
                    named_params! {":su": su, ":sa": sa, ":sc": sc, ":label": block.label, ":value": value,
                                   ":limit": i64::try_from(block.limit).unwrap_or(i64::MAX), ":ro": block.read_only,
                                   ":description": block.description, ":shared": stored.shared, ":at": now()},
                )
                .map_err(sql)?;
                tx.commit().map_err(sql)?;
                stored.block.value = value;
                Ok(stored.block)
            })
            .await
    }

    async fn add_records(
        &self,
        scope: &Scope,
        records: &[NewRecord],
    ) -> Result<Vec<i64>, MemoryError> {
        let texts: Vec<String> = records.iter().map(|r| r.text.clone()).collect();
        let embedded = embed_records(self.inner.embedder.as_ref(), &texts).await;
        let records = records.to_vec();
        let created = now();
        let [su, sa, sc] = scope.columns().map(str::to_owned);
        let key = scope.key();
        self.inner
            .db
            .write(move |conn| {
                let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql)?;
                let mut ids = Vec::with_capacity(records.len());
                {
                    let mut insert = tx
                        .prepare_cached(
                            "INSERT INTO records(session, role, text, created_at, embedding, embedder, turn,
                                                 scope_user, scope_agent, scope_conv, scope_key)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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
                            .execute(params![record.session, record.role, record.text, created, blob, embedder,
                                             record.turn, su, sa, sc, key])
                            .map_err(sql)?;
                        ids.push(tx.last_insert_rowid());
                    }
                }
                tx.commit().map_err(sql)?;
                Ok(ids)
            })
            .await
    }

    async fn record_count(&self, scope: &Scope) -> Result<i64, MemoryError> {
        let [su, sa, sc] = scope.columns().map(str::to_owned);
        let key = scope.key();
        self.inner
            .db
            .read(move |conn| {
                conn.query_row(
                    &format!("SELECT count(*) FROM records WHERE scope_key = :key AND {SCOPED}"),
                    named_params! {":key": key, ":su": su, ":sa": sa, ":sc": sc},
                    |r| r.get(0),
                )
                .map_err(sql)
            })
            .await
    }

    async fn recall(&self, scope: &Scope, query: &RecallQuery) -> Result<Recall, MemoryError> {
        self.recall_records(scope, query).await
    }

    async fn add_triple(
        &self,
        scope: &Scope,
        triple: NewTriple,
    ) -> Result<(Triple, Vec<String>), MemoryError> {
        self.insert_triple(scope, triple).await
    }

    async fn invalidate_triple(&self, scope: &Scope, id: i64) -> Result<bool, MemoryError> {
        self.end_triple(scope, id).await
    }

    async fn query_triples(
        &self,
        scope: &Scope,
        query: TripleQuery,
    ) -> Result<Vec<Triple>, MemoryError> {
        self.select_triples(scope, query).await
    }
}

/// The block rows `reader` may see (its own and shared ones of scopes
/// containing it), of one label or all.
fn visible_rows(
    conn: &rusqlite::Connection,
    reader: &Scope,
    label: Option<&str>,
) -> Result<Vec<StoredBlock>, MemoryError> {
    let [su, sa, sc] = reader.columns();
    let mut statement = conn
        .prepare_cached(
            "SELECT label, value, char_limit, read_only, description, shared, scope_user, scope_agent, scope_conv
             FROM blocks
             WHERE (:label IS NULL OR label = :label)
               AND ((scope_user = :su AND scope_agent = :sa AND scope_conv = :sc)
                    OR (shared AND scope_user IN ('', :su) AND scope_agent IN ('', :sa)
                        AND scope_conv IN ('', :sc)))",
        )
        .map_err(sql)?;
    let rows = statement
        .query_map(
            named_params! {":label": label, ":su": su, ":sa": sa, ":sc": sc},
            |row| {
                Ok(StoredBlock {
                    block: block_from_row(row)?,
                    shared: row.get(5)?,
                    scope: Scope::from_columns(row.get(6)?, row.get(7)?, row.get(8)?),
                })
            },
        )
        .map_err(sql)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(sql)
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
