//! Recipe: traces and cost. Each run, model call and tool call becomes an
//! OpenTelemetry span (GenAI conventions) sent over OTLP/HTTP to a local
//! collector (`OTEL_EXPORTER_OTLP_ENDPOINT`, default http://127.0.0.1:4318:
//! Jaeger, the OpenTelemetry Collector, ...); a price table gives the cost
//! and a budget caps it. Runs on a scripted model, no API key.
//! `cargo run --example recipe_telemetry --features tools,opentelemetry`
#![allow(clippy::print_stdout, missing_docs)]

use kinet::Agent;
use kinet::builder::Limits;
use kinet::core::telemetry::{Price, PriceTable, Telemetry, otel};
use kinet::core::{ApprovalPolicy, RunOutcome, provider::Usage, testing::*};
use serde_json::json;

/// One traced run, its spans sent to `endpoint` and flushed on return.
pub async fn traced_run(endpoint: &str) -> anyhow::Result<RunOutcome> {
    let guard = otel::install(endpoint, "kinet-recipe")?; // or add otel::layer to your subscriber
    let used = |input, output| Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    };
    let model = ScriptedProvider::new([
        ScriptedTurn::new()
            .tool_call("c1", "glob", json!({"pattern": "*.toml"}))
            .tool_call(
                "c2",
                "dispatch_agent",
                json!({"prompt": "Say which crates exist."}),
            )
            .with_usage(used(1_200, 80)),
        ScriptedTurn::text("kinet-core, kinet-tools and more.").with_usage(used(400, 30)), // the sub-agent
        ScriptedTurn::text("Done: see Cargo.toml.").with_usage(used(2_000, 60)),
    ]);
    let prices = PriceTable::new().with("gpt-4o-mini", Price::new(0.15, 0.60)); // per 1M tokens
    let agent = Agent::builder(model)
        .model("gpt-4o-mini")
        .tools(kinet::tools::default_tools())
        .policy(ApprovalPolicy::never())
        .telemetry(Telemetry::new().agent_name("recipe").prices(prices)) // .record_content(true) adds prompts
        .limits(Limits::new().budget(0.05)) // the run ends cleanly once it has cost this much
        .build();
    let outcome = agent.run_to_completion("What is in this workspace?").await;
    drop(guard); // flushes the spans
    Ok(outcome)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:4318".into());
    let outcome = traced_run(&endpoint).await?;
    println!("{}", outcome.final_text().unwrap_or_default());
    println!("stop: {}; tokens: {:?}", outcome.stop, outcome.usage);
    let cost = outcome.cost.unwrap_or(0.0);
    println!("cost: {cost:.6} (spans sent to {endpoint})");
    Ok(())
}
