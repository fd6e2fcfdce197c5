//! kinet's Chat Completions client against the official `openai` Python SDK
//! on the same real server, in one run: llama.cpp's `llama-server` with
//! SmolLM2-135M (as `.ci/llama-server` builds them), a fresh server for
//! each client, the same 30-turn conversation at temperature 0.
//!
//! Reported per turn: client-side time = wall time of the streamed turn
//! minus the server's own processing time (its `timings`, read by the
//! Python peer; the workloads are identical, which the prompt token counts
//! check). Also the share of prompt tokens served from llama.cpp's cache.
//!
//! ```text
//! .ci/llama-server                                    # build once (cached)
//! /var/tmp/kinet-pyenv/bin/pip install openai==3.60.0 # the peer
//! cargo bench --bench llama
//! ```
#![allow(
    missing_docs,
    unreachable_pub,
    dead_code,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

#[path = "../kinet-core/tests/support/llama.rs"]
mod llama;

use std::time::{Duration, Instant};

use kinet::core::provider::{GenerationParams, OpenAiConfig, OpenAiProvider};
use kinet::core::{Agent, Conversation, Message};

const TURNS: usize = 30;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    if llama::binaries().is_none() {
        eprintln!("SKIPPED: llama-server is not built: run .ci/llama-server");
        return;
    }
    let python =
        std::env::var("KINET_PYTHON").unwrap_or_else(|_| "/var/tmp/kinet-pyenv/bin/python".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // kinet, on a fresh server.
    let server = llama::Server::start(llama::free_port(), 8192);
    let provider =
        OpenAiProvider::new(OpenAiConfig::new().base_url(format!("{}/v1", server.url()))).unwrap();
    let agent = Agent::builder(provider)
        .system_prompt("You answer in one short sentence.")
        .model("smollm2")
        .params(GenerationParams {
            temperature: Some(0.0),
            max_tokens: Some(24),
            ..GenerationParams::default()
        })
        .build();
    let mut conversation = Conversation::new();
    let mut kinet_rows = Vec::new();
    for turn in 0..TURNS {
        conversation.push(Message::user(format!(
            "Tell me one fact about the number {turn}."
        )));
        let started = Instant::now();
        let outcome = rt.block_on(agent.run_to_completion(conversation.clone()));
        let total = started.elapsed();
        assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
        kinet_rows.push((total, outcome.usage));
        conversation = outcome.conversation;
    }
    drop(server);

    // The Python SDK, on another fresh server.
    let server = llama::Server::start(llama::free_port(), 8192);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/llama/openai_sdk.py");
    let output = std::process::Command::new(&python)
        .args([script, &format!("{}/v1", server.url()), &TURNS.to_string()])
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "the openai SDK peer failed (pip install openai==3.60.0 into {python}): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    drop(server);
    let peer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = peer["turns"].as_array().unwrap();

    let mut kinet_client = Vec::new();
    let mut sdk_client = Vec::new();
    let (mut prompt, mut cached) = (0u64, 0u64);
    let (mut sdk_prompt, mut sdk_cached) = (0u64, 0u64);
    let mut same_workload = true;
    for (turn, ((total, usage), row)) in kinet_rows.iter().zip(rows).enumerate() {
        let server_ms = row["server_ms"].as_f64().unwrap();
        let sdk_total = row["total_ms"].as_f64().unwrap();
        kinet_client.push(total.as_secs_f64() * 1e3 - server_ms);
        sdk_client.push(sdk_total - server_ms);
        prompt += usage.input_tokens;
        cached += usage.cache_read_tokens;
        sdk_prompt += row["prompt"].as_u64().unwrap();
        sdk_cached += row["cached"].as_u64().unwrap();
        if row["prompt"].as_u64() != Some(usage.input_tokens) {
            same_workload = false;
            eprintln!(
                "turn {turn}: prompt tokens differ: kinet {} vs SDK {}",
                usage.input_tokens, row["prompt"]
            );
        }
    }
    let (k, s) = (median(kinet_client), median(sdk_client));
    println!(
        "openai SDK {}, {TURNS} turns, same workload: {same_workload}",
        peer["openai"]
    );
    println!("| client | client-side time per turn (median) | ratio |\n|---|---|---|");
    println!("| kinet OpenAiProvider | {k:.2} ms | {:.2}x |", k / s);
    println!("| openai Python SDK | {s:.2} ms | 1.00x |");
    println!(
        "cached prompt share over {TURNS} turns: kinet {:.1}% ({cached} of {prompt} tokens), SDK {:.1}% ({sdk_cached} of {sdk_prompt})",
        100.0 * cached as f64 / prompt.max(1) as f64,
        100.0 * sdk_cached as f64 / sdk_prompt.max(1) as f64
    );
    let _ = Duration::ZERO;
}
