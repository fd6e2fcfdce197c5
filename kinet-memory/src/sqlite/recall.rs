//! Recall on SQLite: the quantised vector scan rescored exactly, and FTS5
//! bm25 bounded so frequent words stay cheap, fused by reciprocal rank.

use std::sync::Arc;

use rusqlite::{OptionalExtension, named_params, params};

use super::triples::SCOPED;
use super::vector::{Filter, dot, floats};
use super::{MemoryStore, row_to_triple, sql};
use crate::MemoryError;
use crate::backend::{MIN_SIMILARITY, embed_query, fuse, query_terms, query_words};
use crate::model::{Recall, RecallMode, RecallQuery, Triple};
use crate::scope::Scope;

/// A term matching more records than this is "frequent": it is left out of
/// the full-text query while rarer terms remain, and when every term is
/// frequent only this many newest matches are ranked (by how many of the
/// terms they hold). Ranking every match of two words in a sixth of a
/// million records by bm25 took 290 ms; this bounds the full-text side to
/// a few milliseconds at any size.
const FREQUENT: usize = 5_000;

impl MemoryStore {
    pub(super) async fn recall_records(
        &self,
        scope: &Scope,
        query: &RecallQuery,
    ) -> Result<Recall, MemoryError> {
        let (k, depth) = query.sizes();
        let terms = query_terms(&query.text);
        // The vector scan and the full-text query run at the same time.
        let (vector, text) = tokio::join!(
            self.vector_candidates(scope, &query.text, k, depth, query.since),
            self.text_candidates(scope, &query.text, depth, query.since)
        );
        let (vector, mode) = vector?;
        let ranked = fuse(&vector, &text?);
        let exclude = query.exclude_turn.clone();
        let since = query.since;
        let [su, sa, sc] = scope.columns().map(str::to_owned);
        let (hits, triples) = self
            .inner
            .db
            .read(move |conn| {
                let mut hits = Vec::with_capacity(k);
                let mut fetch = conn
                    .prepare_cached(&format!(
                        "SELECT session, role, text, created_at, turn FROM records WHERE id = :id AND {SCOPED}"
                    ))
                    .map_err(sql)?;
                for fused in ranked {
                    if hits.len() == k {
                        break;
                    }
                    let row = fetch
                        .query_row(named_params! {":id": fused.id, ":su": su, ":sa": sa, ":sc": sc}, |r| {
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
                    // Deleted since the search, or another scope's (the
                    // indexes hold scope hashes, which can collide): skip it.
                    let Some((session, role, text, created_at, turn)) = row else {
                        continue;
                    };
                    if (exclude.is_some() && turn == exclude)
                        || since.is_some_and(|since| created_at < since)
                    {
                        continue;
                    }
                    hits.push(fused.hit(session, role, text, created_at));
                }
                let triples = triples_mentioning(conn, [&su, &sa, &sc], &terms)?;
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
        scope: &Scope,
        query: &str,
        k: usize,
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
        let filter = Filter {
            since,
            scope: scope.hash(),
        };
        // A scan is CPU work: keep it off the async threads. Twice the depth
        // is taken from the quantised scan and rescored exactly.
        let approximate = tokio::task::spawn_blocking(move || {
            inner
                .index
                .read()
                .map(|index| index.search(&query, depth * 2, k, filter))
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
                    let stored = floats(&blob);
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

    /// The `depth` best records for the query's terms, bounded: rare terms
    /// are ranked by bm25 (as prefixes when four letters or more and the
    /// prefix stays rare) and a term matching more than [`FREQUENT`]
    /// records is dropped while rarer ones remain; when all are frequent,
    /// the newest [`FREQUENT`] matches are ranked by how many terms they
    /// hold.
    async fn text_candidates(
        &self,
        scope: &Scope,
        query: &str,
        depth: usize,
        since: Option<i64>,
    ) -> Result<Vec<i64>, MemoryError> {
        let terms = query_words(query);
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let key = scope.key();
        self.inner
            .db
            .read(move |conn| {
                let Some(search) = TextSearch::new(conn, key, since)? else {
                    return Ok(Vec::new());
                };
                let phrases = search.phrases(&terms)?;
                if !phrases.rare.is_empty() {
                    return search.best_by_bm25(&phrases.rare, depth);
                }
                search.holding_most(&phrases.frequent, depth)
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
                        "SELECT id, created_at, embedding, scope_key FROM records
                         WHERE id > ?1 AND embedder = ?2 AND embedding IS NOT NULL ORDER BY id",
                    )
                    .map_err(sql)?;
                let rows = statement
                    .query_map(params![after, name], |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, Vec<u8>>(2)?,
                            r.get::<_, String>(3)?,
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
            for (id, created_at, blob, key) in rows {
                if id <= index.max_id() {
                    continue;
                }
                if blob.len() != dims * 4 {
                    // Written by an embedder of another size under the same
                    // name: never compared, but not read again either.
                    index.skip_to(id);
                    continue;
                }
                // A malformed key (never written by kinet) matches no scope.
                let scope = Scope::hash_of_key(&key).unwrap_or(u64::MAX);
                index.push(id, created_at, scope, &blob);
            }
            index.settle();
            Ok(())
        })
        .await
        .map_err(|e| MemoryError::Io(format!("loading vectors failed: {e}")))?
    }
}

/// Whether no record of another scope than `key` exists (two seeks on the
/// scope index).
fn scope_is_alone(conn: &rusqlite::Connection, key: &str) -> Result<bool, MemoryError> {
    conn.prepare_cached(
        "SELECT NOT EXISTS (SELECT 1 FROM records WHERE scope_key < ?1)
            AND NOT EXISTS (SELECT 1 FROM records WHERE scope_key > ?1)",
    )
    .and_then(|mut statement| statement.query_row(params![key], |r| r.get(0)))
    .map_err(sql)
}

/// A full-text search over one scope's records, from a first rowid on.
struct TextSearch<'a> {
    conn: &'a rusqlite::Connection,
    /// The scope's key, or `None` when the scope is alone in the store.
    key: Option<String>,
    /// The lowest rowid searched.
    first: i64,
}

/// A query's terms as FTS5 phrases, sorted by how many records they match.
struct Phrases {
    /// Phrases matching at most [`FREQUENT`] records.
    rare: Vec<String>,
    /// Phrases matching more.
    frequent: Vec<String>,
}

impl<'a> TextSearch<'a> {
    /// The search for the records of the scope `key` created at `since` or
    /// later; `None` when no record is that recent.
    fn new(
        conn: &'a rusqlite::Connection,
        key: String,
        since: Option<i64>,
    ) -> Result<Option<Self>, MemoryError> {
        // Every match is inside the scope: its key is a second column of
        // the full-text index, intersected with the terms (matched in the
        // text only). A scope alone in the store (one tenant, or a store
        // from before scopes) skips the intersection; the rows are checked
        // against the scope again when fetched, so a record another scope
        // writes meanwhile is still never returned.
        let alone = scope_is_alone(conn, &key)?;
        // Records are written in time order, so a time limit is a rowid
        // range, which FTS5 applies inside its index (a join with the
        // records table would visit every match); the hits are checked
        // against the time again when fetched.
        let first: i64 = match since {
            None => i64::MIN,
            Some(since) => {
                let first: Option<i64> = conn
                    .query_row(
                        "SELECT min(id) FROM records WHERE created_at >= ?1",
                        params![since],
                        |r| r.get(0),
                    )
                    .map_err(sql)?;
                match first {
                    Some(first) => first,
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(Self {
            conn,
            key: (!alone).then_some(key),
            first,
        }))
    }

    /// The FTS5 query for `terms` within the scope.
    fn within(&self, terms: &str) -> String {
        match &self.key {
            None => format!("text : ({terms})"),
            Some(key) => format!("scope_key : \"{key}\" AND text : ({terms})"),
        }
    }

    /// Sorts the query's terms (each with its word as written) into rare
    /// and frequent phrases; a rare term of four letters or more becomes a
    /// prefix phrase while the prefix stays rare.
    fn phrases(&self, terms: &[(String, String)]) -> Result<Phrases, MemoryError> {
        // How many records a phrase matches, counted up to one past
        // FREQUENT (newest first, so FTS5 stops early for a term; a prefix
        // phrase reads its doclists whole).
        let mut count = self
            .conn
            .prepare_cached(
                "SELECT count(*) FROM (SELECT rowid FROM records_fts
                 WHERE records_fts MATCH ?1 AND rowid >= ?2 ORDER BY rowid DESC LIMIT ?3)",
            )
            .map_err(sql)?;
        let mut matches = |phrase: &str| -> Result<i64, MemoryError> {
            count
                .query_row(
                    params![self.within(phrase), self.first, FREQUENT as i64 + 1],
                    |r| r.get(0),
                )
                .map_err(sql)
        };
        let frequent_count = FREQUENT as i64;
        let mut rare = Vec::new();
        let mut frequent = Vec::new();
        for (term, word) in terms {
            // A common word as written is frequent: no need to read the
            // doclists of all its forms to say so.
            if word != term {
                let written = format!("\"{word}\"");
                if matches(&written)? > frequent_count {
                    frequent.push(written);
                    continue;
                }
            }
            let exact = format!("\"{term}\"");
            let exact_matches = matches(&exact)?;
            if exact_matches > frequent_count {
                frequent.push(exact);
            } else if term.chars().count() < 4 {
                rare.push(exact);
            } else if matches(&phrase(term))? <= frequent_count {
                // Word forms ("deploy" finds "deployment") while the prefix
                // stays rare.
                rare.push(phrase(term));
            } else if exact_matches > 0 {
                rare.push(exact);
            } else {
                // Only its longer forms occur ("bill" of "billing"), and
                // often.
                frequent.push(phrase(term));
            }
        }
        Ok(Phrases { rare, frequent })
    }

    /// The `depth` best matches of any of the rare phrases, by bm25.
    fn best_by_bm25(&self, rare: &[String], depth: usize) -> Result<Vec<i64>, MemoryError> {
        let mut statement = self
            .conn
            .prepare_cached(
                "SELECT rowid FROM records_fts WHERE records_fts MATCH ?1 AND rowid >= ?2
                 ORDER BY bm25(records_fts) LIMIT ?3",
            )
            .map_err(sql)?;
        statement
            .query_map(
                params![self.within(&rare.join(" OR ")), self.first, depth as i64],
                |r| r.get(0),
            )
            .map_err(sql)?
            .collect::<Result<Vec<i64>, _>>()
            .map_err(sql)
    }

    /// For frequent phrases only: bm25 would read every match of each to
    /// weigh it, and weighs them all about the same. The newest
    /// [`FREQUENT`] matches of any phrase are ranked by how many of the
    /// phrases they hold, newest first among equals; the first `depth`
    /// are returned.
    fn holding_most(&self, frequent: &[String], depth: usize) -> Result<Vec<i64>, MemoryError> {
        let mut rows = self
            .conn
            .prepare_cached(
                "SELECT rowid FROM records_fts WHERE records_fts MATCH ?1 AND rowid >= ?2
                 ORDER BY rowid DESC LIMIT ?3",
            )
            .map_err(sql)?;
        let newest: Vec<i64> = rows
            .query_map(
                params![
                    self.within(&frequent.join(" OR ")),
                    self.first,
                    FREQUENT as i64
                ],
                |r| r.get(0),
            )
            .map_err(sql)?
            .collect::<Result<_, _>>()
            .map_err(sql)?;
        let Some(oldest) = newest.last().copied() else {
            return Ok(Vec::new());
        };
        let mut held: std::collections::HashMap<i64, usize> =
            newest.iter().map(|id| (*id, 0)).collect();
        for term in frequent {
            let ids = rows
                .query_map(params![self.within(term), oldest, FREQUENT as i64], |r| {
                    r.get::<_, i64>(0)
                })
                .map_err(sql)?;
            for id in ids {
                if let Some(count) = held.get_mut(&id.map_err(sql)?) {
                    *count += 1;
                }
            }
        }
        let mut ranked: Vec<(i64, usize)> = held.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
        Ok(ranked.into_iter().take(depth).map(|(id, _)| id).collect())
    }
}

/// A term as an FTS5 prefix phrase (terms hold letters and digits only).
fn phrase(term: &str) -> String {
    format!("\"{term}\"*")
}

/// Current triples whose subject or object contains one of the terms.
fn triples_mentioning(
    conn: &rusqlite::Connection,
    [su, sa, sc]: [&str; 3],
    terms: &[String],
) -> Result<Vec<Triple>, MemoryError> {
    let mut out: Vec<Triple> = Vec::new();
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT id, subject, predicate, object, source, valid_from, valid_to FROM triples
             WHERE {SCOPED} AND valid_to IS NULL
               AND (subject LIKE :pattern ESCAPE '\\' OR object LIKE :pattern ESCAPE '\\')
             ORDER BY valid_from DESC LIMIT 10"
        ))
        .map_err(sql)?;
    for term in terms.iter().filter(|t| t.chars().count() >= 3) {
        let escaped = term
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        let rows = statement
            .query_map(
                named_params! {":su": su, ":sa": sa, ":sc": sc, ":pattern": format!("%{escaped}%")},
                row_to_triple,
            )
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
