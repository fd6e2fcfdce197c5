//! MCP client benchmarks, one run, same server
//! (`@modelcontextprotocol/server-everything` over stdio):
//!
//! - `tools/call` round trip of `echo`, p50/p99 over 2,000 calls: kinet's hub
//!   vs the official TypeScript SDK client and the official Python SDK
//!   client (`mcp` from PyPI);
//! - start-up of 8 servers at once vs the slowest of them started alone;
//! - kinet's hub and kinet's `McpServer` over streamable HTTP, `add` round
//!   trip p50/p99 over 2,000 calls, 2026-07-28 (`server/discover`, no
//!   session, each request self-contained) vs 2025-11-25 (`initialize`, a
//!   session), in one run; and the same hub against the official
//!   TypeScript SDK's server with the same tool (`benches/mcp/ts_add_server.mjs`).
//!
//! ```text
//! npm ci --prefix kinet-mcp/tests/peers
//! python3 -m venv /var/tmp/kinet-pyenv && /var/tmp/kinet-pyenv/bin/pip install mcp==2.3.0
//! cargo bench --bench mcp --features mcp
//! ```
//!
//! `KINET_BENCH_REVISIONS_ONLY=1` runs only the two revisions (and the
//! TypeScript server); `KINET_BENCH_PROFILE_REVISION=2026-07-28` (or
//! `2025-11-25`) runs one revision's `add` for ten rounds, for a profiler.
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kinet::Agent;
use kinet::core::testing::ScriptedProvider;
use kinet::mcp::{HubSettings, McpHub, McpServer, ServerConfig, ServerState};
use serde_json::json;

mod support;

const CALLS: usize = 2000;

fn server(modules: &Path, name: &str) -> ServerConfig {
    ServerConfig::stdio(
        name,
        "node",
        vec![
            modules
                .join("@modelcontextprotocol/server-everything/dist/index.js")
                .display()
                .to_string(),
            "stdio".into(),
        ],
    )
}

/// Runs a peer client script and reads its p50 and p99.
fn peer(command: Command) -> Option<(f64, f64)> {
    let value = support::peer_json(command)?;
    Some((value["p50_us"].as_f64()?, value["p99_us"].as_f64()?))
}

async fn kinet_latency(modules: &Path) -> (f64, f64) {
    let hub = McpHub::start(vec![server(modules, "everything")], HubSettings::default());
    assert!(hub.wait_settled(Duration::from_secs(60)).await);
    for _ in 0..50 {
        hub.call("everything", "echo", json!({"message": "warm"}))
            .await
            .unwrap();
    }
    let mut samples = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        let message = format!("m{i}");
        let start = Instant::now();
        let out = hub
            .call("everything", "echo", json!({"message": message}))
            .await
            .unwrap();
        samples.push(start.elapsed().as_secs_f64() * 1e6);
        assert_eq!(out.text, format!("Echo: m{i}"));
    }
    hub.shutdown().await;
    samples.sort_by(f64::total_cmp);
    (
        support::percentile(&samples, 0.5),
        support::percentile(&samples, 0.99),
    )
}

/// `add` round trips from the hub to `config`'s server: p50, p99 in µs,
/// and the revision spoken.
async fn add_latency(config: ServerConfig) -> (f64, f64, String) {
    let hub = McpHub::start(vec![config], HubSettings::default());
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let protocol = hub.status()[0].protocol.clone().unwrap_or_default();
    for i in 0..50 {
        hub.call("kinet", "add", json!({"a": i, "b": 1}))
            .await
            .unwrap();
    }
    let mut samples = Vec::with_capacity(CALLS);
    for i in 0..CALLS as i64 {
        let start = Instant::now();
        let out = hub
            .call("kinet", "add", json!({"a": i, "b": 1}))
            .await
            .unwrap();
        samples.push(start.elapsed().as_secs_f64() * 1e6);
        assert_eq!(out.text, (i + 1).to_string());
    }
    hub.shutdown().await;
    samples.sort_by(f64::total_cmp);
    (
        support::percentile(&samples, 0.5),
        support::percentile(&samples, 0.99),
        protocol,
    )
}

