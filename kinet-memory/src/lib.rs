//! Memory for kinet agents, behind one trait: [`MemoryBackend`].
//!
//! A backend holds:
//!
//! - session **facts**: key/value anchors (`remember_fact`, `recall_fact`);
//! - labelled **memory blocks** with character limits, rendered into the
//!   latest user message of each request by [`BlocksHook`] and edited by the model with
//!   `memory_replace` / `memory_append`;
//! - **history** records (written by the [`HistoryHook`] of
//!   [`MemoryPack::history_hook`]) recalled by `recall_memory`: embedding
//!   similarity and full-text rank fused by reciprocal rank, full text
//!   alone when there is no embedder or it fails; the turn in progress is
//!   left out, so a recall never spends its first slot on its own question;
//! - **knowledge-graph triples** with validity intervals: a newer fact
//!   supersedes an older one instead of deleting it.
//!
//! Backends ([`MemoryPack`] and the hooks take any, as [`SharedMemory`]):
//!
//! - [`MemoryStore`]: one SQLite file (bundled SQLite, WAL; several
//!   processes may share it). Vectors are held in memory quantised (sign
//!   bits and int8 codes, rescored exactly) and full-text search is
//!   bounded for frequent words, so hybrid recall stays fast at a million
//!   records (`BENCHMARKS.md`).
//! - [`postgres::PostgresMemory`] (feature `postgres`): PostgreSQL with
//!   pgvector, for many processes and machines: pooled connections, HNSW,
//!   `tsvector` full text, migrations under an advisory lock.
//!
//! Both pass one conformance suite (`tests/conformance`); a new backend
//! should too.
//!
//! Everything belongs to a [`Scope`] (user, agent, conversation; set by the
//! host on the [`MemoryPack`] and hooks, never by the model), and both
//! backends filter by it inside their SQL: facts, records (full-text,
//! vector and hybrid recall) and triples are seen only by the scope that
//! wrote them; blocks too, except those defined as shared, which every
//! scope inside theirs sees (an agent's persona for all its users). Stores
//! written before scopes existed keep their data in the empty scope.
//!
//! Embedders: the bundled offline model [`Model2VecEmbedder`] (feature
//! `model2vec`, off by default as it needs a C++ compiler; on in the
//! `kinet` facade's `memory` feature), [`HashEmbedder`] (no weights, lexical only), and
//! [`OpenAiEmbedder`] for `/v1/embeddings` servers.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use kinet_memory::{BlockSpec, MemoryBackend, MemoryConfig, MemoryPack, MemoryStore, Scope};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = MemoryStore::open(
//!     dir.path().join("memory.db"),
//!     MemoryConfig { blocks: BlockSpec::defaults(), ..MemoryConfig::default() },
//! )
//! .await
//! .unwrap();
//! let alice = Scope::user("alice").with_agent("assistant");
//! store.block_append(&alice, "user_profile", "Prefers short answers.").await.unwrap();
//! let pack = MemoryPack::new(store.clone(), "session-1").scope(alice);
//! let tools = pack.toolset(); // for the agent's toolset
//! let history = pack.history_hook(); // for its hooks
//! assert!(tools.static_tools().get("recall_memory").is_some());
//! # drop(history);
//! # }
//! ```

mod backend;
pub mod embed;
mod hooks;
pub mod model;
#[cfg(feature = "postgres")]
pub mod postgres;
mod scope;
pub mod sessions;
mod sqlite;
mod tools;

pub use backend::{MemoryBackend, SharedMemory};
#[cfg(feature = "model2vec")]
pub use embed::Model2VecEmbedder;
#[cfg(feature = "openai-embeddings")]
pub use embed::OpenAiEmbedder;
pub use embed::{Embedder, HashEmbedder};
pub use hooks::{BlocksHook, HistoryHook};
pub use kinet_core;
pub use model::{BlockSpec, Hit, MemoryConfig, Recall, RecallQuery};
pub use scope::Scope;
pub use sessions::SqliteSessionStore;
pub use sqlite::MemoryStore;
pub use tools::MemoryPack;

/// Errors of the memory store.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// The store (a SQLite file, a PostgreSQL server) could not be opened,
    /// reached or migrated.
    #[error("cannot open the store `{path}`: {message}")]
    Open {
        /// The file, or the server's address without its password.
        path: String,
        /// Why.
        message: String,
    },
    /// A query failed.
    #[error("memory database error: {0}")]
    Sql(String),
    /// The request was invalid (unknown block, limit exceeded, ...); the
    /// message is written for the model.
    #[error("{0}")]
    Invalid(String),
    /// A thread or task failed.
    #[error("memory store failure: {0}")]
    Io(String),
    /// The store was closed.
    #[error("the memory store is closed")]
    Closed,
}

impl MemoryError {
    pub(crate) fn open(path: &std::path::Path, error: impl std::fmt::Display) -> Self {
        Self::Open {
            path: path.display().to_string(),
            message: error.to_string(),
        }
    }
}

#[doc(hidden)]
pub mod testing {
    //! Internals exposed for the crate's own migration tests.

    /// Creates (or migrates) a memory file only up to schema `version`.
    pub fn create_at_version(
        path: &std::path::Path,
        version: usize,
    ) -> Result<(), super::MemoryError> {
        super::sqlite::db::open_at(path, version).map(|_| ())
    }

    /// The current schema version.
    pub const SCHEMA_VERSION: usize = super::sqlite::db::SCHEMA_VERSION;
}
