//! The memory store on real SQLite files in temp dirs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kinet_core::Agent;

use kinet_core::testing::{Expectation, ScriptedProvider, ScriptedTurn};
use kinet_memory::{
    BlockSpec, BlocksHook, EmbedError, Embedder, HashEmbedder, HistoryHook, MemoryConfig,
    MemoryError, MemoryPack, MemoryStore, RecallMode, TripleQuery,
};
use serde_json::json;

async fn open(path: &Path, embedder: Option<Arc<dyn Embedder>>) -> MemoryStore {
    MemoryStore::open(
        path,
        MemoryConfig {
            embedder,
            blocks: BlockSpec::defaults(),
        },
    )
    .await
    .unwrap()
}

fn integrity(path: &Path) -> String {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn blocks_enforce_limits_and_exact_single_replacements() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("m.db"), None).await;
    store
        .define_block(BlockSpec {
            label: "tiny".into(),
            limit: 20,
            read_only: false,
            description: "a small block".into(),
            initial: "likes tea".into(),
        })
        .await
        .unwrap();
    let block = store.block_append("tiny", "and cake").await.unwrap();
    assert_eq!(block.value, "likes tea\nand cake");
    let error = store
        .block_append("tiny", "and biscuits")
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("would hold 31 characters, over its 20 limit by 11"),
        "{message}"
    );
    assert!(
        message.contains("2 characters of room are left"),
        "{message}"
    );
    assert!(matches!(error, MemoryError::Invalid(_)));

    store.block_append("tiny", "a").await.unwrap();
    let error = store.block_replace("tiny", "a", "x").await.unwrap_err();
    assert!(error.to_string().contains("occurs 4 times"), "{error}");
    let error = store
        .block_replace("tiny", "coffee", "x")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("does not occur"), "{error}");
    let error = store
        .block_replace("tiny", "tea", "coffee")
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("0 characters of room are left"),
        "{error}"
    );
    let block = store.block_replace("tiny", "tea", "gin").await.unwrap();
    assert_eq!(block.value, "likes gin\nand cake\na");
    let error = store.block_append("nope", "x").await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("there is no block `nope`; blocks: active_goals"),
        "{error}"
    );

    store
        .define_block(BlockSpec {
            read_only: true,
            ..BlockSpec::new("policy", 100, "rules")
        })
        .await
        .unwrap();
    assert!(
        store
            .block_append("policy", "x")
            .await
            .unwrap_err()
            .to_string()
            .contains("read-only")
    );
    // Re-defining keeps the content.
    store
        .define_block(BlockSpec::new("tiny", 40, "bigger"))
        .await
        .unwrap();
    let blocks = store.blocks().await.unwrap();
    let tiny = blocks.iter().find(|b| b.label == "tiny").unwrap();
    assert_eq!(
        (tiny.limit, tiny.value.as_str()),
        (40, "likes gin\nand cake\na")
    );
}

#[tokio::test]
async fn full_text_recall_without_an_embedder_says_so_and_finds_word_forms() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("m.db"), None).await;
    store
        .add_record(
            "s1",
            "user",
            "Our deployment uses blue-green releases on Kubernetes.",
        )
        .await
        .unwrap();
    store
        .add_record("s1", "assistant", "The database is PostgreSQL 16.")
        .await
        .unwrap();
    store
        .add_record("s2", "user", "Lunch is at noon.")
        .await
        .unwrap();
    let recall = store.recall("how do we deploy?", 5, None).await.unwrap();
    assert_eq!(
        recall.mode,
        RecallMode::FullTextOnly {
            reason: "no embedder is configured".into()
        }
    );
    assert_eq!(recall.hits.len(), 1);
    assert!(recall.hits[0].text.contains("blue-green"));
    assert!(recall.hits[0].full_text && recall.hits[0].similarity.is_none());
    let none = store.recall("zebra", 5, None).await.unwrap();
    assert!(none.hits.is_empty());
    // `since` filters by time.
    let future = store
        .recall("deployment", 5, Some(i64::MAX / 2))
        .await
        .unwrap();
    assert!(future.hits.is_empty());
}

/// Maps words of one concept to one direction: "car" and "automobile" are
/// the same to it, with no shared letters needed.
struct ConceptEmbedder;

