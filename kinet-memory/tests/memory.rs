//! The SQLite backend on real files in temp dirs: the conformance suite,
//! then what only a file has (processes sharing it, SIGKILL, migrations).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[macro_use]
mod conformance;

use kinet_core::builder::Calls;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kinet_core::Agent;

use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_memory::model::NewTriple;
use kinet_memory::{
    BlockSpec, Embedder, HashEmbedder, MemoryBackend, MemoryConfig, MemoryPack, MemoryStore,
    RecallQuery, Scope, SharedMemory,
};
use serde_json::json;

/// SQLite files in one temp dir.
struct Files(tempfile::TempDir, std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl conformance::Fixture for Files {
    async fn fresh(&self) -> String {
        let n = self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.path().join(format!("m{n}.db")).display().to_string()
    }
    async fn open(&self, at: &str, embedder: Option<Arc<dyn Embedder>>) -> SharedMemory {
        open(Path::new(at), embedder).await.into()
    }
}

fn files() -> Option<Files> {
    Some(Files(tempfile::tempdir().unwrap(), Default::default()))
}

conformance_suite!(files());

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
        store
            .add_record(&Scope::EMPTY, "s", "user", text)
            .await
            .unwrap();
    }
    let recall = store
        .recall(
            &Scope::EMPTY,
            &RecallQuery::new("a young cat napping on the sofa").limit(1),
        )
        .await
        .unwrap();
    assert_eq!(recall.mode, kinet_memory::model::RecallMode::Hybrid);
    assert!(recall.hits[0].text.contains("kitten"), "{:?}", recall.hits);
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
            .add_record(&Scope::EMPTY, &tag, "user", &format!("{tag} record {i}"))
            .await
            .unwrap();
        if i % 10 == 0 {
            store
                .set_fact(&Scope::EMPTY, &tag, &format!("k{i}"), "v")
                .await
                .unwrap();
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
    assert_eq!(store.record_count(&Scope::EMPTY).await.unwrap(), 800);
    assert_eq!(store.facts(&Scope::EMPTY, "a").await.unwrap().len(), 40);
    assert_eq!(store.facts(&Scope::EMPTY, "b").await.unwrap().len(), 40);
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
    let count = store.record_count(&Scope::EMPTY).await.unwrap();
    assert!(count > 200, "{count}");
    store
        .add_record(&Scope::EMPTY, "after", "user", "still writable")
        .await
        .unwrap();
    assert_eq!(
        store
            .recall(&Scope::EMPTY, &RecallQuery::new("writable"))
            .await
            .unwrap()
            .hits
            .len(),
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
        conn.execute(
            "INSERT INTO blocks(label, value, char_limit, read_only, description, updated_at)
             VALUES ('user_profile', 'likes tea', 100, 0, 'who', 1)",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO triples(subject, predicate, object, valid_from, created_at)
             VALUES ('api', 'runs_on', 'ec2', 1, 1)",
            [],
        )
        .unwrap();
        assert!(
            conn.prepare("SELECT scope_user FROM records").is_err(),
            "scopes arrive in the new version"
        );
    }
    let store = open(&path, Some(Arc::new(HashEmbedder::new(64)))).await;
    assert_eq!(
        store
            .fact(&Scope::EMPTY, "s", "db")
            .await
            .unwrap()
            .as_deref(),
        Some("postgres")
    );
    assert_eq!(
        store
            .recall(&Scope::EMPTY, &RecallQuery::new("invoices"))
            .await
            .unwrap()
            .hits
            .len(),
        1
    );
    store
        .add_triple(&Scope::EMPTY, NewTriple::new("billing", "uses", "stripe"))
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version as usize, kinet_memory::testing::SCHEMA_VERSION);
    assert!(conn.prepare("SELECT scope_user FROM records").is_ok());
    drop(conn);
    // What was written before scopes is the empty scope's, and only its.
    let blocks = store.blocks(&Scope::EMPTY).await.unwrap();
    let profile = blocks.iter().find(|b| b.label == "user_profile").unwrap();
    assert_eq!(profile.value, "likes tea");
    assert_eq!(
        store
            .query_triples(
                &Scope::EMPTY,
                kinet_memory::model::TripleQuery {
                    subject: Some("api".into()),
                    ..Default::default()
                }
            )
            .await
            .unwrap()
            .len(),
        1
    );
    let alice = Scope::user("alice");
    assert!(
        store
            .blocks(&alice)
            .await
            .unwrap()
            .iter()
            .all(|b| b.value.is_empty())
    );
    assert!(store.fact(&alice, "s", "db").await.unwrap().is_none());
    assert!(
        store
            .recall(&alice, &RecallQuery::new("invoices"))
            .await
            .unwrap()
            .hits
            .is_empty()
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
    store
        .set_block(&Scope::EMPTY, "user_profile", "stage one")
        .await
        .unwrap();
    let replace = |old: &str, new: &str| json!({"label": "user_profile", "old": old, "new": new});
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .tool_call("a", "memory_replace", replace("stage one", "stage two"))
            .tool_call("b", "memory_replace", replace("stage two", "stage three")),
        ScriptedTurn::text("done"),
    ]);
    let spans = Arc::new(Spans::default());
    let agent = Agent::builder(provider)
        .tools(MemoryPack::new(store.clone(), "run").toolset())
        .calls(Calls::new().layer(spans.clone()))
        .build();
    let outcome = agent.run_to_completion("update").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    // Both ran, without approval, in call order.
    let blocks = store.blocks(&Scope::EMPTY).await.unwrap();
    let profile = blocks.iter().find(|b| b.label == "user_profile").unwrap();
    assert_eq!(profile.value, "stage three");
    let spans = spans.0.lock().unwrap().clone();
    let (a, b) = (&spans[0], &spans[1]);
    assert_eq!((a.0.as_str(), b.0.as_str()), ("a", "b"));
    assert!(a.2 <= b.1, "the two memory_replace calls overlapped");
}
