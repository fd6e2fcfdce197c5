//! Cost from the price table, per model call and per run, and a budget
//! that ends a run cleanly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use kinet_core::builder::Limits;
use kinet_core::provider::Usage;
use kinet_core::telemetry::Telemetry;
use kinet_core::telemetry::{Price, PriceTable};
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::{Agent, AgentEvent, ApprovalPolicy, RunStop};
use serde_json::json;

fn used(input: u64, output: u64, cached: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: cached,
        ..Usage::default()
    }
}

fn prices() -> PriceTable {
    // A dated model name is priced by its family's entry.
    PriceTable::new().with("m1", Price::new(2.0, 8.0).with_cache(0.5, 2.5))
}

#[tokio::test(start_paused = true)]
async fn each_model_call_and_the_run_are_priced() {
    let timeline = Timeline::default();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .tool_call("c1", "look", json!({"label": "a", "ms": 1}))
            .with_usage(used(10_000, 500, 4_000)),
        ScriptedTurn::text("done").with_usage(used(12_000, 300, 10_000)),
    ]);
    let agent = Agent::builder(provider)
        .model("m1-2026-01-01")
        .telemetry(Telemetry::new().prices(prices()))
        .tool(Sleeper::new("look", true, &timeline))
        .policy(ApprovalPolicy::never())
        .build();
    let (events, outcome) = collect(agent.run("go")).await;
    let first = (6_000.0 * 2.0 + 4_000.0 * 0.5 + 500.0 * 8.0) / 1e6;
    let second = (2_000.0 * 2.0 + 10_000.0 * 0.5 + 300.0 * 8.0) / 1e6;
    let costs: Vec<(f64, f64)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Cost { turn, run } => Some((*turn, *run)),
            _ => None,
        })
        .collect();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    assert_eq!(costs.len(), 2);
    assert!(
        close(costs[0].0, first) && close(costs[0].1, first),
        "{costs:?}"
    );
    assert!(
        close(costs[1].0, second) && close(costs[1].1, first + second),
        "{costs:?}"
    );
    assert!(close(outcome.cost.unwrap(), first + second));
    assert!(outcome.stop.is_completed());

    // No price for the model: no cost at all.
    let provider = ScriptedProvider::new([ScriptedTurn::text("hi").with_usage(used(10, 1, 0))]);
    let agent = Agent::builder(provider)
        .model("other")
        .telemetry(Telemetry::new().prices(prices()))
        .build();
    let (events, outcome) = collect(agent.run("go")).await;
    assert_eq!(outcome.cost, None);
    assert!(!events.iter().any(|e| matches!(e, AgentEvent::Cost { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_reached_budget_ends_the_run_and_answers_its_calls_without_running_them() {
    let timeline = Timeline::default();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .tool_call("c1", "look", json!({"label": "a", "ms": 1}))
            .with_usage(used(1_000, 100, 0)),
        ScriptedTurn::new()
            .tool_call("c2", "look", json!({"label": "b", "ms": 1}))
            .tool_call("c3", "change", json!({"label": "c", "ms": 1}))
            .with_usage(used(1_000, 100, 0)),
        ScriptedTurn::text("never asked for"),
    ]);
    let per_call = (1_000.0 * 2.0 + 100.0 * 8.0) / 1e6;
    let agent = Agent::builder(provider)
        .model("m1")
        .telemetry(Telemetry::new().prices(prices()))
        .limits(Limits::new().budget(per_call * 1.5))
        .tool(Sleeper::new("look", true, &timeline))
        .tool(Sleeper::new("change", false, &timeline))
        .policy(ApprovalPolicy::never())
        .build();
    let (events, outcome) = collect(agent.run("go")).await;
    match &outcome.stop {
        RunStop::BudgetReached { spent, limit } => {
            assert!((*spent - per_call * 2.0).abs() < 1e-12, "{spent}");
            assert!((*limit - per_call * 1.5).abs() < 1e-12, "{limit}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(outcome.turns, 2, "no model call after the budget");
    // The first turn's call ran; the second turn's were answered unrun.
    assert_eq!(timeline.labels(), vec!["a".to_owned()]);
    assert_paired(&outcome);
    for call in ["c2", "c3"] {
        let (text, is_error) = result_text(&outcome, call);
        assert!(is_error && text.contains("cost budget"), "{call}: {text}");
    }
    let finished = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::ToolCallFinished { .. }))
        .count();
    assert_eq!(finished, 3, "every call gets its events");
    assert!(outcome.stop.to_string().contains("budget"));
}
