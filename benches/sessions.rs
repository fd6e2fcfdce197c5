//! Sessions and context management, measured:
//!
//! - journal append per event (SQLite, WAL, synchronous=NORMAL): p50, p99;
//! - resuming a session of 1,000 events (load + rebuild);
//! - compaction overhead without the model call (estimate, prune, split,
//!   with a summariser that answers at once), on a 400-message history.
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
            .context(
                ContextPolicy::new()
                    .window(16_000)
                    .summarizer(Arc::new(Instant0)),
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
}
