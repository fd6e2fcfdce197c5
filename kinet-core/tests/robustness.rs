//! Misbehaving tools, hooks, handlers and streams: the run still ends
//! cleanly with a paired history.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kinet_core::builder::{Calls, Limits};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use kinet_core::confirm::{ConfirmError, ConfirmRequest};
use kinet_core::hook::Hook;
use kinet_core::hook::HookError;
use kinet_core::message::ToolCall;
use kinet_core::provider::{ChatRequest, StopReason};
use kinet_core::testing::{Expectation, ScriptedProvider, ScriptedTurn};
use kinet_core::tool::{CancellationToken, ToolErrorKind};
use kinet_core::{
    Agent, AgentEvent, ApprovalPolicy, ConfirmDecision, ConfirmHandler, RunStop, Tool, ToolCtx,
    ToolError, ToolOutput,
};
use serde_json::json;

struct PanickyHook;

#[async_trait::async_trait]
impl Hook for PanickyHook {
    async fn after_tool_call(&self, _: &ToolCall, _: &mut Result<ToolOutput, ToolError>) {
        panic!("hook bug");
    }
}

struct PanickyBeforeHook;

#[async_trait::async_trait]
impl Hook for PanickyBeforeHook {
    async fn before_model_call(&self, _: &mut ChatRequest<'_>) -> Result<(), HookError> {
        panic!("before hook bug")
    }
}

struct PanickyHandler;

#[async_trait::async_trait]
impl ConfirmHandler for PanickyHandler {
    async fn confirm(&self, _: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        panic!("dialog bug")
    }
}

#[tokio::test]
async fn panicking_hooks_and_handlers_do_not_lose_the_conversation() {
    let timeline = Timeline::default();
    let change = Sleeper::new("change", false, &timeline);
    let calls = Arc::clone(&change.calls);
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .tool_call("r", "look", json!({"label": "r", "ms": 0}))
            .tool_call("w", "change", json!({"label": "w", "ms": 0})),
        ScriptedTurn::text("ok").expect(Expectation::ToolResultContains {
            call_id: "w".into(),
            text: "the confirmation handler panicked: dialog bug".into(),
        }),
    ]);
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("look", true, &timeline))
        .tool(change)
        .calls(Calls::new().hook(PanickyHook))
        .confirm_handler(PanickyHandler)
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_paired(&outcome);
    assert_eq!(result_text(&outcome, "r").0, "r done");
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    let agent = Agent::builder(ScriptedProvider::new([ScriptedTurn::text("never")]))
        .calls(Calls::new().hook(PanickyBeforeHook))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(
        matches!(&outcome.stop, RunStop::Failed(e) if e.to_string().contains("before hook bug")),
        "{:?}",
        outcome.stop
    );
    assert_eq!(
        outcome.conversation.messages.len(),
        1,
        "the user message is kept"
    );
}

/// Fails fatally after a short wait.
struct SlowDoom;

#[async_trait::async_trait]
impl Tool for SlowDoom {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "slow_doom"
    }
    fn description(&self) -> &str {
        "Fails fatally after 20 ms."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Err(ToolError::fatal("license server gone"))
    }
}

/// Waits for its own token and reports whether it saw it.
struct Watcher {
    saw_cancel: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl Tool for Watcher {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "watcher"
    }
    fn description(&self) -> &str {
        "Waits until cancelled."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        ctx.cancellation().cancelled().await;
        self.saw_cancel.store(true, Ordering::SeqCst);
        Err(ToolError::new(ToolErrorKind::Cancelled, "watcher stopped"))
    }
}

#[tokio::test]
async fn a_fatal_error_stops_running_siblings() {
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let provider = ScriptedProvider::new([ScriptedTurn::new()
        .tool_call("doom", "slow_doom", json!({}))
        .tool_call("watch", "watcher", json!({}))]);
    let agent = Agent::builder(provider)
        .tool(SlowDoom)
        .tool(Watcher {
            saw_cancel: Arc::clone(&saw_cancel),
        })
        .build();
    let outcome = tokio::time::timeout(Duration::from_secs(5), agent.run_to_completion("go"))
        .await
        .expect("the sibling is stopped");
    assert!(
        matches!(outcome.stop, RunStop::Failed(_)),
        "{:?}",
        outcome.stop
    );
    assert!(saw_cancel.load(Ordering::SeqCst));
    assert_paired(&outcome);
}

