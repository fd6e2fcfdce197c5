//! Code Mode against plain tool calls, on one task: look up 20 prices and
//! sum them, with a scripted model (the same answers each run).
//!
//! - plain: the model calls `lookup` once per turn (20 turns), then answers;
//! - Code Mode: the model writes one `run_code` script, then answers.
//!
//! Reported: model turns, what was sent to the model (characters of the
//! system prompt, tool specs and messages of every request, and that over
//! 4 as tokens), wall time; then the added cost of one tool call made from
//! a script over the same call made through the pipeline directly.
//!
//! ```text
//! cargo bench --bench code_mode --features code-mode
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used
)]

use kinet::builder::Limits;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kinet::core::provider::{ChatRequest, ProviderError, ProviderStream};
use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
use kinet::core::tool::Toolset;
use kinet::core::{
    Agent, Message, Provider, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput,
};
use kinet::tools::code_mode::CodeMode;
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct LookupArgs {
    /// The item to price.
    item: String,
}

/// A price list lookup: a line of text per item, as a real lookup tool
/// would answer (name, price, currency, stock, a note).
struct Lookup;

#[async_trait]
impl Tool for Lookup {
    type Args = LookupArgs;
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "Looks up an item in the price list: its price, currency, stock and notes."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, args: LookupArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let price = args.item.len() * 3;
        Ok(ToolOutput::text(format!(
            "{{\"item\": \"{}\", \"price\": {price}, \"currency\": \"EUR\", \"stock\": 120, \"note\": \"price valid for the current week; bulk discounts from 50 units; delivery in 2 to 4 days\"}}",
            args.item
        )))
    }
}

