//! kinet's browser tools against Microsoft's Playwright MCP server driving
//! the same Debian Chromium, called through kinet's MCP client, in the same
//! run, on the same pages:
//!
//! - `browser_snapshot` and `browser_click` on a page with 2,000 elements:
//!   time, snapshot size, and the size of what a click answers;
//! - `browser_snapshot` of large documentation pages: a generated one (150
//!   sections of prose with inline code and links, highlighted code, a
//!   table and a list each) and, when Debian's `python3-doc` is installed,
//!   the Python docs' `library/stdtypes.html` and `library/functions.html`.
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

const PYTHON_DOCS: &str = "/usr/share/doc/python3/html";

/// A documentation page like the ones generators write: sections of prose
/// with inline code and links, syntax-highlighted code (one span per
/// token), a table and a list each.
fn docs_page() -> String {
    let mut body = String::new();
    for i in 0..150 {
        body.push_str(&format!(
            "<section id=\"s{i}\"><h2>Section {i}<a class=\"headerlink\" href=\"#s{i}\">¶</a></h2>"
        ));
        for j in 0..5 {
            body.push_str(&format!(
                "<p>Paragraph {j} of section {i} explains how <code class=\"docutils literal\"><span class=\"pre\">value_{i}_{j}</span></code> \
relates to <a class=\"reference internal\" href=\"#s{}\"><code>other_{j}()</code></a>, with enough ordinary words to read like \
documentation that somebody wrote by hand, and a closing remark number {j}.</p>",
                (i + 1) % 150
            ));
        }
        body.push_str("<div class=\"highlight\"><pre>");
        for k in 0..6 {
            body.push_str(&format!(
                "<span class=\"gp\">&gt;&gt;&gt; </span><span class=\"n\">x{k}</span> <span class=\"o\">=</span> <span class=\"o\">-</span><span class=\"mi\">{i}</span> <span class=\"o\">+</span> <span class=\"nb\">len</span><span class=\"p\">(</span><span class=\"s1\">'\\x00{k}'</span><span class=\"p\">)</span>\n"
            ));
        }
        body.push_str("</pre></div><table><tr><th>Name</th><th>Meaning</th></tr>");
        for k in 0..4 {
            body.push_str(&format!(
                "<tr><td><code>opt_{k}</code></td><td>Option {k} of section {i}</td></tr>"
            ));
        }
        body.push_str("</table><ul>");
        for k in 0..3 {
            body.push_str(&format!(
                "<li>Point {k}: see <a href=\"#s{k}\">section {k}</a>.</li>"
            ));
        }
        body.push_str("</ul></section>");
    }
    format!(
        "<!doctype html><html><head><title>Generated docs</title></head><body><h1>Reference</h1>{body}</body></html>"
    )
}

/// Serves `/` (the rows page), `/docs` (the generated docs page) and the
/// Python documentation under `/py/`.
async fn serve(rows: String, docs: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let pages = Arc::new((rows, docs));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let pages = Arc::clone(&pages);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut read = 0;
                while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf[read..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => read += n,
                    }
                }
                let head = String::from_utf8_lossy(&buf[..read]).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                let (status, kind, content) = match path.as_str() {
                    "/" => (
                        "200 OK",
                        "text/html; charset=utf-8",
                        pages.0.clone().into_bytes(),
                    ),
                    "/docs" => (
                        "200 OK",
                        "text/html; charset=utf-8",
                        pages.1.clone().into_bytes(),
                    ),
                    _ => match path.strip_prefix("/py/").filter(|p| !p.contains("..")) {
                        Some(file) => match std::fs::read(Path::new(PYTHON_DOCS).join(file)) {
                            Ok(bytes) => {
                                let kind = match file.rsplit('.').next() {
                                    Some("css") => "text/css",
                                    Some("js") => "text/javascript",
                                    Some("svg") => "image/svg+xml",
                                    Some("png") => "image/png",
                                    _ => "text/html; charset=utf-8",
                                };
                                ("200 OK", kind, bytes)
                            }
                            Err(_) => ("404 Not Found", "text/plain", Vec::new()),
                        },
                        None => ("404 Not Found", "text/plain", Vec::new()),
                    },
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    content.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&content).await;
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
    /// What a click answers, in characters (median).
    click_chars: usize,
}

/// A documentation page's snapshot: median time and size.
struct Doc {
    ms: f64,
    chars: usize,
}

const DOC_RUNS: usize = 10;

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

