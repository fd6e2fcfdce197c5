//! Helpers shared by the browser test files.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kinet_core::tool::engine::EngineCtx as _;
use std::sync::Arc;

use kinet_computer::browser::{BrowserConfig, BrowserSession, BrowserTools};
use kinet_core::{ToolCtx, ToolOutput, Toolset};
use serde_json::Value;

/// The tools and session, or `None` (loudly) when no Chromium is installed.
pub(crate) fn browser() -> Option<(Toolset, BrowserSession)> {
    browser_with(BrowserConfig::default())
}

/// [`browser`] with these settings.
pub(crate) fn browser_with(config: BrowserConfig) -> Option<(Toolset, BrowserSession)> {
    if let Err(error) = config.find_executable() {
        kinet_core::testing::skipped(&format!("{error} (.ci/test installs chromium)"));
        return None;
    }
    let session = BrowserSession::new(config);
    Some((BrowserTools::new(session.clone()).toolset(), session))
}

pub(crate) async fn call(
    tools: &Toolset,
    name: &str,
    args: Value,
) -> Result<ToolOutput, kinet_core::ToolError> {
    call_in(tools, name, args, ToolCtx::new(std::env::temp_dir())).await
}

/// [`call`] with this context (workspace roots, say).
pub(crate) async fn call_in(
    tools: &Toolset,
    name: &str,
    args: Value,
    ctx: ToolCtx,
) -> Result<ToolOutput, kinet_core::ToolError> {
    let tool = Arc::clone(tools.static_tools().get(name).unwrap());
    let prepared = tool.prepare(&args.to_string())?;
    prepared.call(ctx.for_call("c", name)).await
}

pub(crate) async fn text(tools: &Toolset, name: &str, args: Value) -> String {
    match call(tools, name, args.clone()).await {
        Ok(out) => out.text,
        Err(error) => panic!("{name} {args}: {error}"),
    }
}

/// The ref on the snapshot line that contains `needle`.
pub(crate) fn ref_of(snapshot: &str, needle: &str) -> String {
    let line = snapshot
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{snapshot}"));
    let start = line.find("[ref=").unwrap() + 5;
    let end = start + line[start..].find(']').unwrap();
    line[start..end].to_owned()
}

/// What the test server answers for one path.
pub(crate) struct Reply {
    pub(crate) status: &'static str,
    pub(crate) body: String,
    /// How long to wait before answering.
    pub(crate) delay: std::time::Duration,
    pub(crate) content_type: &'static str,
}

impl Reply {
    pub(crate) fn ok(body: impl Into<String>) -> Self {
        Self {
            status: "200 OK",
            body: body.into(),
            delay: std::time::Duration::ZERO,
            content_type: "text/html; charset=utf-8",
        }
    }

    /// A file, typed by its extension; 404 when it cannot be read.
    pub(crate) fn file(path: &std::path::Path) -> Self {
        let Ok(body) = std::fs::read_to_string(path) else {
            return Self::ok("<h1>Not found</h1>").status("404 Not Found");
        };
        let content_type = match path.extension().and_then(|e| e.to_str()) {
            Some("css") => "text/css",
            Some("js") => "text/javascript",
            Some("svg") => "image/svg+xml",
            _ => "text/html; charset=utf-8",
        };
        Self {
            content_type,
            ..Self::ok(body)
        }
    }

    pub(crate) fn status(mut self, status: &'static str) -> Self {
        self.status = status;
        self
    }

    pub(crate) fn after(mut self, delay: std::time::Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// A loopback HTTP server answering each request with `route(path, query)`;
/// returns its base URL (`http://127.0.0.1:port`).
pub(crate) async fn serve(
    route: impl Fn(&str, &std::collections::HashMap<String, String>) -> Reply + Send + Sync + 'static,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let route = Arc::new(route);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let route = Arc::clone(&route);
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
                let target = head.split(' ').nth(1).unwrap_or("/").to_owned();
                let (path, query) = target.split_once('?').unwrap_or((&target, ""));
                let params: std::collections::HashMap<String, String> = query
                    .split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.replace('+', " ")))
                    .collect();
                let reply = route(path, &params);
                if !reply.delay.is_zero() {
                    tokio::time::sleep(reply.delay).await;
                }
                let response = format!(
                    "HTTP/1.1 {}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                    reply.status,
                    reply.content_type,
                    reply.body.len(),
                    reply.body
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    url
}