/// Counts what each request carries, then lets the script answer.
struct Measured {
    inner: ScriptedProvider,
    chars: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

#[async_trait]
impl Provider for Measured {
    fn name(&self) -> &str {
        "measured"
    }
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let size = request.system.len()
            + serde_json::to_string(&*request.tools).unwrap().len()
            + serde_json::to_string(&*request.messages).unwrap().len();
        self.chars.fetch_add(size, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.inner.stream(request).await
    }
}

fn items() -> Vec<String> {
    (0..20)
        .map(|n| format!("item-{n:02}-{}", "x".repeat(n % 7)))
        .collect()
}

fn total() -> usize {
    items().iter().map(|i| i.len() * 3).sum()
}

struct Outcome {
    turns: usize,
    chars: usize,
    wall: Duration,
    answer: String,
}

async fn plain() -> Outcome {
    let mut turns: Vec<ScriptedTurn> = items()
        .into_iter()
        .enumerate()
        .map(|(n, item)| {
            ScriptedTurn::new().tool_call(format!("c{n}"), "lookup", json!({ "item": item }))
        })
        .collect();
    turns.push(ScriptedTurn::text(format!("The total is {}.", total())));
    measure(turns, false).await
}

async fn code_mode() -> Outcome {
    let list: Vec<String> = items().iter().map(|i| format!("\"{i}\"")).collect();
    let script = format!(
        "total = 0\nfor item in [{}]:\n    total += lookup(item)['price']\nprint(total)",
        list.join(", ")
    );
    let turns = vec![
        ScriptedTurn::new().tool_call("s", "run_code", json!({ "code": script })),
        ScriptedTurn::text(format!("The total is {}.", total())),
    ];
    measure(turns, true).await
}

async fn measure(turns: Vec<ScriptedTurn>, with_code: bool) -> Outcome {
    let chars = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let provider = Measured {
        inner: ScriptedProvider::new(turns),
        chars: Arc::clone(&chars),
        requests: Arc::clone(&requests),
    };
    let mut tools = Toolset::new().with(Lookup);
    if with_code {
        // Both are offered: the script calls `lookup` through the pipeline.
        let code = CodeMode::new(&tools);
        tools.add(code);
    }
    let agent = Agent::builder(provider)
        .system_prompt("You answer questions about prices. Use the tools.")
        .tools(tools)
        .limits(Limits::new().max_turns(30))
        .build();
    let start = Instant::now();
    let outcome = agent
        .run_to_completion("What do the 20 items cost together?")
        .await;
    let wall = start.elapsed();
    assert!(outcome.stop.is_completed(), "{}", outcome.stop);
    if with_code {
        let script_result = outcome
            .conversation
            .messages
            .iter()
            .find_map(|m| matches!(m, Message::Tool { .. }).then(|| m.text()))
            .unwrap();
        assert_eq!(script_result.trim(), total().to_string());
    }
    Outcome {
        turns: requests.load(Ordering::Relaxed),
        chars: chars.load(Ordering::Relaxed),
        wall,
        answer: outcome.final_text().unwrap_or_default(),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (mut plain_walls, mut code_walls) = (Vec::new(), Vec::new());
    let (mut p, mut c) = (None, None);
    for _ in 0..30 {
        let a = rt.block_on(plain());
        plain_walls.push(a.wall);
        p = Some(a);
        let b = rt.block_on(code_mode());
        code_walls.push(b.wall);
        c = Some(b);
    }
    let (p, c) = (p.unwrap(), c.unwrap());
    assert_eq!(p.answer, c.answer);
    println!(
        "20 lookups and a sum: plain {} model turns, Code Mode {} (expected 21 vs 2)",
        p.turns, c.turns
    );
    println!(
        "sent to the model: plain {} chars (~{} tokens), Code Mode {} chars (~{} tokens): {:.1}% fewer (target >= 90%)",
        p.chars,
        p.chars / 4,
        c.chars,
        c.chars / 4,
        100.0 * (1.0 - c.chars as f64 / p.chars as f64)
    );
    println!(
        "wall time with an instant model (median of 30): plain {:.2} ms, Code Mode {:.2} ms",
        median(plain_walls).as_secs_f64() * 1e3,
        median(code_walls).as_secs_f64() * 1e3
    );
    per_call(&rt);
}

/// One tool call from a script vs the same call through the pipeline.
fn per_call(rt: &tokio::runtime::Runtime) {
    let calls = 1000;
    let mut tools = Toolset::new().with(Lookup);
    let code = CodeMode::new(&tools).max_tool_calls(calls + 1);
    tools.add(code);
    let script_of = |n: usize| format!("for i in range({n}):\n    lookup('apple')");
    let run_script = |n: usize| {
        let agent = Agent::builder(ScriptedProvider::new([
            ScriptedTurn::new().tool_call("s", "run_code", json!({ "code": script_of(n) })),
            ScriptedTurn::text("ok"),
        ]))
        .tools(tools.clone())
        .build();
        rt.block_on(async {
            let start = Instant::now();
            let outcome = agent.run_to_completion("go").await;
            assert!(outcome.stop.is_completed());
            start.elapsed()
        })
    };
    // The script's own cost without calls, then with 1,000 calls.
    let mut with_calls = Vec::new();
    let mut without = Vec::new();
    for _ in 0..5 {
        with_calls.push(run_script(calls));
        without.push(run_script(0));
    }
    with_calls.sort();
    without.sort();
    let script_per_call = (with_calls[2].saturating_sub(without[2])).as_secs_f64() / calls as f64;
    // The same calls through the pipeline directly.
    let agent = Agent::builder(ScriptedProvider::new([]))
        .tools(tools.clone())
        .build();
    let direct: Vec<Duration> = (0..5)
        .map(|_| {
            rt.block_on(async {
                let snapshot = agent.tools().snapshot().await;
                let ctx = agent.tool_context(Default::default());
                let start = Instant::now();
                for n in 0..calls {
                    let call = kinet::core::message::ToolCall {
                        id: format!("d{n}"),
                        name: "lookup".into(),
                        arguments: "{\"item\": \"apple\"}".into(),
                    };
                    let record = agent.pipeline().call(&snapshot, call, &ctx).await;
                    assert!(record.result.is_ok());
                }
                start.elapsed()
            })
        })
        .collect();
    let mut direct = direct;
    direct.sort();
    let direct_per_call = direct[2].as_secs_f64() / calls as f64;
    println!(
        "one tool call: from a script {:.1} µs, through the pipeline directly {:.1} µs: {:.1} µs added (target < 20 µs)",
        script_per_call * 1e6,
        direct_per_call * 1e6,
        (script_per_call - direct_per_call) * 1e6
    );
}
