//! The PostgreSQL schema and its migrations.

use deadpool_postgres::Client;

use super::pg;
use crate::MemoryError;

/// Schema migrations, in order; `kinet_memory_schema` holds how many ran.
const MIGRATIONS: &[&str] = &[
    // 1: facts, blocks, history records with full-text search, triples.
    "
    CREATE EXTENSION IF NOT EXISTS vector;
    CREATE TABLE kinet_facts (
        session text NOT NULL,
        key text NOT NULL,
        value text NOT NULL,
        updated_at bigint NOT NULL,
        PRIMARY KEY (session, key)
    );
    CREATE TABLE kinet_blocks (
        label text PRIMARY KEY,
        value text NOT NULL,
        char_limit bigint NOT NULL,
        read_only boolean NOT NULL DEFAULT false,
        description text NOT NULL DEFAULT '',
        updated_at bigint NOT NULL
    );
    CREATE TABLE kinet_records (
        id bigserial PRIMARY KEY,
        session text NOT NULL,
        role text NOT NULL,
        text text NOT NULL,
        turn text,
        created_at bigint NOT NULL,
        embedder text,
        embedding vector,
        tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
    );
    CREATE INDEX kinet_records_tsv ON kinet_records USING gin (tsv);
    CREATE INDEX kinet_records_created ON kinet_records (created_at);
    CREATE TABLE kinet_triples (
        id bigserial PRIMARY KEY,
        subject text NOT NULL,
        predicate text NOT NULL,
        object text NOT NULL,
        source text NOT NULL DEFAULT '',
        valid_from bigint NOT NULL,
        valid_to bigint,
        created_at bigint NOT NULL
    );
    CREATE INDEX kinet_triples_subject ON kinet_triples (lower(subject), lower(predicate));
    CREATE INDEX kinet_triples_object ON kinet_triples (lower(object));
    ",
    // 2: scopes (user, agent, conversation; '' when unset) on every row;
    // rows written before stay in the empty scope.
    "
    ALTER TABLE kinet_facts
        ADD COLUMN scope_user text NOT NULL DEFAULT '',
        ADD COLUMN scope_agent text NOT NULL DEFAULT '',
        ADD COLUMN scope_conv text NOT NULL DEFAULT '';
    ALTER TABLE kinet_facts DROP CONSTRAINT kinet_facts_pkey;
    ALTER TABLE kinet_facts ADD PRIMARY KEY (scope_user, scope_agent, scope_conv, session, key);
    ALTER TABLE kinet_blocks
        ADD COLUMN scope_user text NOT NULL DEFAULT '',
        ADD COLUMN scope_agent text NOT NULL DEFAULT '',
        ADD COLUMN scope_conv text NOT NULL DEFAULT '',
        ADD COLUMN shared boolean NOT NULL DEFAULT false;
    ALTER TABLE kinet_blocks DROP CONSTRAINT kinet_blocks_pkey;
    ALTER TABLE kinet_blocks ADD PRIMARY KEY (scope_user, scope_agent, scope_conv, label);
    CREATE INDEX kinet_blocks_label ON kinet_blocks (label);
    ALTER TABLE kinet_records
        ADD COLUMN scope_user text NOT NULL DEFAULT '',
        ADD COLUMN scope_agent text NOT NULL DEFAULT '',
        ADD COLUMN scope_conv text NOT NULL DEFAULT '';
    CREATE INDEX kinet_records_scope ON kinet_records (scope_user, scope_agent, scope_conv, id);
    ALTER TABLE kinet_triples
        ADD COLUMN scope_user text NOT NULL DEFAULT '',
        ADD COLUMN scope_agent text NOT NULL DEFAULT '',
        ADD COLUMN scope_conv text NOT NULL DEFAULT '';
    DROP INDEX kinet_triples_subject;
    DROP INDEX kinet_triples_object;
    CREATE INDEX kinet_triples_subject
        ON kinet_triples (scope_user, scope_agent, scope_conv, lower(subject), lower(predicate));
    CREATE INDEX kinet_triples_object ON kinet_triples (scope_user, scope_agent, scope_conv, lower(object));
    ",
];

