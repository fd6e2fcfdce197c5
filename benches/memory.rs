//! kinet-memory benchmarks, at 100k and 1M records (`KINET_BENCH_SIZES`
//! overrides, e.g. `100000`):
//!
//! - insert throughput (batches of 1,000 records with 384-dim vectors);
//! - recall p50/p99 of vector, full-text and hybrid queries on kinet's
//!   SQLite backend; sqlite-vec's brute-force KNN (`vec0`, cosine) on the
//!   same vectors; with the `postgres` feature, kinet's PostgreSQL backend
//!   (pgvector HNSW, PostgreSQL full text) on a throwaway local cluster
//!   (`KINET_BENCH_PG_MAX` caps its size, default 100k: building HNSW over
//!   a million vectors takes long on two cores);
//! - recall@10 of each vector search against the exact scan.
//!
//! ```text
//! cargo bench --bench memory --features memory,postgres
//! ```
#![allow(
    unsafe_code,
    missing_docs,
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used
)]

#[cfg(feature = "postgres")]
#[path = "../kinet-memory/tests/support/pg_server.rs"]
mod pg_server;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use kinet::memory::embed::EmbedError;
use kinet::memory::model::{NewRecord, RecallMode};
use kinet::memory::{Embedder, MemoryConfig, MemoryStore, RecallQuery, Scope, SharedMemory};

const DIMS: usize = 384;
const QUERIES: usize = 200;
const K: usize = 10;
/// Queries whose exact top 10 is computed for recall@10.
const EXACT_QUERIES: usize = 50;

/// Deterministic vectors computed from the text, so embedding costs
/// nothing and every engine sees the same vectors. Two kinds
/// (`KINET_BENCH_VECTORS`):
///
/// - `topics` (default), shaped like a real embedder's: each vocabulary
///   word (or its stand-in `t<n>`, which full text cannot match) is a
///   direction, and a text is the sum of its words' directions plus a
///   smaller pseudo-random part of its own;
/// - `random`: uniformly random unit vectors, the worst case for any
///   approximate search (no structure at all).
struct SeededEmbedder;

