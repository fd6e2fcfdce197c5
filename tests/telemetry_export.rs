//! The telemetry recipe against a collector on loopback: its spans arrive
//! over OTLP/HTTP (JSON) with the run, model calls and tool calls named by
//! the GenAI conventions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../examples/recipes/telemetry.rs"]
#[allow(dead_code, unreachable_pub)]
mod recipe;

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A collector that keeps the body of every `POST /v1/traces`.
async fn collector() -> (String, Arc<Mutex<Vec<serde_json::Value>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&received);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let kept = Arc::clone(&kept);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 65536];
                loop {
                    let Ok(n) = socket.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if buf.len() < end + 4 + length {
                        continue;
                    }
                    let body = &buf[end + 4..end + 4 + length];
                    if head.starts_with("post /v1/traces")
                        && let Ok(json) = serde_json::from_slice(body)
                    {
                        kept.lock().unwrap().push(json);
                    }
                    let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                    let _ = socket.write_all(reply.as_bytes()).await;
                    buf.drain(..end + 4 + length);
                }
            });
        }
    });
    (url, received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recipe_sends_its_spans_to_a_local_collector() {
    let (endpoint, received) = collector().await;
    let outcome = recipe::traced_run(&endpoint).await.unwrap();
    assert!(outcome.stop.is_completed(), "{}", outcome.stop);
    let expected = (3_200.0 * 0.15 + 140.0 * 0.60) / 1e6;
    assert!(
        (outcome.cost.unwrap() - expected).abs() < 1e-12,
        "{:?}",
        outcome.cost
    );

    let batches = received.lock().unwrap().clone();
    let mut names = Vec::new();
    for batch in &batches {
        for resource in batch["resourceSpans"].as_array().unwrap() {
            let service = resource["resource"]["attributes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["key"] == "service.name")
                .map(|a| a["value"]["stringValue"].clone());
            assert_eq!(service, Some(serde_json::json!("kinet-recipe")));
            for scope in resource["scopeSpans"].as_array().unwrap() {
                for span in scope["spans"].as_array().unwrap() {
                    names.push(span["name"].as_str().unwrap().to_owned());
                }
            }
        }
    }
    for name in [
        "invoke_agent recipe",
        "chat gpt-4o-mini",
        "execute_tool glob",
        "execute_tool dispatch_agent",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    assert_eq!(
        names.iter().filter(|n| *n == "invoke_agent recipe").count(),
        2,
        "the run and its sub-agent: {names:?}"
    );
}