#[tokio::test]
async fn a_tool_timeout_cancels_the_tools_own_token() {
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("w", "watcher", json!({})),
        ScriptedTurn::text("ok"),
    ]);
    let agent = Agent::builder(provider)
        .tool(Watcher {
            saw_cancel: Arc::clone(&saw_cancel),
        })
        .limits(Limits::new().tool_timeout(Duration::from_millis(50)))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed());
    assert!(saw_cancel.load(Ordering::SeqCst), "the tool could clean up");
    assert!(
        result_text(&outcome, "w")
            .0
            .contains("did not finish within 0.1 s")
    );
}

/// Leaks its context into a task that outlives the call.
struct Leaky;

#[async_trait::async_trait]
impl Tool for Leaky {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "leaky"
    }
    fn description(&self) -> &str {
        "Keeps reporting progress forever."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            loop {
                ctx.progress("still here");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        Ok(ToolOutput::text("started"))
    }
}

#[tokio::test]
async fn a_leaked_event_sender_does_not_keep_the_run_open() {
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("l", "leaky", json!({})),
        ScriptedTurn::text("done"),
    ]);
    let agent = Agent::builder(provider).tool(Leaky).build();
    let (events, outcome) = tokio::time::timeout(Duration::from_secs(5), collect(agent.run("go")))
        .await
        .expect("the stream ends after Done");
    assert!(matches!(events.last(), Some(AgentEvent::Done { .. })));
    assert!(outcome.stop.is_completed());
    let outcome = tokio::time::timeout(Duration::from_secs(5), agent.run_to_completion("go")).await;
    // The script is used up: this run fails, but it ends.
    assert!(outcome.is_ok());
}

#[tokio::test]
async fn dropping_a_run_leaves_the_callers_token_alone() {
    let parent = CancellationToken::new();
    let agent = Agent::builder(ScriptedProvider::new([ScriptedTurn::text("hi")])).build();
    let mut run = agent.run_with_cancellation("go", parent.clone());
    while run.next().await.is_some() {}
    drop(run);
    assert!(!parent.is_cancelled());

    // Cancelling the caller's token still stops the run.
    let agent = Agent::builder(ScriptedProvider::new([
        ScriptedTurn::text("slow").with_delay(Duration::from_secs(60))
    ]))
    .build();
    let run = agent.run_with_cancellation("go", parent.clone());
    parent.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), run.finish())
        .await
        .unwrap();
    assert!(matches!(outcome.stop, RunStop::Cancelled));
}

#[tokio::test]
async fn calls_without_ids_get_unique_ones() {
    let timeline = Timeline::default();
    // Two calls with different ids at the same index, and two without ids.
    let turn = ScriptedTurn::new()
        .tool_call("a", "look", json!({"label": "a", "ms": 0}))
        .tool_call("", "look", json!({"label": "x", "ms": 0}))
        .tool_call("", "look", json!({"label": "y", "ms": 0}));
    let provider = Arc::new(kinet_core::testing::ScriptedProvider::new([
        turn,
        ScriptedTurn::text("ok"),
    ]));
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("look", true, &timeline))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert_paired(&outcome);
    let ids: Vec<String> = outcome.conversation.messages[1]
        .tool_calls()
        .iter()
        .map(|c| c.id.clone())
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], "a");
    assert_ne!(ids[1], ids[2]);
    assert!(ids[1].starts_with("call_"));
}

#[tokio::test]
async fn duplicate_ids_are_made_unique_and_stay_paired() {
    let timeline = Timeline::default();
    // Two calls sharing an id in one turn, and the same id again next turn.
    let provider = Arc::new(kinet_core::testing::ScriptedProvider::new([
        ScriptedTurn::new()
            .tool_call("dup", "look", json!({"label": "a", "ms": 0}))
            .tool_call("dup", "look", json!({"label": "b", "ms": 0})),
        ScriptedTurn::new().tool_call("dup", "look", json!({"label": "c", "ms": 0})),
        ScriptedTurn::text("ok"),
    ]));
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("look", true, &timeline))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert_paired(&outcome);
    let ids: Vec<String> = outcome
        .conversation
        .messages
        .iter()
        .flat_map(|m| {
            m.tool_calls()
                .iter()
                .map(|c| c.id.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(ids[0], "dup");
    let unique: std::collections::BTreeSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), 3, "{ids:?}");
}