#[async_trait::async_trait]
impl Embedder for ConceptEmbedder {
    fn name(&self) -> &str {
        "concepts"
    }
    fn dims(&self) -> usize {
        4
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let t = t.to_lowercase();
                let mut v = vec![0.01f32; 4];
                if t.contains("car") || t.contains("automobile") || t.contains("vehicle") {
                    v[0] = 1.0;
                }
                if t.contains("cat") || t.contains("kitten") {
                    v[1] = 1.0;
                }
                if t.contains("rain") || t.contains("drizzle") {
                    v[2] = 1.0;
                }
                v
            })
            .collect())
    }
}

struct BrokenEmbedder;

#[async_trait::async_trait]
impl Embedder for BrokenEmbedder {
    fn name(&self) -> &str {
        "broken"
    }
    fn dims(&self) -> usize {
        4
    }
    async fn embed(&self, _texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Err(EmbedError("the embedding server is down".into()))
    }
}

#[tokio::test]
async fn hybrid_recall_finds_embedding_matches_and_falls_back_when_the_embedder_fails() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let store = open(&path, Some(Arc::new(ConceptEmbedder))).await;
    store
        .add_record("s", "user", "I parked my car by the station.")
        .await
        .unwrap();
    store
        .add_record("s", "user", "The kitten knocked over a glass.")
        .await
        .unwrap();
    store
        .add_record("s", "user", "Expect drizzle tomorrow.")
        .await
        .unwrap();
    let recall = store.recall("automobile", 2, None).await.unwrap();
    assert_eq!(recall.mode, RecallMode::Hybrid);
    assert!(recall.hits[0].text.contains("car"), "{:?}", recall.hits);
    assert!(!recall.hits[0].full_text, "found by meaning, not by words");
    assert!(recall.hits[0].similarity.unwrap() > 0.9);

    // Another process's writes are seen by this one's index.
    let other = open(&path, Some(Arc::new(ConceptEmbedder))).await;
    other
        .add_record("s", "user", "Heavy rain all week.")
        .await
        .unwrap();
    let recall = store.recall("drizzle", 2, None).await.unwrap();
    assert_eq!(recall.hits.len(), 2);

    let broken = open(&dir.path().join("b.db"), Some(Arc::new(BrokenEmbedder))).await;
    broken
        .add_record("s", "user", "The car is blue.")
        .await
        .unwrap();
    let recall = broken.recall("car", 3, None).await.unwrap();
    assert_eq!(
        recall.mode,
        RecallMode::FullTextOnly {
            reason: "embedding failed: the embedding server is down".into()
        }
    );
    assert_eq!(recall.hits.len(), 1);
}

#[cfg(feature = "model2vec")]
#[tokio::test]
async fn the_bundled_model_recalls_paraphrases() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = Arc::new(kinet_memory::Model2VecEmbedder::bundled().unwrap());
    assert_eq!(embedder.dims(), 128);
    let store = open(&dir.path().join("m.db"), Some(embedder)).await;
    for text in [
        "The kitten is asleep on the couch.",
        "Quarterly revenue grew by twelve percent.",
        "The train to Berlin leaves at nine.",
        "Please water the tomato plants.",
    ] {
        store.add_record("s", "user", text).await.unwrap();
    }
    let recall = store
        .recall("a young cat napping on the sofa", 1, None)
        .await
        .unwrap();
    assert_eq!(recall.mode, RecallMode::Hybrid);
    assert!(recall.hits[0].text.contains("kitten"), "{:?}", recall.hits);
}

