//! Knowledge-graph triples of the store, each of one scope.

use rusqlite::{OptionalExtension, named_params};

use super::{MemoryStore, row_to_triple, sql};
use crate::MemoryError;
use crate::backend::now;
use crate::model::{NewTriple, Triple, TripleQuery};
use crate::scope::Scope;

/// The predicate of a scope's rows, on `:su`, `:sa`, `:sc`.
pub(crate) const SCOPED: &str = "scope_user = :su AND scope_agent = :sa AND scope_conv = :sc";

impl MemoryStore {
    pub(super) async fn insert_triple(
        &self,
        scope: &Scope,
        triple: NewTriple,
    ) -> Result<(Triple, Vec<String>), MemoryError> {
        let NewTriple {
            subject,
            predicate,
            object,
            source,
            supersede,
        } = triple;
        let [su, sa, sc] = scope.columns().map(str::to_owned);
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
                        .prepare(&format!(
                            "UPDATE triples SET valid_to = :at
                             WHERE {SCOPED} AND subject = :s COLLATE NOCASE AND predicate = :p COLLATE NOCASE
                               AND object <> :o COLLATE NOCASE AND valid_to IS NULL
                             RETURNING object"
                        ))
                        .map_err(sql)?;
                    superseded = update
                        .query_map(
                            named_params! {":su": su, ":sa": sa, ":sc": sc, ":s": subject, ":p": predicate, ":o": object, ":at": at},
                            |r| r.get(0),
                        )
                        .map_err(sql)?
                        .collect::<Result<Vec<String>, _>>()
                        .map_err(sql)?;
                }
                let existing: Option<Triple> = tx
                    .query_row(
                        &format!(
                            "SELECT id, subject, predicate, object, source, valid_from, valid_to FROM triples
                             WHERE {SCOPED} AND subject = :s COLLATE NOCASE AND predicate = :p COLLATE NOCASE
                               AND object = :o COLLATE NOCASE AND valid_to IS NULL"
                        ),
                        named_params! {":su": su, ":sa": sa, ":sc": sc, ":s": subject, ":p": predicate, ":o": object},
                        row_to_triple,
                    )
                    .optional()
                    .map_err(sql)?;
                let triple = match existing {
                    Some(existing) => existing,
                    None => {
                        tx.execute(
                            "INSERT INTO triples(scope_user, scope_agent, scope_conv, subject, predicate, object,
                                                 source, valid_from, created_at)
                             VALUES (:su, :sa, :sc, :s, :p, :o, :source, :at, :at)",
                            named_params! {":su": su, ":sa": sa, ":sc": sc, ":s": subject, ":p": predicate,
                                           ":o": object, ":source": source, ":at": at},
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

    pub(super) async fn end_triple(&self, scope: &Scope, id: i64) -> Result<bool, MemoryError> {
        let [su, sa, sc] = scope.columns().map(str::to_owned);
        self.inner
            .db
            .write(move |conn| {
                conn.execute(
                    &format!(
                        "UPDATE triples SET valid_to = :at WHERE id = :id AND {SCOPED} AND valid_to IS NULL"
                    ),
                    named_params! {":su": su, ":sa": sa, ":sc": sc, ":id": id, ":at": now()},
                )
                .map(|n| n > 0)
                .map_err(sql)
            })
            .await
    }

    pub(super) async fn select_triples(
        &self,
        scope: &Scope,
        query: TripleQuery,
    ) -> Result<Vec<Triple>, MemoryError> {
        let [su, sa, sc] = scope.columns().map(str::to_owned);
        self.inner
            .db
            .read(move |conn| {
                let mut statement = conn
                    .prepare_cached(&format!(
                        "SELECT id, subject, predicate, object, source, valid_from, valid_to FROM triples
                         WHERE {SCOPED}
                           AND (:s IS NULL OR subject = :s COLLATE NOCASE)
                           AND (:p IS NULL OR predicate = :p COLLATE NOCASE)
                           AND (:o IS NULL OR object = :o COLLATE NOCASE)
                           AND (:history OR valid_to IS NULL)
                         ORDER BY valid_to IS NOT NULL, valid_from DESC, id DESC LIMIT 200"
                    ))
                    .map_err(sql)?;
                let rows = statement
                    .query_map(
                        named_params! {":su": su, ":sa": sa, ":sc": sc, ":s": query.subject,
                                       ":p": query.predicate, ":o": query.object, ":history": query.include_history},
                        row_to_triple,
                    )
                    .map_err(sql)?;
                rows.collect::<Result<Vec<_>, _>>().map_err(sql)
            })
            .await
    }
}
