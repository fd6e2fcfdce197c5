//! The PostgreSQL + pgvector backend against a real server (PostgreSQL 16
//! with pgvector from PyPI's pgserver wheel, started on a loopback port):
//! the conformance suite, two processes writing one database, migrations.
#![cfg(feature = "postgres")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

#[macro_use]
mod conformance;
#[path = "support/pg_server.rs"]
mod pg_server;

use std::sync::Arc;

use kinet_memory::model::NewRecord;
use kinet_memory::postgres::PostgresMemory;
use kinet_memory::{
    BlockSpec, Embedder, MemoryBackend, MemoryConfig, MemoryError, Scope, SharedMemory,
};

/// Databases on the process-wide test cluster.
struct Databases(&'static pg_server::PgServer);

#[async_trait::async_trait]
impl conformance::Fixture for Databases {
    async fn fresh(&self) -> String {
        self.0.url(&pg_server::fresh_database(self.0).await)
    }
    async fn open(&self, at: &str, embedder: Option<Arc<dyn Embedder>>) -> SharedMemory {
        PostgresMemory::connect(
            at,
            MemoryConfig {
                embedder,
                blocks: BlockSpec::defaults(),
            },
        )
        .await
        .unwrap()
        .into()
    }
}

fn databases() -> Option<Databases> {
    pg_server::server().map(Databases)
}

conformance_suite!(databases());

#[macro_use]
mod session_conformance;

/// Session stores in databases on the process-wide test cluster.
struct SessionDatabases(&'static pg_server::PgServer);

#[async_trait::async_trait]
impl session_conformance::SessionFixture for SessionDatabases {
    async fn fresh(&self) -> String {
        self.0.url(&pg_server::fresh_database(self.0).await)
    }
    async fn open(&self, at: &str) -> Arc<dyn kinet_core::session::SessionStore> {
        open_sessions(at)
    }
}

fn open_sessions(at: &str) -> Arc<dyn kinet_core::session::SessionStore> {
    Arc::new(kinet_memory::postgres::PostgresSessionStore::connect(at).unwrap())
}

fn session_databases() -> Option<SessionDatabases> {
    pg_server::server().map(SessionDatabases)
}

session_suite!(session_databases(), open_sessions);

/// The PostgreSQL store's claims can be awaited (so the conformance case
/// `claims_awaited_mean_what_blocking_claims_mean` checks them here), and
/// awaited on a runtime of one thread they do not hold it up: a timer on
/// the same thread fires while a claim waits behind a lock in the database.
#[tokio::test(flavor = "current_thread")]
async fn claims_are_awaited_without_blocking_the_runtime() {
    let Some(server) = pg_server::server() else {
        return;
    };
    let at = server.url(&pg_server::fresh_database(server).await);
    let store = open_sessions(&at);
    let claims = store
        .nonblocking()
        .expect("the PostgreSQL store awaits its claims");
    store
        .create(&kinet_core::session::Session::empty("s"))
        .unwrap();
    // Another connection, on a thread of its own, holds the claim row's
    // lock for 300 ms.
    let (locked, lock_taken) = std::sync::mpsc::channel();
    let holder = std::thread::spawn({
        let at = at.clone();
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let (client, connection) = tokio_postgres::connect(&at, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(connection);
                client
                    .batch_execute("BEGIN; INSERT INTO kinet_session_claims VALUES ('s', 'z', 0)")
                    .await
                    .unwrap();
                locked.send(()).unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                client.batch_execute("ROLLBACK").await.unwrap();
            });
        }
    });
    lock_taken.recv().unwrap();
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counting = {
        let ticks = std::sync::Arc::clone(&ticks);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                ticks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    let claimed = claims
        .claim_and_load("s", "a", std::time::Duration::from_secs(60))
        .await;
    holder.join().unwrap();
    counting.abort();
    assert!(matches!(
        claimed.unwrap(),
        kinet_core::session::Claimed::Held(Some(_))
    ));
    let ticks = ticks.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        ticks >= 10,
        "the runtime's one thread was held while the claim waited ({ticks} ticks of 10 ms in 300 ms)"
    );
}

