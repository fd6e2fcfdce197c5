//! Approvals given later: a run stops at a call whose approval is
//! deferred, its session is saved, and other processes finish it with the
//! decisions. The approved calls run once, with the idempotency keys they
//! had, and the transcript equals that of a run approved in place.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use kinet_core::confirm::{ConfirmError, ConfirmRequest};
use kinet_core::deferred::Decisions;
use kinet_core::session::Session;
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::{
    Agent, AgentError, ApprovalPolicy, ConfirmDecision, ConfirmHandler, Conversation, RunStop,
    Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct LookupArgs {
    /// The item.
    item: String,
}

/// Reads a price.
struct Lookup;

#[async_trait::async_trait]
impl Tool for Lookup {
    type Args = LookupArgs;
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "Looks up the price of an item."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, args: LookupArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!(
            "{} costs {}",
            args.item,
            args.item.len() * 3
        )))
    }
}

#[derive(Deserialize, JsonSchema)]
struct ChargeArgs {
    /// The account.
    account: String,
    /// The amount.
    amount: u64,
}

/// Charges an account: appends to a ledger file, once per idempotency key.
struct Charge {
    ledger: PathBuf,
}

#[async_trait::async_trait]
impl Tool for Charge {
    type Args = ChargeArgs;
    fn name(&self) -> &str {
        "charge"
    }
    fn description(&self) -> &str {
        "Charges an account."
    }
    async fn call(&self, args: ChargeArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let key = ctx
            .idempotency_key()
            .ok_or_else(|| ToolError::failed("no idempotency key"))?;
        let ledger = std::fs::read_to_string(&self.ledger).unwrap_or_default();
        if !ledger
            .lines()
            .any(|line| line.starts_with(&format!("{key} ")))
        {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.ledger)
                .map_err(|e| ToolError::failed(e.to_string()))?;
            writeln!(file, "{key} {} {}", args.account, args.amount)
                .map_err(|e| ToolError::failed(e.to_string()))?;
        }
        Ok(ToolOutput::text(format!(
            "charged {} to {}",
            args.amount, args.account
        )))
    }
}

/// Approves everything, in place.
struct Approver;

#[async_trait::async_trait]
impl ConfirmHandler for Approver {
    async fn confirm(&self, _request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        Ok(ConfirmDecision::Allow)
    }
}

/// Defers everything, as a service's handler would.
struct Deferrer;

#[async_trait::async_trait]
impl ConfirmHandler for Deferrer {
    async fn confirm(&self, _request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        Ok(ConfirmDecision::Defer)
    }
}

/// The model's turns: two lookups around a charge, then a second charge,
/// then an answer.
fn turns() -> Vec<ScriptedTurn> {
    vec![
        ScriptedTurn::new()
            .tool_call("l1", "lookup", json!({"item": "apple"}))
            .tool_call("c1", "charge", json!({"account": "x", "amount": 5}))
            .tool_call("l2", "lookup", json!({"item": "pear"})),
        ScriptedTurn::new().tool_call("c2", "charge", json!({"account": "y", "amount": 7})),
        ScriptedTurn::text("charged both"),
    ]
}

fn agent(turns: Vec<ScriptedTurn>, ledger: &Path, handler: Arc<dyn ConfirmHandler>) -> Agent {
    Agent::builder(ScriptedProvider::new(turns))
        .tool(Lookup)
        .tool(Charge {
            ledger: ledger.to_path_buf(),
        })
        .confirm_handler(handler)
        .build()
}

fn transcript(conversation: &Conversation) -> String {
    serde_json::to_string(&conversation.messages).unwrap()
}

/// One stage, in a process of its own (see the test below).
#[tokio::test]
#[ignore = "run by a_deferred_run_finishes_in_other_processes"]
async fn deferred_stage() {
    let dir = PathBuf::from(std::env::var("KINET_DEFERRED_DIR").unwrap());
    let stage = std::env::var("KINET_DEFERRED_STAGE").unwrap();
    let ledger = dir.join("ledger");
    let saved = dir.join("session.json");
    let (turn, conversation) = match stage.as_str() {
        "a" => (0, Conversation::from("charge x and y")),
        "b" => (1, read(&saved)),
        _ => (2, read(&saved)),
    };
    let agent = agent(vec![turns().remove(turn)], &ledger, Arc::new(Deferrer));
    let outcome = if stage == "a" {
        agent.run_to_completion(conversation).await
    } else {
        let pending = conversation.deferred.clone().unwrap().pending;
        let decisions = pending
            .iter()
            .fold(Decisions::new(), |d, p| d.allow(p.call_id.clone()));
        agent.resume(conversation, decisions).finish().await
    };
    let session = Session::capture(&outcome.conversation, &[]);
    std::fs::write(&saved, session.to_json()).unwrap();
    println!("STOP {}", outcome.stop);
}

fn read(path: &Path) -> Conversation {
    let session = Session::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    session.resume(&[]).unwrap().0
}

