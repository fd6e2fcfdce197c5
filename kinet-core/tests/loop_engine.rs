//! The loop: batch scheduling, errors, truncation, hooks, sources, sub-agents.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kinet_core::Toolset;
use kinet_core::builder::{Calls, Limits, Sessions};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use kinet_core::hook::Hook;
use kinet_core::hook::HookError;
use kinet_core::message::ToolCall;
use kinet_core::provider::ChatRequest;
use kinet_core::testing::{Expectation, ScriptedProvider, ScriptedTurn};
use kinet_core::tool::{DynTool, ToolErrorKind, ToolSource, TruncationPolicy};
use kinet_core::{
    Agent, AgentEvent, ApprovalPolicy, Conversation, Message, RunStop, Tool, ToolCtx, ToolError,
    ToolOutput,
};
use serde_json::json;

fn sleep_call(id: &str, tool: &str, label: &str, ms: u64) -> (String, String, serde_json::Value) {
    (id.into(), tool.into(), json!({"label": label, "ms": ms}))
}

fn turn_with(calls: Vec<(String, String, serde_json::Value)>) -> ScriptedTurn {
    calls
        .into_iter()
        .fold(ScriptedTurn::new(), |turn, (id, name, args)| {
            turn.tool_call(id, name, args)
        })
}

#[tokio::test(start_paused = true)]
async fn mixed_batch_runs_in_three_phases_with_results_in_call_order() {
    let timeline = Timeline::default();
    let provider = ScriptedProvider::new([
        turn_with(vec![
            sleep_call("c1", "look", "r1", 100),
            sleep_call("c2", "look", "r2", 50),
            sleep_call("c3", "change", "w", 100),
            sleep_call("c4", "look", "r3", 10),
        ]),
        ScriptedTurn::text("done").expect(Expectation::ToolResultsFor(vec![
            "c1".into(),
            "c2".into(),
            "c3".into(),
            "c4".into(),
        ])),
    ]);
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("look", true, &timeline))
        .tool(Sleeper::new("change", false, &timeline))
        .policy(ApprovalPolicy::never())
        .build();
    let started = tokio::time::Instant::now();
    let (events, outcome) = collect(agent.run("go")).await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_paired(&outcome);

    // Phase 1: r1 and r2 overlap.
    assert!(timeline.at("r2", "start") < timeline.at("r1", "end"));
    assert!(timeline.at("r1", "start") < timeline.at("r2", "end"));
    // Phase 2: the write starts after both reads ended.
    assert!(timeline.at("w", "start") >= timeline.at("r1", "end"));
    assert!(timeline.at("w", "start") >= timeline.at("r2", "end"));
    // Phase 3: the last read starts after the write ended.
    assert!(timeline.at("r3", "start") >= timeline.at("w", "end"));
    // 100 (phase 1) + 100 + 10 ms in all.
    assert_eq!(started.elapsed(), Duration::from_millis(210));

    for (id, label) in [("c1", "r1"), ("c2", "r2"), ("c3", "w"), ("c4", "r3")] {
        assert_eq!(result_text(&outcome, id), (format!("{label} done"), false));
    }
    // The host saw r2 finish before r1 (completion order), the model got call order.
    let finished: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCallFinished { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(finished, ["c2", "c1", "c3", "c4"]);
    assert!(matches!(
        events.last(),
        Some(AgentEvent::Done {
            stop: RunStop::Completed,
            ..
        })
    ));
}

#[tokio::test(start_paused = true)]
async fn five_read_only_calls_overlap_and_five_mutating_ones_do_not() {
    let timeline = Timeline::default();
    let reads = (0..5).map(|i| sleep_call(&format!("r{i}"), "look", &format!("r{i}"), 100));
    let writes = (0..5).map(|i| sleep_call(&format!("w{i}"), "change", &format!("w{i}"), 100));
    let provider = ScriptedProvider::new([
        turn_with(reads.collect()),
        turn_with(writes.collect()),
        ScriptedTurn::text("ok"),
    ]);
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("look", true, &timeline))
        .tool(Sleeper::new("change", false, &timeline))
        .policy(ApprovalPolicy::never())
        .build();
    let mut run = agent.run("go");
    let mut turn_started = Vec::new();
    use futures::StreamExt;
    while let Some(event) = run.next().await {
        if let AgentEvent::TurnStarted { .. } = event {
            turn_started.push(tokio::time::Instant::now());
        }
    }
    let outcome = run.finish().await;
    assert!(outcome.stop.is_completed());
    assert_eq!(
        turn_started[1] - turn_started[0],
        Duration::from_millis(100)
    );
    assert_eq!(
        turn_started[2] - turn_started[1],
        Duration::from_millis(500)
    );
    for i in 0..4 {
        assert!(
            timeline.at(&format!("w{}", i + 1), "start") >= timeline.at(&format!("w{i}"), "end")
        );
    }
}

