//! Loop engine benchmarks.
//!
//! - `loop_overhead`: ScriptedProvider, 1,000 turns each with 5 trivial
//!   read-only tool calls; the engine's cost per tool call (target < 20 µs)
//!   and heap allocations per call.
//! - `concurrency`: 5 read-only tools that sleep 100 ms finish in ≤ 120 ms;
//!   5 mutating ones take ≥ 500 ms.
//! - with `--features opentelemetry`, `tracing`: the loop-overhead run with
//!   the spans turned into OpenTelemetry spans (the OpenTelemetry layer, an
//!   in-memory exporter) against the same run with no subscriber, on one
//!   current-thread runtime (target: at most +3 µs per tool call).
//!
//! ```text
//! cargo bench --bench engine [--features opentelemetry]
//! ```
#![allow(
    unsafe_code,
    missing_docs,
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used
)]

use kinet::builder::Calls;
use kinet::builder::Limits;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use kinet::core::ApprovalPolicy;
use kinet::core::testing::ScriptedProvider;
use kinet::core::testing::ScriptedTurn;
use kinet::{Agent, Tool, ToolCtx, ToolError, ToolOutput, async_trait};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Counts heap allocations so the summary can report them per tool call.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Deserialize, JsonSchema)]
struct NoopArgs {
    /// Any number.
    n: u32,
}

struct Noop;

#[async_trait]
impl Tool for Noop {
    type Args = NoopArgs;
    fn name(&self) -> &str {
        "noop"
    }
    fn description(&self) -> &str {
        "Does nothing."
    }
    fn annotations(&self) -> kinet::ToolAnnotations {
        kinet::ToolAnnotations::read_only()
    }
    async fn call(&self, args: NoopArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(args.n.to_string()))
    }
}

#[derive(Deserialize, JsonSchema)]
struct SleepArgs {
    /// Milliseconds.
    ms: u64,
}

struct Sleep {
    name: &'static str,
    read_only: bool,
}

#[async_trait]
impl Tool for Sleep {
    type Args = SleepArgs;
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "Sleeps."
    }
    fn annotations(&self) -> kinet::ToolAnnotations {
        if self.read_only {
            kinet::ToolAnnotations::read_only()
        } else {
            kinet::ToolAnnotations::default()
        }
    }
    async fn call(&self, args: SleepArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        Ok(ToolOutput::text("slept"))
    }
}

const TURNS: usize = 1000;
const CALLS_PER_TURN: usize = 5;

/// Counts calls: the cheapest real layer.
#[derive(Default)]
struct CallCounter(std::sync::atomic::AtomicU64);

#[async_trait]
impl kinet::core::layer::ToolLayer for CallCounter {
    async fn call(
        &self,
        call: kinet::core::layer::Invocation,
        next: kinet::core::layer::Next<'_>,
    ) -> Result<ToolOutput, ToolError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        next.run(call).await
    }
}

/// The loop-overhead agent, with two layers (a call counter and a
/// concurrency limit, as a host would add) or none.
fn overhead_agent(layers: bool) -> Agent {
    let mut turns: Vec<ScriptedTurn> = (0..TURNS)
        .map(|t| {
            (0..CALLS_PER_TURN).fold(ScriptedTurn::new(), |turn, c| {
                turn.tool_call(format!("c{t}_{c}"), "noop", json!({"n": c}))
            })
        })
        .collect();
    turns.push(ScriptedTurn::text("done"));
    let builder = Agent::builder(ScriptedProvider::new(turns))
        .tool(Noop)
        .limits(Limits::new().max_turns(u32::try_from(TURNS + 1).unwrap()));
    if layers {
        builder
            .calls(
                Calls::new()
                    .layer(CallCounter::default())
                    .layer(kinet::core::layer::ConcurrencyLimitLayer::new(64)),
            )
            .build()
    } else {
        builder.build()
    }
}

