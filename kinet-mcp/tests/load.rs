//! Many users on several machines, reduced for the test suite (the full
//! size is `cargo bench --bench serve`): two stateless replicas as separate
//! processes behind a round-robin proxy, sessions and memory in one
//! PostgreSQL, four OAuth principals driving conversations from 20
//! concurrent clients, and one replica killed with SIGKILL mid-run and
//! restarted. Every completed turn is in its journal exactly once, no
//! conversation is interleaved, no principal reads another's words, and
//! clients that lost their replica finish on the other.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "support/issuer.rs"]
mod issuer;
#[path = "support/load.rs"]
mod load;
#[path = "../../kinet-memory/tests/support/pg_server.rs"]
mod pg_server;

/// The replica process (this binary run again with `KINET_LOAD_REPLICA`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_process() {
    if let Ok(config) = std::env::var("KINET_LOAD_REPLICA") {
        load::replica_main(serde_json::from_str(&config).unwrap()).await;
    }
}

const REPLICA: &[&str] = &["--exact", "replica_process", "--nocapture"];

/// The resource the replicas serve, as the tokens name it.
const RESOURCE: &str = "https://agents.kinet.test/mcp";

/// A fresh PostgreSQL database and tokens for `principals` from a running
/// issuer (kept while the run lasts); `None` (the helpers said why) when
/// either is missing.
async fn on_postgres(principals: usize) -> Option<(load::Store, load::Setup, issuer::Issuer)> {
    let server = pg_server::server()?;
    let issuer = issuer::Issuer::start().await?;
    let store = load::Store::Postgres(server.url(&pg_server::fresh_database(server).await));
    let setup = load::Setup::minted(&issuer, RESOURCE, principals).await;
    Some((store, setup, issuer))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_users_on_two_replicas_survive_a_sigkill() {
    let plan = load::Plan {
        clients: 20,
        principals: 4,
        conversations: 60,
        turns: 5,
    };
    let Some((store, setup, _issuer)) = on_postgres(plan.principals).await else {
        return;
    };
    let total = plan.conversations * plan.turns;
    let (report, check) = load::run(&setup, &store, 2, true, plan, REPLICA).await;
    let (p50, p99) = load::percentiles(&mut report.latencies.clone());
    println!(
        "load: {} turns in {:.1} s ({:.0}/s, p50 {p50:.1} ms, p99 {p99:.1} ms); {} conversations by principal {:?}; \
         {} attempts sent again, {} turns finished on the other replica; journals: {} conversations, {} turns, \
         {} wrong, {} interleaved; leaks: {} answers, {} recalls; own words recalled by {} of {} principals",
        report.turns,
        report.elapsed.as_secs_f64(),
        report.turns as f64 / report.elapsed.as_secs_f64(),
        report.conversations.len(),
        load::by_principal(&report),
        report.retries,
        report.resumed_elsewhere,
        check.conversations,
        check.turns,
        check.wrong.len(),
        check.interleaved,
        report.leaked_answers,
        check.leaked_recalls,
        check.own_recalled,
        plan.principals,
    );
    // Round trips to PostgreSQL per completed turn, the kill run's retries
    // and claim renewals included: printed for the record (the steady
    // count is asserted below).
    let round_trips = report.round_trips.unwrap_or_default();
    println!(
        "postgres round trips: {} run + {} prepared for {} turns ({:.1} per turn)",
        round_trips.run,
        round_trips.prepared,
        report.turns,
        round_trips.run as f64 / report.turns.max(1) as f64
    );
    assert!(round_trips.run > 0, "the counting proxy saw no round trip");
    let failed: Vec<&String> = report
        .errors
        .iter()
        .filter(|e| !e.starts_with("(retried)"))
        .collect();
    assert!(failed.is_empty(), "{:?}", report.errors);
    assert_eq!(
        report.turns, total,
        "every turn completed: {:?}",
        report.errors
    );
    assert_eq!(check.conversations, plan.conversations);
    assert_eq!(check.turns, total);
    assert!(check.wrong.is_empty(), "{:?}", check.wrong);
    assert_eq!(check.interleaved, 0);
    assert_eq!(report.leaked_answers, 0);
    assert_eq!(check.leaked_recalls, 0);
    assert_eq!(check.own_recalled, plan.principals);
    assert!(report.retries > 0, "the kill was felt: {:?}", report.errors);
    assert!(report.resumed_elsewhere > 0, "{:?}", report.errors);
}

/// A served turn on PostgreSQL, in steady state (no kill, so no retries):
/// claiming and reading the conversation, recording the history, recall,
/// and saving with the release are one round trip each, four in all (a
/// conversation's first turn creates it in one: three). Preparing a
/// statement, once per statement and connection, is counted apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_turn_on_postgres_takes_four_round_trips() {
    let plan = load::Plan {
        clients: 4,
        principals: 2,
        conversations: 8,
        turns: 6,
    };
    let Some((store, setup, _issuer)) = on_postgres(plan.principals).await else {
        return;
    };
    let (report, check) = load::run(&setup, &store, 1, false, plan, REPLICA).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(check.turns, plan.conversations * plan.turns);
    let round_trips = report.round_trips.unwrap();
    let per_turn = round_trips.run as f64 / report.turns as f64;
    println!(
        "steady: {} run + {} prepared round trips for {} turns ({per_turn:.2} per turn)",
        round_trips.run, round_trips.prepared, report.turns
    );
    assert!(per_turn <= 4.0, "{per_turn:.2} round trips per turn");
    // Three for each first turn, four for each later one: fewer would
    // mean a step went uncounted.
    let (first, later) = (plan.conversations, report.turns - plan.conversations);
    assert!(
        round_trips.run >= (3 * first + 4 * later) as u64,
        "{per_turn:.2} round trips per turn"
    );
}