fn median_usize(mut samples: Vec<usize>) -> usize {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// The rows workload through `call` (either tool set): a snapshot, then a
/// click on a different button each time.
async fn rows<F: AsyncFn(&str, Value) -> String>(call: F, click_arg: &str) -> Figures {
    let (mut snaps, mut clicks, mut answers) = (Vec::new(), Vec::new(), Vec::new());
    let mut chars = 0;
    for i in 0..=RUNS {
        let start = Instant::now();
        let snapshot = call("browser_snapshot", json!({})).await;
        let snap = start.elapsed().as_secs_f64() * 1e3;
        chars = snapshot.chars().count();
        let target = ref_of(&snapshot, &format!("button \"Press {}\"", i * 20));
        let start = Instant::now();
        let answer = call("browser_click", json!({ click_arg: target })).await;
        let click = start.elapsed().as_secs_f64() * 1e3;
        if i > 0 {
            snaps.push(snap);
            clicks.push(click);
            answers.push(answer.chars().count());
        }
    }
    Figures {
        snapshot_ms: median(snaps),
        click_ms: median(clicks),
        snapshot_chars: chars,
        click_chars: median_usize(answers),
    }
}

/// Snapshots of each docs page through `call`.
async fn docs<F: AsyncFn(&str, Value) -> String>(call: F, urls: &[String]) -> Vec<Doc> {
    let mut figures = Vec::new();
    for url in urls {
        call("browser_navigate", json!({ "url": url })).await;
        let mut times = Vec::new();
        let mut chars = 0;
        for i in 0..=DOC_RUNS {
            let start = Instant::now();
            let snapshot = call("browser_snapshot", json!({})).await;
            if i > 0 {
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
            chars = snapshot.chars().count();
        }
        figures.push(Doc {
            ms: median(times),
            chars,
        });
    }
    figures
}

async fn kinet(
    url: &str,
    docs_urls: &[String],
    snapshot_after_action: bool,
) -> (Figures, Vec<Doc>) {
    // Whole snapshots in the result, to compare sizes (by default a
    // snapshot over 7,500 characters is shown in part and saved to a file).
    let config = BrowserConfig {
        snapshot_limit: usize::MAX,
        ..BrowserConfig::default()
    };
    let session = BrowserSession::new(config);
    let tools = BrowserTools::new(session.clone())
        .snapshot_after_action(snapshot_after_action)
        .toolset();
    let call = async |tool: &str, args: Value| kinet_tool(&tools, tool, args).await.text;
    call("browser_navigate", json!({ "url": url })).await;
    let figures = rows(&call, "ref").await;
    let check = kinet_tool(&tools, "browser_eval", json!({"expression": "window.c"})).await;
    assert_eq!(
        check.structured,
        Some(json!(RUNS + 1)),
        "every click landed"
    );
    let pages = docs(&call, docs_urls).await;
    session.shutdown().await;
    (figures, pages)
}

async fn playwright(
    modules: &Path,
    url: &str,
    docs_urls: &[String],
    extra: &[&str],
) -> (Figures, Vec<Doc>) {
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
    let call =
        async |tool: &str, args: Value| hub.call("playwright", tool, args).await.unwrap().text;
    call("browser_navigate", json!({ "url": url })).await;
    let figures = rows(&call, "target").await;
    let pages = docs(&call, docs_urls).await;
    hub.shutdown().await;
    (figures, pages)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let base = serve(page(), docs_page()).await;
    let url = format!("{base}/");
    let mut docs_urls = vec![format!("{base}/docs")];
    let mut docs_names = vec!["generated docs page"];
    if Path::new(PYTHON_DOCS)
        .join("library/stdtypes.html")
        .exists()
    {
        docs_urls.push(format!("{base}/py/library/stdtypes.html"));
        docs_urls.push(format!("{base}/py/library/functions.html"));
        docs_names.extend([
            "Python docs library/stdtypes.html",
            "Python docs library/functions.html",
        ]);
    } else {
        eprintln!("{PYTHON_DOCS} is missing (Debian's python3-doc): only the generated docs page");
    }
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/computer/node_modules");
    let (ours, our_docs) = kinet(&url, &docs_urls, true).await;
    let (ours_bare, _) = kinet(&url, &[], false).await;
    println!(
        "rows page: {ROWS} rows, {} elements; median of {RUNS} after a warm-up",
        ROWS * 4
    );
    println!(
        "kinet: snapshot {:.1} ms ({} chars); click {:.1} ms answering {} chars; click without the page {:.1} ms",
        ours.snapshot_ms, ours.snapshot_chars, ours.click_ms, ours.click_chars, ours_bare.click_ms
    );
    for (name, doc) in docs_names.iter().zip(&our_docs) {
        println!(
            "kinet: {name}: snapshot {:.1} ms, {} chars (median of {DOC_RUNS})",
            doc.ms, doc.chars
        );
    }
    if !modules.join("@playwright/mcp").exists() {
        eprintln!("Playwright MCP is not installed: npm ci --prefix benches/computer");
        return;
    }
    for (label, extra) in [
        ("default (500 ms settle)", &[][..]),
        ("--timeout-settle 0", &["--timeout-settle", "0"][..]),
    ] {
        let (theirs, their_docs) = playwright(&modules, &url, &docs_urls, extra).await;
        println!(
            "Playwright MCP {label}: snapshot {:.1} ms ({} chars); click {:.1} ms answering {} chars",
            theirs.snapshot_ms, theirs.snapshot_chars, theirs.click_ms, theirs.click_chars
        );
        println!(
            "  ratios kinet/Playwright: snapshot {:.2}, click {:.2}, click without the page {:.2}, snapshot size {:.2}, click answer {:.3} (kinet's click answer is {:.1}% of its full snapshot)",
            ours.snapshot_ms / theirs.snapshot_ms,
            ours.click_ms / theirs.click_ms,
            ours_bare.click_ms / theirs.click_ms,
            ours.snapshot_chars as f64 / theirs.snapshot_chars as f64,
            ours.click_chars as f64 / theirs.click_chars as f64,
            100.0 * ours.click_chars as f64 / ours.snapshot_chars as f64
        );
        for ((name, doc), theirs) in docs_names.iter().zip(&our_docs).zip(&their_docs) {
            println!(
                "  {name}: Playwright {:.1} ms, {} chars; ratios kinet/Playwright time {:.2}, size {:.2}",
                theirs.ms,
                theirs.chars,
                doc.ms / theirs.ms,
                doc.chars as f64 / theirs.chars as f64
            );
        }
    }
}