/// The schema version this build writes.
pub(crate) const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// The session store's migrations, in order, with their own version table
/// (`kinet_session_schema`): a host that keeps only sessions in
/// PostgreSQL needs no pgvector.
const SESSION_MIGRATIONS: &[&str] = &[
    // 1: sessions and their journals, claims on them. Sequence numbers are drawn from the session row, so appends
    // from any number of processes are ordered and never collide.
    "
    CREATE TABLE kinet_sessions (
        id text PRIMARY KEY,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL,
        forked_from text,
        fork_at bigint,
        next_seq bigint NOT NULL DEFAULT 0
    );
    CREATE INDEX kinet_sessions_updated ON kinet_sessions (updated_at DESC, id);
    CREATE TABLE kinet_session_entries (
        session text NOT NULL REFERENCES kinet_sessions(id) ON DELETE CASCADE,
        seq bigint NOT NULL,
        kind text NOT NULL,
        body text NOT NULL,
        PRIMARY KEY (session, seq)
    );
    CREATE TABLE kinet_session_claims (
        session text PRIMARY KEY,
        holder text NOT NULL,
        expires_at bigint NOT NULL
    );
    ",
];

/// The session schema version this build writes.
pub(crate) const SESSION_SCHEMA_VERSION: usize = SESSION_MIGRATIONS.len();

/// Which tables a migration brings up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tables {
    /// Facts, blocks, records, triples (`kinet_memory_schema`).
    Memory,
    /// Sessions, journals, claims (`kinet_session_schema`).
    Sessions,
}

/// A key no other program should take: processes migrating one database
/// wait for each other on it.
const MIGRATION_LOCK: i64 = 0x6b69_6e65_745f_6d65;

/// Brings `tables` to `target` (the current version unless testing), in one
/// transaction under an advisory lock, so processes starting together
/// migrate once; a database of a newer version is refused.
pub(crate) async fn migrate(
    client: &mut Client,
    tables: Tables,
    target: usize,
) -> Result<(), MemoryError> {
    let (versions, migrations, what) = match tables {
        Tables::Memory => ("kinet_memory_schema", MIGRATIONS, "memory"),
        Tables::Sessions => ("kinet_session_schema", SESSION_MIGRATIONS, "session"),
    };
    let tx = client.transaction().await.map_err(pg)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg)?;
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {versions} (version integer NOT NULL)"
    ))
    .await
    .map_err(pg)?;
    let current: Option<i32> = tx
        .query_one(&format!("SELECT max(version) FROM {versions}"), &[])
        .await
        .map_err(pg)?
        .get(0);
    let current = usize::try_from(current.unwrap_or(0)).unwrap_or(0);
    if current > migrations.len() {
        return Err(MemoryError::Invalid(format!(
            "the database has kinet {what} schema version {current}; this build knows versions up \
             to {}: it was written by a newer kinet",
            migrations.len()
        )));
    }
    for (index, sql) in migrations.iter().enumerate().take(target).skip(current) {
        tx.batch_execute(sql).await.map_err(pg)?;
        let version = i32::try_from(index + 1).unwrap_or(i32::MAX);
        tx.execute(
            &format!("INSERT INTO {versions}(version) VALUES ($1)"),
            &[&version],
        )
        .await
        .map_err(pg)?;
    }
    tx.commit().await.map_err(pg)
}

/// The HNSW index for one embedder (a partial expression index: vectors of
/// other embedders or sizes are never compared), created if missing.
/// Returns the SQL expression queries order by.
pub(crate) async fn vector_index(
    client: &mut Client,
    embedder: &str,
    dims: usize,
) -> Result<String, MemoryError> {
    let literal = quote_literal(embedder);
    let expression = format!("(embedding::vector({dims}))");
    let name = format!("kinet_records_hnsw_{:016x}", fnv1a(embedder, dims));
    // Under the migration lock: two processes creating the same index at
    // once would collide in the catalogue.
    let tx = client.transaction().await.map_err(pg)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg)?;
    tx.batch_execute(&format!(
        "CREATE INDEX IF NOT EXISTS {name} ON kinet_records USING hnsw ({expression} vector_cosine_ops) \
         WHERE embedder = {literal}"
    ))
    .await
    .map_err(pg)?;
    tx.commit().await.map_err(pg)?;
    Ok(expression)
}

/// A string as an SQL literal.
pub(crate) fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn fnv1a(text: &str, dims: usize) -> u64 {
    text.bytes()
        .chain(dims.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
}
