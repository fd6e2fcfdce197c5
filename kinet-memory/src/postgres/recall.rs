//! Recall on PostgreSQL: pgvector HNSW and full-text search, fused by
//! reciprocal rank.

use super::Cached as _;
use std::collections::HashMap;

use super::{PostgresMemory, SCOPED, TRIPLE_COLUMNS, pg, triple_from_row};
use crate::MemoryError;
use crate::backend::{MIN_SIMILARITY, embed_query, fuse, query_terms, query_words};
use crate::model::{Recall, RecallMode, RecallQuery, Triple};
use crate::scope::Scope;

/// A word matching more records than this is frequent (as on SQLite).
const FREQUENT: i64 = 5_000;

/// A scope with at most this many embedded records is scanned exactly
/// (a few milliseconds), without the HNSW index.
const EXACT_UP_TO: i64 = 5_000;

impl PostgresMemory {
    pub(super) async fn recall_records(
        &self,
        scope: &Scope,
        query: &RecallQuery,
    ) -> Result<Recall, MemoryError> {
        let (k, depth) = query.sizes();
        let terms = query_terms(&query.text);
        let since = query.since.unwrap_or(i64::MIN);
        let exclude = query.exclude_turn.as_deref();
        let (vector, text) = tokio::join!(
            self.vector_candidates(scope, &query.text, depth, since, exclude),
            self.text_candidates(scope, &query.text, depth, since, exclude)
        );
        let (vector, mode) = vector?;
        let mut ranked = fuse(&vector, &text?);
        ranked.truncate(k);
        let ids: Vec<i64> = ranked.iter().map(|f| f.id).collect();
        let client = self.client().await?;
        let [su, sa, sc] = scope.columns();
        let rows = client
            .query_cached(
                &format!(
                    "SELECT id, session, role, text, created_at FROM kinet_records
                     WHERE {SCOPED} AND id = ANY($4) AND ($5::text IS NULL OR turn IS DISTINCT FROM $5)"
                ),
                &[&su, &sa, &sc, &ids, &exclude],
            )
            .await
            .map_err(pg)?;
        let mut found: HashMap<i64, tokio_postgres::Row> =
            rows.into_iter().map(|r| (r.get(0), r)).collect();
        let hits = ranked
            .into_iter()
            .filter_map(|fused| {
                let row = found.remove(&fused.id)?;
                Some(fused.hit(row.get(1), row.get(2), row.get(3), row.get(4)))
            })
            .collect();
        let triples = self.triples_mentioning(&client, scope, &terms).await?;
        Ok(Recall {
            hits,
            triples,
            mode,
        })
    }

