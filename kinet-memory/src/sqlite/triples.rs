//! Knowledge-graph triples of the store.

use rusqlite::{OptionalExtension, params};

use super::{MemoryStore, row_to_triple, sql};
use crate::MemoryError;
use crate::backend::now;
use crate::model::{NewTriple, Triple, TripleQuery};

impl MemoryStore {
    pub(super) async fn insert_triple(
        &self,
        triple: NewTriple,
    ) -> Result<(Triple, Vec<String>), MemoryError> {
        let NewTriple {
            subject,
            predicate,
            object,
            source,
            supersede,
        } = triple;
        self.inner
            .db
            .write(move |conn| {
                let tx = conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .map_err(sql)?;
                let at = now();
                let mut superseded = Vec::new();
                if supersede {
                    let mut update = tx
                        .prepare(
                            "UPDATE triples SET valid_to = ?4
                             WHERE subject = ?1 COLLATE NOCASE AND predicate = ?2 COLLATE NOCASE
                               AND object <> ?3 COLLATE NOCASE AND valid_to IS NULL
                             RETURNING object",
                        )
                        .map_err(sql)?;
                    superseded = update
                        .query_map(params![subject, predicate, object, at], |r| r.get(0))
                        .map_err(sql)?
                        .collect::<Result<Vec<String>, _>>()
                        .map_err(sql)?;
                }
                let existing: Option<Triple> = tx
                    .query_row(
                        "SELECT id, subject, predicate, object, source, valid_from, valid_to FROM triples
                         WHERE subject = ?1 COLLATE NOCASE AND predicate = ?2 COLLATE NOCASE
                           AND object = ?3 COLLATE NOCASE AND valid_to IS NULL",
                        params![subject, predicate, object],
                        row_to_triple,
                    )
                    .optional()
                    .map_err(sql)?;
                let triple = match existing {
                    Some(existing) => existing,
                    None => {
                        tx.execute(
                            "INSERT INTO triples(subject, predicate, object, source, valid_from, created_at)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
                            params![subject, predicate, object, source, at],
                        )
                        .map_err(sql)?;
                        Triple {
                            id: tx.last_insert_rowid(),
                            subject,
                            predicate,
                            object,
                            source,
                            valid_from: at,
                            valid_to: None,
                        }
                    }
                };
                tx.commit().map_err(sql)?;
                Ok((triple, superseded))
            })
            .await
    }

    pub(super) async fn end_triple(&self, id: i64) -> Result<bool, MemoryError> {
        self.inner
            .db
            .write(move |conn| {
                conn.execute(
                    "UPDATE triples SET valid_to = ?2 WHERE id = ?1 AND valid_to IS NULL",
                    params![id, now()],
                )
                .map(|n| n > 0)
                .map_err(sql)
            })
            .await
    }

    pub(super) async fn select_triples(
        &self,
        query: TripleQuery,
    ) -> Result<Vec<Triple>, MemoryError> {
        self.inner
            .db
            .read(move |conn| {
                let mut statement = conn
                    .prepare_cached(
                        "SELECT id, subject, predicate, object, source, valid_from, valid_to FROM triples
                         WHERE (?1 IS NULL OR subject = ?1 COLLATE NOCASE)
                           AND (?2 IS NULL OR predicate = ?2 COLLATE NOCASE)
                           AND (?3 IS NULL OR object = ?3 COLLATE NOCASE)
                           AND (?4 OR valid_to IS NULL)
                         ORDER BY valid_to IS NOT NULL, valid_from DESC, id DESC LIMIT 200",
                    )
                    .map_err(sql)?;
                let rows = statement
                    .query_map(
                        params![query.subject, query.predicate, query.object, query.include_history],
                        row_to_triple,
                    )
                    .map_err(sql)?;
                rows.collect::<Result<Vec<_>, _>>().map_err(sql)
            })
            .await
    }
}