#[tokio::test]
async fn malformed_arguments_and_unknown_tools_become_error_results() {
    let timeline = Timeline::default();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .raw_tool_call("bad", "look", "{\"label\": \"x\", \"ms\": ")
            .tool_call("wrong", "look", json!({"label": 7}))
            .tool_call("ghost", "teleport", json!({})),
        ScriptedTurn::text("sorry")
            .expect(Expectation::ToolResultContains {
                call_id: "bad".into(),
                text: "invalid arguments for tool `look`".into(),
            })
            .expect(Expectation::ToolResultContains {
                call_id: "ghost".into(),
                text: "there is no tool named `teleport`. Available tools: look".into(),
            }),
    ]);
    let sleeper = Sleeper::new("look", true, &timeline);
    let calls = Arc::clone(&sleeper.calls);
    let agent = Agent::builder(provider).tool(sleeper).build();
    let (events, outcome) = collect(agent.run("go")).await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_paired(&outcome);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let (text, is_error) = result_text(&outcome, "wrong");
    assert!(is_error);
    assert!(text.contains("invalid type"), "{text}");
    let kinds: Vec<ToolErrorKind> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCallFinished { result: Err(e), .. } => Some(e.kind()),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ToolErrorKind::InvalidArguments,
            ToolErrorKind::InvalidArguments,
            ToolErrorKind::UnknownTool
        ]
    );
}

#[tokio::test]
async fn a_panicking_tool_is_reported_and_the_run_goes_on() {
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("p", "panicker", json!({})),
        ScriptedTurn::text("recovered").expect(Expectation::ToolResultContains {
            call_id: "p".into(),
            text: "tool `panicker` panicked: the disk is on fire".into(),
        }),
    ]);
    let agent = Agent::builder(provider).tool(Panicker).build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(outcome.final_text().as_deref(), Some("recovered"));
}

#[tokio::test]
async fn a_fatal_tool_error_ends_the_run_with_a_paired_history() {
    let timeline = Timeline::default();
    let provider = ScriptedProvider::new([ScriptedTurn::new()
        .tool_call("f", "doomed", json!({}))
        .tool_call("w", "change", json!({"label": "w", "ms": 1}))]);
    let sleeper = Sleeper::new("change", false, &timeline);
    let calls = Arc::clone(&sleeper.calls);
    let agent = Agent::builder(provider)
        .tool(Doomed)
        .tool(sleeper)
        .policy(ApprovalPolicy::never())
        .build();
    let outcome = agent.run_to_completion("go").await;
    match &outcome.stop {
        RunStop::Failed(error) => assert!(error.to_string().contains("credentials were revoked")),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_paired(&outcome);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "calls after a fatal error do not run"
    );
    assert!(result_text(&outcome, "w").0.contains("not run"));
}

#[tokio::test]
async fn max_turns_stops_with_every_call_answered() {
    let timeline = Timeline::default();
    let turns = (0..5).map(|i| {
        ScriptedTurn::new().tool_call(format!("c{i}"), "look", json!({"label": "x", "ms": 0}))
    });
    let agent = Agent::builder(ScriptedProvider::new(turns))
        .tool(Sleeper::new("look", true, &timeline))
        .limits(Limits::new().max_turns(3))
        .build();
    let outcome = agent.run_to_completion("loop forever").await;
    assert!(
        matches!(outcome.stop, RunStop::MaxTurns),
        "{:?}",
        outcome.stop
    );
    assert_eq!(outcome.turns, 3);
    assert_paired(&outcome);
    // user + 3 x (assistant + tool)
    assert_eq!(outcome.conversation.messages.len(), 7);
}

