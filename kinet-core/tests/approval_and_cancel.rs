//! Approval through the ConfirmHandler, and cancellation at every stage.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kinet_core::builder::{Limits, Workspace};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use kinet_core::confirm::{ChannelConfirmHandler, ConfirmError, ConfirmRequest};
use kinet_core::testing::{Expectation, ScriptedProvider, ScriptedTurn};
use kinet_core::tool::ToolErrorKind;
use kinet_core::{
    Agent, AgentEvent, ApprovalPolicy, ConfirmDecision, ConfirmHandler, RunStop, Tool, ToolCtx,
    ToolError, ToolOutput,
};
use serde_json::json;

fn write_call(id: &str, label: &str) -> ScriptedTurn {
    ScriptedTurn::new().tool_call(id, "change", json!({"label": label, "ms": 0}))
}

#[tokio::test]
async fn a_denied_call_never_runs_and_the_model_reads_the_reason() {
    let timeline = Timeline::default();
    let change = Sleeper::new("change", false, &timeline);
    let calls = Arc::clone(&change.calls);
    let confirm = QueueConfirm::new([ConfirmDecision::Deny {
        reason: Some("not on a Friday".into()),
    }]);
    let provider = ScriptedProvider::new([
        write_call("w", "x"),
        ScriptedTurn::text("ok, I won't").expect(Expectation::ToolResultContains {
            call_id: "w".into(),
            text: "This `change` call was denied; it did not run. Reason: not on a Friday.".into(),
        }),
    ]);
    let agent = Agent::builder(provider)
        .tool(change)
        .confirm_handler(confirm.clone())
        .build();
    let (events, outcome) = collect(agent.run("go")).await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let asked = confirm.asked();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].tool, "change");
    assert_eq!(asked[0].arguments, json!({"label": "x", "ms": 0}));
    assert!(
        asked[0].summary.contains("\"label\": \"x\""),
        "{}",
        asked[0].summary
    );
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::ToolCallFinished { result: Err(e), .. } if e.kind() == ToolErrorKind::Denied)));
}

#[tokio::test]
async fn never_policy_runs_without_asking_and_read_only_calls_never_ask() {
    let timeline = Timeline::default();
    let change = Sleeper::new("change", false, &timeline);
    let calls = Arc::clone(&change.calls);
    let confirm = QueueConfirm::new([]);
    let provider = ScriptedProvider::new([write_call("w", "x"), ScriptedTurn::text("done")]);
    let agent = Agent::builder(provider)
        .tool(change)
        .policy(ApprovalPolicy::never())
        .confirm_handler(confirm.clone())
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(confirm.asked().is_empty());

    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("r", "look", json!({"label": "r", "ms": 0})),
        ScriptedTurn::text("done"),
    ]);
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("look", true, &timeline))
        .confirm_handler(confirm.clone())
        .build();
    assert!(agent.run_to_completion("go").await.stop.is_completed());
    assert!(confirm.asked().is_empty());
}

#[tokio::test]
async fn approve_for_session_asks_once() {
    let timeline = Timeline::default();
    let change = Sleeper::new("change", false, &timeline);
    let calls = Arc::clone(&change.calls);
    let confirm = QueueConfirm::new([ConfirmDecision::AllowForSession]);
    let provider = ScriptedProvider::new([
        write_call("a", "a").tool_call("b", "change", json!({"label": "b", "ms": 0})),
        write_call("c", "c"),
        ScriptedTurn::text("done"),
        write_call("d", "d"),
        ScriptedTurn::text("done again"),
    ]);
    let agent = Agent::builder(provider)
        .tool(change)
        .confirm_handler(confirm.clone())
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed());
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(confirm.asked().len(), 1);
    assert!(outcome.conversation.session_approvals.contains("change"));

    // The approval lives with the conversation in memory...
    let mut conversation = outcome.conversation;
    conversation.push_user("more");
    let outcome = agent.run_to_completion(conversation).await;
    assert!(outcome.stop.is_completed());
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(confirm.asked().len(), 1);
    // ...and is saved with it, as a session saves it (one run state).
    let json = serde_json::to_string(&outcome.conversation).unwrap();
    let restored: kinet_core::Conversation = serde_json::from_str(&json).unwrap();
    assert_eq!(
        restored.session_approvals,
        std::collections::BTreeSet::from(["change".to_owned()])
    );
}

