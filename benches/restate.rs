//! Durable runs on Restate against plain kinet, same scripted run, same
//! machine:
//!
//! - the cost of one journaled step (a model call or a tool call): runs
//!   of 10 tool calls (21 steps) and of none (1 step), through Restate and
//!   in plain kinet; per step = the Restate run's extra time for the 20
//!   extra steps over plain kinet's, divided by 20 (what the invocation
//!   itself adds, its state and reply, is reported apart);
//! - runs per second through one service process, 16 conversations at a
//!   time, on a single Restate node and on a three-node cluster.
//!
//! A Restate server (npm `@restatedev/restate-server`, which `.ci/setup`
//! installs) is started on loopback ports; the service runs in this
//! process.
//!
//! ```text
//! cargo bench --bench restate --features restate
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

#[path = "../kinet-restate/tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use kinet::core::{Agent, ApprovalPolicy};
use kinet::restate::{AgentObject, Client};
use support::{Counting, Effect, Node, free_port, register, restate_server};

fn agent_builder(
    model: std::sync::Arc<dyn kinet::Provider>,
    dir: &std::path::Path,
) -> kinet::core::AgentBuilder {
    Agent::builder(model)
        .tool(Effect {
            dir: dir.to_owned(),
            pause: Duration::ZERO,
            mutating: false,
        })
        .policy(ApprovalPolicy::ask())
}

/// Serves the agent (`calls` tool calls per prompt) in this process; its
/// address.
async fn serve(calls: usize, dir: &std::path::Path) -> String {
    let dir = dir.to_owned();
    let object = AgentObject::new(Counting { calls }, move |model| agent_builder(model, &dir));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(object.serve_on(listener, std::future::pending::<()>()));
    uri
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// One prompt to conversation `key`, sent again (under its idempotency
/// key, so it runs once) when the ingress fails to answer, as a cluster
/// may while its partitions settle after startup.
async fn prompt(client: &Client, key: &str) -> kinet::restate::Reply {
    let mut tries = 0;
    loop {
        match client.prompt(key, "go", Some(key)).await {
            Ok(reply) => return reply,
            Err(error) if tries < 5 => {
                eprintln!("{key}: {error}; again");
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("{key}: {error}"),
        }
    }
}

/// The median time of `runs` prompts, each to a conversation of its own.
async fn restate_runs(client: &Client, label: &str, runs: usize) -> Duration {
    let mut samples = Vec::new();
    for i in 0..runs {
        let key = format!("{label}-{i}");
        let start = Instant::now();
        let reply = prompt(client, &key).await;
        samples.push(start.elapsed());
        assert_eq!(reply.stop, "completed", "{reply:?}");
    }
    median(samples)
}

/// The median time of `runs` plain kinet runs of the same agent.
async fn plain_runs(calls: usize, dir: &std::path::Path, runs: usize) -> Duration {
    let mut samples = Vec::new();
    for _ in 0..runs {
        let agent = agent_builder(std::sync::Arc::new(Counting { calls }), dir).build();
        let start = Instant::now();
        let outcome = agent.run_to_completion("go").await;
        samples.push(start.elapsed());
        assert!(outcome.stop.is_completed());
    }
    median(samples)
}

/// Runs per second: `total` prompts, `parallel` conversations at a time.
async fn throughput(client: &Client, label: &str, total: usize, parallel: usize) -> f64 {
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..parallel {
        let client = client.clone();
        let label = label.to_owned();
        tasks.spawn(async move {
            let mut i = worker;
            while i < total {
                let reply = prompt(&client, &format!("{label}-{i}")).await;
                assert_eq!(reply.stop, "completed");
                i += parallel;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// Registers `uri` and waits until `client` reaches the service.
async fn ready(node: &Node, uri: &str, client: &Client) {
    register(&node.admin, uri).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.prompt("warm-up", "go", None).await.is_err() {
        assert!(Instant::now() < deadline, "the service is not reachable");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn bench() {
    let Some(binary) = restate_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();

    // One node.
    let base = work.join("single");
    std::fs::create_dir_all(&base).unwrap();
    let mut node = Node::new(&binary, &base, 0, &[]);
    node.spawn();
    node.ready().await;
    let (ten, none) = (serve(10, work).await, serve(0, work).await);
    // Two deployments of one service cannot be live at once: measure the
    // ten-call agent, then the one without calls.
    let client = Client::new(&node.ingress);
    ready(&node, &ten, &client).await;
    let runs = 30;
    let restate_ten = restate_runs(&client, "ten", runs).await;
    let single_rate = throughput(&client, "rate", 200, 16).await;
    ready(&node, &none, &client).await;
    let restate_none = restate_runs(&client, "none", runs).await;
    let plain_ten = plain_runs(10, work, runs).await;
    let plain_none = plain_runs(0, work, runs).await;
    node.stop();

    let per_step = (restate_ten.saturating_sub(restate_none))
        .saturating_sub(plain_ten.saturating_sub(plain_none))
        .as_secs_f64()
        / 20.0;
    println!(
        "a run of 10 tool calls (21 journaled steps): Restate {:.2} ms, plain kinet {:.2} ms (median of {runs})",
        restate_ten.as_secs_f64() * 1e3,
        plain_ten.as_secs_f64() * 1e3
    );
    println!(
        "a run of no tool call (1 step): Restate {:.2} ms, plain kinet {:.2} ms: the invocation adds {:.2} ms",
        restate_none.as_secs_f64() * 1e3,
        plain_none.as_secs_f64() * 1e3,
        (restate_none.saturating_sub(plain_none)).as_secs_f64() * 1e3
    );
    println!(
        "overhead per journaled step (model or tool call): {:.2} ms (target < 2 ms)",
        per_step * 1e3
    );

    // Three nodes.
    let base = work.join("cluster");
    std::fs::create_dir_all(&base).unwrap();
    let ports = [free_port(), free_port(), free_port()];
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| Node::new(&binary, &base, i, &ports))
        .collect();
    for node in &mut nodes {
        node.spawn();
    }
    for node in &nodes {
        node.ready().await;
    }
    let client = Client::new(&nodes[0].ingress);
    ready(&nodes[0], &serve(10, work).await, &client).await;
    let cluster_rate = throughput(&client, "rate3", 200, 16).await;
    for node in &mut nodes {
        node.stop();
    }
    println!(
        "runs of 10 tool calls per second, one service process, 16 conversations at a time: \
         1 node {single_rate:.1}, 3 nodes {cluster_rate:.1}"
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}
