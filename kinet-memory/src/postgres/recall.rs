//! Recall on PostgreSQL: pgvector HNSW and full-text search, fused by
//! reciprocal rank, in one statement (one round trip to the server).

use super::Cached as _;

use super::{PostgresMemory, SCOPED, pg};
use crate::MemoryError;
use crate::backend::{Fused, MIN_SIMILARITY, RRF_K, embed_query, query_terms, query_words};
use crate::model::{Recall, RecallMode, RecallQuery, Triple};
use crate::scope::Scope;

/// A word matching more records than this is frequent (as on SQLite).
const FREQUENT: i64 = 5_000;

/// A scope with at most this many embedded records is scanned exactly
/// (a few milliseconds), without the HNSW index.
const EXACT_UP_TO: i64 = 5_000;

/// Parameters every recall statement takes: `$1`–`$3` the scope, `$4` the
/// query's words, `$5` the oldest `created_at`, `$6` the turn left out,
/// `$7` the candidates per ranking, `$8` the hits wanted, `$9` one past
/// [`FREQUENT`], `$10` the triple patterns; with vectors also `$11` the
/// query vector, `$12` `hnsw.ef_search`, `$13` whether to scan exactly
/// whatever the scope's size.
type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);

impl PostgresMemory {
    pub(super) async fn recall_records(
        &self,
        scope: &Scope,
        query: &RecallQuery,
    ) -> Result<Recall, MemoryError> {
        let (k, depth) = query.sizes();
        let words: Vec<String> = query_words(&query.text)
            .into_iter()
            .map(|(_, word)| word)
            .collect();
        let patterns = triple_patterns(&query_terms(&query.text));
        let since = query.since.unwrap_or(i64::MIN);
        let exclude = query.exclude_turn.as_deref();
        let [su, sa, sc] = scope.columns();
        let (depth, k) = (
            i64::try_from(depth).unwrap_or(i64::MAX),
            i64::try_from(k).unwrap_or(i64::MAX),
        );
        let frequent = FREQUENT + 1;
        let base: [Param<'_>; 10] = [
            &su, &sa, &sc, &words, &since, &exclude, &depth, &k, &frequent, &patterns,
        ];
        let (vector, mode) = match embed_query(self.inner.embedder.as_ref(), &query.text).await {
            Ok(vector) => (Some(pgvector::Vector::from(vector)), RecallMode::Hybrid),
            Err(mode) => (None, mode),
        };
        let client = self.client().await?;
        let rows = match (&vector, &self.inner.vectors) {
            (Some(vector), Some((expression, embedder))) => {
                let statement = recall_statement(Some((expression, embedder)));
                // The index search keeps this many candidates; filters
                // apply after it, so it must exceed the depth wanted.
                let ef_search = (depth * 4).clamp(100, 1000).to_string();
                let mut exact = false;
                loop {
                    let mut params = base.to_vec();
                    params.extend_from_slice(&[vector as Param<'_>, &ef_search, &exact]);
                    let rows = client.query_cached(&statement, &params).await.map_err(pg)?;
                    // The index kept too few of the scope's rows (it
                    // filters after its search): again, exactly.
                    let too_few = rows.iter().any(|r| {
                        r.get::<_, &str>(0) == "m"
                            && r.get::<_, Option<i64>>(9).unwrap_or(0) < depth
                            && r.get::<_, Option<bool>>(4) == Some(false)
                    });
                    if exact || !too_few {
                        break rows;
                    }
                    exact = true;
                }
            }
            _ => client
                .query_cached(&recall_statement(None), &base)
                .await
                .map_err(pg)?,
        };
        let mut recall = Recall {
            hits: Vec::new(),
            triples: Vec::new(),
            mode,
        };
        for row in &rows {
            match row.get::<_, &str>(0) {
                "r" => recall.hits.push(
                    Fused {
                        id: row.get(1),
                        score: row.get(2),
                        similarity: row.get(3),
                        full_text: row.get(4),
                    }
                    .hit(row.get(5), row.get(6), row.get(7), row.get(9)),
                ),
                "t" => recall.triples.push(Triple {
                    id: row.get(1),
                    subject: row.get(5),
                    predicate: row.get(6),
                    object: row.get(7),
                    source: row.get(8),
                    valid_from: row.get(9),
                    valid_to: row.get(10),
                }),
                _ => {}
            }
        }
        Ok(recall)
    }
}

/// `%term%` patterns (escaped for ILIKE) of the terms a triple's subject
/// or object may contain: those of three characters or more.
fn triple_patterns(terms: &[String]) -> Vec<String> {
    terms
        .iter()
        .filter(|t| t.chars().count() >= 3)
        .map(|t| {
            let escaped = t
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            format!("%{escaped}%")
        })
        .collect()
}

/// The recall statement (see [`Param`] for its parameters): the vector
/// ranking (with `vectors`, the embedding expression and the embedder's
/// name as a literal), the full-text ranking, their reciprocal-rank fusion
/// (as `backend::fuse` does it: ties to the newer record), the hits'
/// records and the triples mentioning a term, as rows tagged `r` (hit:
/// id, score, similarity, full text, session, role, text, -, created_at),
/// `t` (triple: id, -, -, -, subject, predicate, object, source,
/// valid_from, valid_to) and `m` (with vectors: whether the scope was
/// scanned exactly, in column 4, and the vector candidates' count, in 9).
fn recall_statement(vectors: Option<(&str, &str)>) -> String {
    let not_turn = "($6::text IS NULL OR turn IS DISTINCT FROM $6)";
    // Every word's match count (up to $9) decides which words are rare (in
    // a scope of at most FREQUENT records, every word is: they are not
    // counted); a stop word has no node and matches nothing. With rare words, the
    // best matches of those; else the best of the newest FREQUENT
    // matches of any word.
    let text = format!(
        "sized AS (
             SELECT count(*) >= $9 AS large FROM (SELECT 1 FROM kinet_records WHERE {SCOPED} LIMIT $9) c
         ), words AS (
             SELECT w.n, w.word, numnode(q) AS nodes,
                    CASE WHEN (SELECT large FROM sized) THEN
                        (SELECT count(*) FROM (SELECT 1 FROM kinet_records
                            WHERE {SCOPED} AND tsv @@ q LIMIT $9) m)
                    ELSE 0 END AS hits
             FROM unnest($4::text[]) WITH ORDINALITY AS w(word, n),
                  LATERAL websearch_to_tsquery('english', w.word) q
         ), rare AS (
             SELECT string_agg(word, ' or ' ORDER BY n) AS q FROM words WHERE nodes > 0 AND hits < $9
         ), text_ranked AS (
             (SELECT id, row_number() OVER (ORDER BY ts_rank(tsv, q) DESC, id DESC) AS r
              FROM kinet_records, websearch_to_tsquery('english', (SELECT q FROM rare)) q
              WHERE (SELECT q FROM rare) IS NOT NULL AND {SCOPED} AND tsv @@ q
                AND created_at >= $5 AND {not_turn}
              ORDER BY r LIMIT $7)
             UNION ALL
             (SELECT id, row_number() OVER (ORDER BY ts_rank(tsv, q) DESC, id DESC) AS r FROM (
                  SELECT id, tsv, q FROM kinet_records,
                         websearch_to_tsquery('english', array_to_string($4::text[], ' or ')) q
                  WHERE (SELECT q FROM rare) IS NULL AND cardinality($4::text[]) > 0
                    AND {SCOPED} AND tsv @@ q AND created_at >= $5 AND {not_turn}
                  ORDER BY id DESC LIMIT $9 - 1
              ) newest ORDER BY r LIMIT $7)
         )"
    );
    let (vector, meta) = match vectors {
        Some((expression, embedder)) => {
            let filter = format!(
                "{SCOPED} AND embedder = {embedder} AND created_at >= $5 AND {not_turn}"
            );
            // A scope of at most EXACT_UP_TO embedded records (or any,
            // with $13) is scanned exactly; a larger one goes through the
            // HNSW index, whose search reads `hnsw.ef_search` when it
            // starts: set for this statement's transaction by `ef`, which
            // the index branch joins to (so it is set first).
            let vector = format!(
                "ef AS MATERIALIZED (SELECT set_config('hnsw.ef_search', $12, true) AS v),
                 small AS (
                     SELECT $13::bool OR count(*) <= {EXACT_UP_TO} AS yes FROM (
                         SELECT 1 FROM kinet_records WHERE {SCOPED} AND embedder = {embedder}
                         LIMIT {EXACT_UP_TO} + 1
                     ) c
                 ), vec AS (
                     (SELECT id, distance FROM (
                          SELECT id, ({expression} <=> $11) AS distance FROM kinet_records WHERE {filter}
                          OFFSET 0
                      ) scoped WHERE (SELECT yes FROM small) ORDER BY distance, id DESC LIMIT $7)
                     UNION ALL
                     (SELECT h.id, h.distance FROM ef CROSS JOIN LATERAL (
                          SELECT id, ({expression} <=> $11) AS distance FROM kinet_records
                          WHERE {filter} AND NOT (SELECT yes FROM small) AND ef.v IS NOT NULL
                          ORDER BY {expression} <=> $11 LIMIT $7
                      ) h)
                 ), vec_ranked AS (
                     SELECT id, sim, row_number() OVER (ORDER BY distance, id DESC) AS r FROM (
                         SELECT id, distance, (1 - distance)::real AS sim FROM vec
                     ) s
                     WHERE sim <> 'NaN'::real AND sim < 'Infinity'::real AND sim >= {MIN_SIMILARITY}::real
                 ),"
            );
            let meta = "UNION ALL
                 SELECT 'm', NULL, NULL, NULL, (SELECT yes FROM small), NULL, NULL, NULL, NULL,
                        (SELECT count(*) FROM vec), NULL, 0"
                .to_owned();
            (vector, meta)
        }
        None => (
            "vec_ranked AS (SELECT NULL::bigint AS id, NULL::real AS sim, NULL::bigint AS r WHERE false),"
                .to_owned(),
            String::new(),
        ),
    };
    format!(
        "WITH {vector} {text}, fused AS (
             SELECT id, sum(s) AS score, max(sim) AS sim, bool_or(ft) AS ft FROM (
                 SELECT id, 1.0::float8 / ({RRF_K}::float8 + r) AS s, sim, false AS ft FROM vec_ranked
                 UNION ALL
                 SELECT id, 1.0::float8 / ({RRF_K}::float8 + r), NULL::real, true FROM text_ranked
             ) x GROUP BY id
             ORDER BY score DESC, id DESC LIMIT $8
         )
         SELECT * FROM (
             SELECT 'r' AS tag, f.id, f.score, f.sim, f.ft, k.session, k.role, k.text, NULL::text,
                    k.created_at, NULL::bigint, row_number() OVER (ORDER BY f.score DESC, f.id DESC) AS ord
             FROM fused f JOIN kinet_records k ON k.id = f.id
             UNION ALL
             (SELECT 't', id, NULL, NULL, NULL, subject, predicate, object, source, valid_from, valid_to,
                     row_number() OVER (ORDER BY valid_from DESC, id DESC)
              FROM kinet_triples
              WHERE {SCOPED} AND valid_to IS NULL
                AND (subject ILIKE ANY($10) OR object ILIKE ANY($10))
              ORDER BY valid_from DESC, id DESC LIMIT 10)
             {meta}
         ) tagged ORDER BY tag, ord"
    )
}