#[tokio::test]
async fn the_model_sees_a_truncated_copy_and_the_host_the_full_output() {
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .tool_call("big", "big", json!({"chars": 20_000}))
            .tool_call("small", "big", json!({"chars": 100})),
        ScriptedTurn::text("ok"),
    ]);
    let agent = Agent::builder(provider).tool(Big).build();
    let (events, outcome) = collect(agent.run("go")).await;
    let (seen, _) = result_text(&outcome, "big");
    insta::assert_snapshot!("truncated_for_model", seen);
    assert_eq!(seen.chars().count(), 6000 + marker_len(&seen));
    let full = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolCallFinished {
                call_id,
                result: Ok(output),
                truncated_for_model,
                ..
            } if call_id == "big" => Some((output.text.clone(), *truncated_for_model)),
            _ => None,
        })
        .unwrap();
    assert_eq!(full.0, big_text(20_000));
    assert!(full.1);
    assert_eq!(result_text(&outcome, "small").0, big_text(100));
}

fn marker_len(seen: &str) -> usize {
    let start = seen.find("\n\n[...").unwrap();
    let end = seen.find("...]\n\n").unwrap() + "...]\n\n".len();
    seen[start..end].chars().count()
}

#[tokio::test]
async fn per_tool_truncation_override_wins() {
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("big", "big", json!({"chars": 20_000})),
        ScriptedTurn::text("ok"),
    ]);
    let agent = Agent::builder(provider)
        .tool(Big)
        .calls(Calls::new().truncation_for("big", TruncationPolicy::disabled()))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert_eq!(result_text(&outcome, "big").0.len(), 20_000);
}

struct Memory;

#[async_trait::async_trait]
impl Hook for Memory {
    async fn before_model_call(&self, request: &mut ChatRequest<'_>) -> Result<(), HookError> {
        request
            .system
            .to_mut()
            .push_str("\n<memory>user likes tea</memory>");
        Ok(())
    }

    async fn after_tool_call(&self, _call: &ToolCall, result: &mut Result<ToolOutput, ToolError>) {
        if let Ok(output) = result {
            output.text = output.text.replace("done", "[redacted]");
        }
    }
}

struct Refuse;

#[async_trait::async_trait]
impl Hook for Refuse {
    async fn before_model_call(&self, _request: &mut ChatRequest<'_>) -> Result<(), HookError> {
        Err(HookError("memory store is offline".into()))
    }
}

#[tokio::test]
async fn hooks_edit_the_request_and_rewrite_results() {
    let timeline = Timeline::default();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .expect(Expectation::SystemContains(
                "Be kind.\n<memory>user likes tea</memory>".into(),
            ))
            .tool_call("c", "look", json!({"label": "x", "ms": 0})),
        ScriptedTurn::text("ok").expect(Expectation::ToolResultContains {
            call_id: "c".into(),
            text: "x [redacted]".into(),
        }),
    ]);
    let agent = Agent::builder(provider)
        .system_prompt("Be kind.")
        .tool(Sleeper::new("look", true, &timeline))
        .calls(Calls::new().hook(Memory))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);

    let agent = Agent::builder(ScriptedProvider::new([ScriptedTurn::text("never")]))
        .calls(Calls::new().hook(Refuse))
        .build();
    let outcome = agent.run_to_completion("go").await;
    match outcome.stop {
        RunStop::Failed(error) => assert!(error.to_string().contains("memory store is offline")),
        other => panic!("{other:?}"),
    }
}

/// A source whose tools are ready only after `ready_after`.
struct SlowSource {
    ready_at: tokio::time::Instant,
    timeline: Timeline,
}

#[async_trait::async_trait]
impl ToolSource for SlowSource {
    fn name(&self) -> &str {
        "slow"
    }
    async fn tools(&self, _ready_by: tokio::time::Instant) -> Vec<Arc<dyn DynTool>> {
        tokio::time::sleep_until(self.ready_at).await;
        vec![Arc::new(Sleeper::new("remote", true, &self.timeline))]
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_tool_source_joins_a_later_turn() {
    let timeline = Timeline::default();
    let source = SlowSource {
        ready_at: tokio::time::Instant::now() + Duration::from_secs(3),
        timeline: timeline.clone(),
    };
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .expect(Expectation::LacksTool("remote".into()))
            .tool_call("wait", "look", json!({"label": "w", "ms": 2000})),
        ScriptedTurn::new()
            .expect(Expectation::HasTools(vec!["remote".into(), "look".into()]))
            .tool_call("r", "remote", json!({"label": "r", "ms": 0})),
        ScriptedTurn::text("ok"),
    ]);
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("look", true, &timeline))
        .tools(Toolset::new().with_source(Arc::new(source)))
        .build();
    let (events, outcome) = collect(agent.run("go")).await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::Warning { message } if message.contains("`slow` was not ready"))));
    assert_eq!(result_text(&outcome, "r").0, "r done");
}