/// Runs as a child process when KINET_PG_CHILD is set: writes records,
/// facts and block lines to the database it names; otherwise does nothing.
#[tokio::test]
async fn child_writer() {
    let Ok(url) = std::env::var("KINET_PG_CHILD") else {
        return;
    };
    let tag = std::env::var("KINET_PG_TAG").unwrap();
    let memory = PostgresMemory::connect(&url, MemoryConfig::default())
        .await
        .unwrap();
    for i in 0..300 {
        memory
            .add_records(
                &Scope::EMPTY,
                &[NewRecord::new(
                    tag.as_str(),
                    "user",
                    format!("{tag} record {i}"),
                )],
            )
            .await
            .unwrap();
        if i % 10 == 0 {
            memory
                .set_fact(&Scope::EMPTY, &tag, &format!("k{i}"), "v")
                .await
                .unwrap();
            memory
                .block_append(&Scope::EMPTY, "log", &format!("{tag}-{i}"))
                .await
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_writing_one_database_lose_nothing() {
    let Some(server) = pg_server::server() else {
        return;
    };
    let url = server.url(&pg_server::fresh_database(server).await);
    // Both children create the schema at once (the migration lock decides).
    let memory_block = BlockSpec::new("log", 10_000, "lines from both writers");
    let spawn = |tag: &str| {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["child_writer", "--exact", "--nocapture", "--test-threads=1"])
            .env("KINET_PG_CHILD", &url)
            .env("KINET_PG_TAG", tag)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    // The block must exist before the children append to it; defining it
    // also creates the schema, so one child races the other on nothing
    // but writes... and a third connection races them on migration.
    let memory = PostgresMemory::connect(&url, MemoryConfig::default())
        .await
        .unwrap();
    memory
        .define_block(&Scope::EMPTY, memory_block)
        .await
        .unwrap();
    let (mut a, mut b) = (spawn("a"), spawn("b"));
    let (a, b) = tokio::task::spawn_blocking(move || (a.wait().unwrap(), b.wait().unwrap()))
        .await
        .unwrap();
    assert!(a.success() && b.success());
    assert_eq!(memory.record_count(&Scope::EMPTY).await.unwrap(), 600);
    assert_eq!(memory.facts(&Scope::EMPTY, "a").await.unwrap().len(), 30);
    assert_eq!(memory.facts(&Scope::EMPTY, "b").await.unwrap().len(), 30);
    let blocks = memory.blocks(&Scope::EMPTY).await.unwrap();
    let log = blocks.iter().find(|b| b.label == "log").unwrap();
    assert_eq!(log.value.lines().count(), 60, "lost block appends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_starting_together_migrate_once_and_a_newer_schema_is_refused() {
    let Some(server) = pg_server::server() else {
        return;
    };
    let url = server.url(&pg_server::fresh_database(server).await);
    let connects: Vec<_> = (0..6)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(
                async move { PostgresMemory::connect(&url, MemoryConfig::default()).await },
            )
        })
        .collect();
    for connect in connects {
        connect.await.unwrap().unwrap();
    }
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let versions: i64 = client
        .query_one("SELECT count(*) FROM kinet_memory_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        versions as usize,
        kinet_memory::postgres::testing::SCHEMA_VERSION
    );
    client
        .execute("INSERT INTO kinet_memory_schema(version) VALUES (99)", &[])
        .await
        .unwrap();
    let error = PostgresMemory::connect(&url, MemoryConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Invalid(_)));
    assert!(
        error.to_string().contains("written by a newer kinet"),
        "{error}"
    );
}

#[tokio::test]
async fn a_server_that_is_not_there_is_named_without_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = PostgresMemory::connect(
        &format!("postgres://agent:s3cret@127.0.0.1:{port}/memory"),
        MemoryConfig::default(),
    )
    .await
    .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains(&format!("postgres://agent:***@127.0.0.1:{port}/memory")),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");
    assert!(message.contains("check that the server runs"), "{message}");
}