#[tokio::test]
async fn rules_allow_and_deny_specific_tools() {
    let timeline = Timeline::default();
    let change = Sleeper::new("change", false, &timeline);
    let look = Sleeper::new("look", true, &timeline);
    let (change_calls, look_calls) = (Arc::clone(&change.calls), Arc::clone(&look.calls));
    let confirm = QueueConfirm::new([]);
    let provider = ScriptedProvider::new([
        write_call("w", "w").tool_call("r", "look", json!({"label": "r", "ms": 0})),
        ScriptedTurn::text("done").expect(Expectation::ToolResultContains {
            call_id: "r".into(),
            text: "calls to `look` are denied by the approval policy".into(),
        }),
    ]);
    let agent = Agent::builder(provider)
        .tool(change)
        .tool(look)
        .policy(ApprovalPolicy::ask().allow("change").deny("lo*"))
        .confirm_handler(confirm.clone())
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(change_calls.load(Ordering::SeqCst), 1);
    assert_eq!(look_calls.load(Ordering::SeqCst), 0);
    assert!(confirm.asked().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_errors_times_out_or_is_dropped_denies() {
    let timeline = Timeline::default();
    // Errors.
    let confirm = Arc::new(QueueConfirm::default());
    confirm
        .answers
        .lock()
        .unwrap()
        .push_back(Err(ConfirmError("dialog crashed".into())));
    let change = Sleeper::new("change", false, &timeline);
    let calls = Arc::clone(&change.calls);
    let provider = ScriptedProvider::new([
        write_call("w", "w"),
        ScriptedTurn::text("ok").expect(Expectation::ToolResultContains {
            call_id: "w".into(),
            text: "confirmation failed: dialog crashed".into(),
        }),
    ]);
    let agent = Agent::builder(provider)
        .tool(change)
        .confirm_handler(confirm)
        .build();
    assert!(agent.run_to_completion("go").await.stop.is_completed());
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // Times out.
    let slow = Arc::new(QueueConfirm {
        delay: Some(Duration::from_secs(3600)),
        ..QueueConfirm::default()
    });
    let change = Sleeper::new("change", false, &timeline);
    let calls = Arc::clone(&change.calls);
    let provider = ScriptedProvider::new([
        write_call("w", "w"),
        ScriptedTurn::text("ok").expect(Expectation::ToolResultContains {
            call_id: "w".into(),
            text: "no answer to the confirmation within 30 s".into(),
        }),
    ]);
    let agent = Agent::builder(provider)
        .tool(change)
        .policy(ApprovalPolicy::ask().confirm_timeout(Duration::from_secs(30)))
        .confirm_handler(slow)
        .build();
    assert!(agent.run_to_completion("go").await.stop.is_completed());
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // The UI drops the request unanswered.
    let (handler, mut requests) = ChannelConfirmHandler::new(4);
    tokio::spawn(async move {
        while let Some(pending) = requests.recv().await {
            drop(pending);
        }
    });
    let provider = ScriptedProvider::new([
        write_call("w", "w"),
        ScriptedTurn::text("ok").expect(Expectation::ToolResultContains {
            call_id: "w".into(),
            text: "dropped without an answer".into(),
        }),
    ]);
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("change", false, &timeline))
        .confirm_handler(handler)
        .build();
    assert!(agent.run_to_completion("go").await.stop.is_completed());
}

#[tokio::test]
async fn abort_ends_the_run_and_answers_every_call() {
    let timeline = Timeline::default();
    let change = Sleeper::new("change", false, &timeline);
    let calls = Arc::clone(&change.calls);
    let confirm = QueueConfirm::new([ConfirmDecision::Allow, ConfirmDecision::Abort]);
    let provider = ScriptedProvider::new([write_call("a", "a")
        .tool_call("b", "change", json!({"label": "b", "ms": 0}))
        .tool_call("c", "change", json!({"label": "c", "ms": 0}))]);
    let agent = Agent::builder(provider)
        .tool(change)
        .confirm_handler(confirm.clone())
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(
        matches!(&outcome.stop, RunStop::Aborted { tool } if tool == "change"),
        "{:?}",
        outcome.stop
    );
    assert_paired(&outcome);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the approved first call ran"
    );
    assert_eq!(confirm.asked().len(), 2);
    assert_eq!(result_text(&outcome, "a"), ("a done".into(), false));
    assert!(result_text(&outcome, "b").0.contains("aborted"));
    assert!(result_text(&outcome, "c").0.contains("aborted"));
}

