//! Recall: vector similarity and FTS5 bm25, fused by reciprocal rank.

use std::collections::HashMap;
use std::sync::Arc;

use rusqlite::{OptionalExtension, params};

use crate::MemoryError;
use crate::embed::normalize;
use crate::store::{Hit, MemoryStore, Recall, RecallMode, Triple, row_to_triple, sql};

/// A record's fused score, vector similarity, and whether FTS found it.
type Fused = (f64, Option<f32>, bool);

/// Vector hits below this cosine similarity are dropped.
const MIN_SIMILARITY: f32 = 0.05;

/// The reciprocal-rank-fusion constant.
const RRF_K: f64 = 60.0;

impl MemoryStore {
    // ------------------------------------------------------------ recall

    /// Ranks records for `query`: embedding cosine similarity and FTS5
    /// bm25, fused by reciprocal rank; FTS5 alone when there is no
    /// embedder or it fails (the mode says which). `since` (seconds since
    /// the epoch) drops older records. Also returns current triples that
    /// mention the query's words.
    pub async fn recall(
        &self,
        query: &str,
        k: usize,
        since: Option<i64>,
    ) -> Result<Recall, MemoryError> {
        let k = k.clamp(1, 100);
        let depth = (k * 4).max(50);
        let terms = query_terms(query);
        // The vector scan and the full-text query run at the same time.
        let (vector, fts) = tokio::join!(
            self.vector_candidates(query, depth, since),
            self.fts_candidates(&terms, depth, since)
        );
        let (vector_ids, mode) = vector?;
        let fts = fts?;
        let db = Arc::clone(&self.inner.db);
        let (hits, triples) = db
            .read(move |conn| {
                let mut scores: HashMap<i64, Fused> = HashMap::new();
                for (rank, (id, similarity)) in vector_ids.iter().enumerate() {
                    let entry = scores.entry(*id).or_insert((0.0, None, false));
                    entry.0 += 1.0 / (RRF_K + rank as f64 + 1.0);
                    entry.1 = Some(*similarity);
                }
                for (rank, id) in fts.iter().enumerate() {
                    let entry = scores.entry(*id).or_insert((0.0, None, false));
                    entry.0 += 1.0 / (RRF_K + rank as f64 + 1.0);
                    entry.2 = true;
                }
                let mut ranked: Vec<(i64, Fused)> = scores.into_iter().collect();
                ranked.sort_by(|a, b| b.1.0.total_cmp(&a.1.0).then(b.0.cmp(&a.0)));
                ranked.truncate(k);
                let mut hits = Vec::with_capacity(ranked.len());
                let mut fetch = conn
                    .prepare_cached(
                        "SELECT session, role, text, created_at FROM records WHERE id = ?1",
                    )
                    .map_err(sql)?;
                for (id, (score, similarity, full_text)) in ranked {
                    let row = fetch
                        .query_row(params![id], |r| {
                            Ok((
                                r.get::<_, String>(0)?,
                                r.get::<_, String>(1)?,
                                r.get::<_, String>(2)?,
                                r.get::<_, i64>(3)?,
                            ))
                        })
                        .optional()
                        .map_err(sql)?;
                    // Deleted since the search: skip it.
                    let Some(row) = row else { continue };
                    hits.push(Hit {
                        id,
                        session: row.0,
                        role: row.1,
                        text: row.2,
                        created_at: row.3,
                        score,
                        similarity,
                        full_text,
                    });
                }
                let triples = triples_mentioning(conn, &terms)?;
                Ok((hits, triples))
            })
            .await?;
        Ok(Recall {
            hits,
            triples,
            mode,
        })
    }

    /// The `depth` nearest records by embedding, and how recall answers.
    async fn vector_candidates(
        &self,
        query: &str,
        depth: usize,
        since: Option<i64>,
    ) -> Result<(Vec<(i64, f32)>, RecallMode), MemoryError> {
        let Some(embedder) = &self.inner.embedder else {
            return Ok((
                Vec::new(),
                RecallMode::FullTextOnly {
                    reason: "no embedder is configured".into(),
                },
            ));
        };
        let mut vector = match embedder.embed(&[query.to_owned()]).await {
            Ok(mut vectors) if vectors.len() == 1 && vectors[0].len() == embedder.dims() => {
                vectors.swap_remove(0)
            }
            Ok(_) => {
                return Ok((
                    Vec::new(),
                    RecallMode::FullTextOnly {
                        reason: "the embedder returned a malformed vector".into(),
                    },
                ));
            }
            Err(error) => {
                return Ok((
                    Vec::new(),
                    RecallMode::FullTextOnly {
                        reason: error.to_string(),
                    },
                ));
            }
        };
        normalize(&mut vector);
        self.sync_index().await?;
        let inner = Arc::clone(&self.inner);
        // A full scan is CPU work: keep it off the async threads.
        let found = tokio::task::spawn_blocking(move || {
            inner
                .index
                .read()
                .map(|index| {
                    // Unrelated or degenerate vectors (a query of symbols) do not
                    // count as matches.
                    index
                        .search(&vector, depth, since)
                        .into_iter()
                        .filter(|(_, similarity)| {
                            similarity.is_finite() && *similarity >= MIN_SIMILARITY
                        })
                        .collect::<Vec<_>>()
                })
                .map_err(|_| MemoryError::Closed)
        })
        .await
        .map_err(|e| MemoryError::Io(format!("vector search failed: {e}")))??;
        Ok((found, RecallMode::Hybrid))
    }

