//! browser_snapshot and browser_click on a page with 2,000 elements: kinet's
//! browser tools against Microsoft's Playwright MCP server driving the same
//! Debian Chromium, called through kinet's MCP client, in the same run, on
//! the same page. Also compares the snapshot sizes.
//!
//! ```text
//! npm ci --prefix benches/computer      # @playwright/mcp, pinned
//! cargo bench --bench computer --features computer,mcp
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kinet::computer::browser::{BrowserConfig, BrowserSession, BrowserTools};
use kinet::core::{ToolCtx, ToolOutput, Toolset};
use kinet::mcp::{HubSettings, McpHub, ServerConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ROWS: usize = 500;
const RUNS: usize = 20;

/// 500 rows of a label, a checkbox, a button that changes the row's text,
/// and a link: 2,000 elements the snapshot must describe.
fn page() -> String {
    let mut rows = String::new();
    for i in 0..ROWS {
        rows.push_str(&format!(
            "<li><span id=\"s{i}\">Row {i} waiting</span> <input type=\"checkbox\" aria-label=\"Pick {i}\"> \
<button onclick=\"document.getElementById('s{i}').textContent = 'Row {i} pressed ' + (++window.c)\">Press {i}</button> \
<a href=\"#row{i}\">Details {i}</a></li>\n"
        ));
    }
    format!(
        "<!doctype html><html><head><title>Two thousand elements</title><script>window.c = 0</script></head>\
<body><h1>Rows</h1><ul>{rows}</ul></body></html>"
    )
}

async fn serve(body: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let body = Arc::new(body);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = Arc::clone(&body);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut read = 0;
                while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf[read..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => read += n,
                    }
                }
                let (status, content) = if buf.starts_with(b"GET / ") {
                    ("200 OK", body.as_str())
                } else {
                    ("404 Not Found", "")
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{content}",
                    content.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    url
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The ref on the line naming `needle`, in either tool's snapshot format.
fn ref_of(snapshot: &str, needle: &str) -> String {
    let line = snapshot
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no {needle:?} in the snapshot"));
    let start = line.find("[ref=").unwrap() + 5;
    let end = start + line[start..].find(']').unwrap();
    line[start..end].to_owned()
}

struct Figures {
    snapshot_ms: f64,
    click_ms: f64,
    snapshot_chars: usize,
}

/// Runs a tool the way every call runs: through the pipeline.
async fn kinet_tool(tools: &Toolset, name: &str, args: Value) -> ToolOutput {
    let pipeline =
        kinet::core::pipeline::Pipeline::new().with_policy(kinet::ApprovalPolicy::never());
    let call = kinet::core::message::ToolCall {
        id: "b".into(),
        name: name.into(),
        arguments: args.to_string(),
    };
    pipeline
        .call(
            tools.static_tools(),
            call,
            &ToolCtx::new(std::env::temp_dir()),
        )
        .await
        .result
        .unwrap()
}

async fn kinet(url: &str, snapshot_after_action: bool) -> Figures {
    let session = BrowserSession::new(BrowserConfig::default());
    let tools = BrowserTools::new(session.clone())
        .snapshot_after_action(snapshot_after_action)
        .toolset();
    kinet_tool(&tools, "browser_navigate", json!({"url": url})).await;
    let (mut snaps, mut clicks) = (Vec::new(), Vec::new());
    let mut chars = 0;
    for i in 0..=RUNS {
        let start = Instant::now();
        let snapshot = kinet_tool(&tools, "browser_snapshot", json!({})).await.text;
        let snap = start.elapsed().as_secs_f64() * 1e3;
        chars = snapshot.chars().count();
        let target = ref_of(&snapshot, &format!("button \"Press {}\"", i * 20));
        let start = Instant::now();
        kinet_tool(&tools, "browser_click", json!({"ref": target})).await;
        let click = start.elapsed().as_secs_f64() * 1e3;
        if i > 0 {
            snaps.push(snap);
            clicks.push(click);
        }
    }
    let check = kinet_tool(&tools, "browser_eval", json!({"expression": "window.c"})).await;
    assert_eq!(
        check.structured,
        Some(json!(RUNS + 1)),
        "every click landed"
    );
    session.shutdown().await;
    Figures {
        snapshot_ms: median(snaps),
        click_ms: median(clicks),
        snapshot_chars: chars,
    }
}

async fn playwright(modules: &Path, url: &str, extra: &[&str]) -> Figures {
    let mut args = vec![
        modules.join("@playwright/mcp/cli.js").display().to_string(),
        "--executable-path".into(),
        "/usr/bin/chromium".into(),
        "--headless".into(),
        "--isolated".into(),
        "--no-sandbox".into(),
        "--output-dir".into(),
        std::env::temp_dir()
            .join("kinet-bench-playwright")
            .display()
            .to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let hub = McpHub::start(
        vec![ServerConfig::stdio("playwright", "node", args)],
        HubSettings::default(),
    );
    assert!(hub.wait_settled(Duration::from_secs(60)).await);
    let call = async |tool: &str, args: Value| hub.call("playwright", tool, args).await.unwrap();
    call("browser_navigate", json!({"url": url})).await;
    let (mut snaps, mut clicks) = (Vec::new(), Vec::new());
    let mut chars = 0;
    for i in 0..=RUNS {
        let start = Instant::now();
        let snapshot = call("browser_snapshot", json!({})).await.text;
        let snap = start.elapsed().as_secs_f64() * 1e3;
        chars = snapshot.chars().count();
        let target = ref_of(&snapshot, &format!("button \"Press {}\"", i * 20));
        let start = Instant::now();
        call("browser_click", json!({"target": target})).await;
        let click = start.elapsed().as_secs_f64() * 1e3;
        if i > 0 {
            snaps.push(snap);
            clicks.push(click);
        }
    }
    hub.shutdown().await;
    Figures {
        snapshot_ms: median(snaps),
        click_ms: median(clicks),
        snapshot_chars: chars,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let url = serve(page()).await;
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/computer/node_modules");
    let ours = kinet(&url, true).await;
    let ours_bare = kinet(&url, false).await;
    println!(
        "page: {ROWS} rows, {} elements; median of {RUNS} after a warm-up",
        ROWS * 4
    );
    println!(
        "kinet: snapshot {:.1} ms ({} chars); click + fresh snapshot {:.1} ms; click alone {:.1} ms",
        ours.snapshot_ms, ours.snapshot_chars, ours.click_ms, ours_bare.click_ms
    );
    if !modules.join("@playwright/mcp").exists() {
        eprintln!("Playwright MCP is not installed: npm ci --prefix benches/computer");
        return;
    }
    for (label, extra) in [
        ("default (500 ms settle)", &[][..]),
        ("--timeout-settle 0", &["--timeout-settle", "0"][..]),
    ] {
        let theirs = playwright(&modules, &url, extra).await;
        println!(
            "Playwright MCP {label}: snapshot {:.1} ms ({} chars); click {:.1} ms",
            theirs.snapshot_ms, theirs.snapshot_chars, theirs.click_ms
        );
        println!(
            "  ratios kinet/Playwright: snapshot {:.2}, click (with snapshot) {:.2}, click alone {:.2}, snapshot size {:.2}",
            ours.snapshot_ms / theirs.snapshot_ms,
            ours.click_ms / theirs.click_ms,
            ours_bare.click_ms / theirs.click_ms,
            ours.snapshot_chars as f64 / theirs.snapshot_chars as f64
        );
    }
}