/// A summary written by the tool reaches the confirmation request.
struct Shell;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ShellArgs {
    command: String,
}

#[async_trait::async_trait]
impl Tool for Shell {
    type Args = ShellArgs;
    fn name(&self) -> &str {
        "shell"
    }
    fn description(&self) -> &str {
        "Runs a command."
    }
    async fn confirm_summary(&self, args: &ShellArgs, ctx: &ToolCtx) -> Option<String> {
        Some(format!("$ {}  (in {})", args.command, ctx.cwd().display()))
    }
    async fn call(&self, args: ShellArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!("ran {}", args.command)))
    }
}

#[tokio::test]
async fn the_confirm_request_carries_the_tools_summary() {
    let confirm = QueueConfirm::new([ConfirmDecision::Allow]);
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("s", "shell", json!({"command": "ls -la"})),
        ScriptedTurn::text("listed"),
    ]);
    let agent = Agent::builder(provider)
        .tool(Shell)
        .workspace(Workspace::new().cwd("/srv/project"))
        .confirm_handler(confirm.clone())
        .build();
    let outcome = agent.run_to_completion("list").await;
    assert_eq!(result_text(&outcome, "s").0, "ran ls -la");
    assert_eq!(confirm.asked()[0].summary, "$ ls -la  (in /srv/project)");
}

/// Waits for cancellation and records that it saw it.
struct Patient {
    saw_cancel: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait::async_trait]
impl Tool for Patient {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "patient"
    }
    fn description(&self) -> &str {
        "Waits a long time."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        tokio::select! {
            _ = ctx.cancellation().cancelled() => {
                self.saw_cancel.store(true, Ordering::SeqCst);
                Err(ToolError::new(ToolErrorKind::Cancelled, "stopped early"))
            }
            _ = tokio::time::sleep(Duration::from_secs(600)) => Ok(ToolOutput::text("finally")),
        }
    }
}

#[tokio::test]
async fn cancelling_mid_tool_call_ends_promptly_with_a_paired_history() {
    let timeline = Timeline::default();
    let saw_cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let provider = ScriptedProvider::new([ScriptedTurn::new()
        .tool_call("p", "patient", json!({}))
        .tool_call("stuck", "look", json!({"label": "stuck", "ms": 600_000}))
        .tool_call("later", "change", json!({"label": "later", "ms": 0}))]);
    let change = Sleeper::new("change", false, &timeline);
    let change_calls = Arc::clone(&change.calls);
    let agent = Agent::builder(provider)
        .tool(Patient {
            saw_cancel: Arc::clone(&saw_cancel),
        })
        .tool(Sleeper::new("look", true, &timeline))
        .tool(change)
        .policy(ApprovalPolicy::never())
        .build();
    let mut run = agent.run("go");
    // Wait until both read-only calls are running.
    let mut started = 0;
    while let Some(event) = run.next().await {
        if let AgentEvent::ToolCallStarted { .. } = event {
            started += 1;
            if started == 2 {
                break;
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cancelled_at = Instant::now();
    run.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), run.finish())
        .await
        .expect("the run ends promptly");
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(1),
        "{:?}",
        cancelled_at.elapsed()
    );
    assert!(
        matches!(outcome.stop, RunStop::Cancelled),
        "{:?}",
        outcome.stop
    );
    assert_paired(&outcome);
    assert!(saw_cancel.load(Ordering::SeqCst), "the tool saw the token");
    assert_eq!(result_text(&outcome, "p"), ("stopped early".into(), true));
    assert!(result_text(&outcome, "stuck").0.contains("cancelled"));
    assert!(result_text(&outcome, "later").0.contains("cancelled"));
    assert_eq!(change_calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn cancelling_mid_stream_keeps_the_partial_text_and_no_dangling_calls() {
    let provider = ScriptedProvider::new([ScriptedTurn::text("I am thinking about it")
        .with_delay(Duration::from_millis(5))
        .hanging()]);
    let agent = Agent::builder(provider).build();
    let mut run = agent.run("go");
    let mut deltas = 0;
    while let Some(event) = run.next().await {
        if let AgentEvent::TextDelta { .. } = event {
            deltas += 1;
            if deltas == 5 {
                break;
            }
        }
    }
    let cancelled_at = Instant::now();
    run.cancel();
    let mut rest = Vec::new();
    while let Some(event) = run.next().await {
        rest.push(event);
    }
    let outcome = run.finish().await;
    assert!(cancelled_at.elapsed() < Duration::from_millis(500));
    assert!(matches!(
        rest.last(),
        Some(AgentEvent::Done {
            stop: RunStop::Cancelled,
            ..
        })
    ));
    assert!(matches!(outcome.stop, RunStop::Cancelled));
    assert_eq!(
        outcome.final_text().as_deref(),
        Some("I am thinking about it")
    );
    assert_paired(&outcome);

    // A hang with tool calls already streamed: they are dropped, not left
    // unanswered.
    let provider = ScriptedProvider::new([ScriptedTurn::new()
        .tool_call("x", "look", json!({"label": "x", "ms": 0}))
        .hanging()]);
    let agent = Agent::builder(provider).build();
    let run = agent.run("go");
    let token = run.cancellation_token();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        token.cancel();
    });
    let outcome = run.finish().await;
    assert!(matches!(outcome.stop, RunStop::Cancelled));
    assert_paired(&outcome);
    assert_eq!(outcome.conversation.messages.len(), 1);
}