/// A 2-worker runtime serving kinet's `add` over streamable HTTP on
/// loopback: the runtime, the server and its URL.
fn add_server() -> (
    tokio::runtime::Runtime,
    kinet::mcp::HttpServerHandle,
    String,
) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let handle = rt.block_on(async {
        let agent = Agent::builder(ScriptedProvider::new([])).build();
        McpServer::builder(agent)
            .expose_tool(support::Add)
            .build()
            .serve_http("127.0.0.1:0".parse().unwrap(), None)
            .await
            .unwrap()
    });
    let url = format!("http://{}/mcp", handle.local_addr());
    (rt, handle, url)
}

/// One revision only, ten rounds, for a profiler (`perf record`) to see
/// where its calls go: `KINET_BENCH_PROFILE_REVISION=2026-07-28` (or
/// `2025-11-25`).
fn profile_revision(revision: &str) {
    let (rt, handle, url) = add_server();
    for _ in 0..10 {
        let mut config = ServerConfig::http("kinet", &url);
        if revision == "2025-11-25" {
            config = config.initialize_only();
        }
        let (p50, p99, protocol) = rt.block_on(add_latency(config));
        assert_eq!(protocol, revision);
        println!("{revision}: p50 {p50:.0} µs, p99 {p99:.0} µs");
    }
    rt.block_on(handle.shutdown());
}

/// The two revisions against one kinet server, taking turns for three
/// rounds; prints the medians.
fn revisions() {
    let (rt, handle, url) = add_server();
    // The official TypeScript SDK's server with the same tool, beside.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let modules = root.join("kinet-mcp/tests/peers/node_modules");
    let port = support::free_port();
    let mut ts_server = Command::new("node")
        .arg(root.join("benches/mcp/ts_add_server.mjs"))
        .arg(&modules)
        .arg(port.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok();
    let ts_url = ts_server.as_mut().and_then(|child| {
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut()?),
            &mut line,
        )
        .ok()?;
        (line.trim() == "ready").then(|| format!("http://127.0.0.1:{port}/mcp"))
    });
    if ts_url.is_none() {
        eprintln!(
            "the TypeScript SDK server did not start: run `npm ci --prefix kinet-mcp/tests/peers`"
        );
    }
    let mut modern = Vec::new();
    let mut legacy = Vec::new();
    let mut typescript = Vec::new();
    for _ in 0..3 {
        let (p50, p99, protocol) = rt.block_on(add_latency(ServerConfig::http("kinet", &url)));
        assert_eq!(protocol, "2026-07-28");
        modern.push((p50, p99));
        let (p50, p99, protocol) = rt.block_on(add_latency(
            ServerConfig::http("kinet", &url).initialize_only(),
        ));
        assert_eq!(protocol, "2025-11-25");
        legacy.push((p50, p99));
        if let Some(ts_url) = &ts_url {
            let (p50, p99, protocol) =
                rt.block_on(add_latency(ServerConfig::http("kinet", ts_url)));
            assert_eq!(protocol, "2025-11-25");
            typescript.push((p50, p99));
        }
    }
    rt.block_on(handle.shutdown());
    if let Some(mut child) = ts_server {
        let _ = child.kill();
        let _ = child.wait();
    }
    let median = |mut v: Vec<(f64, f64)>| {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v[v.len() / 2]
    };
    let (m50, m99) = median(modern);
    let (l50, l99) = median(legacy);
    println!(
        "\nkinet hub → kinet McpServer, streamable HTTP, `add`, {CALLS} calls after 50 warm-up, median of 3 rounds:\n"
    );
    println!("| revision | p50 | p99 | p50 / 2025-11-25 p50 |\n|---|---|---|---|");
    println!("| 2025-11-25 (initialize, session) | {l50:.0} µs | {l99:.0} µs | 1.00 |");
    println!(
        "| 2026-07-28 (server/discover, no session) | {m50:.0} µs | {m99:.0} µs | {:.2} |",
        m50 / l50
    );
    if !typescript.is_empty() {
        let (t50, t99) = median(typescript);
        println!(
            "\nThe same hub → the official TypeScript SDK's server (1.32, a session per client, `add`):\n"
        );
        println!("| server | p50 | p99 | kinet p50 / TypeScript p50 |\n|---|---|---|---|");
        println!("| TypeScript SDK, 2025-11-25 | {t50:.0} µs | {t99:.0} µs | 1.00 |");
        println!(
            "| kinet, 2025-11-25 | {l50:.0} µs | {l99:.0} µs | {:.2} |",
            l50 / t50
        );
        println!(
            "| kinet, 2026-07-28 | {m50:.0} µs | {m99:.0} µs | {:.2} |",
            m50 / t50
        );
    }
}

