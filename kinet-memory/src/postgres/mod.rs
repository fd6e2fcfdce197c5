//! The PostgreSQL + pgvector backend (feature `postgres`): one database for
//! many processes and machines.
//!
//! - Tables `kinet_facts`, `kinet_blocks`, `kinet_records`,
//!   `kinet_triples`, created and migrated by [`PostgresMemory::connect`]
//!   (versions in `kinet_memory_schema`, under an advisory lock so
//!   processes starting together migrate once). The `vector` extension
//!   must be installable by the connecting role (or already installed).
//! - Recall: pgvector HNSW (cosine; one partial index per embedder, made
//!   at connect) and full-text search (`tsvector` with the `english`
//!   configuration, `websearch_to_tsquery`, `ts_rank`: term frequency,
//!   like SQLite's bm25; cover density, `ts_rank_cd`, cost four times as
//!   much for a query of several words), fused by reciprocal rank as on
//!   SQLite, all in one statement (one round trip). Frequent words are
//!   bounded the same way: a word matching more than 5,000 records is
//!   dropped while rarer ones remain, and when every word is frequent the
//!   newest 5,000 matches are ranked.
//! - Writes are transactions: a block edit locks its row, a triple's
//!   supersession takes an advisory lock on its subject and predicate, so
//!   concurrent writers from any number of processes lose nothing.
//! - Connections: a pool (deadpool) of up to as many as this machine has
//!   cores, at least 2, or `pool_max_conns` in the connection string (a
//!   database runs as many statements at once as it has cores; more
//!   connections share them and stretch the slowest calls), over TLS (rustls) as the
//!   connection string's `sslmode` and `sslrootcert` say, read as libpq
//!   reads them: `verify-full` (the default when `sslrootcert` names a CA)
//!   checks the server's certificate and name, `verify-ca` its CA only,
//!   `require` encrypts without checking, `prefer` (the default without a
//!   CA) encrypts when the server offers it, `disable` never does. A
//!   database on another machine wants `verify-full`.
//! - [`PostgresSessionStore`]: the session journals (`SessionStore`) in the
//!   same database or another, for replicas on several machines.
//!
//! ```no_run
//! # async fn run() -> Result<(), kinet_memory::MemoryError> {
//! use kinet_memory::postgres::PostgresMemory;
//! use kinet_memory::{MemoryConfig, MemoryPack, Scope};
//!
//! let memory = PostgresMemory::connect(
//!     "postgres://agent@127.0.0.1:5432/agents",
//!     MemoryConfig::default(),
//! )
//! .await?;
//! let tools = MemoryPack::new(memory, "conversation-42")
//!     .scope(Scope::user("customer-42").with_agent("support"))
//!     .toolset();
//! # Ok(()) }
//! ```

mod recall;
mod schema;
mod sessions;
mod tls;

pub use sessions::PostgresSessionStore;

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use crate::MemoryError;
use crate::backend::now;
use crate::backend::{MemoryBackend, SharedMemory, embed_records};
use crate::embed::Embedder;
use crate::model::{
    Block, BlockEdit, BlockSpec, MemoryConfig, NewRecord, NewTriple, Recall, RecallQuery, Triple,
    TripleQuery, no_such_block,
};
use crate::scope::{Scope, StoredBlock, visible_blocks};

/// Memory in a PostgreSQL database with pgvector. Cheap to clone; every
/// clone shares the pool. Its API is the [`MemoryBackend`] trait.
#[derive(Clone)]
pub struct PostgresMemory {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    embedder: Option<Arc<dyn Embedder>>,
    /// The vector expression the embedder's HNSW index is on, and the
    /// embedder's name as an SQL literal.
    vectors: Option<(String, String)>,
    /// Where it connects, without a password.
    target: String,
    /// The unshared blocks of [`MemoryConfig::blocks`]: every scope's own.
    templates: Vec<BlockSpec>,
}

