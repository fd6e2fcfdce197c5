//! Memory for kinet agents: session facts, labelled memory blocks shown to
//! the model on every request, recall over the recorded history, and
//! knowledge-graph triples, in SQLite or PostgreSQL behind one trait,
//! [`MemoryBackend`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use kinet_core::Agent;
//! use kinet_core::builder::Calls;
//! use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
//! use kinet_memory::{BlockSpec, MemoryBackend, MemoryConfig, MemoryPack, MemoryStore, Scope};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let config = MemoryConfig { blocks: BlockSpec::defaults(), ..MemoryConfig::default() };
//! let store = MemoryStore::open(dir.path().join("memory.db"), config).await.unwrap();
//! // The host sets whose memory it is; the model cannot name another scope.
//! let alice = Scope::user("alice").with_agent("assistant");
//! let memory = MemoryPack::new(store.clone(), "session-1").scope(alice.clone());
//! let provider = ScriptedProvider::new([
//!     ScriptedTurn::new().tool_call(
//!         "c1",
//!         "memory_append",
//!         serde_json::json!({"label": "user_profile", "text": "Prefers short answers."}),
//!     ),
//!     ScriptedTurn::text("Noted."),
//! ]);
//! let agent = Agent::builder(provider)
//!     .tools(memory.toolset()) // facts, blocks, recall, triples; never asked about
//!     .calls(Calls::new().hook(memory.blocks_hook()).hook(memory.history_hook()))
//!     .build();
//! let outcome = agent.run_to_completion("Keep your answers short, please.").await;
//! assert!(outcome.stop.is_completed());
//! // A later run, in this process or another, shows the block to the model.
//! let blocks = store.blocks(&alice).await.unwrap();
//! assert!(blocks.iter().any(|b| b.value.contains("Prefers short answers.")));
//! # }
//! ```
//!
//! # Where to go next
//!
//! - [`MemoryPack`]: the seven memory tools of one session, with
//!   [`BlocksHook`] (blocks rendered into each request) and
//!   [`HistoryHook`] (the conversation recorded for `recall_memory`).
//! - [`MemoryStore`]: one SQLite file, shared by several processes;
//!   hybrid recall stays fast at a million records (`BENCHMARKS.md`).
//!   `postgres::PostgresMemory` (feature `postgres`) is PostgreSQL with
//!   pgvector, for many processes and machines.
//! - [`MemoryBackend`]: what every backend does; both pass one conformance
//!   suite (`tests/conformance`), and a new backend should too.
//! - [`Scope`]: whose memory (user, agent, conversation), filtered inside
//!   every backend's queries.
//! - [`embed`]: [`HashEmbedder`] (no weights), `OpenAiEmbedder` (feature
//!   `openai-embeddings`, on by default) for `/v1/embeddings` servers, and
//!   `Model2VecEmbedder` (feature `model2vec`: a bundled offline model; it
//!   needs a C++ compiler). Without an embedder, recall is full text only.
//! - [`sessions`]: [`SqliteSessionStore`], session journals in SQLite for
//!   [`Sessions::journal`](kinet_core::builder::Sessions::journal).
//! - [`model`]: the data backends store and return ([`BlockSpec`],
//!   [`RecallQuery`], [`Recall`]).

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