fn main() {
    if let Ok(revision) = std::env::var("KINET_BENCH_PROFILE_REVISION") {
        profile_revision(&revision);
        return;
    }
    if std::env::var_os("KINET_BENCH_REVISIONS_ONLY").is_some() {
        revisions();
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let modules = root.join("kinet-mcp/tests/peers/node_modules");
    if !modules
        .join("@modelcontextprotocol/server-everything")
        .exists()
    {
        eprintln!("run `npm ci --prefix kinet-mcp/tests/peers` first");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let everything = modules.join("@modelcontextprotocol/server-everything/dist/index.js");

    // Three rounds, each client in turn, so that machine noise hits all
    // alike; each figure is the median of the rounds. kinet runs on a
    // current-thread runtime (an event loop, as node and asyncio are) and
    // on a 2-worker runtime.
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let python = support::python("mcp");
    if python.is_none() {
        eprintln!("the Python SDK (`mcp`) is not installed: set KINET_PYTHON or see the header");
    }
    let mut rounds: Vec<[Option<(f64, f64)>; 4]> = Vec::new();
    for _ in 0..3 {
        let single = Some(current.block_on(kinet_latency(&modules)));
        let multi = Some(rt.block_on(kinet_latency(&modules)));
        let mut ts = Command::new("node");
        ts.arg(root.join("benches/mcp/ts_client.mjs"))
            .arg(&modules)
            .arg(CALLS.to_string())
            .arg("node")
            .arg(&everything)
            .arg("stdio");
        let ts = peer(ts);
        let py = python.as_ref().and_then(|python| {
            let mut command = Command::new(python);
            command
                .arg(root.join("benches/mcp/py_client.py"))
                .arg(CALLS.to_string())
                .arg("node")
                .arg(&everything)
                .arg("stdio");
            peer(command)
        });
        rounds.push([single, multi, ts, py]);
    }
    drop(current);
    let median_of = |column: usize| -> Option<(f64, f64)> {
        let mut p50: Vec<f64> = rounds
            .iter()
            .filter_map(|r| r[column].map(|v| v.0))
            .collect();
        let mut p99: Vec<f64> = rounds
            .iter()
            .filter_map(|r| r[column].map(|v| v.1))
            .collect();
        if p50.is_empty() {
            return None;
        }
        p50.sort_by(f64::total_cmp);
        p99.sort_by(f64::total_cmp);
        Some((p50[p50.len() / 2], p99[p99.len() / 2]))
    };
    let (c50, c99) = median_of(0).unwrap();
    let (k50, k99) = median_of(1).unwrap();
    let ts = median_of(2);
    let py = median_of(3);

    println!(
        "\ntools/call `echo` round trip over stdio, {CALLS} calls after 50 warm-up, median of 3 rounds:\n"
    );
    println!("| client | p50 | p99 | kinet p50 ratio |\n|---|---|---|---|");
    println!("| kinet, current-thread runtime | {c50:.0} µs | {c99:.0} µs | 1.00 |");
    println!(
        "| kinet, 2-worker runtime | {k50:.0} µs | {k99:.0} µs | {:.2} |",
        k50 / c50
    );
    let k50 = c50;
    for (label, result) in [("TypeScript SDK 1.32.2", ts), ("Python SDK 2.3.0", py)] {
        match result {
            Some((p50, p99)) => println!(
                "| {label} | {p50:.0} µs | {p99:.0} µs | kinet/{label} = {:.2} |",
                k50 / p50
            ),
            None => println!("| {label} | n/a | n/a | |"),
        }
    }

    revisions();

    // Start-up: 8 at once vs each alone.
    let (together, alone, cpu) = rt.block_on(async {
        let configs: Vec<ServerConfig> =
            (0..8).map(|i| server(&modules, &format!("s{i}"))).collect();
        let start = Instant::now();
        let own_before = cpu_of("self");
        let hub = McpHub::start(configs, HubSettings::default());
        assert!(hub.wait_settled(Duration::from_secs(120)).await);
        let together = start.elapsed();
        // The CPU the start took: each server process's own (user +
        // system, at ready) and this process's (the hub and its runtime).
        let servers: Duration = hub
            .status()
            .iter()
            .filter_map(|s| s.pid)
            .map(|pid| cpu_of(&pid.to_string()))
            .sum();
        let cpu = servers + cpu_of("self").saturating_sub(own_before);
        assert!(hub.status().iter().all(|s| s.state == ServerState::Ready));
        hub.shutdown().await;
        let mut alone = Vec::new();
        for i in 0..8 {
            let start = Instant::now();
            let hub = McpHub::start(
                vec![server(&modules, &format!("a{i}"))],
                HubSettings::default(),
            );
            assert!(hub.wait_settled(Duration::from_secs(60)).await);
            alone.push(start.elapsed());
            hub.shutdown().await;
        }
        (together, alone, cpu)
    });
    let slowest = alone.iter().max().copied().unwrap_or(Duration::ZERO);
    // The floor with no client at all: the same 8 processes started bare,
    // each done starting when its CPU time stops growing; and one alone.
    let (bare8, bare8_cpu) = bare_start(&everything, 8);
    let (bare1, _) = bare_start(&everything, 1);
    println!(
        "\nno client: 8 servers started bare are idle after {:.0} ms ({:.0} ms CPU), one alone after {:.0} ms; \
         the hub's 8-server start / 8 bare = {:.2}, / one bare = {:.2}",
        bare8.as_secs_f64() * 1e3,
        bare8_cpu.as_secs_f64() * 1e3,
        bare1.as_secs_f64() * 1e3,
        together.as_secs_f64() / bare8.as_secs_f64(),
        together.as_secs_f64() / bare1.as_secs_f64()
    );
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let floor = slowest.max(cpu / u32::try_from(cores).unwrap_or(1));
    println!(
        "\nstart-up CPU: {:.0} ms (8 servers and the hub) on {cores} cores; floor max(slowest alone, CPU / cores) = {:.0} ms; 8 at once / floor = {:.2}",
        cpu.as_secs_f64() * 1e3,
        floor.as_secs_f64() * 1e3,
        together.as_secs_f64() / floor.as_secs_f64()
    );
    println!(
        "\nstart-up to ready: 8 servers at once {:.0} ms; alone: slowest {:.0} ms, median {:.0} ms; ratio {:.2} (target ≤ 1.3)",
        together.as_secs_f64() * 1e3,
        slowest.as_secs_f64() * 1e3,
        {
            let mut sorted = alone.clone();
            sorted.sort();
            sorted[4].as_secs_f64() * 1e3
        },
        together.as_secs_f64() / slowest.as_secs_f64()
    );
}

/// Starts `n` copies of the stdio server at `script` with no client (their
/// stdin held open) and waits until each has stopped using CPU for 300 ms:
/// the time from the spawn to the last CPU any of them used, and their CPU.
fn bare_start(script: &Path, n: usize) -> (Duration, Duration) {
    let start = Instant::now();
    let mut children: Vec<std::process::Child> = (0..n)
        .map(|_| {
            Command::new("node")
                .arg(script)
                .arg("stdio")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let pids: Vec<String> = children.iter().map(|c| c.id().to_string()).collect();
    let mut last = vec![(Duration::ZERO, start); n];
    loop {
        std::thread::sleep(Duration::from_millis(10));
        let now = Instant::now();
        for (pid, seen) in pids.iter().zip(&mut last) {
            let cpu = cpu_of(pid);
            if cpu != seen.0 {
                *seen = (cpu, now);
            }
        }
        let quiet = last
            .iter()
            .all(|(cpu, at)| !cpu.is_zero() && now - *at >= Duration::from_millis(300));
        if quiet || start.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    let done = last
        .iter()
        .map(|(_, at)| *at - start)
        .max()
        .unwrap_or_default();
    (done, last.iter().map(|(cpu, _)| *cpu).sum())
}

/// The CPU time (user + system) process `pid` (or `self`) has used so far,
/// from `/proc/<pid>/stat` (clock ticks of 1/100 s); zero where it cannot
/// be read.
fn cpu_of(pid: &str) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // After the command name (in parentheses, which may hold spaces):
    // state is field 3, utime 14, stime 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}
