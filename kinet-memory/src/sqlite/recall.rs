//! Recall on SQLite: the quantised vector scan rescored exactly, and FTS5
//! bm25 bounded so frequent words stay cheap, fused by reciprocal rank.

use std::sync::Arc;

use rusqlite::{OptionalExtension, params};

use super::vector::dot;
use super::{MemoryStore, row_to_triple, sql};
use crate::MemoryError;
use crate::backend::{MIN_SIMILARITY, embed_query, fuse, query_terms};
use crate::model::{Hit, Recall, RecallMode, RecallQuery, Triple};

/// A term matching more records than this is "frequent": it is left out of
/// the full-text query while rarer terms remain, and when every term is
/// frequent only this many newest matches are ranked by bm25. Ranking every
/// match of a word in a fifth of a million records took 35 ms; this bounds
/// the full-text side to a few milliseconds at any size.
const FREQUENT: usize = 5_000;

impl MemoryStore {
    pub(super) async fn recall_records(&self, query: &RecallQuery) -> Result<Recall, MemoryError> {
        let (k, depth) = query.sizes();
        let terms = query_terms(&query.text);
        // The vector scan and the full-text query run at the same time.
        let (vector, text) = tokio::join!(
            self.vector_candidates(&query.text, depth, query.since),
            self.text_candidates(&terms, depth, query.since)
        );
        let (vector, mode) = vector?;
        let ranked = fuse(&vector, &text?);
        let exclude = query.exclude_turn.clone();
        let (hits, triples) = self
            .inner
            .db
            .read(move |conn| {
                let mut hits = Vec::with_capacity(k);
                let mut fetch = conn
                    .prepare_cached(
                        "SELECT session, role, text, created_at, turn FROM records WHERE id = ?1",
                    )
                    .map_err(sql)?;
                for fused in ranked {
                    if hits.len() == k {
                        break;
                    }
                    let row = fetch
                        .query_row(params![fused.id], |r| {
                            Ok((
                                r.get::<_, String>(0)?,
                                r.get::<_, String>(1)?,
                                r.get::<_, String>(2)?,
                                r.get::<_, i64>(3)?,
                                r.get::<_, Option<String>>(4)?,
                            ))
                        })
                        .optional()
                        .map_err(sql)?;
                    // Deleted since the search: skip it.
                    let Some((session, role, text, created_at, turn)) = row else {
                        continue;
                    };
                    if exclude.is_some() && turn == exclude {
                        continue;
                    }
                    hits.push(Hit {
                        id: fused.id,
                        session,
                        role,
                        text,
                        created_at,
                        score: fused.score,
                        similarity: fused.similarity,
                        full_text: fused.full_text,
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

    /// The `depth` nearest records by embedding (exact cosine, best first),
    /// and how recall answers.
    async fn vector_candidates(
        &self,
        query: &str,
        depth: usize,
        since: Option<i64>,
    ) -> Result<(Vec<(i64, f32)>, RecallMode), MemoryError> {
        let vector = match embed_query(self.inner.embedder.as_ref(), query).await {
            Ok(vector) => vector,
            Err(mode) => return Ok((Vec::new(), mode)),
        };
        self.sync_index().await?;
        let inner = Arc::clone(&self.inner);
        let query = vector.clone();
        // A scan is CPU work: keep it off the async threads. Twice the depth
        // is taken from the quantised scan and rescored exactly.
        let approximate = tokio::task::spawn_blocking(move || {
            inner
                .index
                .read()
                .map(|index| index.search(&query, depth * 2, since))
                .map_err(|_| MemoryError::Closed)
        })
        .await
        .map_err(|e| MemoryError::Io(format!("vector search failed: {e}")))??;
        if approximate.is_empty() {
            return Ok((Vec::new(), RecallMode::Hybrid));
        }
        let exact = self
            .inner
            .db
            .read(move |conn| {
                let mut statement = conn
                    .prepare_cached("SELECT embedding FROM records WHERE id = ?1")
                    .map_err(sql)?;
                let mut exact = Vec::with_capacity(approximate.len());
                for (id, _) in approximate {
                    let blob: Option<Option<Vec<u8>>> = statement
                        .query_row(params![id], |r| r.get(0))
                        .optional()
                        .map_err(sql)?;
                    let Some(Some(blob)) = blob else { continue };
                    let stored: Vec<f32> = blob
                        .as_chunks::<4>()
                        .0
                        .iter()
                        .map(|bytes| f32::from_le_bytes(*bytes))
                        .collect();
                    if stored.len() != vector.len() {
                        continue;
                    }
                    let similarity = dot(&vector, &stored);
                    if similarity.is_finite() && similarity >= MIN_SIMILARITY {
                        exact.push((id, similarity));
                    }
                }
                Ok(exact)
            })
            .await?;
        let mut exact = exact;
        exact.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        exact.truncate(depth);
        Ok((exact, RecallMode::Hybrid))
    }

    /// The `depth` best records by bm25 for the query's terms, bounded: a
    /// term matching more than [`FREQUENT`] records is dropped while rarer
    /// terms remain; when all are frequent, the newest [`FREQUENT`]
    /// matches are ranked.
    async fn text_candidates(
        &self,
        terms: &[String],
        depth: usize,
        since: Option<i64>,
    ) -> Result<Vec<i64>, MemoryError> {
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let terms = terms.to_vec();
        self.inner
            .db
            .read(move |conn| {
                let since = since.unwrap_or(i64::MIN);
                let mut count = conn
                    .prepare_cached(
                        "SELECT count(*) FROM (SELECT rowid FROM records_fts WHERE records_fts MATCH ?1
                         ORDER BY rowid DESC LIMIT ?2)",
                    )
                    .map_err(sql)?;
                let mut rare = Vec::new();
                for term in &terms {
                    let matches: i64 = count
                        .query_row(params![phrase(term), FREQUENT as i64 + 1], |r| r.get(0))
                        .map_err(sql)?;
                    if matches <= FREQUENT as i64 {
                        rare.push(phrase(term));
                    }
                }
                if !rare.is_empty() {
                    let mut statement = conn
                        .prepare_cached(
                            "SELECT f.rowid FROM records_fts f JOIN records r ON r.id = f.rowid
                             WHERE records_fts MATCH ?1 AND r.created_at >= ?2
                             ORDER BY bm25(records_fts) LIMIT ?3",
                        )
                        .map_err(sql)?;
                    return statement
                        .query_map(params![rare.join(" OR "), since, depth as i64], |r| r.get(0))
                        .map_err(sql)?
                        .collect::<Result<Vec<i64>, _>>()
                        .map_err(sql);
                }
                let expression = terms.iter().map(|t| phrase(t)).collect::<Vec<_>>().join(" OR ");
                let mut statement = conn
                    .prepare_cached(
                        "SELECT f.rowid, bm25(records_fts) FROM records_fts f JOIN records r ON r.id = f.rowid
                         WHERE records_fts MATCH ?1 AND r.created_at >= ?2
                         ORDER BY f.rowid DESC LIMIT ?3",
                    )
                    .map_err(sql)?;
                let mut newest: Vec<(i64, f64)> = statement
                    .query_map(params![expression, since, FREQUENT as i64], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .map_err(sql)?
                    .collect::<Result<_, _>>()
                    .map_err(sql)?;
                // bm25 is lower for better matches.
                newest.sort_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
                Ok(newest.into_iter().take(depth).map(|(id, _)| id).collect())
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
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut index = inner.index.write().map_err(|_| MemoryError::Closed)?;
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
            index.settle();
            Ok(())
        })
        .await
        .map_err(|e| MemoryError::Io(format!("loading vectors failed: {e}")))?
    }
}

/// A term as an FTS5 prefix phrase (terms hold letters and digits only).
fn phrase(term: &str) -> String {
    format!("\"{term}\"*")
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

