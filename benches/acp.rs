//! An agent in an editor, as the editor sees it: the time from
//! `session/prompt` to the first `session/update`, the time per update
//! message after it, and the time per text delta of the model's (prompt to
//! the last text; kinet merges deltas that are already waiting into one
//! update), for kinet's ACP server and for the TypeScript SDK's agents,
//! driven by the same client (the TypeScript SDK's, `kinet-acp/tests/
//! clients/bench.mjs`) in one run. The scripted turn: 200 text chunks.
//!
//! Peers: the SDK 1.9 example agent (`dist/examples/agent.js`, which
//! pauses a second between its steps: only its first update compares),
//! and the same example reduced to the scripted turn with no pauses
//! (`stream_agent.mjs`, on the current SDK).
//!
//! ```text
//! npm ci --prefix kinet-acp/tests/clients   # .ci/setup does this
//! cargo bench --bench acp --features acp
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

use kinet::builder::Workspace;
use std::path::Path;
use std::process::Command;

use async_trait::async_trait;
use futures::StreamExt;
use kinet::acp::AcpServer;
use kinet::core::provider::{ChatRequest, ProviderError, ProviderStream, StopReason, StreamEvent};
use kinet::core::{Agent, Provider};

const CHUNKS: usize = 200;

/// Streams the scripted turn: 200 text chunks, at once.
struct Chunks;

#[async_trait]
impl Provider for Chunks {
    fn name(&self) -> &str {
        "chunks"
    }
    async fn stream(&self, _request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let events = (0..CHUNKS)
            .map(|i| StreamEvent::TextDelta(format!("w{i} ")))
            .chain(std::iter::once(StreamEvent::Finished(StopReason::EndTurn)));
        Ok(futures::stream::iter(events.map(Ok)).boxed())
    }
}

