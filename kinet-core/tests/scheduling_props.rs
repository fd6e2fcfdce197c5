//! Property test of the scheduler: for any mix of parallel, keyed and
//! exclusive calls in one turn, exclusive calls overlap nothing, calls
//! sharing a key run one at a time in call order, nothing waits longer than
//! its phase requires, and results come back paired in call order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kinet_core::builder::Calls;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::tool::Scheduling;
use kinet_core::{Agent, Message, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput};
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

#[derive(Deserialize, schemars::JsonSchema)]
struct ProbeArgs {
    /// `parallel`, `exclusive`, or a key.
    kind: String,
    ms: u64,
    label: usize,
}

type Spans = Arc<Mutex<Vec<(usize, Instant, Instant)>>>;

/// Sleeps and records when it ran; schedules itself as its arguments say.
struct Probe(Spans);

#[async_trait::async_trait]
impl Tool for Probe {
    type Args = ProbeArgs;
    fn name(&self) -> &str {
        "probe"
    }
    fn description(&self) -> &str {
        "Sleeps."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::local_write()
    }
    fn mutating(&self, _: &ProbeArgs) -> bool {
        false
    }
    fn scheduling(&self, args: &ProbeArgs) -> Scheduling {
        match args.kind.as_str() {
            "parallel" => Scheduling::Parallel,
            "exclusive" => Scheduling::Exclusive,
            key => Scheduling::keyed(key.to_owned()),
        }
    }
    async fn call(&self, args: ProbeArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let start = Instant::now();
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        self.0
            .lock()
            .unwrap()
            .push((args.label, start, Instant::now()));
        Ok(ToolOutput::text(args.label.to_string()))
    }
}

fn kind() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("parallel"), Just("exclusive"), Just("a"), Just("b")]
}

/// Runs one turn of `calls` (kind, milliseconds) on a paused clock: when
/// it started, how it ended, and when each call ran.
fn run_turn(
    calls: &[(&'static str, u64)],
    one_at_a_time: bool,
) -> (
    Instant,
    kinet_core::RunOutcome,
    Vec<(usize, Instant, Instant)>,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let spans: Spans = Arc::default();
    let turn = calls
        .iter()
        .enumerate()
        .fold(ScriptedTurn::new(), |turn, (i, (kind, ms))| {
            turn.tool_call(
                format!("c{i}"),
                "probe",
                json!({"kind": kind, "ms": ms, "label": i}),
            )
        });
    let mut builder = Agent::builder(ScriptedProvider::new([turn, ScriptedTurn::text("done")]))
        .tool(Probe(Arc::clone(&spans)));
    if one_at_a_time {
        builder = builder.calls(Calls::new().one_at_a_time());
    }
    let agent = builder.build();
    let (t0, outcome) = runtime.block_on(async {
        let t0 = Instant::now();
        (t0, agent.run_to_completion("go").await)
    });
    let spans = spans.lock().unwrap().clone();
    (t0, outcome, spans)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn the_scheduler_keeps_its_promises(calls in prop::collection::vec((kind(), 1u64..40), 1..9)) {
        let (t0, outcome, spans) = run_turn(&calls, false);
        prop_assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
        common::assert_paired(&outcome);
        // Results in call order.
        let results: Vec<String> = outcome.conversation.messages.iter().filter_map(|m| match m {
            Message::Tool { .. } => Some(m.text()),
            _ => None,
        }).collect();
        let expected: Vec<String> = (0..calls.len()).map(|i| i.to_string()).collect();
        prop_assert_eq!(results, expected);

        let span = |i: usize| spans.iter().find(|s| s.0 == i).map(|s| (s.1, s.2)).unwrap();
        for j in 0..calls.len() {
            let (start_j, _) = span(j);
            for i in 0..j {
                let (_, end_i) = span(i);
                let exclusive = calls[i].0 == "exclusive" || calls[j].0 == "exclusive";
                let same_key = calls[i].0 == calls[j].0 && calls[i].0 != "parallel" && !exclusive;
                if exclusive || same_key {
                    prop_assert!(end_i <= start_j, "call {} overlapped call {}: {:?}", i, j, calls);
                }
            }
            // A parallel call starts with its phase: when the last
            // exclusive call before it ended (or at once).
            if calls[j].0 == "parallel" {
                let phase_start = (0..j).rev().find(|&i| calls[i].0 == "exclusive")
                    .map_or(t0, |i| span(i).1);
                prop_assert_eq!(start_j, phase_start, "call {} waited: {:?}", j, calls);
            }
        }
    }

    #[test]
    fn one_call_at_a_time_runs_in_the_models_order(calls in prop::collection::vec((kind(), 1u64..40), 1..9)) {
        let (_, outcome, spans) = run_turn(&calls, true);
        prop_assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
        common::assert_paired(&outcome);
        let order: Vec<usize> = spans.iter().map(|s| s.0).collect();
        prop_assert_eq!(order, (0..calls.len()).collect::<Vec<_>>());
        for pair in spans.windows(2) {
            prop_assert!(pair[0].2 <= pair[1].1, "calls overlapped: {:?}", calls);
        }
    }
}
