//! MCP over OAuth, one run, one server (`kinet-mcp/tests/peers/oauth_server.py`:
//! a Python SDK server that is its own authorization server, consent
//! automatic):
//!
//! - the first connection: discovery, dynamic registration, the consent
//!   redirect, the code exchange and `initialize`, until the first call can
//!   go out; kinet's hub vs the official Python SDK client's OAuth provider;
//! - `tools/call` of `whoami` p50/p99 over 1,000 calls: kinet's hub through
//!   its OAuth client, the same hub given the same token as a static header
//!   (the cost of OAuth per request), and the Python SDK client with OAuth.
//!
//! ```text
//! python3 -m venv /var/tmp/kinet-pyenv && /var/tmp/kinet-pyenv/bin/pip install mcp==2.3.0
//! cargo bench --bench mcp_oauth --features mcp
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kinet::async_trait;
use kinet::mcp::oauth::{
    AuthorizationOutcome, AuthorizationPrompt, AuthorizationRequest, MemoryTokenStore, OAuth,
    TokenStore,
};
use kinet::mcp::{HubSettings, McpHub, ServerConfig, ServerState};
use serde_json::json;

#[allow(dead_code)]
mod support;

const CALLS: usize = 1000;
const ROUNDS: usize = 3;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The consent page redirects straight back: follow it to the hub.
struct Browser;

#[async_trait]
impl AuthorizationPrompt for Browser {
    async fn authorize(&self, request: AuthorizationRequest) -> AuthorizationOutcome {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let page = client.get(&request.url).send().await.unwrap();
        let back = page.headers()["location"].to_str().unwrap().to_owned();
        client.get(&back).send().await.unwrap();
        AuthorizationOutcome::Opened
    }
}

/// p50 and p99 of `whoami` through `hub`, in µs.
async fn latency(hub: &McpHub) -> (f64, f64) {
    for _ in 0..50 {
        hub.call("guarded", "whoami", json!({})).await.unwrap();
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let start = Instant::now();
        let out = hub.call("guarded", "whoami", json!({})).await.unwrap();
        samples.push(start.elapsed().as_secs_f64() * 1e6);
        assert_eq!(out.text, "authorized");
    }
    samples.sort_by(f64::total_cmp);
    (
        support::percentile(&samples, 0.5),
        support::percentile(&samples, 0.99),
    )
}

async fn ready(hub: &McpHub) {
    let started = Instant::now();
    while hub.status()[0].state != ServerState::Ready {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{:?}",
            hub.status()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

struct Round {
    authorize_ms: f64,
    oauth: (f64, f64),
    bearer: (f64, f64),
}

async fn kinet_round(url: &str) -> Round {
    let store = Arc::new(MemoryTokenStore::default());
    let oauth = || OAuth::new().store(store.clone()).prompt(Arc::new(Browser));
    let started = Instant::now();
    let hub = McpHub::builder(vec![ServerConfig::http("guarded", url)])
        .settings(HubSettings::default())
        .oauth(oauth())
        .start();
    ready(&hub).await;
    let authorize_ms = started.elapsed().as_secs_f64() * 1e3;
    hub.shutdown().await;

    // The same token as a static header, then through the OAuth client
    // again (a hub reusing the saved tokens), so neither runs first.
    let token = store
        .load(&format!("guarded {url}"))
        .await
        .unwrap()
        .and_then(|c| c.tokens)
        .unwrap()
        .access_token;
    let mut config = ServerConfig::http("guarded", url);
    if let kinet::mcp::ServerTransport::Http { headers, .. } = &mut config.transport {
        headers.insert("Authorization".into(), format!("Bearer {token}"));
    }
    let hub = McpHub::start(vec![config], HubSettings::default());
    ready(&hub).await;
    let bearer = latency(&hub).await;
    hub.shutdown().await;

    let hub = McpHub::builder(vec![ServerConfig::http("guarded", url)])
        .settings(HubSettings::default())
        .oauth(oauth())
        .start();
    ready(&hub).await;
    let oauth = latency(&hub).await;
    hub.shutdown().await;
    Round {
        authorize_ms,
        oauth,
        bearer,
    }
}

fn python_round(python: &str, script: &PathBuf, url: &str) -> Option<(f64, f64, f64)> {
    let mut command = Command::new(python);
    command.arg(script).arg(CALLS.to_string()).arg(url);
    let value = support::peer_json(command)?;
    Some((
        value["authorize_ms"].as_f64()?,
        value["p50_us"].as_f64()?,
        value["p99_us"].as_f64()?,
    ))
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let Some(python) = support::python("mcp.client.auth") else {
        eprintln!("the Python SDK (`mcp`) is not installed: set KINET_PYTHON or see the header");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let mut server = Command::new(&python)
        .arg(root.join("kinet-mcp/tests/peers/oauth_server.py"))
        .arg(port.to_string())
        .arg(dir.path().join("grants.log"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(100));
    }
    let url = format!("http://127.0.0.1:{port}/mcp");
    let script = root.join("benches/mcp/py_oauth_client.py");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut kinet = Vec::new();
    let mut peer = Vec::new();
    for _ in 0..ROUNDS {
        kinet.push(runtime.block_on(kinet_round(&url)));
        if let Some(round) = python_round(&python, &script, &url) {
            peer.push(round);
        }
    }
    let _ = server.kill();
    let _ = server.wait();

    let k_auth = median(kinet.iter().map(|r| r.authorize_ms).collect());
    let k50 = median(kinet.iter().map(|r| r.oauth.0).collect());
    let k99 = median(kinet.iter().map(|r| r.oauth.1).collect());
    let b50 = median(kinet.iter().map(|r| r.bearer.0).collect());
    let b99 = median(kinet.iter().map(|r| r.bearer.1).collect());
    println!(
        "MCP over OAuth, {CALLS} `whoami` calls after 50 warm-up, median of {ROUNDS} rounds\n"
    );
    println!(
        "| client | first connection (authorize + initialize) | p50 | p99 |\n|---|---|---|---|"
    );
    println!("| kinet hub, OAuth | {k_auth:.1} ms | {k50:.0} µs | {k99:.0} µs |");
    println!("| kinet hub, same token as a static header | | {b50:.0} µs | {b99:.0} µs |");
    if peer.is_empty() {
        println!("| Python SDK client, OAuth | n/a | n/a | n/a |");
    } else {
        let p_auth = median(peer.iter().map(|r| r.0).collect());
        let p50 = median(peer.iter().map(|r| r.1).collect());
        let p99 = median(peer.iter().map(|r| r.2).collect());
        println!("| Python SDK client, OAuth | {p_auth:.1} ms | {p50:.0} µs | {p99:.0} µs |");
        println!(
            "\nkinet / Python SDK: first connection {:.2}×, p50 {:.2}×; OAuth / static header p50 {:.2}×",
            k_auth / p_auth,
            k50 / p50,
            k50 / b50
        );
    }
}