    /// The `depth` nearest records of the scope by HNSW (cosine), best
    /// first. pgvector (0.6) filters after its index search, which keeps
    /// `ef_search` candidates of every scope: when fewer than `depth` of
    /// them are the scope's (a small scope in a large table, or one with
    /// fewer records than that), the scope's rows are scanned exactly.
    async fn vector_candidates(
        &self,
        scope: &Scope,
        query: &str,
        depth: usize,
        since: i64,
        exclude: Option<&str>,
    ) -> Result<(Vec<(i64, f32)>, RecallMode), MemoryError> {
        let vector = match embed_query(self.inner.embedder.as_ref(), query).await {
            Ok(vector) => pgvector::Vector::from(vector),
            Err(mode) => return Ok((Vec::new(), mode)),
        };
        let Some((expression, embedder)) = &self.inner.vectors else {
            return Ok((Vec::new(), RecallMode::Hybrid));
        };
        let client = self.client().await?;
        let limit = i64::try_from(depth).unwrap_or(i64::MAX);
        let [su, sa, sc] = scope.columns();
        let filter = format!(
            "{SCOPED} AND embedder = {embedder} AND created_at >= $5 \
             AND ($6::text IS NULL OR turn IS DISTINCT FROM $6)"
        );
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
            [&su, &sa, &sc, &vector, &since, &exclude, &limit];
        let exact = format!(
            "SELECT id, (1 - distance)::real, true FROM (
                 SELECT id, ({expression} <=> $4) AS distance FROM kinet_records WHERE {filter}
                 OFFSET 0
             ) scoped ORDER BY distance, id DESC LIMIT $7"
        );
        // A scope of at most EXACT_UP_TO embedded records is scanned
        // exactly; a larger one goes through the HNSW index. One statement:
        // the branch not taken is never run.
        let either = format!(
            "WITH small AS (
                 SELECT count(*) <= {EXACT_UP_TO} AS yes FROM (
                     SELECT 1 FROM kinet_records WHERE {SCOPED} AND embedder = {embedder}
                     LIMIT {EXACT_UP_TO} + 1
                 ) c
             )
             (SELECT * FROM ({exact}) e WHERE (SELECT yes FROM small))
             UNION ALL
             (SELECT id, (1 - ({expression} <=> $4))::real, false FROM kinet_records
              WHERE {filter} AND NOT (SELECT yes FROM small)
              ORDER BY {expression} <=> $4 LIMIT $7)"
        );
        // The index search keeps this many candidates; filters apply after
        // it, so it must exceed the depth wanted. Sent with the query (one
        // round trip; the connection is this call's while it runs).
        let ef_search = (depth * 4).clamp(100, 1000).to_string();
        let set_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&ef_search];
        let (set, rows) = tokio::join!(
            client.execute_cached(
                "SELECT set_config('hnsw.ef_search', $1, false)",
                &set_params
            ),
            client.query_cached(&either, &params)
        );
        set.map_err(pg)?;
        let mut rows = rows.map_err(pg)?;
        if rows.len() < depth && !rows.iter().any(|r| r.get::<_, bool>(2)) {
            // The index kept too few of the scope's rows (it filters after
            // its search): exact, over the scope.
            rows = client.query_cached(&exact, &params).await.map_err(pg)?;
        }
        let found = rows
            .iter()
            .map(|r| (r.get::<_, i64>(0), r.get::<_, f32>(1)))
            .filter(|(_, similarity)| similarity.is_finite() && *similarity >= MIN_SIMILARITY)
            .collect();
        Ok((found, RecallMode::Hybrid))
    }

    /// The `depth` best records by `ts_rank_cd`, frequent words bounded.
    async fn text_candidates(
        &self,
        scope: &Scope,
        query: &str,
        depth: usize,
        since: i64,
        exclude: Option<&str>,
    ) -> Result<Vec<i64>, MemoryError> {
        // The words as written: the english configuration stems them.
        let words: Vec<String> = query_words(query)
            .into_iter()
            .map(|(_, word)| word)
            .collect();
        if words.is_empty() {
            return Ok(Vec::new());
        }
        let client = self.client().await?;
        let [su, sa, sc] = scope.columns();
        // Every word's match count (up to one past FREQUENT) in one round
        // trip; a stop word has no node and matches nothing.
        let counted = client
            .query_cached(
                &format!(
                    "SELECT n, numnode(q), (SELECT count(*) FROM (SELECT 1 FROM kinet_records
                       WHERE {SCOPED} AND tsv @@ q LIMIT $5) m)
                     FROM unnest($4::text[]) WITH ORDINALITY AS w(word, n),
                          LATERAL websearch_to_tsquery('english', w.word) q
                     ORDER BY n"
                ),
                &[&su, &sa, &sc, &words, &(FREQUENT + 1)],
            )
            .await
            .map_err(pg)?;
        let rare: Vec<&str> = counted
            .iter()
            .filter(|row| row.get::<_, i32>(1) > 0 && row.get::<_, i64>(2) <= FREQUENT)
            .filter_map(|row| {
                let n = usize::try_from(row.get::<_, i64>(0)).ok()?;
                words.get(n.checked_sub(1)?).map(String::as_str)
            })
            .collect();
        let limit = i64::try_from(depth).unwrap_or(i64::MAX);
        let rows = if !rare.is_empty() {
            client
                .query_cached(
                    &format!(
                        "SELECT id FROM kinet_records, websearch_to_tsquery('english', $4) q
                         WHERE {SCOPED} AND tsv @@ q AND created_at >= $5
                           AND ($6::text IS NULL OR turn IS DISTINCT FROM $6)
                         ORDER BY ts_rank_cd(tsv, q) DESC, id DESC LIMIT $7"
                    ),
                    &[&su, &sa, &sc, &rare.join(" or "), &since, &exclude, &limit],
                )
                .await
        } else {
            client
                .query_cached(
                    &format!(
                        "SELECT id FROM (
                            SELECT id, tsv, q FROM kinet_records, websearch_to_tsquery('english', $4) q
                            WHERE {SCOPED} AND tsv @@ q AND created_at >= $5
                              AND ($6::text IS NULL OR turn IS DISTINCT FROM $6)
                            ORDER BY id DESC LIMIT $8
                         ) newest ORDER BY ts_rank_cd(tsv, q) DESC, id DESC LIMIT $7"
                    ),
                    &[&su, &sa, &sc, &words.join(" or "), &since, &exclude, &limit, &FREQUENT],
                )
                .await
        };
        Ok(rows.map_err(pg)?.iter().map(|r| r.get(0)).collect())
    }

    /// Current triples whose subject or object contains one of the terms.
    async fn triples_mentioning(
        &self,
        client: &impl deadpool_postgres::GenericClient,
        scope: &Scope,
        terms: &[String],
    ) -> Result<Vec<Triple>, MemoryError> {
        let patterns: Vec<String> = terms
            .iter()
            .filter(|t| t.chars().count() >= 3)
            .map(|t| {
                let escaped = t
                    .replace('\\', "\\\\")
                    .replace('%', "\\%")
                    .replace('_', "\\_");
                format!("%{escaped}%")
            })
            .collect();
        if patterns.is_empty() {
            return Ok(Vec::new());
        }
        let [su, sa, sc] = scope.columns();
        let rows = client
            .query_cached(
                &format!(
                    "SELECT {TRIPLE_COLUMNS} FROM kinet_triples
                     WHERE {SCOPED} AND valid_to IS NULL
                       AND (subject ILIKE ANY($4) OR object ILIKE ANY($4))
                     ORDER BY valid_from DESC, id DESC LIMIT 10"
                ),
                &[&su, &sa, &sc, &patterns],
            )
            .await
            .map_err(pg)?;
        Ok(rows.iter().map(triple_from_row).collect())
    }
}
