//! The call pipeline: before-tool hooks, the doom-loop guard, scheduling
//! keys, the shipped layers, and the direct call path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kinet_core::builder::Calls;
use kinet_core::tool::engine::EngineCtx as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{SleepArgs, Sleeper, Timeline, assert_paired, result_text};
use kinet_core::hook::{BeforeTool, DoomLoopGuard, Hook};
use kinet_core::layer::{ConcurrencyLimitLayer, RetryLayer, TimeoutLayer};
use kinet_core::message::ToolCall;
use kinet_core::pipeline::Pipeline;
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::tool::{Scheduling, ToolErrorKind};
use kinet_core::{
    Agent, ApprovalPolicy, RunStop, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput, Toolset,
};
use serde_json::json;

fn sleep(id: &str, tool: &str, label: &str, ms: u64) -> (String, String, serde_json::Value) {
    (id.into(), tool.into(), json!({"label": label, "ms": ms}))
}

fn turn(calls: &[(String, String, serde_json::Value)]) -> ScriptedTurn {
    calls
        .iter()
        .fold(ScriptedTurn::new(), |turn, (id, tool, args)| {
            turn.tool_call(id, tool, args.clone())
        })
}

/// Shares state with its siblings: no approval, one at a time.
struct Keyed(Sleeper);

#[async_trait::async_trait]
impl Tool for Keyed {
    type Args = SleepArgs;
    fn name(&self) -> &str {
        self.0.name
    }
    fn description(&self) -> &str {
        "Writes shared state."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::local_write()
    }
    fn mutating(&self, _: &SleepArgs) -> bool {
        false
    }
    fn scheduling(&self, _: &SleepArgs) -> Scheduling {
        Scheduling::keyed("state")
    }
    async fn call(&self, args: SleepArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Tool::call(&self.0, args, ctx).await
    }
}

#[tokio::test(start_paused = true)]
async fn keyed_calls_run_one_at_a_time_in_call_order_beside_parallel_ones() {
    let timeline = Timeline::default();
    let provider = ScriptedProvider::new([
        turn(&[
            sleep("k1", "keyed", "k1", 100),
            sleep("r1", "reader", "r1", 100),
            sleep("k2", "keyed", "k2", 100),
            sleep("r2", "reader", "r2", 100),
            sleep("k3", "other_keyed", "k3", 100),
        ]),
        ScriptedTurn::text("done"),
    ]);
    let agent = Agent::builder(provider)
        .tool(Keyed(Sleeper::new("keyed", false, &timeline)))
        .tool(Keyed(Sleeper::new("other_keyed", false, &timeline)))
        .tool(Sleeper::new("reader", true, &timeline))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_paired(&outcome);
    // k1 -> k2 -> k3 (one key), in call order, never overlapping.
    assert!(timeline.at("k1", "end") <= timeline.at("k2", "start"));
    assert!(timeline.at("k2", "end") <= timeline.at("k3", "start"));
    // The readers ran beside the first keyed call.
    let t0 = timeline.at("k1", "start");
    assert_eq!(timeline.at("r1", "start"), t0);
    assert_eq!(timeline.at("r2", "start"), t0);
    // No approval was asked (the default handler would have denied).
    assert!(!result_text(&outcome, "k2").1);
}

#[tokio::test(start_paused = true)]
async fn a_key_is_held_across_runs_sharing_the_pipeline() {
    let timeline = Timeline::default();
    let make = |id: &'static str| {
        ScriptedProvider::new([
            turn(&[sleep(id, "keyed", id, 100)]),
            ScriptedTurn::text("done"),
        ])
    };
    let first = Agent::builder(make("a"))
        .tool(Keyed(Sleeper::new("keyed", false, &timeline)))
        .build();
    // The same pipeline (its key locks) with another provider.
    let second = Agent::builder(make("b"))
        .tool(Keyed(Sleeper::new("keyed", false, &timeline)))
        .build();
    let pipeline = first.pipeline().clone();
    let tools = second.tools().snapshot().await;
    let call = ToolCall {
        id: "b".into(),
        name: "keyed".into(),
        arguments: json!({"label": "b", "ms": 100}).to_string(),
    };
    let base = second.tool_context(Default::default());
    let (outcome, record) = tokio::join!(
        first.run_to_completion("go"),
        pipeline.call(&tools, call, &base)
    );
    assert!(outcome.stop.is_completed());
    assert!(record.result.is_ok());
    let (a, b) = (
        (timeline.at("a", "start"), timeline.at("a", "end")),
        (timeline.at("b", "start"), timeline.at("b", "end")),
    );
    assert!(a.1 <= b.0 || b.1 <= a.0, "the two calls overlapped");
}