#[tokio::test]
async fn newer_triples_supersede_older_ones_and_history_stays() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("m.db"), None).await;
    store
        .add_triple("api", "deployed_on", "ec2", "ops wiki", true)
        .await
        .unwrap();
    store
        .add_triple("api", "owned_by", "team-a", "", true)
        .await
        .unwrap();
    store
        .add_triple("user", "likes", "tea", "", false)
        .await
        .unwrap();
    store
        .add_triple("user", "likes", "cake", "", false)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (_, superseded) = store
        .add_triple("API", "deployed_on", "kubernetes", "migration notes", true)
        .await
        .unwrap();
    assert_eq!(superseded, ["ec2"], "matched case-insensitively");
    let current = store
        .query_triples(TripleQuery {
            subject: Some("API".into()),
            predicate: Some("deployed_on".into()),
            ..TripleQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(current.len(), 1);
    assert_eq!(current[0].object, "kubernetes");
    let history = store
        .query_triples(TripleQuery {
            subject: Some("api".into()),
            predicate: Some("deployed_on".into()),
            include_history: true,
            ..TripleQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].object, "ec2");
    assert!(history[1].valid_to.is_some());
    let likes = store
        .query_triples(TripleQuery {
            predicate: Some("likes".into()),
            ..TripleQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(likes.len(), 2, "many-valued relations keep every object");
    assert!(store.invalidate_triple(likes[0].id).await.unwrap());
    assert!(!store.invalidate_triple(likes[0].id).await.unwrap());
    // Recall returns current triples that mention the query.
    store
        .add_record("s", "user", "the api has been flaky")
        .await
        .unwrap();
    let recall = store.recall("api outage", 3, None).await.unwrap();
    let objects: Vec<&str> = recall.triples.iter().map(|t| t.object.as_str()).collect();
    assert!(
        objects.contains(&"kubernetes") && !objects.contains(&"ec2"),
        "{objects:?}"
    );
}

/// Runs as a child process when KINET_MEMORY_CHILD is set: writes records
/// and facts to the file it names; otherwise does nothing.
#[tokio::test]
async fn child_writer() {
    let Ok(path) = std::env::var("KINET_MEMORY_CHILD") else {
        return;
    };
    let tag = std::env::var("KINET_MEMORY_TAG").unwrap();
    let count: usize = std::env::var("KINET_MEMORY_COUNT")
        .unwrap()
        .parse()
        .unwrap();
    let store = MemoryStore::open(&path, MemoryConfig::default())
        .await
        .unwrap();
    for i in 0..count {
        store
            .add_record(&tag, "user", &format!("{tag} record {i}"))
            .await
            .unwrap();
        if i % 10 == 0 {
            store.set_fact(&tag, &format!("k{i}"), "v").await.unwrap();
        }
    }
}

fn spawn_writer(path: &Path, tag: &str, count: usize) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child_writer", "--exact", "--nocapture", "--test-threads=1"])
        .env("KINET_MEMORY_CHILD", path)
        .env("KINET_MEMORY_TAG", tag)
        .env("KINET_MEMORY_COUNT", count.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn two_processes_writing_one_file_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    // Create the schema first so both children race on writes only... and
    // also let one of them race on creation: the first child creates it.
    let mut a = spawn_writer(&path, "a", 400);
    let mut b = spawn_writer(&path, "b", 400);
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    let store = MemoryStore::open(&path, MemoryConfig::default())
        .await
        .unwrap();
    assert_eq!(store.record_count().await.unwrap(), 800);
    assert_eq!(store.facts("a").await.unwrap().len(), 40);
    assert_eq!(store.facts("b").await.unwrap().len(), 40);
    assert_eq!(integrity(&path), "ok");
}

#[cfg(unix)]
#[tokio::test]
async fn a_writer_killed_with_sigkill_leaves_a_sound_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.db");
    let mut child = spawn_writer(&path, "k", 1_000_000);
    // Let it write for a while.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if path.exists() {
            let written: i64 = rusqlite::Connection::open(&path)
                .and_then(|c| c.query_row("SELECT count(*) FROM records", [], |r| r.get(0)))
                .unwrap_or(0);
            if written > 200 {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the child wrote nothing"
        );
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    assert_eq!(integrity(&path), "ok");
    let store = MemoryStore::open(&path, MemoryConfig::default())
        .await
        .unwrap();
    let count = store.record_count().await.unwrap();
    assert!(count > 200, "{count}");
    store
        .add_record("after", "user", "still writable")
        .await
        .unwrap();
    assert_eq!(
        store.recall("writable", 1, None).await.unwrap().hits.len(),
        1
    );
}

#[tokio::test]
async fn a_file_from_the_previous_schema_version_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("old.db");
    let previous = kinet_memory::testing::SCHEMA_VERSION - 1;
    kinet_memory::testing::create_at_version(&path, previous).unwrap();
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO facts(session, key, value, updated_at) VALUES ('s', 'db', 'postgres', 1)",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO records(session, role, text, created_at) VALUES ('s', 'user', 'old note about invoices', 1)",
            [],
        )
        .unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version as usize, previous);
        assert!(
            conn.prepare("SELECT * FROM sessions").is_err(),
            "sessions arrive in the new version"
        );
    }
    let store = open(&path, Some(Arc::new(HashEmbedder::new(64)))).await;
    assert_eq!(
        store.fact("s", "db").await.unwrap().as_deref(),
        Some("postgres")
    );
    assert_eq!(
        store.recall("invoices", 3, None).await.unwrap().hits.len(),
        1
    );
    store
        .add_triple("billing", "uses", "stripe", "", true)
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version as usize, kinet_memory::testing::SCHEMA_VERSION);
}