#[tokio::test]
async fn a_database_from_before_scopes_keeps_its_rows_in_the_empty_scope() {
    let Some(server) = pg_server::server() else {
        return;
    };
    let url = server.url(&pg_server::fresh_database(server).await);
    drop(
        kinet_memory::postgres::testing::connect_at_version(&url, 1)
            .await
            .unwrap(),
    );
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(
            "INSERT INTO kinet_facts(session, key, value, updated_at) VALUES ('s', 'db', 'postgres', 1);
             INSERT INTO kinet_records(session, role, text, created_at) VALUES ('s', 'user', 'old note about invoices', 1);
             INSERT INTO kinet_blocks(label, value, char_limit, description, updated_at)
                 VALUES ('user_profile', 'likes tea', 100, 'who', 1);
             INSERT INTO kinet_triples(subject, predicate, object, valid_from, created_at)
                 VALUES ('api', 'runs_on', 'ec2', 1, 1);",
        )
        .await
        .unwrap();
    let memory = PostgresMemory::connect(
        &url,
        MemoryConfig {
            embedder: None,
            blocks: BlockSpec::defaults(),
        },
    )
    .await
    .unwrap();
    let empty = &Scope::EMPTY;
    assert_eq!(
        memory.fact(empty, "s", "db").await.unwrap().as_deref(),
        Some("postgres")
    );
    let recall = memory
        .recall(empty, &kinet_memory::RecallQuery::new("invoices api"))
        .await
        .unwrap();
    assert_eq!((recall.hits.len(), recall.triples.len()), (1, 1));
    let blocks = memory.blocks(empty).await.unwrap();
    let profile = blocks.iter().find(|b| b.label == "user_profile").unwrap();
    assert_eq!(profile.value, "likes tea");
    let alice = Scope::user("alice");
    assert!(memory.fact(&alice, "s", "db").await.unwrap().is_none());
    let recall = memory
        .recall(&alice, &kinet_memory::RecallQuery::new("invoices api"))
        .await
        .unwrap();
    assert!(recall.hits.is_empty() && recall.triples.is_empty());
    assert!(
        memory
            .blocks(&alice)
            .await
            .unwrap()
            .iter()
            .all(|b| b.value.is_empty())
    );
}

/// A scope past 5,000 embedded records is searched through the HNSW index
/// (then exactly if the index kept too few of its rows); a small one in
/// the same table exactly: both find their own records and only those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_scopes_use_the_index_and_small_ones_are_scanned_exactly() {
    let Some(server) = pg_server::server() else {
        return;
    };
    let url = server.url(&pg_server::fresh_database(server).await);
    let memory = PostgresMemory::connect(
        &url,
        MemoryConfig {
            embedder: Some(Arc::new(kinet_memory::HashEmbedder::new(64))),
            blocks: Vec::new(),
        },
    )
    .await
    .unwrap();
    let (big, small) = (Scope::user("big"), Scope::user("small"));
    for batch in 0..13 {
        let records: Vec<NewRecord> = (0..500)
            .map(|i| NewRecord::new("s", "user", format!("routine note {batch} {i} about lunch")))
            .collect();
        memory.add_records(&big, &records).await.unwrap();
    }
    memory
        .add_record(
            &big,
            "s",
            "user",
            "the zeppelin hangar key is under the mat",
        )
        .await
        .unwrap();
    memory
        .add_record(&small, "s", "user", "the zeppelin tickets are booked")
        .await
        .unwrap();
    for (scope, expected) in [(&big, "hangar"), (&small, "tickets")] {
        let recall = memory
            .recall(scope, &kinet_memory::RecallQuery::new("zeppelin").limit(5))
            .await
            .unwrap();
        assert!(recall.hits[0].text.contains(expected), "{:?}", recall.hits);
        let other = if expected == "hangar" {
            "tickets"
        } else {
            "hangar"
        };
        assert!(recall.hits.iter().all(|h| !h.text.contains(other)));
    }
    assert_eq!(memory.record_count(&small).await.unwrap(), 1);
}