#[tokio::test]
async fn an_empty_turn_adds_no_message_and_the_stop_reason_is_reported() {
    let provider = ScriptedProvider::new([ScriptedTurn::new()
        .with_reasoning("thinking a lot")
        .with_stop(StopReason::MaxTokens)]);
    let agent = Agent::builder(provider).build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed());
    assert_eq!(outcome.model_stop, Some(StopReason::MaxTokens));
    assert_eq!(outcome.conversation.messages.len(), 1);
}

/// Fails with a huge message.
struct Loud;

#[async_trait::async_trait]
impl Tool for Loud {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "loud"
    }
    fn description(&self) -> &str {
        "Fails verbosely."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Err(ToolError::failed(big_text(50_000)))
    }
}

#[tokio::test]
async fn long_error_messages_are_truncated_for_the_model() {
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("l", "loud", json!({})),
        ScriptedTurn::text("ok"),
    ]);
    let agent = Agent::builder(provider).tool(Loud).build();
    let (events, outcome) = collect(agent.run("go")).await;
    let (text, is_error) = result_text(&outcome, "l");
    assert!(is_error);
    assert!(
        text.contains("44000 characters omitted"),
        "{}",
        &text[..100]
    );
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::ToolCallFinished { result: Err(e), truncated_for_model: true, .. } if e.message().len() == 50_000)));
}

#[tokio::test]
async fn invalid_tool_names_are_left_out_with_a_warning() {
    struct Spaced;
    #[async_trait::async_trait]
    impl Tool for Spaced {
        type Args = NoArgs;
        fn name(&self) -> &str {
            "read file"
        }
        fn description(&self) -> &str {
            "Bad name."
        }
        async fn call(&self, _: NoArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text("x"))
        }
    }
    let provider = ScriptedProvider::new([
        ScriptedTurn::text("hi").expect(Expectation::LacksTool("read file".into()))
    ]);
    let agent = Agent::builder(provider)
        .tool(Spaced)
        .policy(ApprovalPolicy::never())
        .build();
    let (events, outcome) = collect(agent.run("go")).await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::Warning { message } if message.contains("`read file` was left out"))));
}

/// Streams fixed events, as a compatible server that puts every call at
/// index 0 would.
struct SameIndexProvider {
    turns: std::sync::Mutex<Vec<Vec<kinet_core::provider::StreamEvent>>>,
}

#[async_trait::async_trait]
impl kinet_core::Provider for SameIndexProvider {
    fn name(&self) -> &str {
        "same-index"
    }
    async fn stream(
        &self,
        _request: ChatRequest<'_>,
    ) -> Result<kinet_core::provider::ProviderStream, kinet_core::provider::ProviderError> {
        let events = self.turns.lock().unwrap().remove(0);
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }
}

#[tokio::test]
async fn a_new_id_at_a_used_index_starts_a_new_call() {
    use kinet_core::provider::StreamEvent::*;
    let timeline = Timeline::default();
    let start = |id: &str| ToolCallStart {
        index: 0,
        id: id.into(),
        name: "look".into(),
    };
    let args = |label: &str| ToolCallArgumentsDelta {
        index: 0,
        delta: json!({"label": label, "ms": 0}).to_string(),
    };
    let provider = SameIndexProvider {
        turns: std::sync::Mutex::new(vec![
            vec![
                start("one"),
                args("1"),
                start("two"),
                args("2"),
                Finished(StopReason::ToolUse),
            ],
            vec![TextDelta("ok".into()), Finished(StopReason::EndTurn)],
        ]),
    };
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("look", true, &timeline))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_paired(&outcome);
    assert_eq!(result_text(&outcome, "one").0, "1 done");
    assert_eq!(result_text(&outcome, "two").0, "2 done");
}