fn concurrency_agent(name: &'static str, read_only: bool) -> Agent {
    let turn = (0..5).fold(ScriptedTurn::new(), |turn, i| {
        turn.tool_call(format!("s{i}"), name, json!({"ms": 100}))
    });
    Agent::builder(ScriptedProvider::new([turn, ScriptedTurn::text("done")]))
        .tool(Sleep { name, read_only })
        .policy(ApprovalPolicy::never())
        .build()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Plain-number summary printed before criterion's own output.
fn summary(rt: &tokio::runtime::Runtime) {
    let calls = (TURNS * CALLS_PER_TURN) as f64;
    for (label, layers) in [
        ("pipeline, no layers", false),
        ("pipeline + 2 layers", true),
    ] {
        let mut times = Vec::new();
        let mut allocations = Vec::new();
        for _ in 0..15 {
            let agent = overhead_agent(layers);
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            let start = Instant::now();
            let outcome = rt.block_on(agent.run_to_completion("go"));
            times.push(start.elapsed());
            allocations.push(ALLOCATIONS.load(Ordering::Relaxed) - before);
            assert!(outcome.stop.is_completed());
            assert_eq!(
                outcome.conversation.messages.len(),
                1 + TURNS * 7 - TURNS + 1
            );
        }
        let run = median(times);
        allocations.sort();
        println!(
            "summary loop_overhead ({label}): {} turns x {} calls in {:.2} ms (median of 15) = {:.2} µs per tool call; {:.0} allocations per tool call",
            TURNS,
            CALLS_PER_TURN,
            run.as_secs_f64() * 1e3,
            run.as_secs_f64() * 1e6 / calls,
            allocations[allocations.len() / 2] as f64 / calls,
        );
    }
    for (label, name, read_only) in [
        ("5 read-only x 100 ms", "look", true),
        ("5 mutating x 100 ms", "change", false),
    ] {
        let samples: Vec<Duration> = (0..5)
            .map(|_| {
                let agent = concurrency_agent(name, read_only);
                let start = Instant::now();
                let outcome = rt.block_on(agent.run_to_completion("go"));
                assert!(outcome.stop.is_completed());
                start.elapsed()
            })
            .collect();
        println!(
            "summary concurrency: {label}: {:.1} ms wall (median of 5)",
            median(samples).as_secs_f64() * 1e3
        );
    }
}

/// Per-call cost of the spans: the same run without a subscriber and with
/// the OpenTelemetry layer exporting to memory, alternated, on a
/// current-thread runtime (the subscriber is the thread's default).
#[cfg(feature = "opentelemetry")]
fn tracing_overhead() {
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let calls = (TURNS * CALLS_PER_TURN) as f64;
    let per_call = |d: Duration| d.as_secs_f64() * 1e6 / calls;
    // Spans exported as each ends (simple), or queued for a background
    // thread (batch, as `telemetry::otel::otlp_provider` sets up).
    for batch in [false, true] {
        let exporter = InMemorySpanExporter::default();
        let builder = SdkTracerProvider::builder();
        let provider = if batch {
            builder.with_batch_exporter(exporter.clone()).build()
        } else {
            builder.with_simple_exporter(exporter.clone()).build()
        };
        let subscriber =
            tracing_subscriber::registry().with(kinet::core::telemetry::otel::layer(&provider));
        let dispatch = tracing::Dispatch::new(subscriber);
        // A second subscriber registered (never used) makes tracing decide
        // per span site and call, from the current thread's subscriber,
        // instead of caching "off" for sites first seen outside
        // `with_default`.
        let _second = tracing::Dispatch::new(tracing_subscriber::registry());
        let (mut off, mut on) = (Vec::new(), Vec::new());
        let mut spans = 0;
        for _ in 0..15 {
            let agent = overhead_agent(false);
            let start = Instant::now();
            assert!(
                rt.block_on(agent.run_to_completion("go"))
                    .stop
                    .is_completed()
            );
            off.push(start.elapsed());
            let agent = overhead_agent(false);
            let start = Instant::now();
            let outcome = tracing::dispatcher::with_default(&dispatch, || {
                rt.block_on(agent.run_to_completion("go"))
            });
            on.push(start.elapsed());
            assert!(outcome.stop.is_completed());
            let _ = provider.force_flush();
            spans = exporter.get_finished_spans().unwrap().len();
            exporter.reset();
        }
        let (off, on) = (median(off), median(on));
        println!(
            "summary tracing ({} processor): no subscriber {:.2} µs per tool call; OpenTelemetry layer + in-memory exporter {:.2} µs ({} spans per run); +{:.2} µs per tool call (median of 15, current-thread runtime)",
            if batch { "batch" } else { "simple" },
            per_call(off),
            per_call(on),
            spans,
            per_call(on) - per_call(off),
        );
        let _ = provider.shutdown();
    }
}

fn benches(c: &mut Criterion) {
    // First: the subscriber must exist before kinet's spans are first
    // seen, or tracing keeps them off (it caches each span site's interest).
    #[cfg(feature = "opentelemetry")]
    tracing_overhead();
    let rt = runtime();
    summary(&rt);

    let mut group = c.benchmark_group("loop_overhead");
    group.sample_size(20);
    group.bench_function("1000_turns_x_5_calls", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let agent = overhead_agent(true);
                let start = Instant::now();
                let outcome = rt.block_on(agent.run_to_completion("go"));
                total += start.elapsed();
                assert!(outcome.stop.is_completed());
            }
            total
        });
    });
    group.finish();

    let mut group = c.benchmark_group("concurrency");
    group.sample_size(10);
    for (label, name, read_only) in [
        ("5_read_only_100ms", "look", true),
        ("5_mutating_100ms", "change", false),
    ] {
        group.bench_function(label, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let agent = concurrency_agent(name, read_only);
                    let start = Instant::now();
                    rt.block_on(agent.run_to_completion("go"));
                    total += start.elapsed();
                }
                total
            });
        });
    }
    group.finish();
}

criterion_group!(engine, benches);
criterion_main!(engine);
