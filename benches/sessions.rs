//! Sessions and context management, measured:
//!
//! - journal append per event (SQLite, WAL, synchronous=NORMAL): p50, p99;
//! - resuming a session of 1,000 events (load + rebuild);
//! - compaction overhead without the model call (estimate, prune, split,
//!   with a summariser that answers at once), on a 400-message history;
//! - resuming a run that stopped at a deferred approval: load its session
//!   from the store, resume with the decision, the approved call runs and
//!   the (scripted) model answers; vs the same turn approved in place.
//!
//! ```text
//! cargo bench --bench sessions --features memory
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used
)]

use kinet::builder::Sessions;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kinet::core::context::{ContextPolicy, Summarizer};
use kinet::core::session::{Journal, JournalEntry, Session, SessionStore};
use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
use kinet::core::{Agent, AgentEvent, Message};
use kinet::memory::SqliteSessionStore;

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * p) as usize]
}

struct Instant0;

#[async_trait::async_trait]
impl Summarizer for Instant0 {
    async fn summarize(&self, _messages: &[Message]) -> Result<String, String> {
        Ok("summary".into())
    }
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteSessionStore::open(dir.path().join("sessions.db")).unwrap();

    // Journal appends.
    store.create(&Session::empty("bench")).unwrap();
    let journal = store.journal("bench", Vec::new());
    let message =
        Message::assistant("A model turn of moderate length, like most of them are. ".repeat(4));
    let mut samples = Vec::new();
    for _ in 0..2000 {
        let entry = JournalEntry::Message {
            message: message.clone(),
        };
        let start = Instant::now();
        journal.record(&entry);
        samples.push(start.elapsed());
    }
    assert!(journal.take_errors().is_empty());
    let p50 = percentile(&mut samples, 0.5);
    let p99 = percentile(&mut samples, 0.99);
    println!(
        "journal append: p50 {:.1} µs, p99 {:.1} µs (2,000 events; target p50 < 100 µs)",
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );

    // Resume of 1,000 events.
    store.create(&Session::empty("resume")).unwrap();
    let journal = store.journal("resume", Vec::new());
    for n in 0..1000 {
        journal.record(&JournalEntry::Message {
            message: Message::user(format!("message {n}: {}", "words ".repeat(20))),
        });
    }
    let mut samples = Vec::new();
    for _ in 0..20 {
        let start = Instant::now();
        let session = store.load("resume").unwrap().unwrap();
        let (conversation, _) = session.resume(&[]).unwrap();
        samples.push(start.elapsed());
        assert_eq!(conversation.messages.len(), 1000);
    }
    println!(
        "resume a 1,000-event session: {:.2} ms (median of 20)",
        percentile(&mut samples, 0.5).as_secs_f64() * 1e3
    );

    // Compaction overhead: a 400-message history over a 16k window.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut history = Vec::new();
    for n in 0..200 {
        history.push(Message::user(format!(
            "turn {n}: {}",
            "look at this ".repeat(10)
        )));
        history.push(Message::assistant("checked ".repeat(20)));
    }
    let mut samples = Vec::new();
    for _ in 0..20 {
        let provider = ScriptedProvider::new([ScriptedTurn::text("ok")]);
        let agent = Agent::builder(provider)
            .model("m")
            .sessions(
                Sessions::new().context(
                    ContextPolicy::new()
                        .window(16_000)
                        .summarizer(Arc::new(Instant0)),
                ),
            )
            .build();
        let with_compaction = rt.block_on(async {
            let start = Instant::now();
            let mut run = agent.run(history.clone());
            let mut compacted = false;
            while let Some(event) = futures::StreamExt::next(&mut run).await {
                compacted |= matches!(event, AgentEvent::ContextCompacted { .. });
            }
            let _ = run.finish().await;
            assert!(compacted);
            start.elapsed()
        });
        let provider = ScriptedProvider::new([ScriptedTurn::text("ok")]);
        let plain = Agent::builder(provider).model("m").build();
        let without = rt.block_on(async {
            let start = Instant::now();
            let _ = plain.run_to_completion(history.clone()).await;
            start.elapsed()
        });
        samples.push(with_compaction.saturating_sub(without));
    }
    println!(
        "compaction overhead (400 messages, summariser excluded): {:.2} ms (median of 20)",
        percentile(&mut samples, 0.5).as_secs_f64() * 1e3
    );