#[tokio::test]
async fn an_agent_remembers_across_runs_through_tools_and_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let store = open(&path, Some(Arc::new(HashEmbedder::new(256)))).await;
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .expect(Expectation::LastUserContains(
                "<user_profile chars=\"0/2000\">".into(),
            ))
            .tool_call(
                "m",
                "memory_append",
                json!({"label": "user_profile", "text": "Name: Ada. Prefers Rust."}),
            )
            .tool_call(
                "f",
                "remember_fact",
                json!({"key": "build", "value": "cargo build --release"}),
            )
            .tool_call(
                "k",
                "kg_add",
                json!({"subject": "ada", "predicate": "works_on", "object": "kinet"}),
            ),
        ScriptedTurn::text("Noted."),
    ]);
    let agent = Agent::builder(provider)
        .toolset(MemoryPack::new(store.clone(), "run-1").toolset())
        .hook(BlocksHook::new(store.clone()))
        .hook(HistoryHook::new(store.clone(), "run-1"))
        .build();
    let outcome = agent
        .run_to_completion("I'm Ada and I like Rust; we build with cargo.")
        .await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);

    // A second run, as in a new process: the store is reopened.
    drop(agent);
    let store = open(&path, Some(Arc::new(HashEmbedder::new(256)))).await;
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .expect(Expectation::LastUserContains(
                "Name: Ada. Prefers Rust.".into(),
            ))
            .tool_call(
                "r",
                "recall_memory",
                json!({"query": "what does Ada like?"}),
            ),
        ScriptedTurn::text("You like Rust.").expect(Expectation::ToolResultContains {
            call_id: "r".into(),
            text: "I'm Ada and I like Rust".into(),
        }),
    ]);
    let agent = Agent::builder(provider)
        .toolset(MemoryPack::new(store.clone(), "run-2").toolset())
        .hook(BlocksHook::new(store.clone()))
        .build();
    let outcome = agent.run_to_completion("What do I like?").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let recalled = outcome.conversation.messages[2].text();
    assert!(recalled.contains("(ada, works_on, kinet)"), "{recalled}");
    assert_eq!(
        store.fact("run-1", "build").await.unwrap().as_deref(),
        Some("cargo build --release")
    );
}

/// Records when each call enters and leaves the tool, holding it 50 ms so
/// that calls which may overlap do.
#[derive(Default)]
struct Spans(std::sync::Mutex<Vec<(String, std::time::Instant, std::time::Instant)>>);

#[async_trait::async_trait]
impl kinet_core::layer::ToolLayer for Spans {
    async fn call(
        &self,
        call: kinet_core::layer::Invocation,
        next: kinet_core::layer::Next<'_>,
    ) -> Result<kinet_core::ToolOutput, kinet_core::ToolError> {
        let id = call.ctx().call_id().to_owned();
        let entered = std::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let result = next.run(call).await;
        self.0
            .lock()
            .unwrap()
            .push((id, entered, std::time::Instant::now()));
        result
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_memory_replace_calls_in_one_turn_never_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("agent.db"), None).await;
    store.set_block("user_profile", "stage one").await.unwrap();
    let replace = |old: &str, new: &str| json!({"label": "user_profile", "old": old, "new": new});
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .tool_call("a", "memory_replace", replace("stage one", "stage two"))
            .tool_call("b", "memory_replace", replace("stage two", "stage three")),
        ScriptedTurn::text("done"),
    ]);
    let spans = Arc::new(Spans::default());
    let agent = Agent::builder(provider)
        .toolset(MemoryPack::new(store.clone(), "run").toolset())
        .layer_arc(spans.clone())
        .build();
    let outcome = agent.run_to_completion("update").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    // Both ran, without approval, in call order.
    let blocks = store.blocks().await.unwrap();
    let profile = blocks.iter().find(|b| b.label == "user_profile").unwrap();
    assert_eq!(profile.value, "stage three");
    let spans = spans.0.lock().unwrap().clone();
    let (a, b) = (&spans[0], &spans[1]);
    assert_eq!((a.0.as_str(), b.0.as_str()), ("a", "b"));
    assert!(a.2 <= b.1, "the two memory_replace calls overlapped");
}