impl std::fmt::Debug for PostgresMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresMemory")
            .field("target", &self.inner.target)
            .field(
                "embedder",
                &self.inner.embedder.as_ref().map(|e| e.name().to_owned()),
            )
            .finish()
    }
}

/// A database error in words: the server's own message when it sent one.
pub(crate) fn pg(error: tokio_postgres::Error) -> MemoryError {
    match error.as_db_error() {
        Some(db) => MemoryError::Sql(match db.hint() {
            Some(hint) => format!("{} ({hint})", db.message()),
            None => db.message().to_owned(),
        }),
        None => MemoryError::Sql(with_causes(&error)),
    }
}

/// An error with its causes ("error performing TLS handshake: invalid
/// peer certificate: ..."), each said once.
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

fn pool_error(target: &str, error: impl std::error::Error + 'static) -> MemoryError {
    let error = with_causes(&error);
    let hint = if error.contains("TLS") || error.contains("certificate") {
        "check sslmode, and that sslrootcert is the CA that signed the server's certificate \
         and the certificate names the host connected to"
    } else {
        "check that the server runs and the address and credentials"
    };
    MemoryError::Open {
        path: target.to_owned(),
        message: format!("{error}; {hint}"),
    }
}

/// A connection string without its password, for messages.
fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let (authority, tail) = rest
            .split_once('@')
            .map_or((None, rest), |(a, t)| (Some(a), t));
        return match authority.and_then(|a| a.split_once(':')) {
            Some((user, _)) => format!("{scheme}://{user}:***@{tail}"),
            None => match authority {
                Some(user) => format!("{scheme}://{user}@{tail}"),
                None => format!("{scheme}://{tail}"),
            },
        };
    }
    url.split_whitespace()
        .map(|pair| {
            if pair.starts_with("password=") {
                "password=***"
            } else {
                pair
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl PostgresMemory {
    /// Connects to `url` (`postgres://user:password@host:port/db`, or
    /// `host=... user=...`), migrates the schema, makes the embedder's
    /// HNSW index if missing and creates missing blocks. The pool holds up
    /// to this machine's cores' worth of connections (at least 2), or
    /// `pool_max_conns` in the connection string.
    pub async fn connect(url: &str, config: MemoryConfig) -> Result<Self, MemoryError> {
        Self::connect_at(url, config, schema::SCHEMA_VERSION).await
    }

    pub(crate) async fn connect_at(
        url: &str,
        config: MemoryConfig,
        version: usize,
    ) -> Result<Self, MemoryError> {
        let (pool, target) = open_pool(url, schema::Tables::Memory, version).await?;
        let mut client = pool.get().await.map_err(|e| pool_error(&target, e))?;
        let vectors = match &config.embedder {
            Some(embedder) => Some((
                schema::vector_index(&mut client, embedder.name(), embedder.dims()).await?,
                schema::quote_literal(embedder.name()),
            )),
            None => None,
        };
        drop(client);
        let (shared, templates): (Vec<BlockSpec>, Vec<BlockSpec>) =
            config.blocks.into_iter().partition(|spec| spec.shared);
        let memory = Self {
            inner: Arc::new(Inner {
                pool,
                embedder: config.embedder,
                vectors,
                target,
                templates,
            }),
        };
        for spec in shared {
            memory.define_block(&Scope::default(), spec).await?;
        }
        Ok(memory)
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, MemoryError> {
        self.inner
            .pool
            .get()
            .await
            .map_err(|e| pool_error(&self.inner.target, e))
    }
}

/// A pool of connections to `url`, `tables` migrated to `version`; and
/// the address without its password, for messages.
pub(crate) async fn open_pool(
    url: &str,
    tables: schema::Tables,
    version: usize,
) -> Result<(Pool, String), MemoryError> {
    let target = redact(url);
    let connect = tls::parse(url, &target)?;
    tracing::debug!(target = %target, mode = ?connect.mode, pool = connect.pool_size, "connecting to PostgreSQL");
    let settings = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = match connect.tls {
        Some(tls) => Manager::from_config(connect.config, tls, settings),
        None => Manager::from_config(connect.config, NoTls, settings),
    };
    let pool = Pool::builder(manager)
        .max_size(connect.pool_size)
        .build()
        .map_err(|e| pool_error(&target, e))?;
    let mut client = pool.get().await.map_err(|e| pool_error(&target, e))?;
    schema::migrate(&mut client, tables, version).await?;
    Ok((pool, target))
}

impl From<PostgresMemory> for SharedMemory {
    fn from(memory: PostgresMemory) -> Self {
        Arc::new(memory)
    }
}

fn block_from_row(row: &tokio_postgres::Row) -> Block {
    Block {
        label: row.get(0),
        value: row.get(1),
        limit: usize::try_from(row.get::<_, i64>(2)).unwrap_or(0),
        read_only: row.get(3),
        description: row.get(4),
    }
}

pub(crate) fn triple_from_row(row: &tokio_postgres::Row) -> Triple {
    Triple {
        id: row.get(0),
        subject: row.get(1),
        predicate: row.get(2),
        object: row.get(3),
        source: row.get(4),
        valid_from: row.get(5),
        valid_to: row.get(6),
    }
}

const TRIPLE_COLUMNS: &str = "id, subject, predicate, object, source, valid_from, valid_to";

/// The predicate of a scope's rows, on parameters `$1`, `$2`, `$3`.
pub(crate) const SCOPED: &str = "scope_user = $1 AND scope_agent = $2 AND scope_conv = $3";

#[async_trait]
impl MemoryBackend for PostgresMemory {
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
        let [su, sa, sc] = scope.columns();
        self.client()
            .await?
            .execute_cached(
                "INSERT INTO kinet_facts(scope_user, scope_agent, scope_conv, session, key, value, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (scope_user, scope_agent, scope_conv, session, key)
                 DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                &[&su, &sa, &sc, &session, &key, &value, &now()],
            )
            .await
            .map_err(pg)?;
        Ok(())
    }

    async fn fact(
        &self,
        scope: &Scope,
        session: &str,
        key: &str,
    ) -> Result<Option<String>, MemoryError> {
        let [su, sa, sc] = scope.columns();
        let row = self
            .client()
            .await?
            .query_opt_cached(
                &format!(
                    "SELECT value FROM kinet_facts WHERE {SCOPED} AND session = $4 AND key = $5"
                ),
                &[&su, &sa, &sc, &session, &key],
            )
            .await
            .map_err(pg)?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn facts(
        &self,
        scope: &Scope,
        session: &str,
    ) -> Result<Vec<(String, String)>, MemoryError> {
        let [su, sa, sc] = scope.columns();
        let rows = self
            .client()
            .await?
            .query_cached(
                &format!("SELECT key, value FROM kinet_facts WHERE {SCOPED} AND session = $4 ORDER BY key"),
                &[&su, &sa, &sc, &session],
            )
            .await
            .map_err(pg)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn define_block(&self, scope: &Scope, spec: BlockSpec) -> Result<(), MemoryError> {
        let [su, sa, sc] = scope.columns();
        let limit = i64::try_from(spec.limit).unwrap_or(i64::MAX);
        self.client()
            .await?
            .execute_cached(
                "INSERT INTO kinet_blocks(scope_user, scope_agent, scope_conv, label, value, char_limit,
                                          read_only, description, shared, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT (scope_user, scope_agent, scope_conv, label) DO UPDATE SET
                    char_limit = excluded.char_limit, read_only = excluded.read_only,
                    description = excluded.description, shared = excluded.shared",
                &[&su, &sa, &sc, &spec.label, &spec.initial, &limit, &spec.read_only,
                  &spec.description, &spec.shared, &now()],
            )
            .await
            .map_err(pg)?;
        Ok(())
    }

    async fn blocks(&self, scope: &Scope) -> Result<Vec<Block>, MemoryError> {
        let client = self.client().await?;
        let rows = visible_rows(&client, scope, None, false).await?;
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
        let templates = &self.inner.templates;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        // A template's row is written first, so the edit below locks it
        // like any other (two first edits in two processes: one waits).
        if let Some(template) = templates.iter().find(|t| t.label == label) {
            let [su, sa, sc] = scope.columns();
            let limit = i64::try_from(template.limit).unwrap_or(i64::MAX);
            tx.execute_cached(
                "INSERT INTO kinet_blocks(scope_user, scope_agent, scope_conv, label, value, char_limit,
                                          read_only, description, shared, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, false, $9)
                 ON CONFLICT (scope_user, scope_agent, scope_conv, label) DO NOTHING",
                &[&su, &sa, &sc, &template.label, &template.initial, &limit,
                  &template.read_only, &template.description, &now()],
            )
            .await
            .map_err(pg)?;
        }
        let rows = visible_rows(&tx, scope, Some(label), true).await?;
        let visible = visible_blocks(scope, rows, templates);
        let Some(mut stored) = visible.into_iter().find(|b| b.block.label == label) else {
            let known: Vec<String> = visible_blocks(
                scope,
                visible_rows(&tx, scope, None, false).await?,
                templates,
            )
            .into_iter()
            .map(|b| b.block.label)
            .collect();
            return Err(no_such_block(label, &known));
        };
        let value = edit.apply(&stored.block)?;
        let [su, sa, sc] = stored.scope.columns();
        tx.execute_cached(
            &format!(
                "UPDATE kinet_blocks SET value = $5, updated_at = $6 WHERE {SCOPED} AND label = $4"
            ),
            &[&su, &sa, &sc, &label, &value, &now()],
        )
        .await
        .map_err(pg)?;
        tx.commit().await.map_err(pg)?;
        stored.block.value = value;
        Ok(stored.block)
    }

    async fn add_records(
        &self,
        scope: &Scope,
        records: &[NewRecord],
    ) -> Result<Vec<i64>, MemoryError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let [su, sa, sc] = scope.columns();
        let texts: Vec<String> = records.iter().map(|r| r.text.clone()).collect();
        let embedded = embed_records(self.inner.embedder.as_ref(), &texts).await;
        let sessions: Vec<&str> = records.iter().map(|r| r.session.as_str()).collect();
        let roles: Vec<&str> = records.iter().map(|r| r.role.as_str()).collect();
        let turns: Vec<Option<&str>> = records.iter().map(|r| r.turn.as_deref()).collect();
        let (vectors, embedder): (Vec<Option<pgvector::Vector>>, Option<String>) = match embedded {
            Some((vectors, name)) => (
                vectors
                    .into_iter()
                    .map(|v| Some(pgvector::Vector::from(v)))
                    .collect(),
                Some(name),
            ),
            None => (vec![None; records.len()], None),
        };
        // Text without NUL: PostgreSQL's text cannot hold it.
        let texts: Vec<String> = texts
            .into_iter()
            .map(|t| t.replace('\0', "\u{fffd}"))
            .collect();
        let rows = self
            .client()
            .await?
            .query_cached(
                "INSERT INTO kinet_records(scope_user, scope_agent, scope_conv, session, role, text, turn,
                                           created_at, embedder, embedding)
                 SELECT $1, $2, $3, s, r, t, u, $8, $9, e
                 FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $10::vector[])
                      WITH ORDINALITY AS x(s, r, t, u, e, n)
                 ORDER BY n
                 RETURNING id",
                &[&su, &sa, &sc, &sessions, &roles, &texts, &turns, &now(), &embedder, &vectors],
            )
            .await
            .map_err(pg)?;
        let mut ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        // Ids are drawn in insertion order, which follows `n`.
        ids.sort_unstable();
        Ok(ids)
    }

    async fn record_count(&self, scope: &Scope) -> Result<i64, MemoryError> {
        let [su, sa, sc] = scope.columns();
        let row = self
            .client()
            .await?
            .query_one_cached(
                &format!("SELECT count(*) FROM kinet_records WHERE {SCOPED}"),
                &[&su, &sa, &sc],
            )
            .await
            .map_err(pg)?;
        Ok(row.get(0))
    }

    async fn recall(&self, scope: &Scope, query: &RecallQuery) -> Result<Recall, MemoryError> {
        self.recall_records(scope, query).await
    }

    async fn add_triple(
        &self,
        scope: &Scope,
        triple: NewTriple,
    ) -> Result<(Triple, Vec<String>), MemoryError> {
        let [su, sa, sc] = scope.columns();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        // One writer per scope, subject and predicate at a time, in any
        // process.
        tx.execute_cached(
            "SELECT pg_advisory_xact_lock(hashtextextended(
                 $1 || chr(31) || $2 || chr(31) || $3 || chr(31) || lower($4) || chr(31) || lower($5), 0))",
            &[&su, &sa, &sc, &triple.subject, &triple.predicate],
        )
        .await
        .map_err(pg)?;
        let at = now();
        let mut superseded = Vec::new();
        if triple.supersede {
            superseded = tx
                .query_cached(
                    &format!(
                        "UPDATE kinet_triples SET valid_to = $7
                         WHERE {SCOPED} AND lower(subject) = lower($4) AND lower(predicate) = lower($5)
                           AND lower(object) <> lower($6) AND valid_to IS NULL
                         RETURNING object"
                    ),
                    &[&su, &sa, &sc, &triple.subject, &triple.predicate, &triple.object, &at],
                )
                .await
                .map_err(pg)?
                .iter()
                .map(|r| r.get(0))
                .collect();
        }
        let existing = tx
            .query_opt_cached(
                &format!(
                    "SELECT {TRIPLE_COLUMNS} FROM kinet_triples
                     WHERE {SCOPED} AND lower(subject) = lower($4) AND lower(predicate) = lower($5)
                       AND lower(object) = lower($6) AND valid_to IS NULL LIMIT 1"
                ),
                &[
                    &su,
                    &sa,
                    &sc,
                    &triple.subject,
                    &triple.predicate,
                    &triple.object,
                ],
            )
            .await
            .map_err(pg)?;
        let stored = match existing {
            Some(row) => triple_from_row(&row),
            None => {
                let row = tx
                    .query_one_cached(
                        &format!(
                            "INSERT INTO kinet_triples(scope_user, scope_agent, scope_conv, subject, predicate,
                                                       object, source, valid_from, created_at)
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING {TRIPLE_COLUMNS}"
                        ),
                        &[&su, &sa, &sc, &triple.subject, &triple.predicate, &triple.object,
                          &triple.source, &at],
                    )
                    .await
                    .map_err(pg)?;
                triple_from_row(&row)
            }
        };
        tx.commit().await.map_err(pg)?;
        Ok((stored, superseded))
    }

    async fn invalidate_triple(&self, scope: &Scope, id: i64) -> Result<bool, MemoryError> {
        let [su, sa, sc] = scope.columns();
        let changed = self
            .client()
            .await?
            .execute_cached(
                &format!(
                    "UPDATE kinet_triples SET valid_to = $5 WHERE {SCOPED} AND id = $4 AND valid_to IS NULL"
                ),
                &[&su, &sa, &sc, &id, &now()],
            )
            .await
            .map_err(pg)?;
        Ok(changed > 0)
    }

    async fn query_triples(
        &self,
        scope: &Scope,
        query: TripleQuery,
    ) -> Result<Vec<Triple>, MemoryError> {
        let [su, sa, sc] = scope.columns();
        let rows = self
            .client()
            .await?
            .query_cached(
                &format!(
                    "SELECT {TRIPLE_COLUMNS} FROM kinet_triples
                     WHERE {SCOPED}
                       AND ($4::text IS NULL OR lower(subject) = lower($4))
                       AND ($5::text IS NULL OR lower(predicate) = lower($5))
                       AND ($6::text IS NULL OR lower(object) = lower($6))
                       AND ($7 OR valid_to IS NULL)
                     ORDER BY valid_to IS NOT NULL, valid_from DESC, id DESC LIMIT 200"
                ),
                &[
                    &su,
                    &sa,
                    &sc,
                    &query.subject,
                    &query.predicate,
                    &query.object,
                    &query.include_history,
                ],
            )
            .await
            .map_err(pg)?;
        Ok(rows.iter().map(triple_from_row).collect())
    }
}

