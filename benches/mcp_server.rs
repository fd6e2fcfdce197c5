//! MCP server throughput: a direct read-only tool (`add`) over streamable
//! HTTP with 16 concurrent client sessions for 5 s, against the same tool
//! served by the official Python SDK's MCPServer (FastMCP), same client,
//! same run. Each server runs in its own process.
//!
//! ```text
//! /var/tmp/kinet-pyenv/bin/pip install mcp==2.3.0     # or set KINET_PYTHON
//! cargo bench --bench mcp_server --features mcp
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kinet::Agent;
use kinet::core::testing::ScriptedProvider;
use kinet::mcp::{HubSettings, McpHub, McpServer, ServerConfig};
use serde_json::json;

#[allow(dead_code)]
mod support;

const SESSIONS: usize = 16;
const SECONDS: u64 = 5;

fn wait_for(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server on {port} did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Drives `add` through 16 sessions for SECONDS; returns (calls/s, p50 ms, p99 ms).
async fn load(url: &str) -> (f64, f64, f64) {
    let configs: Vec<ServerConfig> = (0..SESSIONS)
        .map(|i| ServerConfig::http(format!("s{i}"), url))
        .collect();
    let hub = McpHub::start(configs, HubSettings::default());
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let end = Instant::now() + Duration::from_secs(SECONDS);
    let tasks = (0..SESSIONS).map(|i| {
        let hub = hub.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let name = format!("s{i}");
            while Instant::now() < end {
                let start = Instant::now();
                let out = hub
                    .call(&name, "add", json!({"a": i, "b": 1}))
                    .await
                    .unwrap();
                samples.push(start.elapsed().as_secs_f64() * 1e3);
                assert_eq!(out.text, (i + 1).to_string());
            }
            samples
        })
    });
    let mut all: Vec<f64> = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    hub.shutdown().await;
    all.sort_by(f64::total_cmp);
    let at = |q: f64| all[((q * all.len() as f64) as usize).min(all.len() - 1)];
    (all.len() as f64 / SECONDS as f64, at(0.5), at(0.99))
}

fn main() {
    // Child mode: serve kinet's `add` and wait.
    if let Ok(port) = std::env::var("KINET_BENCH_SERVE") {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let agent = Agent::builder(ScriptedProvider::new([])).build();
            let server = McpServer::builder(agent).expose_tool(support::Add).build();
            let addr = format!("127.0.0.1:{port}").parse().unwrap();
            let _handle = server.serve_http(addr, None).await.unwrap();
            futures::future::pending::<()>().await;
        });
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();

    let port = support::free_port();
    let _kinet = Kill(
        Command::new(std::env::current_exe().unwrap())
            .env("KINET_BENCH_SERVE", port.to_string())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(port);
    let (k_rate, k50, k99) = rt.block_on(load(&format!("http://127.0.0.1:{port}/mcp")));
    println!(
        "kinet McpServer: {k_rate:.0} calls/s, p50 {k50:.2} ms, p99 {k99:.2} ms ({SESSIONS} sessions, {SECONDS} s)"
    );

    let python =
        std::env::var("KINET_PYTHON").unwrap_or_else(|_| "/var/tmp/kinet-pyenv/bin/python".into());
    let port = support::free_port();
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/mcp/mcpserver_add.py");
    let Ok(child) = Command::new(&python)
        .arg(script)
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        eprintln!("python unavailable ({python})");
        return;
    };
    let _python = Kill(child);
    wait_for(port);
    let (p_rate, p50, p99) = rt.block_on(load(&format!("http://127.0.0.1:{port}/mcp")));
    println!("Python SDK MCPServer: {p_rate:.0} calls/s, p50 {p50:.2} ms, p99 {p99:.2} ms");
    println!(
        "ratio kinet/python: throughput {:.1}x, p99 {:.2}x",
        k_rate / p_rate,
        k99 / p99
    );
}