/// The runtime every part of the bench runs on: two workers, as the
/// machine has two cores.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The protocol crate alone: an agent that sends the turn's 200 updates
/// straight from its prompt handler (no kinet run), to tell the crate's
/// cost per update from kinet's.
fn raw_agent() {
    use agent_client_protocol::v1::schema as acp;
    use agent_client_protocol::{Agent as AgentRole, on_receive_request};
    let runtime = runtime();
    runtime.block_on(async {
        AgentRole
            .v1()
            .on_receive_request(
                async |request: acp::InitializeRequest, responder, _cx| {
                    responder.respond(acp::InitializeResponse::new(request.protocol_version))
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async |_request: acp::NewSessionRequest, responder, _cx| {
                    responder.respond(acp::NewSessionResponse::new(acp::SessionId::new("s")))
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async |request: acp::PromptRequest, responder, cx| {
                    for i in 0..CHUNKS {
                        cx.send_notification(acp::SessionNotification::new(
                            request.session_id.clone(),
                            acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(
                                format!("w{i} ").into(),
                            )),
                        ))?;
                    }
                    responder.respond(acp::PromptResponse::new(acp::StopReason::EndTurn))
                },
                on_receive_request!(),
            )
            .connect_to(agent_client_protocol::Stdio::new())
            .await
            .unwrap();
    });
}

/// Runs the client against `agent` for `prompts` prompts; its JSON
/// report.
fn measure(node: &str, clients: &Path, prompts: u32, agent: &[String]) -> serde_json::Value {
    let output = Command::new(node)
        .arg(clients.join("bench.mjs"))
        .arg(prompts.to_string())
        .args(agent)
        .current_dir(clients)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{agent:?}: {text}");
    serde_json::from_str(text.trim()).unwrap()
}

fn main() {
    if std::env::args().any(|a| a == "--raw") {
        raw_agent();
        return;
    }
    if std::env::args().any(|a| a == "--agent") {
        let runtime = runtime();
        runtime
            .block_on(
                AcpServer::new(|cwd| {
                    Agent::builder(Chunks)
                        .workspace(Workspace::new().cwd(cwd))
                        .build()
                })
                .serve_stdio(),
            )
            .unwrap();
        return;
    }
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("kinet-acp/tests/clients");
    let node = std::env::var("KINET_ACP_NODE").unwrap_or_else(|_| "node".into());
    if !clients.join("node_modules/sdk19").is_dir() {
        eprintln!("SKIPPED: run `npm ci --prefix kinet-acp/tests/clients` first");
        return;
    }
    // The engine alone: the same turn's events, read in process.
    let runtime = runtime();
    let engine_us = runtime.block_on(async {
        let agent = Agent::builder(Chunks).build();
        let mut samples = Vec::new();
        for _ in 0..30 {
            let mut run = agent.run("go");
            let mut stamps = Vec::new();
            while let Some(event) = run.next().await {
                if matches!(event, kinet::core::AgentEvent::TextDelta { .. }) {
                    stamps.push(std::time::Instant::now());
                }
            }
            let span = stamps[stamps.len() - 1] - stamps[0];
            samples.push(span.as_secs_f64() * 1e6 / (stamps.len() - 1) as f64);
        }
        samples.sort_by(f64::total_cmp);
        samples[samples.len() / 2]
    });
    println!("the engine alone, in process: {engine_us:.1} µs per text event");
    let this = std::env::current_exe().unwrap().display().to_string();
    let kinet = measure(&node, &clients, 30, &[this.clone(), "--agent".into()]);
    let floor = measure(
        &node,
        &clients,
        30,
        &[node.clone(), "burst_agent.mjs".into(), CHUNKS.to_string()],
    );
    println!(
        "the client's own floor (all updates in one write, no protocol library): first update {:.2} ms, {:.1} µs per update",
        floor["firstUpdateMs"].as_f64().unwrap_or(f64::NAN),
        floor["perUpdateUs"].as_f64().unwrap_or(f64::NAN)
    );
    let raw = measure(&node, &clients, 30, &[this.clone(), "--raw".into()]);
    println!(
        "the protocol crate alone (updates sent from the prompt handler, no kinet run): first update {:.2} ms, {:.1} µs per update",
        raw["firstUpdateMs"].as_f64().unwrap_or(f64::NAN),
        raw["perUpdateUs"].as_f64().unwrap_or(f64::NAN)
    );
    let stream = measure(
        &node,
        &clients,
        30,
        &[node.clone(), "stream_agent.mjs".into(), CHUNKS.to_string()],
    );
    // It pauses a second between steps: three prompts.
    let example = measure(
        &node,
        &clients,
        3,
        &[
            node.clone(),
            "node_modules/sdk19/dist/examples/agent.js".into(),
        ],
    );
    let ms = |v: &serde_json::Value| v["firstUpdateMs"].as_f64().unwrap_or(f64::NAN);
    let us = |v: &serde_json::Value| v["perUpdateUs"].as_f64().unwrap_or(f64::NAN);
    println!(
        "prompt to first update (median of 30): kinet {:.2} ms, TypeScript SDK stream agent {:.2} ms ({:.2}x), SDK example agent {:.2} ms (median of 3) ({:.2}x)",
        ms(&kinet),
        ms(&stream),
        ms(&kinet) / ms(&stream),
        ms(&example),
        ms(&kinet) / ms(&example)
    );
    let count = |v: &serde_json::Value| v["updates"].as_u64().unwrap_or(0);
    println!(
        "per update message (median of 30): kinet {:.1} µs over {} messages, TypeScript SDK stream agent {:.1} µs over {} messages ({:.2}x)",
        us(&kinet),
        count(&kinet),
        us(&stream),
        count(&stream),
        us(&kinet) / us(&stream)
    );
    let per_delta = |v: &serde_json::Value| v["perDeltaUs"].as_f64().unwrap_or(f64::NAN);
    println!(
        "per text delta of the model's {CHUNKS}, prompt to the last text (median of 30): kinet {:.1} µs, TypeScript SDK stream agent {:.1} µs ({:.2}x) (target: kinet <= 0.5x)",
        per_delta(&kinet),
        per_delta(&stream),
        per_delta(&kinet) / per_delta(&stream)
    );
}