/// A source that records the context window each turn offers it.
struct WindowSeen(std::sync::Mutex<Vec<Option<u64>>>);

#[async_trait::async_trait]
impl ToolSource for WindowSeen {
    fn name(&self) -> &str {
        "window"
    }
    async fn tools(&self, _ready_by: tokio::time::Instant) -> Vec<Arc<dyn DynTool>> {
        panic!("the engine asks with the window")
    }
    async fn tools_for_window(
        &self,
        _ready_by: tokio::time::Instant,
        window: Option<u64>,
    ) -> Vec<Arc<dyn DynTool>> {
        self.0.lock().unwrap().push(window);
        Vec::new()
    }
}

/// Sources learn the model's window (here configured; also known by name
/// or learned from the provider), so a large tool set can size its offer.
#[tokio::test]
async fn tool_sources_are_told_the_models_window() {
    let seen = Arc::new(WindowSeen(std::sync::Mutex::new(Vec::new())));
    let agent = Agent::builder(ScriptedProvider::new([ScriptedTurn::text("ok")]))
        .tools(Toolset::new().with_source(seen.clone()))
        .sessions(Sessions::new().context(kinet_core::context::ContextPolicy::new().window(50_000)))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(*seen.0.lock().unwrap(), [Some(50_000)]);
}

#[tokio::test]
async fn sub_agents_cannot_mutate_and_their_events_are_tagged() {
    let timeline = Timeline::default();
    let change = Sleeper::new("change", false, &timeline);
    let change_calls = Arc::clone(&change.calls);
    // The parent and the child share the script: parent turn, child turns,
    // parent turn.
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("d", "delegate", json!({"prompt": "edit the file"})),
        ScriptedTurn::new()
            .expect(Expectation::LastUserContains("edit the file".into()))
            .tool_call("x", "change", json!({"label": "child-write", "ms": 0})),
        ScriptedTurn::text("I was not allowed to write.").expect(Expectation::ToolResultContains {
            call_id: "x".into(),
            text: "not allowed".into(),
        }),
        ScriptedTurn::text("The helper could not write.").expect(Expectation::ToolResultContains {
            call_id: "d".into(),
            text: "I was not allowed to write.".into(),
        }),
    ]);
    let agent = Agent::builder(provider)
        .tool(Delegate)
        .tool(change)
        .policy(ApprovalPolicy::never())
        .build();
    let (events, outcome) = collect(agent.run("go")).await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(change_calls.load(Ordering::SeqCst), 0);
    let tagged: Vec<&AgentEvent> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::SubAgent { agent_id, event } => {
                assert!(agent_id.starts_with("sub-"));
                Some(&**event)
            }
            _ => None,
        })
        .collect();
    assert!(tagged.iter().any(|e| matches!(e, AgentEvent::ToolCallFinished { name, result: Err(_), .. } if name == "change")));
    assert!(matches!(
        tagged.last(),
        Some(AgentEvent::Done {
            stop: RunStop::Completed,
            ..
        })
    ));
}

#[tokio::test]
async fn a_conversation_persists_and_resumes() {
    let timeline = Timeline::default();
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedTurn::new().tool_call("c", "look", json!({"label": "a", "ms": 0})),
        ScriptedTurn::text("first answer"),
        ScriptedTurn::text("second answer")
            .expect(Expectation::LastUserContains("and now?".into()))
            .expect(Expectation::MessageCount(5)),
    ]));
    let agent = Agent::builder(provider.clone())
        .tool(Sleeper::new("look", true, &timeline))
        .build();
    let outcome = agent.run_to_completion("hello").await;
    let saved = serde_json::to_string(&outcome.conversation).unwrap();

    let mut resumed: Conversation = serde_json::from_str(&saved).unwrap();
    assert_eq!(resumed.messages, outcome.conversation.messages);
    resumed.push_user("and now?");
    let outcome = agent.run_to_completion(resumed).await;
    assert_eq!(outcome.final_text().as_deref(), Some("second answer"));
    provider.assert_finished().unwrap();
}