fn noise(text: &str) -> Vec<f32> {
    let mut state = text.bytes().fold(0x9e37_79b9_7f4a_7c15u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (0..DIMS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

fn random_vectors() -> bool {
    static RANDOM: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *RANDOM.get_or_init(|| std::env::var("KINET_BENCH_VECTORS").is_ok_and(|v| v == "random"))
}

fn vector_for(text: &str) -> Vec<f32> {
    let mut v = noise(text);
    if !random_vectors() {
        v.iter_mut().for_each(|x| *x *= 0.5);
        for token in text.split(|c: char| !c.is_alphanumeric()) {
            let topic = WORDS.iter().position(|w| *w == token).or_else(|| {
                token
                    .strip_prefix('t')
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|n| *n < WORDS.len())
            });
            if let Some(topic) = topic {
                for (x, t) in v.iter_mut().zip(noise(WORDS[topic])) {
                    *x += t;
                }
            }
        }
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

#[async_trait::async_trait]
impl Embedder for SeededEmbedder {
    fn name(&self) -> &str {
        "seeded-384"
    }
    fn dims(&self) -> usize {
        DIMS
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| vector_for(t)).collect())
    }
}

const WORDS: &[&str] = &[
    "deploy",
    "billing",
    "kubernetes",
    "invoice",
    "customer",
    "latency",
    "database",
    "migration",
    "release",
    "weekend",
    "incident",
    "refund",
    "dashboard",
    "cache",
    "budget",
    "meeting",
    "contract",
    "backup",
    "alert",
    "rollout",
    "sprint",
    "feature",
    "login",
    "payment",
];

fn text(i: usize) -> String {
    let pick = |n: usize| WORDS[(i.wrapping_mul(2_654_435_761) >> n) % WORDS.len()];
    format!(
        "note {i}: the {} {} needs a {} before the {}",
        pick(3),
        pick(9),
        pick(15),
        pick(21)
    )
}

/// A query full-text search finds nothing for: the vector side alone.
/// With topic vectors, two topics by stand-in words ("t3 t17 q b c");
/// then one-letter words (not searched) make each query its own.
fn vector_query(mut i: usize) -> String {
    let mut text = if random_vectors() {
        String::from("q")
    } else {
        format!("t{} t{} q", i % WORDS.len(), (i * 7 + 3) % WORDS.len())
    };
    loop {
        text.push(' ');
        text.push(char::from(b'a' + (i % 26) as u8));
        i /= 26;
        if i == 0 {
            return text;
        }
    }
}

fn keywords(i: usize) -> String {
    format!(
        "{} {}",
        WORDS[i % WORDS.len()],
        WORDS[(i * 7 + 3) % WORDS.len()]
    )
}

fn percentiles(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((q * samples.len() as f64) as usize).min(samples.len() - 1)];
    (at(0.5), at(0.99))
}

/// The exact top `K` record ids (1-based, as inserted) for each query.
fn exact_top(records: usize, keep: impl Fn(usize) -> bool) -> Vec<Vec<i64>> {
    let vectors: Vec<(usize, Vec<f32>)> = (0..records)
        .filter(|i| keep(*i))
        .map(|i| (i, vector_for(&text(i))))
        .collect();
    (0..EXACT_QUERIES)
        .map(|q| {
            let query = vector_for(&vector_query(q));
            let mut scored: Vec<(f32, usize)> = vectors
                .iter()
                .map(|(i, v)| (v.iter().zip(&query).map(|(a, b)| a * b).sum(), *i))
                .collect();
            scored.select_nth_unstable_by(K - 1, |a, b| b.0.total_cmp(&a.0));
            scored.truncate(K);
            scored.iter().map(|(_, i)| *i as i64 + 1).collect()
        })
        .collect()
}

fn recall_at_k(found: &[Vec<i64>], exact: &[Vec<i64>]) -> f64 {
    let hits: usize = found
        .iter()
        .zip(exact)
        .map(|(f, e)| {
            let e: HashSet<_> = e.iter().collect();
            f.iter().filter(|id| e.contains(id)).count()
        })
        .sum();
    hits as f64 / (exact.len() * K) as f64
}

/// Times recall on a backend: vector only, full text only (a second handle
/// without an embedder), hybrid; recall@10 of the vector side.
fn measure(
    rt: &tokio::runtime::Runtime,
    name: &str,
    scope: &Scope,
    store: &SharedMemory,
    text_only: &SharedMemory,
    exact: &[Vec<i64>],
) {
    let time =
        |label: &str, store: &SharedMemory, query: &dyn Fn(usize) -> String, hybrid: bool| {
            let samples: Vec<f64> = (0..QUERIES)
                .map(|i| {
                    let q = RecallQuery::new(query(i)).limit(K);
                    let start = Instant::now();
                    let recall = rt.block_on(store.recall(scope, &q)).unwrap();
                    let elapsed = start.elapsed().as_secs_f64() * 1e3;
                    assert_eq!(recall.mode == RecallMode::Hybrid, hybrid, "{label}");
                    assert!(!recall.hits.is_empty(), "{label}: {}", q.text);
                    elapsed
                })
                .collect();
            let (p50, p99) = percentiles(samples);
            println!("| {name} {label} | {p50:.2} ms | {p99:.2} ms |");
        };
    time("vector", store, &vector_query, true);
    time("full text", text_only, &|i| keywords(i), false);
    time("hybrid", store, &|i| keywords(i), true);
    let found: Vec<Vec<i64>> = (0..EXACT_QUERIES)
        .map(|q| {
            let recall = rt
                .block_on(store.recall(scope, &RecallQuery::new(vector_query(q)).limit(K)))
                .unwrap();
            recall.hits.iter().map(|h| h.id).collect()
        })
        .collect();
    println!(
        "| {name} recall@10 vs exact | {:.3} | |",
        recall_at_k(&found, exact)
    );
}

/// Inserts `records` records in batches of 1,000, batch `b` into
/// `scopes[b % scopes.len()]` (record `i` gets id `i + 1`).
fn insert(
    rt: &tokio::runtime::Runtime,
    name: &str,
    scopes: &[Scope],
    store: &SharedMemory,
    records: usize,
) {
    let start = Instant::now();
    rt.block_on(async {
        for b in 0..records.div_ceil(1000) {
            let batch: Vec<NewRecord> = (b * 1000..((b + 1) * 1000).min(records))
                .map(|i| NewRecord::new("bench", "user", text(i)))
                .collect();
            store
                .add_records(&scopes[b % scopes.len()], &batch)
                .await
                .unwrap();
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    println!(
        "{name} insert: {records} records in {elapsed:.1} s = {:.0} records/s",
        records as f64 / elapsed
    );
}

fn sqlite_vec(dir: &std::path::Path, records: usize, exact: &[Vec<i64>]) {
    let vec_path = dir.join(format!("vec{records}.db"));
    let mut conn = rusqlite::Connection::open(&vec_path).unwrap();
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE items USING vec0(embedding float[{DIMS}] distance_metric=cosine)"
    ))
    .unwrap();
    let start = Instant::now();
    {
        let tx = conn.transaction().unwrap();
        {
            let mut insert = tx
                .prepare("INSERT INTO items(rowid, embedding) VALUES (?1, ?2)")
                .unwrap();
            for i in 0..records {
                let blob: Vec<u8> = vector_for(&text(i))
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect();
                insert
                    .execute(rusqlite::params![(i + 1) as i64, blob])
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    println!(
        "sqlite-vec insert (vectors only): {:.0} records/s",
        records as f64 / start.elapsed().as_secs_f64()
    );
    let mut knn = conn
        .prepare(&format!(
            "SELECT rowid FROM items WHERE embedding MATCH ?1 AND k = {K} ORDER BY distance"
        ))
        .unwrap();
    let mut run = |q: usize| -> Vec<i64> {
        let blob: Vec<u8> = vector_for(&vector_query(q))
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        knn.query_map(rusqlite::params![blob], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    // A brute-force scan of a million vectors takes most of a second: fewer
    // queries there.
    let queries = if records > 100_000 { 20 } else { QUERIES };
    let samples: Vec<f64> = (0..queries)
        .map(|q| {
            let start = Instant::now();
            assert_eq!(run(q).len(), K);
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let (p50, p99) = percentiles(samples);
    println!("| sqlite-vec 0.1.9 vec0 KNN (cosine, brute force) | {p50:.2} ms | {p99:.2} ms |");
    let found: Vec<Vec<i64>> = (0..EXACT_QUERIES.min(queries)).map(&mut run).collect();
    println!(
        "| sqlite-vec recall@10 vs exact | {:.3} | |",
        recall_at_k(&found, &exact[..found.len()])
    );
}

fn main() {
    // SAFETY: registers sqlite-vec's entry point with the bundled SQLite
    // before any connection of this benchmark opens; the pointer is the
    // extension's init function with SQLite's expected signature.
    unsafe {
        rusqlite::ffi::sqlite3_auto_extension(Some(std::mem::transmute::<
            *const (),
            unsafe extern "C" fn(
                *mut rusqlite::ffi::sqlite3,
                *mut *mut std::os::raw::c_char,
                *const rusqlite::ffi::sqlite3_api_routines,
            ) -> i32,
        >(
            sqlite_vec::sqlite3_vec_init as *const ()
        )));
    }
    let sizes: Vec<usize> = std::env::var("KINET_BENCH_SIZES")
        .unwrap_or_else(|_| "100000,1000000".into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for records in sizes {
        println!(
            "\n## {records} records, {} vectors\n",
            if random_vectors() { "random" } else { "topic" }
        );
        let exact = exact_top(records, |_| true);
        let path = dir.path().join(format!("kinet{records}.db"));
        let open = |embedder: Option<Arc<dyn Embedder>>| -> SharedMemory {
            rt.block_on(MemoryStore::open(
                &path,
                MemoryConfig {
                    embedder,
                    blocks: Vec::new(),
                },
            ))
            .unwrap()
            .into()
        };
        // The same records three times: in the empty scope; in one user's
        // scope; spread over four users' scopes (by batch), recalled in
        // the first user's (every query filtered by it inside the indexes).
        let user = |n: usize| Scope::user(format!("bench-user-{n}")).with_agent("bench");
        let four: Vec<Scope> = (0..4).map(user).collect();
        let first_of_four = exact_top(records, |i| (i / 1000) % 4 == 0);
        for (label, scopes, exact) in [
            ("kinet SQLite", vec![Scope::EMPTY], &exact),
            ("kinet SQLite, one user's scope", vec![user(0)], &exact),
            ("kinet SQLite, 1 of 4 users' scopes", four, &first_of_four),
        ] {
            let scope = scopes[0].clone();
            let store = open(Some(Arc::new(SeededEmbedder)));
            insert(&rt, label, &scopes, &store, records);
            let start = Instant::now();
            rt.block_on(store.recall(&scope, &RecallQuery::new("x")))
                .unwrap();
            println!(
                "{label} vector index load (first recall): {:.1} s",
                start.elapsed().as_secs_f64()
            );
            println!("\n| recall of {K} over {records} records | p50 | p99 |\n|---|---|---|");
            measure(&rt, label, &scope, &store, &open(None), exact);
            drop(store);
            std::fs::remove_file(&path).ok();
        }
        sqlite_vec(dir.path(), records, &exact);
        #[cfg(feature = "postgres")]
        postgres(&rt, records, &exact);
    }
}

#[cfg(feature = "postgres")]
fn postgres(rt: &tokio::runtime::Runtime, records: usize, exact: &[Vec<i64>]) {
    use kinet::memory::postgres::PostgresMemory;
    let max: usize = std::env::var("KINET_BENCH_PG_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    if records > max {
        println!("(PostgreSQL skipped at {records} records: KINET_BENCH_PG_MAX is {max})");
        return;
    }
    let Some(server) = pg_server::server() else {
        return;
    };
    let url = server.url(&rt.block_on(pg_server::fresh_database(server)));
    let connect = |embedder: Option<Arc<dyn Embedder>>| -> SharedMemory {
        rt.block_on(PostgresMemory::connect(
            &url,
            MemoryConfig {
                embedder,
                blocks: Vec::new(),
            },
        ))
        .unwrap()
        .into()
    };
    // Inserted with the HNSW index in place, as a live service would.
    let store = connect(Some(Arc::new(SeededEmbedder)));
    insert(
        rt,
        "kinet PostgreSQL (HNSW maintained)",
        &[Scope::EMPTY],
        &store,
        records,
    );
    println!("\n| recall of {K} over {records} records | p50 | p99 |\n|---|---|---|");
    measure(
        rt,
        "kinet PostgreSQL",
        &Scope::EMPTY,
        &store,
        &connect(None),
        exact,
    );
}
