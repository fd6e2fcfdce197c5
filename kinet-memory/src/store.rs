//! `MemoryStore`: the async API over the SQLite file.

use std::path::Path;
use std::sync::{Arc, RwLock};

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use crate::MemoryError;
use crate::db::{Db, now};
use crate::embed::{Embedder, normalize};
use crate::vector::VectorIndex;

/// A labelled long-term memory block, rendered into the system prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Block {
    /// The label (`user_profile`, `project_context`, ...).
    pub label: String,
    /// The content.
    pub value: String,
    /// The most characters it may hold.
    pub limit: usize,
    /// The model cannot change it.
    pub read_only: bool,
    /// What belongs in it (shown to the model).
    pub description: String,
}

/// A block to create if missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockSpec {
    /// The label.
    pub label: String,
    /// Character limit.
    pub limit: usize,
    /// Read-only for the model.
    pub read_only: bool,
    /// What belongs in it.
    pub description: String,
    /// Initial content.
    pub initial: String,
}

impl BlockSpec {
    /// A writable block.
    pub fn new(label: impl Into<String>, limit: usize, description: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            limit,
            read_only: false,
            description: description.into(),
            initial: String::new(),
        }
    }

    /// The default blocks: `user_profile` (2000 chars), `project_context`
    /// (4000), `active_goals` (1000).
    pub fn defaults() -> Vec<Self> {
        vec![
            Self::new(
                "user_profile",
                2000,
                "Who the user is: name, role, preferences, how they like to work.",
            ),
            Self::new(
                "project_context",
                4000,
                "The project: what it is, its stack, conventions, key decisions.",
            ),
            Self::new(
                "active_goals",
                1000,
                "What the user is trying to achieve now, and open threads.",
            ),
        ]
    }
}

/// One recalled record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// Record id.
    pub id: i64,
    /// The session it was recorded in.
    pub session: String,
    /// `user`, `assistant`, `tool`, or what the host recorded.
    pub role: String,
    /// The text.
    pub text: String,
    /// Seconds since the Unix epoch.
    pub created_at: i64,
    /// The fused score (higher is better).
    pub score: f64,
    /// Cosine similarity, when the vector search found it.
    pub similarity: Option<f32>,
    /// Whether full-text search found it.
    pub full_text: bool,
}

/// How a recall was answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum RecallMode {
    /// Embedding similarity and FTS5 bm25, fused by reciprocal rank.
    Hybrid,
    /// FTS5 only: no embedder is configured, or it failed.
    FullTextOnly {
        /// Why.
        reason: String,
    },
}

/// A knowledge-graph fact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Triple {
    /// Id.
    pub id: i64,
    /// Subject.
    pub subject: String,
    /// Predicate.
    pub predicate: String,
    /// Object.
    pub object: String,
    /// Where it came from.
    pub source: String,
    /// Valid since (seconds since the epoch).
    pub valid_from: i64,
    /// Valid until; `None` while current.
    pub valid_to: Option<i64>,
}

/// What `recall` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recall {
    /// Records, best first.
    pub hits: Vec<Hit>,
    /// Current triples mentioning the query's words.
    pub triples: Vec<Triple>,
    /// How the records were ranked.
    pub mode: RecallMode,
}

/// A query on triples; `None` fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TripleQuery {
    /// Subject.
    pub subject: Option<String>,
    /// Predicate.
    pub predicate: Option<String>,
    /// Object.
    pub object: Option<String>,
    /// Include superseded triples.
    pub include_history: bool,
}

/// Store settings.
#[derive(Clone, Default)]
pub struct MemoryConfig {
    /// The embedder for recall; `None`: full-text recall only.
    pub embedder: Option<Arc<dyn Embedder>>,
    /// Blocks created when missing.
    pub blocks: Vec<BlockSpec>,
}

pub(crate) struct Inner {
    pub(crate) db: Arc<Db>,
    pub(crate) embedder: Option<Arc<dyn Embedder>>,
    pub(crate) index: RwLock<VectorIndex>,
}

