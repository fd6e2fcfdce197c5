//! The `MemoryBackend` trait and what every backend shares: embedding,
//! reciprocal-rank fusion, the words of a query.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::MemoryError;
use crate::embed::{Embedder, normalize};
use crate::model::{
    Block, BlockEdit, BlockSpec, Hit, NewRecord, NewTriple, Recall, RecallMode, RecallQuery,
    Triple, TripleQuery,
};
use crate::scope::Scope;

/// Where an agent's memory lives: session facts, labelled blocks, history
/// records with recall, and knowledge-graph triples, each belonging to a
/// [`Scope`].
///
/// The tools ([`MemoryPack`](crate::MemoryPack)) and hooks
/// ([`BlocksHook`](crate::BlocksHook), [`HistoryHook`](crate::HistoryHook))
/// take any backend as an `Arc<dyn MemoryBackend>` (a backend converts
/// with `.into()`) and the scope the host gives them. Two ship with the
/// crate: [`MemoryStore`](crate::MemoryStore), one embedded SQLite file
/// (the default), and, with the `postgres` feature,
/// [`PostgresMemory`](crate::postgres::PostgresMemory) for many processes
/// and machines on one database. Both pass the same conformance suite
/// (`kinet-memory/tests/conformance`).
///
/// What every implementation must do:
/// - every method reads and writes only what its `scope` may see (see
///   [`Scope`]), filtering inside the store's own queries, so no ranking,
///   limit or id lookup can reach another scope's rows;
/// - writes are durable once the call returns, and concurrent writers
///   (tasks, processes) lose nothing: a block edit reads and writes in one
///   transaction;
/// - `recall` ranks by embedding similarity and full-text rank fused by
///   reciprocal rank (constant 60), falls back to full text alone when there
///   is no embedder or it fails (and says so in [`Recall::mode`]), and
///   never returns records of [`RecallQuery::exclude_turn`];
/// - messages of [`MemoryError::Invalid`] are written for the model.
#[async_trait]
pub trait MemoryBackend: Send + Sync + std::fmt::Debug {
    /// The embedder recall uses, if any.
    fn embedder(&self) -> Option<&Arc<dyn Embedder>>;

    /// Sets a session fact.
    async fn set_fact(
        &self,
        scope: &Scope,
        session: &str,
        key: &str,
        value: &str,
    ) -> Result<(), MemoryError>;
    /// A session fact.
    async fn fact(
        &self,
        scope: &Scope,
        session: &str,
        key: &str,
    ) -> Result<Option<String>, MemoryError>;
    /// All facts of a session, by key.
    async fn facts(
        &self,
        scope: &Scope,
        session: &str,
    ) -> Result<Vec<(String, String)>, MemoryError>;

    /// Creates a block in `scope` if it does not exist there (an existing
    /// block keeps its content; its limit, flags and description are
    /// updated). A [shared](BlockSpec::shared) block is seen by every scope
    /// inside `scope`.
    async fn define_block(&self, scope: &Scope, spec: BlockSpec) -> Result<(), MemoryError>;
    /// Every block `scope` sees, by label: its own, shared ones of wider
    /// scopes, and the store's templates.
    async fn blocks(&self, scope: &Scope) -> Result<Vec<Block>, MemoryError>;
    /// Applies `edit` to the block `scope` sees under `label`, in one
    /// transaction, and returns the block as written. A template's block
    /// is written into `scope` on its first edit; a shared block is
    /// edited where it was defined.
    async fn edit_block(
        &self,
        scope: &Scope,
        label: &str,
        edit: BlockEdit,
    ) -> Result<Block, MemoryError>;

    /// Stores records in one transaction, embedding them in one batch first
    /// (an embedder failure stores them without vectors: full-text recall
    /// still finds them). Returns their ids, in order.
    async fn add_records(
        &self,
        scope: &Scope,
        records: &[NewRecord],
    ) -> Result<Vec<i64>, MemoryError>;
    /// How many records `scope` holds.
    async fn record_count(&self, scope: &Scope) -> Result<i64, MemoryError>;
    /// Ranks `scope`'s records for the query, and its current triples that
    /// mention the query's words.
    async fn recall(&self, scope: &Scope, query: &RecallQuery) -> Result<Recall, MemoryError>;