    deferred_resume(&rt, &store);
}

/// A tool that needs approval and does nothing.
struct Touch;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

#[async_trait::async_trait]
impl kinet::core::Tool for Touch {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "touch"
    }
    fn description(&self) -> &str {
        "Touches nothing."
    }
    async fn call(
        &self,
        _args: NoArgs,
        _ctx: &kinet::core::ToolCtx,
    ) -> Result<kinet::core::ToolOutput, kinet::core::ToolError> {
        Ok(kinet::core::ToolOutput::text("touched"))
    }
}

/// Resume of a deferred run from the store, per run (median of 200).
fn deferred_resume(rt: &tokio::runtime::Runtime, store: &SqliteSessionStore) {
    use kinet::core::deferred::Decisions;
    use kinet::core::{ApprovalPolicy, ConfirmDecision};
    let store: Arc<dyn SessionStore> = Arc::new(store.clone());
    let agent = |turns: Vec<ScriptedTurn>, journal: Arc<dyn kinet::core::session::Journal>| {
        Agent::builder(ScriptedProvider::new(turns))
            .tool(Touch)
            .policy(ApprovalPolicy::ask().defer_questions(true))
            .sessions(Sessions::new().journal(journal))
            .build()
    };
    let call = || ScriptedTurn::new().tool_call("t1", "touch", serde_json::json!({}));
    let runs = 200;
    for n in 0..runs {
        let id = format!("deferred-{n}");
        store.create(&Session::empty(id.clone())).unwrap();
        let journal = kinet::core::session::StoreJournal::new(Arc::clone(&store), id, Vec::new());
        let outcome = rt.block_on(agent(vec![call()], journal).run_to_completion("touch it"));
        assert!(matches!(
            outcome.stop,
            kinet::core::RunStop::AwaitingApproval { .. }
        ));
    }
    let mut resumed = Vec::new();
    for n in 0..runs {
        let id = format!("deferred-{n}");
        let start = Instant::now();
        let session = store.load(&id).unwrap().unwrap();
        let (conversation, _) = session.resume(&[]).unwrap();
        let journal = kinet::core::session::StoreJournal::new(Arc::clone(&store), id, Vec::new());
        let agent = agent(vec![ScriptedTurn::text("done")], journal);
        let outcome = rt.block_on(async {
            agent
                .resume(conversation, Decisions::new().allow("t1"))
                .finish()
                .await
        });
        resumed.push(start.elapsed());
        assert!(outcome.stop.is_completed(), "{}", outcome.stop);
    }
    // The same turn approved in place, journalled the same way.
    struct Yes;
    #[async_trait::async_trait]
    impl kinet::core::ConfirmHandler for Yes {
        async fn confirm(
            &self,
            _request: kinet::core::confirm::ConfirmRequest,
        ) -> Result<ConfirmDecision, kinet::core::confirm::ConfirmError> {
            Ok(ConfirmDecision::Allow)
        }
    }
    let mut in_place = Vec::new();
    for n in 0..runs {
        let id = format!("in-place-{n}");
        store.create(&Session::empty(id.clone())).unwrap();
        let journal = kinet::core::session::StoreJournal::new(Arc::clone(&store), id, Vec::new());
        let agent = Agent::builder(ScriptedProvider::new(vec![
            call(),
            ScriptedTurn::text("done"),
        ]))
        .tool(Touch)
        .confirm_handler(Yes)
        .sessions(Sessions::new().journal(journal))
        .build();
        let start = Instant::now();
        let outcome = rt.block_on(agent.run_to_completion("touch it"));
        in_place.push(start.elapsed());
        assert!(outcome.stop.is_completed());
    }
    println!(
        "resume of a deferred run from the store (load, resume, the approved call, the answer): {:.2} ms median, p99 {:.2} ms (target < 5 ms); the whole run approved in place: {:.2} ms",
        percentile(&mut resumed, 0.5).as_secs_f64() * 1e3,
        percentile(&mut resumed, 0.99).as_secs_f64() * 1e3,
        percentile(&mut in_place, 0.5).as_secs_f64() * 1e3
    );
}