/// Denies `forbidden`, rewrites `sleep` to take 1 ms, ends the run at `halt`.
struct HouseRules;

#[async_trait::async_trait]
impl Hook for HouseRules {
    async fn before_tool_call(&self, call: &ToolCall) -> BeforeTool {
        let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
        match args["label"].as_str() {
            Some("forbidden") => BeforeTool::Deny("labels like that are not allowed".into()),
            Some("halt") => BeforeTool::EndRun("the house closes".into()),
            Some("long") => BeforeTool::ReplaceArguments(json!({"label": "short", "ms": 1})),
            _ => BeforeTool::Continue,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn before_tool_hooks_deny_rewrite_and_end_the_run() {
    let timeline = Timeline::default();
    let provider = ScriptedProvider::new([
        turn(&[
            sleep("c1", "sleep", "forbidden", 10),
            sleep("c2", "sleep", "long", 60_000),
            sleep("c3", "sleep", "fine", 10),
        ]),
        turn(&[
            sleep("c4", "sleep", "halt", 10),
            sleep("c5", "sleep", "after", 10),
        ]),
        ScriptedTurn::text("never reached"),
    ]);
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("sleep", true, &timeline))
        .calls(Calls::new().hook(HouseRules))
        .build();
    let started = tokio::time::Instant::now();
    let outcome = agent.run_to_completion("go").await;
    assert_paired(&outcome);
    let (denied, is_error) = result_text(&outcome, "c1");
    assert!(is_error && denied.contains("not allowed"), "{denied}");
    assert_eq!(result_text(&outcome, "c2"), ("short done".into(), false));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the rewrite was not used"
    );
    assert_eq!(result_text(&outcome, "c3").0, "fine done");
    match &outcome.stop {
        RunStop::Halted { reason } => assert_eq!(reason, "the house closes"),
        other => panic!("expected a halt, got {other:?}"),
    }
    assert!(result_text(&outcome, "c4").1);
    assert!(
        result_text(&outcome, "c5")
            .0
            .contains("a hook ended the run")
    );
    assert_eq!(timeline.labels(), ["short", "fine"]);
}

#[tokio::test(start_paused = true)]
async fn the_doom_loop_guard_answers_the_third_identical_call() {
    let timeline = Timeline::default();
    let same = || turn(&[sleep("x", "sleep", "same", 1)]);
    let provider = ScriptedProvider::new([
        same(),
        same(),
        same(),
        // Spacing and key order do not make a call different.
        ScriptedTurn::new().raw_tool_call("y", "sleep", r#"{ "ms": 1,   "label": "same" }"#),
        turn(&[sleep("z", "sleep", "other", 1)]),
        ScriptedTurn::text("done"),
    ]);
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("sleep", true, &timeline))
        .calls(Calls::new().hook(DoomLoopGuard::new()))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    // Two runs, then the guard twice, then a different call runs.
    assert_eq!(timeline.labels(), ["same", "same", "other"]);
    let results: Vec<_> = outcome
        .conversation
        .messages
        .iter()
        .filter_map(|m| match m {
            kinet_core::Message::Tool {
                content, is_error, ..
            } => Some((content[0].as_text().unwrap().to_owned(), *is_error)),
            _ => None,
        })
        .collect();
    assert!(!results[1].1);
    assert!(
        results[2].1 && results[2].0.contains("call 3 in a row"),
        "{results:?}"
    );
    assert!(results[3].1 && results[3].0.contains("call 4 in a row"));
    assert_eq!(results[4], ("other done".into(), false));
}

#[tokio::test(start_paused = true)]
async fn the_timeout_layer_sets_the_deadline_and_stops_the_call() {
    let timeline = Timeline::default();
    let provider = ScriptedProvider::new([
        turn(&[sleep("c1", "sleep", "slow", 60_000)]),
        ScriptedTurn::text("done"),
    ]);
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("sleep", true, &timeline))
        .calls(Calls::new().layer(TimeoutLayer::new(Duration::from_secs(2))))
        .build();
    let started = tokio::time::Instant::now();
    let outcome = agent.run_to_completion("go").await;
    let (text, is_error) = result_text(&outcome, "c1");
    assert!(
        is_error && text.contains("did not finish within 2.0 s"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// Counts how many calls run at once.
struct Gauge {
    now: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Tool for Gauge {
    type Args = SleepArgs;
    fn name(&self) -> &str {
        "gauge"
    }
    fn description(&self) -> &str {
        "Measures concurrency."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, args: SleepArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        Ok(ToolOutput::text(args.label))
    }
}

#[tokio::test(start_paused = true)]
async fn the_concurrency_limit_caps_calls_in_flight() {
    let peak = Arc::new(AtomicUsize::new(0));
    let calls: Vec<_> = (0..6)
        .map(|i| sleep(&format!("c{i}"), "gauge", &format!("g{i}"), 100))
        .collect();
    let provider = ScriptedProvider::new([turn(&calls), ScriptedTurn::text("done")]);
    let agent = Agent::builder(provider)
        .tools(
            Toolset::new()
                .with(Gauge {
                    now: Arc::default(),
                    peak: Arc::clone(&peak),
                })
                .layer(ConcurrencyLimitLayer::new(2)),
        )
        .build();
    let started = tokio::time::Instant::now();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed());
    assert_eq!(peak.load(Ordering::SeqCst), 2);
    assert_eq!(started.elapsed(), Duration::from_millis(300));
}

/// Fails as unavailable twice, then works; says whether it is idempotent.
struct Flaky {
    idempotent: bool,
    calls: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Tool for Flaky {
    type Args = common::NoArgs;
    fn name(&self) -> &str {
        "flaky"
    }
    fn description(&self) -> &str {
        "Fails twice."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::default().idempotent(self.idempotent)
    }
    async fn call(&self, _: common::NoArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) < 2 {
            Err(ToolError::unavailable("the upstream is busy"))
        } else {
            Ok(ToolOutput::text("worked"))
        }
    }
}

#[tokio::test(start_paused = true)]
async fn retries_only_idempotent_tools_after_transient_failures() {
    for idempotent in [true, false] {
        let calls = Arc::new(AtomicUsize::new(0));
        let tools = Toolset::new().with(Flaky {
            idempotent,
            calls: Arc::clone(&calls),
        });
        let pipeline = Pipeline::new()
            .with_policy(ApprovalPolicy::never())
            .with_layer(Arc::new(RetryLayer::new(3)));
        let call = ToolCall {
            id: "c1".into(),
            name: "flaky".into(),
            arguments: "{}".into(),
        };
        let record = pipeline
            .call(tools.static_tools(), call, &ToolCtx::new("/"))
            .await;
        if idempotent {
            assert_eq!(record.result.unwrap().text, "worked");
            assert_eq!(calls.load(Ordering::SeqCst), 3);
        } else {
            assert_eq!(
                record.result.unwrap_err().kind(),
                ToolErrorKind::Unavailable
            );
            assert_eq!(calls.load(Ordering::SeqCst), 1);
        }
    }
}

#[tokio::test]
async fn a_direct_call_is_confirmed_truncated_and_reported() {
    let asked = common::QueueConfirm::new([kinet_core::ConfirmDecision::Allow]);
    let events = Arc::new(Mutex::new(Vec::new()));
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let base = ToolCtx::new("/")
        .with_confirm_handler(asked.clone(), Duration::from_secs(5))
        .with_events(kinet_core::tool::engine::EventSink::new(sender));
    let timeline = Timeline::default();
    let tools = Toolset::new()
        .with(common::Big)
        .with(Sleeper::new("sleep", false, &timeline));
    let pipeline = Pipeline::new();
    let call = |id: &str, name: &str, arguments: serde_json::Value| ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.to_string(),
    };
    let slept = pipeline
        .call(
            tools.static_tools(),
            call("c0", "sleep", json!({"label": "s", "ms": 1})),
            &base,
        )
        .await;
    assert_eq!(slept.result.unwrap().text, "s done");
    let record = pipeline
        .call(
            tools.static_tools(),
            call("c1", "big", json!({"chars": 20_000})),
            &base,
        )
        .await;
    while let Ok(event) = receiver.try_recv() {
        events
            .lock()
            .unwrap()
            .push(format!("{event:?}").chars().take(30).collect::<String>());
    }
    assert_eq!(asked.asked().len(), 1, "the mutating call was confirmed");
    assert_eq!(record.result.unwrap().text.chars().count(), 20_000);
    assert!(record.truncated_for_model);
    assert!(record.message.text().contains("characters omitted"));
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 4, "{events:?}");
    assert!(events[2].starts_with("ToolCallStarted"), "{events:?}");
    assert!(events[3].starts_with("ToolCallFinished"), "{events:?}");
}

/// Notes where it runs: `<name>:<call id>` before a call runs (gate half)
/// and `<name>:after:<call id>` after it ran (execution half).
struct Noting(&'static str, Arc<Mutex<Vec<String>>>);

#[async_trait::async_trait]
impl Hook for Noting {
    async fn before_tool_call(&self, call: &ToolCall) -> BeforeTool {
        self.1
            .lock()
            .unwrap()
            .push(format!("{}:{}", self.0, call.id));
        BeforeTool::Continue
    }
    async fn after_tool_call(&self, call: &ToolCall, _result: &mut Result<ToolOutput, ToolError>) {
        self.1
            .lock()
            .unwrap()
            .push(format!("{}:after:{}", self.0, call.id));
    }
}

/// Notes when the host is asked about a call.
struct NotingConfirm(Arc<Mutex<Vec<String>>>);

#[async_trait::async_trait]
impl kinet_core::confirm::ConfirmHandler for NotingConfirm {
    async fn confirm(
        &self,
        request: kinet_core::confirm::ConfirmRequest,
    ) -> Result<kinet_core::ConfirmDecision, kinet_core::confirm::ConfirmError> {
        self.0
            .lock()
            .unwrap()
            .push(format!("confirm:{}", request.call_id));
        Ok(kinet_core::ConfirmDecision::Allow)
    }
}

#[tokio::test]
async fn a_host_stage_runs_at_its_place_for_a_single_call_and_a_batch() {
    use kinet_core::pipeline::{Half, Place, StageName};
    let log = Arc::new(Mutex::new(Vec::new()));
    let timeline = Timeline::default();
    let pipeline = Pipeline::new()
        .with_hook(Arc::new(Noting("hook", log.clone())))
        .with_stage(
            Place::Before(StageName::Confirm),
            "audit",
            Arc::new(Noting("audit", log.clone())),
        )
        .with_stage(
            Place::Before(StageName::AfterTool),
            "scan",
            Arc::new(Noting("scan", log.clone())),
        );
    let stages: Vec<(String, Half)> = pipeline
        .stages()
        .into_iter()
        .map(|stage| (stage.name, stage.half))
        .collect();
    let names: Vec<&str> = stages.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "parse",
            "policy",
            "defence",
            "audit",
            "confirm",
            "before-tool hooks",
            "layers",
            "panic guard",
            "scan",
            "after-tool hooks",
            "truncation",
            "provenance",
            "record"
        ]
    );
    assert_eq!(stages[3].1, Half::Gate);
    assert_eq!(stages[8].1, Half::Execution);
    let expected = |id: &str| {
        [
            format!("audit:{id}"),
            format!("confirm:{id}"),
            format!("hook:{id}"),
            format!("scan:after:{id}"),
            format!("hook:after:{id}"),
        ]
    };

