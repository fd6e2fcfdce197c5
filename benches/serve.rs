//! Serving many users from several machines, measured: stateless MCP
//! replicas (separate processes, this binary run again) behind a
//! round-robin proxy, 20 concurrent clients as 4 OAuth principals running
//! 200 conversations × 5 turns with a model that recalls from memory
//! before answering (offline: no model cost).
//!
//! - turns per second and p50/p99 per turn: 1 replica and 2 replicas,
//!   sessions and memory in SQLite (one file) and in PostgreSQL;
//! - the same run on PostgreSQL with one replica killed (SIGKILL) at a
//!   third and restarted: its counts;
//! - journal append p50/p99 on PostgreSQL (loopback) and SQLite.
//!
//! Needs the Python MCP SDK (the authorization server) and PostgreSQL with
//! pgvector (`.ci/setup` installs both).
//!
//! ```text
//! cargo bench --bench serve --features mcp,postgres
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used
)]

#[path = "../kinet-mcp/tests/support/issuer.rs"]
mod issuer;
#[path = "../kinet-mcp/tests/support/load.rs"]
mod load;
#[path = "../kinet-memory/tests/support/pg_server.rs"]
mod pg_server;

use std::time::{Duration, Instant};

use kinet::core::Message;
use kinet::core::session::{JournalEntry, Session, SessionStore};

const RESOURCE: &str = "https://agents.kinet.test/mcp";

fn plan() -> load::Plan {
    let conversations = std::env::var("KINET_BENCH_CONVERSATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    load::Plan {
        clients: 20,
        principals: 4,
        conversations,
        turns: 5,
    }
}

/// One run, printed as a table row.
async fn run(
    setup: &load::Setup,
    store: &load::Store,
    replicas: usize,
    kill: bool,
) -> (load::Report, load::JournalCheck) {
    let plan = plan();
    let (report, check) = load::run(setup, store, replicas, kill, plan, &[]).await;
    let (p50, p99) = load::percentiles(&mut report.latencies.clone());
    println!(
        "| {} sessions + memory, {replicas} replica{}{} | {:.0} | {p50:.1} ms | {p99:.1} ms | {}/{} |",
        store.label(),
        if replicas == 1 { "" } else { "s" },
        if kill { ", one killed at a third" } else { "" },
        report.turns as f64 / report.elapsed.as_secs_f64(),
        report.turns,
        plan.conversations * plan.turns,
    );
    (report, check)
}

fn appends(store: &dyn SessionStore, label: &str) {
    store.create(&Session::empty("bench-appends")).unwrap();
    let entry = JournalEntry::Message {
        message: Message::user("one journal entry of an ordinary length, as a turn writes it"),
    };
    let mut samples: Vec<Duration> = (0..2000)
        .map(|_| {
            let start = Instant::now();
            store.append("bench-appends", &entry).unwrap();
            start.elapsed()
        })
        .collect();
    let (p50, p99) = load::percentiles(&mut samples);
    println!("| {label} | {:.0} µs | {:.0} µs |", p50 * 1e3, p99 * 1e3);
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let Ok(config) = std::env::var("KINET_LOAD_REPLICA") {
        runtime.block_on(load::replica_main(serde_json::from_str(&config).unwrap()));
        return;
    }
    runtime.block_on(async {
        let Some(server) = pg_server::server() else {
            return;
        };
        let Some(issuer) = issuer::Issuer::start().await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let plan = plan();
        let setup = load::Setup::minted(&issuer, RESOURCE, plan.principals).await;
        println!(
            "\n{} clients as {} principals, {} conversations × {} turns\n",
            plan.clients, plan.principals, plan.conversations, plan.turns
        );
        println!("| run | turns/s | p50 per turn | p99 per turn | turns completed |\n|---|---|---|---|---|");
        let mut n = 0;
        let mut fresh_sqlite = || {
            n += 1;
            load::Store::Sqlite(dir.path().join(format!("serve{n}.db")).display().to_string())
        };
        for replicas in [1, 2] {
            run(&setup, &fresh_sqlite(), replicas, false).await;
            let pg = load::Store::Postgres(server.url(&pg_server::fresh_database(server).await));
            run(&setup, &pg, replicas, false).await;
        }
        let pg = load::Store::Postgres(server.url(&pg_server::fresh_database(server).await));
        let (report, check) = run(&setup, &pg, 2, true).await;
        println!(
            "\nkill run: {} attempts sent again, {} turns finished on the other replica; journals: {} \
             conversations, {} turns, {} wrong, {} interleaved; leaks: {} answers, {} recalls",
            report.retries,
            report.resumed_elsewhere,
            check.conversations,
            check.turns,
            check.wrong.len(),
            check.interleaved,
            report.leaked_answers,
            check.leaked_recalls
        );
        println!("\n| journal append | p50 | p99 |\n|---|---|---|");
        let url = server.url(&pg_server::fresh_database(server).await);
        let pg_store = tokio::task::spawn_blocking(move || {
            kinet::memory::postgres::PostgresSessionStore::connect(&url).unwrap()
        })
        .await
        .unwrap();
        let sqlite = kinet::memory::SqliteSessionStore::open(dir.path().join("appends.db")).unwrap();
        tokio::task::spawn_blocking(move || {
            appends(&pg_store, "PostgreSQL (loopback)");
            appends(&sqlite, "SQLite (WAL)");
        })
        .await
        .unwrap();
    });
}