    /// Adds a triple and returns it with the objects it superseded (their
    /// `valid_to` is set; nothing is deleted). Adding a triple that is
    /// already current changes nothing but the supersession. Supersession
    /// stays inside `scope`.
    async fn add_triple(
        &self,
        scope: &Scope,
        triple: NewTriple,
    ) -> Result<(Triple, Vec<String>), MemoryError>;
    /// Ends a triple of `scope`; returns whether it was current (a triple
    /// of another scope is not found).
    async fn invalidate_triple(&self, scope: &Scope, id: i64) -> Result<bool, MemoryError>;
    /// `scope`'s triples matching every given field (case-insensitive),
    /// current ones first, newest first, at most 200.
    async fn query_triples(
        &self,
        scope: &Scope,
        query: TripleQuery,
    ) -> Result<Vec<Triple>, MemoryError>;

    /// Records one message or tool result outside any turn.
    async fn add_record(
        &self,
        scope: &Scope,
        session: &str,
        role: &str,
        text: &str,
    ) -> Result<i64, MemoryError> {
        let ids = self
            .add_records(scope, &[NewRecord::new(session, role, text)])
            .await?;
        ids.into_iter().next().ok_or(MemoryError::Closed)
    }

    /// Replaces the one occurrence of `old` in a block with `new`.
    async fn block_replace(
        &self,
        scope: &Scope,
        label: &str,
        old: &str,
        new: &str,
    ) -> Result<Block, MemoryError> {
        let edit = BlockEdit::Replace {
            old: old.to_owned(),
            new: new.to_owned(),
        };
        self.edit_block(scope, label, edit).await
    }

    /// Appends text (on a new line) to a block.
    async fn block_append(
        &self,
        scope: &Scope,
        label: &str,
        text: &str,
    ) -> Result<Block, MemoryError> {
        self.edit_block(scope, label, BlockEdit::Append(text.to_owned()))
            .await
    }

    /// Sets a block's whole content (host use; ignores the read-only flag).
    async fn set_block(&self, scope: &Scope, label: &str, value: &str) -> Result<(), MemoryError> {
        self.edit_block(scope, label, BlockEdit::Set(value.to_owned()))
            .await
            .map(|_| ())
    }
}

/// Seconds since the Unix epoch, as every backend stamps its rows.
pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A shared backend, as the tools and hooks hold it.
pub type SharedMemory = Arc<dyn MemoryBackend>;

/// Vectors for `texts` in one batch, unit length, with the embedder's name;
/// `None` (logged) when there is no embedder or it failed or answered
/// malformed vectors.
pub(crate) async fn embed_records(
    embedder: Option<&Arc<dyn Embedder>>,
    texts: &[String],
) -> Option<(Vec<Vec<f32>>, String)> {
    let embedder = embedder?;
    match embedder.embed(texts).await {
        Ok(mut vectors)
            if vectors.len() == texts.len()
                && vectors.iter().all(|v| v.len() == embedder.dims()) =>
        {
            for v in &mut vectors {
                normalize(v);
            }
            Some((vectors, embedder.name().to_owned()))
        }
        Ok(_) => {
            tracing::warn!(
                embedder = embedder.name(),
                "records stored without embeddings: the embedder answered malformed vectors"
            );
            None
        }
        Err(error) => {
            tracing::warn!(%error, "records stored without embeddings");
            None
        }
    }
}