    /// The `depth` best records by bm25 for the query's terms.
    async fn fts_candidates(
        &self,
        terms: &[String],
        depth: usize,
        since: Option<i64>,
    ) -> Result<Vec<i64>, MemoryError> {
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let expression = terms
            .iter()
            .map(|t| format!("\"{t}\"*"))
            .collect::<Vec<_>>()
            .join(" OR ");
        self.inner
            .db
            .read(move |conn| {
                let ids = match since {
                    // Without a time limit the FTS index alone answers.
                    None => {
                        let mut statement = conn
                            .prepare_cached(
                                "SELECT rowid FROM records_fts WHERE records_fts MATCH ?1
                                 ORDER BY bm25(records_fts) LIMIT ?2",
                            )
                            .map_err(sql)?;
                        statement
                            .query_map(params![expression, depth as i64], |r| r.get(0))
                            .map_err(sql)?
                            .collect::<Result<Vec<i64>, _>>()
                    }
                    Some(since) => {
                        let mut statement = conn
                            .prepare_cached(
                                "SELECT r.id FROM records_fts f JOIN records r ON r.id = f.rowid
                                 WHERE records_fts MATCH ?1 AND r.created_at >= ?2
                                 ORDER BY bm25(records_fts) LIMIT ?3",
                            )
                            .map_err(sql)?;
                        statement
                            .query_map(params![expression, since, depth as i64], |r| r.get(0))
                            .map_err(sql)?
                            .collect::<Result<Vec<i64>, _>>()
                    }
                };
                ids.map_err(sql)
            })
            .await
    }

    /// Loads vectors written since the last search (by this or another
    /// process) into the in-memory index.
    async fn sync_index(&self) -> Result<(), MemoryError> {
        let (after, name, dims) = {
            let index = self.inner.index.read().map_err(|_| MemoryError::Closed)?;
            (index.max_id(), index.embedder().to_owned(), index.dims())
        };
        let rows = self
            .inner
            .db
            .read(move |conn| {
                let mut statement = conn
                    .prepare_cached(
                        "SELECT id, created_at, embedding FROM records
                         WHERE id > ?1 AND embedder = ?2 AND embedding IS NOT NULL ORDER BY id",
                    )
                    .map_err(sql)?;
                let rows = statement
                    .query_map(params![after, name], |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, Vec<u8>>(2)?,
                        ))
                    })
                    .map_err(sql)?;
                rows.collect::<Result<Vec<_>, _>>().map_err(sql)
            })
            .await?;
        if rows.is_empty() {
            return Ok(());
        }
        let mut index = self.inner.index.write().map_err(|_| MemoryError::Closed)?;
        for (id, created_at, blob) in rows {
            if id <= index.max_id() {
                continue;
            }
            if blob.len() != dims * 4 {
                // Written by an embedder of another size under the same
                // name: never compared, but not read again either.
                index.skip_to(id);
                continue;
            }
            index.push(id, created_at, &blob);
        }
        Ok(())
    }
}

/// Current triples whose subject or object contains one of the terms.
fn triples_mentioning(
    conn: &rusqlite::Connection,
    terms: &[String],
) -> Result<Vec<Triple>, MemoryError> {
    let mut out: Vec<Triple> = Vec::new();
    let mut statement = conn
        .prepare_cached(
            "SELECT id, subject, predicate, object, source, valid_from, valid_to FROM triples
             WHERE valid_to IS NULL AND (subject LIKE ?1 ESCAPE '\\' OR object LIKE ?1 ESCAPE '\\')
             ORDER BY valid_from DESC LIMIT 10",
        )
        .map_err(sql)?;
    for term in terms.iter().filter(|t| t.chars().count() >= 3) {
        let escaped = term
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        let rows = statement
            .query_map(params![format!("%{escaped}%")], row_to_triple)
            .map_err(sql)?;
        for triple in rows {
            let triple = triple.map_err(sql)?;
            if !out.iter().any(|t| t.id == triple.id) {
                out.push(triple);
            }
        }
        if out.len() >= 10 {
            break;
        }
    }
    out.truncate(10);
    Ok(out)
}

/// The words of a query, lower-cased and cut to a rough root, for FTS5:
/// each is quoted and matched as a prefix, and they are OR-ed, so "deploy",
/// "deploying" and "deployments" all find "deployment". (SQLite's porter
/// stemmer maps "deploy" and "deployment" to different stems, so the index
/// is unstemmed and the query does the work.)
pub(crate) fn query_terms(query: &str) -> Vec<String> {
    const SUFFIXES: &[&str] = &[
        "ments", "ment", "ings", "ing", "ions", "ion", "ers", "er", "ed", "es", "s",
    ];
    let mut terms: Vec<String> = Vec::new();
    for word in query.split(|c: char| !c.is_alphanumeric()) {
        let mut word = word.to_lowercase();
        if word.chars().count() > 5
            && let Some(root) = SUFFIXES.iter().find_map(|s| word.strip_suffix(s))
            && root.chars().count() >= 4
        {
            word = root.to_owned();
        }
        if word.chars().count() >= 2 && !terms.contains(&word) {
            terms.push(word);
        }
        if terms.len() == 16 {
            break;
        }
    }
    terms
}
