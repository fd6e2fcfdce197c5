//! web_fetch and web_search against a loopback server serving saved pages.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinet_core::{Tool, ToolCtx, ToolOutput};

use kinet_core::tool::ToolErrorKind;
use kinet_tools::web::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone)]
struct Route {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    delay: Duration,
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/web/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn page(content_type: &str, body: Vec<u8>) -> Route {
    Route {
        status: 200,
        headers: vec![("content-type".into(), content_type.into())],
        body,
        delay: Duration::ZERO,
    }
}

/// A loopback HTTP/1.1 server answering by path; counts hits per path.
struct Server {
    url: String,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

async fn serve(routes: HashMap<String, Route>) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let routes = Arc::new(routes);
    let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let counter = Arc::clone(&hits);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let routes = Arc::clone(&routes);
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16384];
                let mut read = 0;
                loop {
                    let Ok(n) = socket.read(&mut buf[read..]).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    read += n;
                    if buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let head = String::from_utf8_lossy(&buf[..read]).into_owned();
                let target = head.split(' ').nth(1).unwrap_or("/").to_owned();
                let path = target.split('?').next().unwrap_or("/").to_owned();
                *counter.lock().unwrap().entry(path.clone()).or_default() += 1;
                let route = routes.get(&path).cloned().unwrap_or(Route {
                    status: 404,
                    headers: vec![("content-type".into(), "text/html".into())],
                    body: b"<h1>Not found</h1>".to_vec(),
                    delay: Duration::ZERO,
                });
                tokio::time::sleep(route.delay).await;
                let mut response = format!(
                    "HTTP/1.1 {} X\r\nconnection: close\r\ncontent-length: {}\r\n",
                    route.status,
                    route.body.len()
                );
                for (k, v) in &route.headers {
                    response.push_str(&format!("{k}: {v}\r\n"));
                }
                response.push_str("\r\n");
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.write_all(&route.body).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    Server { url, hits }
}

async fn fetch(tool: &WebFetchTool, url: String) -> Result<ToolOutput, kinet_core::ToolError> {
    tool.call(
        serde_json::from_value(json!({"url": url})).unwrap(),
        &ToolCtx::new("."),
    )
    .await
}

#[tokio::test]
async fn saved_pages_become_clean_markdown() {
    let server = serve(HashMap::from([
        (
            "/news".to_owned(),
            page("text/html; charset=utf-8", fixture("news_article.html")),
        ),
        (
            "/docs".to_owned(),
            page("text/html", fixture("docs_page.html")),
        ),
        (
            "/status".to_owned(),
            page("text/html", fixture("scripts_page.html")),
        ),
        (
            "/menu".to_owned(),
            page("text/html", fixture("latin1_page.html")),
        ),
    ]))
    .await;
    let tool = WebFetchTool::default();
    for (name, path) in [
        ("news", "/news"),
        ("docs", "/docs"),
        ("scripts", "/status"),
        ("latin1", "/menu"),
    ] {
        let out = fetch(&tool, format!("{}{path}", server.url)).await.unwrap();
        let text = out.text.replace(&server.url, "http://127.0.0.1:PORT");
        insta::assert_snapshot!(format!("markdown_{name}"), text);
        assert!(
            !text.contains("<script") && !text.contains("gtag(") && !text.contains("dataLayer"),
            "{name}: {text}"
        );
    }
    let news = fetch(&tool, format!("{}/news", server.url))
        .await
        .unwrap()
        .text;
    assert!(news.contains("# City council approves new cycling network"));
    assert!(news.contains("**€38 million**"));
    assert!(
        !news.contains("Sign up") && !news.contains("Sport"),
        "chrome removed: {news}"
    );
    let docs = fetch(&tool, format!("{}/docs", server.url))
        .await
        .unwrap()
        .text;
    assert!(docs.contains("```"), "code blocks kept: {docs}");
    assert!(docs.contains("max_attempts(5)"));
    let menu = fetch(&tool, format!("{}/menu", server.url))
        .await
        .unwrap()
        .text;
    assert!(
        menu.contains("Käsespätzle") && menu.contains("täglich"),
        "decoded from ISO-8859-1: {menu}"
    );
}

#[tokio::test]
async fn redirects_errors_limits_and_types() {
    let mut routes = HashMap::from([
        (
            "/old".to_owned(),
            Route {
                status: 301,
                headers: vec![("location".into(), "/news".into())],
                body: vec![],
                delay: Duration::ZERO,
            },
        ),
        (
            "/away".to_owned(),
            Route {
                status: 302,
                headers: vec![(
                    "location".into(),
                    "https://elsewhere.example.invalid/page".into(),
                )],
                body: vec![],
                delay: Duration::ZERO,
            },
        ),
        (
            "/news".to_owned(),
            page("text/html", fixture("news_article.html")),
        ),
        (
            "/slow".to_owned(),
            Route {
                delay: Duration::from_secs(5),
                ..page("text/html", b"<p>late</p>".to_vec())
            },
        ),
        (
            "/huge".to_owned(),
            page("text/html", vec![b'x'; 2 * 1024 * 1024]),
        ),
        (
            "/data.json".to_owned(),
            page("application/json", br#"{"ok":true,"items":[1,2]}"#.to_vec()),
        ),
        (
            "/paper.pdf".to_owned(),
            page("application/pdf", b"%PDF-1.7 ...".to_vec()),
        ),
        (
            "/image.png".to_owned(),
            page("image/png", b"\x89PNG...".to_vec()),
        ),
        (
            "/notes.txt".to_owned(),
            page("text/plain; charset=utf-8", b"plain notes\n".to_vec()),
        ),
    ]);
    routes.insert(
        "/error".into(),
        Route {
            status: 503,
            ..page("text/html", b"down".to_vec())
        },
    );
    let server = serve(routes).await;
    let tool = WebFetchTool::new(WebFetchConfig {
        timeout: Duration::from_millis(800),
        max_bytes: 1024 * 1024,
        ..WebFetchConfig::default()
    });
    let followed = fetch(&tool, format!("{}/old", server.url))
        .await
        .unwrap()
        .text;
    assert!(followed.contains("City council approves"));
    let reported = fetch(&tool, format!("{}/away", server.url))
        .await
        .unwrap()
        .text;
    assert!(
        reported.contains("redirects to another host: https://elsewhere.example.invalid/page"),
        "{reported}"
    );
    let err = fetch(&tool, format!("{}/missing", server.url))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::NotFound);
    assert!(err.message().contains("HTTP 404"), "{}", err.message());
    let err = fetch(&tool, format!("{}/error", server.url))
        .await
        .unwrap_err();
    assert!(err.message().contains("HTTP 503"));
    let err = fetch(&tool, format!("{}/slow", server.url))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::Timeout, "{}", err.message());
    let err = fetch(&tool, format!("{}/huge", server.url))
        .await
        .unwrap_err();
    assert!(
        err.message().contains("larger than the 1 MB limit"),
        "{}",
        err.message()
    );
    let json_text = fetch(&tool, format!("{}/data.json", server.url))
        .await
        .unwrap()
        .text;
    assert!(json_text.ends_with(r#"{"ok":true,"items":[1,2]}"#));
    let err = fetch(&tool, format!("{}/paper.pdf", server.url))
        .await
        .unwrap_err();
    assert!(err.message().contains("is a PDF document"));
    let err = fetch(&tool, format!("{}/image.png", server.url))
        .await
        .unwrap_err();
    assert!(err.message().contains("`image/png`"));
    assert!(
        fetch(&tool, format!("{}/notes.txt", server.url))
            .await
            .unwrap()
            .text
            .ends_with("plain notes")
    );
    let err = fetch(&tool, "ftp://example.invalid/x".into())
        .await
        .unwrap_err();
    assert!(err.message().contains("only http and https"));

    // The cache: a second fetch within 15 minutes does not hit the server.
    fetch(&tool, format!("{}/notes.txt", server.url))
        .await
        .unwrap();
    assert_eq!(server.hits.lock().unwrap()["/notes.txt"], 1);
}

#[tokio::test]
async fn a_reader_backend_is_used_first_and_local_conversion_is_the_fallback() {
    let reader = serve(HashMap::from([(
        "/http://127.0.0.1/ok".to_owned(),
        page("text/plain", b"# From the reader\nBody".to_vec()),
    )]))
    .await;
    let origin = serve(HashMap::from([(
        "/news".to_owned(),
        page("text/html", fixture("news_article.html")),
    )]))
    .await;
    let tool = WebFetchTool::new(WebFetchConfig {
        reader: Some(ReaderBackend {
            base_url: reader.url.clone(),
            api_key: Some("k".into()),
        }),
        ..WebFetchConfig::default()
    });
    // The reader does not know this page (404): local conversion answers.
    let out = fetch(&tool, format!("{}/news", origin.url))
        .await
        .unwrap()
        .text;
    assert!(out.contains("City council approves"));
    assert_eq!(reader.hits.lock().unwrap().values().sum::<usize>(), 1);
}

#[test]
fn result_pages_of_each_engine_parse() {
    let bing = parse_bing(&String::from_utf8(fixture("bing_results.html")).unwrap());
    let urls: Vec<&str> = bing.iter().map(|r| r.url.as_str()).collect();
    assert_eq!(
        urls,
        [
            "https://tokio.rs/",
            "https://docs.rs/async-std/latest/async_std/",
            "https://rust-lang.github.io/async-book/",
            "https://github.com/smol-rs/smol"
        ],
        "ads skipped, Bing redirect links decoded"
    );
    assert_eq!(bing[0].title, "Tokio - An asynchronous Rust runtime");
    assert!(
        bing[0].snippet.contains("Tokio is an asynchronous runtime"),
        "{}",
        bing[0].snippet
    );
    let ddg = parse_duckduckgo(&String::from_utf8(fixture("ddg_results.html")).unwrap());
    assert_eq!(ddg.len(), 3, "{ddg:?}");
    assert_eq!(ddg[0].url, "https://tokio.rs/");
    assert_eq!(ddg[0].title, "Tokio - An asynchronous Rust runtime");
    assert_eq!(ddg[1].url, "https://docs.rs/async-std/latest/async_std/");
    assert_eq!(ddg[2].snippet, "Most people use tokio; smol is smaller.");
}

async fn search(
    tool: &WebSearchTool,
    args: serde_json::Value,
) -> Result<ToolOutput, kinet_core::ToolError> {
    tool.call(serde_json::from_value(args).unwrap(), &ToolCtx::new("."))
        .await
}

#[tokio::test]
async fn bing_falls_back_to_duckduckgo_and_domain_filters_apply() {
    let empty_bing = serve(HashMap::from([(
        "/search".to_owned(),
        page(
            "text/html",
            b"<html><body><ol id=\"b_results\"></ol></body></html>".to_vec(),
        ),
    )]))
    .await;
    let broken_bing = serve(HashMap::new()).await;
    let ddg = serve(HashMap::from([(
        "/html/".to_owned(),
        page("text/html", fixture("ddg_results.html")),
    )]))
    .await;
    let bing = serve(HashMap::from([(
        "/search".to_owned(),
        page("text/html", fixture("bing_results.html")),
    )]))
    .await;

    let tool = WebSearchTool::new(vec![
        Arc::new(BingHtml::new(&empty_bing.url)),
        Arc::new(DuckDuckGoHtml::new(&ddg.url)),
    ]);
    let out = search(&tool, json!({"query": "rust async runtime"}))
        .await
        .unwrap()
        .text;
    assert!(out.starts_with("Results from duckduckgo"), "{out}");
    assert!(
        out.contains("1. Tokio - An asynchronous Rust runtime\n   https://tokio.rs/"),
        "{out}"
    );

    let tool = WebSearchTool::new(vec![
        Arc::new(BingHtml::new(&broken_bing.url)),
        Arc::new(DuckDuckGoHtml::new(&ddg.url)),
    ]);
    assert!(
        search(&tool, json!({"query": "x"}))
            .await
            .unwrap()
            .text
            .starts_with("Results from duckduckgo")
    );

    let tool = WebSearchTool::new(vec![
        Arc::new(BingHtml::new(&bing.url)),
        Arc::new(DuckDuckGoHtml::new(&ddg.url)),
    ]);
    let out = search(
        &tool,
        json!({"query": "rust async runtime", "blocked_domains": ["github.com", "tokio.rs"]}),
    )
    .await
    .unwrap()
    .text;
    assert!(out.starts_with("Results from bing"), "{out}");
    assert!(
        !out.contains("github.com") && !out.contains("https://tokio.rs"),
        "{out}"
    );
    let out = search(
        &tool,
        json!({"query": "rust async runtime", "allowed_domains": ["docs.rs"]}),
    )
    .await
    .unwrap()
    .text;
    assert_eq!(out.matches("https://").count(), 1, "{out}");

    let tool = WebSearchTool::new(vec![Arc::new(BingHtml::new(&broken_bing.url))]);
    let err = search(&tool, json!({"query": "x"})).await.unwrap_err();
    assert!(
        err.message().contains("bing: HTTP 404"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn json_search_apis_parse() {
    let server = serve(HashMap::from([
        ("/search".to_owned(), page("application/json", br#"{"results":[{"title":"SearXNG hit","url":"https://a.example.invalid/","content":"from searx"}]}"#.to_vec())),
        ("/res/v1/web/search".to_owned(), page("application/json", br#"{"web":{"results":[{"title":"Brave hit","url":"https://b.example.invalid/","description":"from brave"}]}}"#.to_vec())),
    ]))
    .await;
    for (kind, expected) in [
        (JsonApiKind::SearXng, "SearXNG hit"),
        (JsonApiKind::Brave, "Brave hit"),
    ] {
        let tool = WebSearchTool::new(vec![Arc::new(JsonApi::new(
            kind,
            &server.url,
            Some("key".into()),
        ))]);
        let out = search(&tool, json!({"query": "q"})).await.unwrap().text;
        assert!(out.contains(expected), "{out}");
    }
}