    // A single call.
    let base = ToolCtx::new("/")
        .with_confirm_handler(Arc::new(NotingConfirm(log.clone())), Duration::from_secs(5));
    let tools = Toolset::new().with(Sleeper::new("sleep", false, &timeline));
    let record = pipeline
        .call(
            tools.static_tools(),
            ToolCall {
                id: "one".into(),
                name: "sleep".into(),
                arguments: json!({"label": "s", "ms": 1}).to_string(),
            },
            &base,
        )
        .await;
    assert_eq!(record.result.unwrap().text, "s done");
    assert_eq!(*log.lock().unwrap(), expected("one"));
    log.lock().unwrap().clear();

    // A batch: the agent's turn of two mutating calls, one at a time.
    let provider = ScriptedProvider::new([
        turn(&[sleep("b1", "sleep", "b1", 1), sleep("b2", "sleep", "b2", 1)]),
        ScriptedTurn::text("done"),
    ]);
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("sleep", false, &timeline))
        .calls(
            Calls::new()
                .hook(Noting("hook", log.clone()))
                .stage(
                    Place::Before(StageName::Confirm),
                    "audit",
                    Noting("audit", log.clone()),
                )
                .stage(
                    Place::Before(StageName::AfterTool),
                    "scan",
                    Noting("scan", log.clone()),
                ),
        )
        .confirm_handler(NotingConfirm(log.clone()))
        .build();
    assert_eq!(agent.pipeline().stages(), pipeline.stages());
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let log = log.lock().unwrap();
    assert_eq!(log[..5], expected("b1"), "{log:?}");
    assert_eq!(log[5..], expected("b2"), "{log:?}");
}