/// The block rows `reader` may see (its own and shared ones of scopes
/// containing it), of one label or all; `lock` takes their row locks.
async fn visible_rows(
    client: &impl deadpool_postgres::GenericClient,
    reader: &Scope,
    label: Option<&str>,
    lock: bool,
) -> Result<Vec<StoredBlock>, MemoryError> {
    let [su, sa, sc] = reader.columns();
    let rows = client
        .query_cached(
            &format!(
                "SELECT label, value, char_limit, read_only, description, shared, scope_user, scope_agent, scope_conv
                 FROM kinet_blocks
                 WHERE ($4::text IS NULL OR label = $4)
                   AND (({SCOPED})
                        OR (shared AND scope_user IN ('', $1) AND scope_agent IN ('', $2)
                            AND scope_conv IN ('', $3)))
                 ORDER BY label{}",
                if lock { " FOR UPDATE" } else { "" }
            ),
            &[&su, &sa, &sc, &label],
        )
        .await
        .map_err(pg)?;
    Ok(rows
        .iter()
        .map(|row| StoredBlock {
            block: block_from_row(row),
            shared: row.get(5),
            scope: Scope::from_columns(row.get(6), row.get(7), row.get(8)),
        })
        .collect())
}

#[doc(hidden)]
pub mod testing {
    //! Internals exposed for the crate's own migration tests.

