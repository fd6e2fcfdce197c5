//! One run state: a conversation saved as a session and read back, or
//! made again from the journal its run wrote, is the conversation the run
//! left — approvals, provenance, the deferred turn and the run key
//! included — over random runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kinet_core::builder::{Approval, Sessions};
use std::sync::{Arc, Mutex};

use kinet_core::session::{Journal, JournalEntry, Session};
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::{
    Agent, ConfirmDecision, Conversation, Message, Tool, ToolAnnotations, ToolCtx, ToolError,
    ToolOutput,
};
use proptest::prelude::*;
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Args {
    /// What to read or write.
    text: String,
}

/// Reads a page of the open web: others' text, for the ledger.
struct Fetch;

#[async_trait::async_trait]
impl Tool for Fetch {
    type Args = Args;
    fn name(&self) -> &str {
        "fetch"
    }
    fn description(&self) -> &str {
        "Reads a page."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only().open_world(true)
    }
    async fn call(&self, args: Args, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!("page about {}", args.text)))
    }
}

/// Writes a note: asks for approval.
struct Note;

#[async_trait::async_trait]
impl Tool for Note {
    type Args = Args;
    fn name(&self) -> &str {
        "note"
    }
    fn description(&self) -> &str {
        "Writes a note."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::local_write()
    }
    async fn call(&self, args: Args, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!("noted {}", args.text)))
    }
}

/// Keeps what the run journals.
#[derive(Default)]
struct Kept(Mutex<Vec<JournalEntry>>);

impl Journal for Kept {
    fn record(&self, entry: &JournalEntry) {
        self.0.lock().unwrap().push(entry.clone());
    }
}

fn decision(n: u8) -> ConfirmDecision {
    match n % 4 {
        0 => ConfirmDecision::Allow,
        1 => ConfirmDecision::AllowForSession,
        2 => ConfirmDecision::Deny {
            reason: Some("not now".into()),
        },
        _ => ConfirmDecision::Defer,
    }
}

/// A run: turns of calls (kind 0: a fetch; 1: a note; 2: a note quoting
/// a page, which the defence asks about), then an answer; the user's
/// answers to the approvals asked.
fn run(turns: &[Vec<(u8, u8)>], answers: &[u8]) -> (Conversation, Vec<JournalEntry>) {
    let mut script: Vec<ScriptedTurn> = turns
        .iter()
        .enumerate()
        .map(|(t, calls)| {
            calls
                .iter()
                .enumerate()
                .fold(ScriptedTurn::new(), |turn, (c, (kind, word))| {
                    let (tool, text) = match kind {
                        0 => ("fetch", format!("topic{word}")),
                        1 => ("note", format!("word{word}")),
                        _ => ("note", format!("page about topic{word}")),
                    };
                    turn.tool_call(format!("c{t}_{c}"), tool, json!({ "text": text }))
                })
        })
        .collect();
    script.push(ScriptedTurn::text("done"));
    let journal = Arc::new(Kept::default());
    let confirm = common::QueueConfirm::new(answers.iter().map(|n| decision(*n)));
    let agent = Agent::builder(ScriptedProvider::new(script))
        .tool(Fetch)
        .tool(Note)
        // The values rule alone: the notes are not declared in a plan.
        .approval(Approval::new().defence(kinet_core::pipeline::Defence::provenance()))
        .confirm_handler(confirm)
        .sessions(Sessions::new().journal(journal.clone()))
        .build();
    let input = Message::user("keep notes on what you read");
    // The host journals its own input.
    journal.message(&input);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = runtime.block_on(agent.run_to_completion(Conversation::from(vec![input])));
    let entries = journal.0.lock().unwrap().clone();
    (outcome.conversation, entries)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_run_state_survives_its_session_and_its_journal(
        turns in prop::collection::vec(
            prop::collection::vec((0u8..3, 0u8..4), 1..4),
            0..4,
        ),
        answers in prop::collection::vec(any::<u8>(), 12),
    ) {
        let (conversation, journal) = run(&turns, &answers);

        // Saved as a session, written as JSON, read back and resumed.
        let session = Session::capture(&conversation, &[]);
        let read = Session::from_json(&session.to_json()).unwrap();
        prop_assert_eq!(&read, &session);
        let (resumed, _) = read.resume(&[]).unwrap();
        prop_assert_eq!(&resumed, &conversation);

        // Made again from the session's journal entries.
        let mut replayed = Session::empty(session.id.clone());
        for entry in session.journal_entries() {
            replayed.apply(entry);
        }
        prop_assert_eq!(&replayed.conversation, &conversation);

        // Made again from what the run journalled as it went.
        let mut from_run = Conversation::new();
        for entry in journal {
            from_run.apply(entry);
        }
        prop_assert_eq!(&from_run, &conversation);
    }
}

#[test]
fn a_deferred_run_keeps_its_turn_approvals_and_ledger_in_a_session() {
    // A fetch, a note approved for the session, then a note quoting the
    // page: asked about again (the defence), and deferred.
    let turns = vec![vec![(0, 1)], vec![(1, 2)], vec![(2, 1)]];
    let (conversation, _) = run(&turns, &[1, 3]);
    assert!(conversation.session_approvals.contains("note"));
    assert!(conversation.deferred.is_some());
    assert!(!conversation.provenance.seen().is_empty());
    assert!(conversation.run_key.is_some());
    let json = Session::capture(&conversation, &[]).to_json();
    let (resumed, _) = Session::from_json(&json).unwrap().resume(&[]).unwrap();
    assert_eq!(resumed, conversation);
    // A conversation on its own keeps its approvals too.
    let alone: Conversation =
        serde_json::from_str(&serde_json::to_string(&conversation).unwrap()).unwrap();
    assert_eq!(alone, conversation);
}