#[tokio::test]
async fn cancelling_while_waiting_for_confirmation_runs_nothing() {
    let timeline = Timeline::default();
    let change = Sleeper::new("change", false, &timeline);
    let calls = Arc::clone(&change.calls);
    let (handler, mut requests) = ChannelConfirmHandler::new(1);
    let provider = ScriptedProvider::new([write_call("w", "w")]);
    let agent = Agent::builder(provider)
        .tool(change)
        .confirm_handler(handler)
        .build();
    let run = agent.run("go");
    let pending = requests.recv().await.unwrap();
    assert_eq!(pending.request.tool, "change");
    run.cancel();
    let outcome = run.finish().await;
    pending.respond(ConfirmDecision::Allow);
    assert!(matches!(outcome.stop, RunStop::Cancelled));
    assert_paired(&outcome);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn dropping_the_run_cancels_it() {
    let saw_cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let provider =
        ScriptedProvider::new([ScriptedTurn::new().tool_call("p", "patient", json!({}))]);
    let agent = Agent::builder(provider)
        .tool(Patient {
            saw_cancel: Arc::clone(&saw_cancel),
        })
        .build();
    let mut run = agent.run("go");
    while let Some(event) = run.next().await {
        if let AgentEvent::ToolCallStarted { .. } = event {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(run);
    tokio::time::timeout(Duration::from_secs(2), async {
        while !saw_cancel.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the tool is cancelled when the run is dropped");
}

#[tokio::test(start_paused = true)]
async fn a_tool_timeout_stops_a_slow_call() {
    let timeline = Timeline::default();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("slow", "look", json!({"label": "s", "ms": 60_000})),
        ScriptedTurn::text("ok").expect(Expectation::ToolResultContains {
            call_id: "slow".into(),
            text: "tool `look` did not finish within 2.0 s".into(),
        }),
    ]);
    let agent = Agent::builder(provider)
        .tool(Sleeper::new("look", true, &timeline))
        .limits(Limits::new().tool_timeout(Duration::from_secs(2)))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
}

/// A handler used through `dyn`: proves the trait is object safe.
#[tokio::test]
async fn confirm_handlers_are_object_safe() {
    let handler: Arc<dyn ConfirmHandler> = QueueConfirm::new([ConfirmDecision::Allow]);
    let decision = handler
        .confirm(ConfirmRequest::new("t", "1", json!({}), ""))
        .await
        .unwrap();
    assert_eq!(decision, ConfirmDecision::Allow);
}