/// The query's unit vector, or why recall answers from full text alone.
pub(crate) async fn embed_query(
    embedder: Option<&Arc<dyn Embedder>>,
    query: &str,
) -> Result<Vec<f32>, RecallMode> {
    let Some(embedder) = embedder else {
        return Err(RecallMode::FullTextOnly {
            reason: "no embedder is configured".into(),
        });
    };
    match embedder.embed(&[query.to_owned()]).await {
        Ok(mut vectors) if vectors.len() == 1 && vectors[0].len() == embedder.dims() => {
            let mut vector = vectors.swap_remove(0);
            normalize(&mut vector);
            Ok(vector)
        }
        Ok(_) => Err(RecallMode::FullTextOnly {
            reason: "the embedder returned a malformed vector".into(),
        }),
        Err(error) => Err(RecallMode::FullTextOnly {
            reason: error.to_string(),
        }),
    }
}

/// Vector hits below this cosine similarity are dropped: unrelated or
/// degenerate vectors (a query of symbols) do not count as matches.
pub(crate) const MIN_SIMILARITY: f32 = 0.05;

/// The reciprocal-rank-fusion constant.
pub(crate) const RRF_K: f64 = 60.0;

/// A record's place after fusion: id, fused score, vector similarity, and
/// whether full-text search found it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Fused {
    pub(crate) id: i64,
    pub(crate) score: f64,
    pub(crate) similarity: Option<f32>,
    pub(crate) full_text: bool,
}

impl Fused {
    /// The hit for this record's stored fields.
    pub(crate) fn hit(self, session: String, role: String, text: String, created_at: i64) -> Hit {
        Hit {
            id: self.id,
            session,
            role,
            text,
            created_at,
            score: self.score,
            similarity: self.similarity,
            full_text: self.full_text,
        }
    }
}

/// Reciprocal-rank fusion of the vector ranking (id, similarity) and the
/// full-text ranking (ids), best first; ties go to the newer record.
pub(crate) fn fuse(vector: &[(i64, f32)], text: &[i64]) -> Vec<Fused> {
    let mut scores: HashMap<i64, Fused> = HashMap::new();
    let entry = |scores: &mut HashMap<i64, Fused>, id: i64| {
        *scores.entry(id).or_insert(Fused {
            id,
            score: 0.0,
            similarity: None,
            full_text: false,
        })
    };
    for (rank, (id, similarity)) in vector.iter().enumerate() {
        let mut fused = entry(&mut scores, *id);
        fused.score += 1.0 / (RRF_K + rank as f64 + 1.0);
        fused.similarity = Some(*similarity);
        scores.insert(*id, fused);
    }
    for (rank, id) in text.iter().enumerate() {
        let mut fused = entry(&mut scores, *id);
        fused.score += 1.0 / (RRF_K + rank as f64 + 1.0);
        fused.full_text = true;
        scores.insert(*id, fused);
    }
    let mut ranked: Vec<Fused> = scores.into_values().collect();
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.id.cmp(&a.id)));
    ranked
}

/// The words of a query, lower-cased and cut to a rough root: each is
/// matched as a prefix and they are OR-ed, so "deploy", "deploying" and
/// "deployments" all find "deployment". At most 16.
pub(crate) fn query_terms(query: &str) -> Vec<String> {
    query_words(query)
        .into_iter()
        .map(|(root, _)| root)
        .collect()
}

/// Each distinct root of [`query_terms`] with the word it came from.
pub(crate) fn query_words(query: &str) -> Vec<(String, String)> {
    const SUFFIXES: &[&str] = &[
        "ments", "ment", "ings", "ing", "ions", "ion", "ers", "er", "ed", "es", "s",
    ];
    let mut terms: Vec<(String, String)> = Vec::new();
    for word in query.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        let mut root = word.clone();
        if word.chars().count() > 5
            && let Some(cut) = SUFFIXES.iter().find_map(|s| word.strip_suffix(s))
            && cut.chars().count() >= 4
        {
            root = cut.to_owned();
        }
        if root.chars().count() >= 2 && !terms.iter().any(|(r, _)| *r == root) {
            terms.push((root, word));
        }
        if terms.len() == 16 {
            break;
        }
    }
    terms
}

impl From<crate::MemoryStore> for SharedMemory {
    fn from(store: crate::MemoryStore) -> Self {
        Arc::new(store)
    }
}