#[tokio::test]
async fn a_recorded_transcript_replays_and_catches_drift() {
    let timeline = Timeline::default();
    let recorded = vec![
        Message::user("count"),
        Message::Assistant {
            content: vec![],
            tool_calls: vec![ToolCall {
                id: "c".into(),
                name: "look".into(),
                arguments: json!({"label": "one", "ms": 0}).to_string(),
            }],
            provider_state: None,
        },
        Message::Tool {
            tool_call_id: "c".into(),
            name: "look".into(),
            content: vec![kinet_core::message::ContentPart::text("one done")],
            is_error: false,
        },
        Message::assistant("one"),
    ];
    let agent = Agent::builder(ScriptedProvider::from_transcript(&recorded))
        .tool(Sleeper::new("look", true, &timeline))
        .build();
    let outcome = agent.run_to_completion("count").await;
    assert_eq!(outcome.conversation.messages, recorded);

    // The same transcript with a different first question fails loudly.
    let agent = Agent::builder(ScriptedProvider::from_transcript(&recorded)).build();
    let outcome = agent.run_to_completion("something else").await;
    match outcome.stop {
        RunStop::Failed(error) => {
            assert!(
                error
                    .to_string()
                    .contains("expected the last user message to contain \"count\""),
                "{error}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_script_file_drives_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("script.json");
    std::fs::write(
        &path,
        json!({"turns": [
            {"expect": [{"last_user_contains": "hi"}], "text": "Hello from a file.",
             "usage": {"input_tokens": 10, "output_tokens": 4}}
        ]})
        .to_string(),
    )
    .unwrap();
    let agent = Agent::builder(ScriptedProvider::from_file(&path).unwrap()).build();
    let outcome = agent.run_to_completion("hi").await;
    assert_eq!(outcome.final_text().as_deref(), Some("Hello from a file."));
    assert_eq!(outcome.usage.input_tokens, 10);

    std::fs::write(&path, "{\"turns\": [{\"txt\": 1}]}").unwrap();
    let error = ScriptedProvider::from_file(&path).unwrap_err();
    assert!(error.to_string().contains("unknown field `txt`"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn model_facing_error_texts_are_stable() {
    let timeline = Timeline::default();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .raw_tool_call("bad_json", "look", "{\"label\": ")
            .tool_call("bad_type", "look", json!({"label": "x", "ms": "soon"}))
            .tool_call("unknown", "teleport", json!({}))
            .tool_call("nameless", "", json!({}))
            .tool_call("panic", "panicker", json!({}))
            .tool_call("slow", "look", json!({"label": "s", "ms": 60_000}))
            .tool_call("policy", "change", json!({"label": "p", "ms": 0}))
            .tool_call("empty", "quiet", json!({})),
        ScriptedTurn::text("ok"),
    ]);
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("look", true, &timeline))
        .tool(Sleeper::new("change", false, &timeline))
        .tool(Panicker)
        .tool(Quiet)
        .policy(ApprovalPolicy::deny_all())
        .limits(Limits::new().tool_timeout(Duration::from_secs(5)))
        .build();
    let outcome = agent.run_to_completion("go").await;
    let texts: Vec<String> = [
        "bad_json", "bad_type", "unknown", "nameless", "panic", "slow", "policy", "empty",
    ]
    .iter()
    .map(|id| {
        let (text, is_error) = result_text(&outcome, id);
        format!("{id} (error: {is_error}): {text}")
    })
    .collect();
    insta::assert_snapshot!("model_facing_errors", texts.join("\n"));
}

/// Returns empty output.
struct Quiet;

#[async_trait::async_trait]
impl Tool for Quiet {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "quiet"
    }
    fn description(&self) -> &str {
        "Says nothing."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::default())
    }
}

#[test]
fn tool_schemas_are_stable() {
    let specs: Vec<_> = [
        Arc::new(Sleeper::new("look", true, &Timeline::default())) as Arc<dyn DynTool>,
        Arc::new(Big),
    ]
    .iter()
    .map(|tool| kinet_core::tool::spec_of(&**tool))
    .collect();
    let specs = kinet_core::testing::sorted_keys(serde_json::to_value(&specs).unwrap());
    insta::assert_json_snapshot!("tool_specs", specs);
}