    use super::{MemoryConfig, MemoryError, PostgresMemory};

    /// Connects, migrating only up to schema `version`.
    pub async fn connect_at_version(
        url: &str,
        version: usize,
    ) -> Result<PostgresMemory, MemoryError> {
        PostgresMemory::connect_at(url, MemoryConfig::default(), version).await
    }

    /// The current schema version.
    pub const SCHEMA_VERSION: usize = super::schema::SCHEMA_VERSION;
}

/// Statements prepared once per connection and kept there (deadpool's
/// statement cache). A statement given as text is prepared on every call,
/// a round trip of its own before the one that runs it; every statement of
/// this backend and its session store goes through here.
pub(crate) trait Cached {
    /// [`query`](tokio_postgres::Client::query), prepared once.
    fn query_cached<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a;

    /// [`execute`](tokio_postgres::Client::execute), prepared once.
    fn execute_cached<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, tokio_postgres::Error>> + Send + 'a;

    /// [`query_one`](tokio_postgres::Client::query_one), prepared once.
    fn query_one_cached<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Row, tokio_postgres::Error>> + Send + 'a;

    /// [`query_opt`](tokio_postgres::Client::query_opt), prepared once.
    fn query_opt_cached<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Option<Row>, tokio_postgres::Error>> + Send + 'a;
}

impl<C: deadpool_postgres::GenericClient> Cached for C {
    async fn query_cached<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let statement = self.prepare_cached(sql).await?;
        self.query(&statement, params).await
    }

    async fn execute_cached<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        let statement = self.prepare_cached(sql).await?;
        self.execute(&statement, params).await
    }

    async fn query_one_cached<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> Result<Row, tokio_postgres::Error> {
        let statement = self.prepare_cached(sql).await?;
        self.query_one(&statement, params).await
    }

    async fn query_opt_cached<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        let statement = self.prepare_cached(sql).await?;
        self.query_opt(&statement, params).await
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            redact("postgres://agent:s3cret@db:5432/x"),
            "postgres://agent:***@db:5432/x"
        );
        assert_eq!(redact("postgres://db/x"), "postgres://db/x");
        assert_eq!(
            redact("host=db user=a password=s3cret dbname=x"),
            "host=db user=a password=*** dbname=x"
        );
    }
}