/// The memory store: one SQLite file (WAL, busy timeout), safe for several
/// agents in one process (clone it) and several processes on one file.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use kinet_memory::{MemoryConfig, MemoryStore};
///
/// let dir = tempfile::tempdir().unwrap();
/// let store = MemoryStore::open(dir.path().join("memory.db"), MemoryConfig::default()).await.unwrap();
/// store.add_record("s1", "user", "We deploy the API with blue-green releases.").await.unwrap();
/// let recall = store.recall("deployment", 5, None).await.unwrap();
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

    /// The embedder, if one is configured.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.inner.embedder.as_ref()
    }

    // ------------------------------------------------------------ facts

    /// Sets a session fact.
    pub async fn set_fact(&self, session: &str, key: &str, value: &str) -> Result<(), MemoryError> {
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

    /// A session fact.
    pub async fn fact(&self, session: &str, key: &str) -> Result<Option<String>, MemoryError> {
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

    /// All facts of a session, by key.
    pub async fn facts(&self, session: &str) -> Result<Vec<(String, String)>, MemoryError> {
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

    // ------------------------------------------------------------ blocks

    /// Creates a block if it does not exist (an existing block keeps its
    /// content; its limit, flag and description are updated).
    pub async fn define_block(&self, spec: BlockSpec) -> Result<(), MemoryError> {
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

    /// Every block, by label.
    pub async fn blocks(&self) -> Result<Vec<Block>, MemoryError> {
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

    /// Replaces the one occurrence of `old` in a block with `new`.
    pub async fn block_replace(
        &self,
        label: &str,
        old: &str,
        new: &str,
    ) -> Result<Block, MemoryError> {
        let (old, new) = (old.to_owned(), new.to_owned());
        self.edit_block(label, move |block| {
            if old.is_empty() {
                return Err("`old` is empty; give the exact text to replace".into());
            }
            match block.value.matches(old.as_str()).count() {
                0 => Err(format!(
                    "`{old}` does not occur in block `{}`; copy the exact text from the block",
                    block.label
                )),
                1 => Ok(block.value.replacen(old.as_str(), &new, 1)),
                n => Err(format!(
                    "`{old}` occurs {n} times in block `{}`; include more surrounding text so it occurs once",
                    block.label
                )),
            }
        })
        .await
    }

    /// Appends text (on a new line) to a block.
    pub async fn block_append(&self, label: &str, text: &str) -> Result<Block, MemoryError> {
        let text = text.to_owned();
        self.edit_block(label, move |block| {
            Ok(if block.value.is_empty() {
                text
            } else {
                format!("{}\n{text}", block.value)
            })
        })
        .await
    }

    /// Sets a block's whole content (host use; ignores the read-only flag).
    pub async fn set_block(&self, label: &str, value: &str) -> Result<(), MemoryError> {
        let (label, value) = (label.to_owned(), value.to_owned());
        self.inner
            .db
            .write(move |conn| {
                let changed = conn
                    .execute(
                        "UPDATE blocks SET value = ?2, updated_at = ?3 WHERE label = ?1",
                        params![label, value, now()],
                    )
                    .map_err(sql)?;
                if changed == 0 {
                    return Err(MemoryError::Invalid(format!("there is no block `{label}`")));
                }
                Ok(())
            })
            .await
    }

    async fn edit_block(
        &self,
        label: &str,
        edit: impl FnOnce(&Block) -> Result<String, String> + Send + 'static,
    ) -> Result<Block, MemoryError> {
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
                    return Err(MemoryError::Invalid(format!(
                        "there is no block `{label}`; blocks: {}",
                        known.join(", ")
                    )));
                };
                if block.read_only {
                    return Err(MemoryError::Invalid(format!("block `{label}` is read-only")));
                }
                let value = edit(&block).map_err(MemoryError::Invalid)?;
                let chars = value.chars().count();
                let used = block.value.chars().count();
                // An edit that does not grow the block is always allowed, so a
                // block over a lowered limit can be shrunk step by step.
                if chars > block.limit && chars > used {
                    return Err(MemoryError::Invalid(format!(
                        "block `{label}` would hold {chars} characters, over its {} limit by {}; it holds {used} now, \
                         so {} characters of room are left. Shorten the text or replace older content.",
                        block.limit,
                        chars - block.limit,
                        block.limit.saturating_sub(used)
                    )));
                }
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

    // ------------------------------------------------------------ records

    /// Records one message or tool result.
    pub async fn add_record(
        &self,
        session: &str,
        role: &str,
        text: &str,
    ) -> Result<i64, MemoryError> {
        let ids = self
            .add_records(&[(session.to_owned(), role.to_owned(), text.to_owned())])
            .await?;
        ids.into_iter().next().ok_or(MemoryError::Closed)
    }

    /// Records many `(session, role, text)` in one transaction, embedding
    /// them in one batch first (an embedder failure stores them without
    /// vectors: full-text recall still finds them).
    pub async fn add_records(
        &self,
        records: &[(String, String, String)],
    ) -> Result<Vec<i64>, MemoryError> {
        let texts: Vec<String> = records.iter().map(|r| r.2.clone()).collect();
        let (vectors, embedder) = match &self.inner.embedder {
            Some(embedder) => match embedder.embed(&texts).await {
                Ok(mut vectors)
                    if vectors.len() == texts.len()
                        && vectors.iter().all(|v| v.len() == embedder.dims()) =>
                {
                    for v in &mut vectors {
                        normalize(v);
                    }
                    (Some(vectors), Some(embedder.name().to_owned()))
                }
                Ok(_) => (None, None),
                Err(error) => {
                    tracing::warn!(%error, "records stored without embeddings");
                    (None, None)
                }
            },
            None => (None, None),
        };
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
                            "INSERT INTO records(session, role, text, created_at, embedding, embedder)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        )
                        .map_err(sql)?;
                    for (index, (session, role, text)) in records.iter().enumerate() {
                        let blob: Option<Vec<u8>> = vectors.as_ref().map(|v| {
                            v[index].iter().flat_map(|x| x.to_le_bytes()).collect()
                        });
                        insert
                            .execute(params![session, role, text, created, blob, embedder])
                            .map_err(sql)?;
                        ids.push(tx.last_insert_rowid());
                    }
                }
                tx.commit().map_err(sql)?;
                Ok(ids)
            })
            .await
    }

    /// How many records the file holds.
    pub async fn record_count(&self) -> Result<i64, MemoryError> {
        self.inner
            .db
            .read(|conn| {
                conn.query_row("SELECT count(*) FROM records", [], |r| r.get(0))
                    .map_err(sql)
            })
            .await
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