#[tokio::test]
async fn a_deferred_run_finishes_in_other_processes() {
    // In place: the handler approves both charges.
    let here = tempfile::tempdir().unwrap();
    let in_place = agent(turns(), &here.path().join("ledger"), Arc::new(Approver))
        .run_to_completion("charge x and y")
        .await;
    assert!(in_place.stop.is_completed(), "{}", in_place.stop);

    // Deferred: process A stops at the first charge, B approves it and
    // stops at the second, C approves that and finishes.
    let dir = tempfile::tempdir().unwrap();
    let mut stops = Vec::new();
    for stage in ["a", "b", "c"] {
        let output = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "deferred_stage", "--ignored", "--nocapture"])
            .env("KINET_DEFERRED_DIR", dir.path())
            .env("KINET_DEFERRED_STAGE", stage)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "stage {stage}: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stops.push(
            text.lines()
                .find_map(|l| l.strip_prefix("STOP "))
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(
        stops,
        [
            "waiting for approval of charge",
            "waiting for approval of charge",
            "completed"
        ]
    );
    let finished = read(&dir.path().join("session.json"));
    assert!(finished.deferred.is_none());
    assert_eq!(transcript(&finished), transcript(&in_place.conversation));

    // Each charge ran once, with one key per call, from one run's key.
    let ledger = std::fs::read_to_string(dir.path().join("ledger")).unwrap();
    let lines: Vec<&str> = ledger.lines().collect();
    assert_eq!(lines.len(), 2, "{ledger}");
    assert!(
        lines[0].ends_with("/c1 x 5") && lines[1].ends_with("/c2 y 7"),
        "{ledger}"
    );
    let run_key = |line: &str| line.split('/').next().unwrap().to_owned();
    assert_eq!(run_key(lines[0]), run_key(lines[1]));
}

#[tokio::test]
async fn resuming_again_after_a_crash_runs_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let policy = ApprovalPolicy::ask().defer_questions(true);
    let stopped = Agent::builder(ScriptedProvider::new(vec![turns().remove(0)]))
        .tool(Lookup)
        .tool(Charge {
            ledger: ledger.clone(),
        })
        .policy(policy.clone())
        .build()
        .run_to_completion("charge x and y")
        .await;
    let RunStop::AwaitingApproval { pending } = &stopped.stop else {
        panic!("{}", stopped.stop);
    };
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].call_id, "c1");
    assert_eq!(pending[0].arguments, json!({"account": "x", "amount": 5}));
    // l1 ran before the stop; c1 and l2 did not.
    let results: Vec<&str> = stopped
        .conversation
        .messages
        .iter()
        .filter_map(|m| match m {
            kinet_core::Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results, ["l1"]);
    assert!(!ledger.exists());

    // The first resume "crashes" after running c1 (its effect is in the
    // ledger, its result lost): a second resume from the saved
    // conversation runs c1 again with the same key, and the tool, which
    // honours the key, charges once.
    for _ in 0..2 {
        let resumed = Agent::builder(ScriptedProvider::new(vec![ScriptedTurn::text("done")]))
            .tool(Lookup)
            .tool(Charge {
                ledger: ledger.clone(),
            })
            .policy(policy.clone())
            .build()
            .resume(stopped.conversation.clone(), Decisions::new().allow("c1"))
            .finish()
            .await;
        assert!(resumed.stop.is_completed(), "{}", resumed.stop);
    }
    let ledger = std::fs::read_to_string(&ledger).unwrap();
    assert_eq!(ledger.lines().count(), 1, "{ledger}");
}

#[tokio::test]
async fn decisions_deny_edit_and_must_fit() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let build = |turns: Vec<ScriptedTurn>| {
        Agent::builder(ScriptedProvider::new(turns))
            .tool(Lookup)
            .tool(Charge {
                ledger: ledger.clone(),
            })
            .policy(ApprovalPolicy::ask().defer_questions(true))
            .build()
    };
    let stopped = build(vec![turns().remove(0)])
        .run_to_completion("charge")
        .await;
    let waiting = stopped.conversation.clone();

    // A plain run on a waiting conversation, a missing decision and a
    // decision for a call that is not waiting all fail, and keep the turn.
    let plain = build(vec![]).run_to_completion(waiting.clone()).await;
    assert!(
        matches!(&plain.stop, RunStop::Failed(AgentError::Resume(why)) if why.contains("`charge` (c1)")),
        "{}",
        plain.stop
    );
    assert!(plain.conversation.deferred.is_some());
    let missing = build(vec![])
        .resume(waiting.clone(), Decisions::new())
        .finish()
        .await;
    assert!(
        matches!(&missing.stop, RunStop::Failed(AgentError::Resume(why)) if why.contains("no decision for the `charge` call c1")),
        "{}",
        missing.stop
    );
    let stray = build(vec![])
        .resume(waiting.clone(), Decisions::new().allow("c1").allow("l2"))
        .finish()
        .await;
    assert!(
        matches!(&stray.stop, RunStop::Failed(AgentError::Resume(why)) if why.contains("call l2 is not waiting")),
        "{}",
        stray.stop
    );

    // Denied: the model reads the reason; nothing is charged.
    let denied = build(vec![ScriptedTurn::text("ok")])
        .resume(waiting.clone(), Decisions::new().deny("c1", "over budget"))
        .finish()
        .await;
    assert!(denied.stop.is_completed(), "{}", denied.stop);
    let text = transcript(&denied.conversation);
    assert!(text.contains("Reason: over budget."), "{text}");
    assert!(!ledger.exists());

    // Edited: the tool runs with the host's arguments.
    let edited = build(vec![ScriptedTurn::text("ok")])
        .resume(
            waiting,
            Decisions::new().set(
                "c1",
                ConfirmDecision::Edit {
                    arguments: json!({"account": "x", "amount": 3}),
                },
            ),
        )
        .finish()
        .await;
    assert!(edited.stop.is_completed(), "{}", edited.stop);
    let ledger = std::fs::read_to_string(&ledger).unwrap();
    assert!(ledger.trim_end().ends_with("/c1 x 3"), "{ledger}");
}
