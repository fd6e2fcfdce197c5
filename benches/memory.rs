//! kinet-memory benchmarks:
//!
//! - inserting 100k history records in batches of 1,000 (with 384-dim
//!   vectors): records per second;
//! - recall over those 100k records: p50/p99 of vector, FTS5 and hybrid
//!   queries, against sqlite-vec's brute-force KNN (`vec0`, cosine) on the
//!   same vectors in the same run.
//!
//! ```text
//! cargo bench --bench memory --features memory
//! ```
#![allow(
    unsafe_code,
    missing_docs,
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::sync::Arc;
use std::time::Instant;

use kinet::memory::{EmbedError, Embedder, MemoryConfig, MemoryStore, RecallMode};

const RECORDS: usize = 100_000;
const DIMS: usize = 384;
const QUERIES: usize = 200;
const K: usize = 10;

/// Deterministic pseudo-random unit vectors (xorshift seeded by the text),
/// so embedding costs nothing and both engines see the same vectors.
struct SeededEmbedder;

fn vector_for(text: &str) -> Vec<f32> {
    let mut state = text.bytes().fold(0x9e37_79b9_7f4a_7c15u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut v: Vec<f32> = (0..DIMS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
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

fn percentiles(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((q * samples.len() as f64) as usize).min(samples.len() - 1)];
    (at(0.5), at(0.99))
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");

    let embedder: Arc<dyn Embedder> = Arc::new(SeededEmbedder);
    let store = rt
        .block_on(MemoryStore::open(
            &path,
            MemoryConfig {
                embedder: Some(Arc::clone(&embedder)),
                blocks: Vec::new(),
            },
        ))
        .unwrap();
    let start = Instant::now();
    rt.block_on(async {
        for batch in 0..RECORDS / 1000 {
            let records: Vec<(String, String, String)> = (batch * 1000..(batch + 1) * 1000)
                .map(|i| ("bench".to_owned(), "user".to_owned(), text(i)))
                .collect();
            store.add_records(&records).await.unwrap();
        }
    });
    let insert = start.elapsed();
    println!(
        "insert: {RECORDS} records ({DIMS}-dim vectors, batches of 1,000) in {:.2} s = {:.0} records/s",
        insert.as_secs_f64(),
        RECORDS as f64 / insert.as_secs_f64()
    );

    let fts_store = rt
        .block_on(MemoryStore::open(&path, MemoryConfig::default()))
        .unwrap();
    let queries: Vec<String> = (0..QUERIES)
        .map(|i| {
            format!(
                "{} {}",
                WORDS[i % WORDS.len()],
                WORDS[(i * 7 + 3) % WORDS.len()]
            )
        })
        .collect();
    // Warm the vector index (loaded from the file on first use).
    let warm = Instant::now();
    rt.block_on(store.recall("x", K, None)).unwrap();
    println!(
        "vector index load: {:.0} ms (first recall)",
        warm.elapsed().as_secs_f64() * 1e3
    );

    let time = |label: &str, store: &MemoryStore, query: &dyn Fn(usize) -> String, expect: bool| {
        let samples: Vec<f64> = (0..QUERIES)
            .map(|i| {
                let q = query(i);
                let start = Instant::now();
                let recall = rt.block_on(store.recall(&q, K, None)).unwrap();
                let elapsed = start.elapsed().as_secs_f64() * 1e3;
                assert_eq!(recall.mode == RecallMode::Hybrid, expect, "{label}");
                assert!(!recall.hits.is_empty(), "{label}: {q}");
                elapsed
            })
            .collect();
        let (p50, p99) = percentiles(samples);
        println!("| kinet {label} | {p50:.2} ms | {p99:.2} ms |");
        p50
    };
    println!("\n| recall of {K} over {RECORDS} records | p50 | p99 |\n|---|---|---|");
    // One-letter words are not searched as text: this is the vector scan alone.
    let vector = time("vector only", &store, &|i| format!("q {i}"), true);
    time("FTS5 only", &fts_store, &|i| queries[i].clone(), false);
    time(
        "hybrid (vector + FTS5, RRF)",
        &store,
        &|i| queries[i].clone(),
        true,
    );

    // sqlite-vec on the same vectors.
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
    let vec_path = dir.path().join("vec.db");
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
            for i in 0..RECORDS {
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
        "\nsqlite-vec insert of the same vectors: {:.0} records/s",
        RECORDS as f64 / start.elapsed().as_secs_f64()
    );
    let mut knn = conn
        .prepare(&format!(
            "SELECT rowid, distance FROM items WHERE embedding MATCH ?1 AND k = {K} ORDER BY distance"
        ))
        .unwrap();
    let samples: Vec<f64> = (0..QUERIES)
        .map(|i| {
            let blob: Vec<u8> = vector_for(&format!("q {i}"))
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            let start = Instant::now();
            let rows: Vec<i64> = knn
                .query_map(rusqlite::params![blob], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(rows.len(), K);
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let (p50, p99) = percentiles(samples);
    println!("| sqlite-vec 0.1.9 vec0 KNN (cosine) | {p50:.2} ms | {p99:.2} ms |");
    println!(
        "\nkinet vector p50 / sqlite-vec p50 = {:.2} (target ≤ 1.0; p50 under 20 ms)",
        vector / p50
    );
}
