//! Sessions journalled in SQLite: a process SIGKILLed during a slow tool
//! resumes with every completed result, the interrupted call answered as
//! interrupted, and an intact database; forks continue independently.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kinet_core::session::{Journal, JournalEntry, Session, SessionStore};
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::{Agent, Message, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput};
use kinet_memory::SqliteSessionStore;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Ms {
    /// How long to take.
    ms: u64,
}

/// A read-only tool that takes `ms` milliseconds.
struct Wait(&'static str);

#[async_trait::async_trait]
impl Tool for Wait {
    type Args = Ms;
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> &str {
        "Waits."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, args: Ms, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        Ok(ToolOutput::text(format!("{} done", self.0)))
    }
}

const ID: &str = "crash-session";

/// The process that gets killed: two parallel calls, one quick, one that
/// would take a minute.
async fn doomed(db: &Path) {
    let store = SqliteSessionStore::open(db).unwrap();
    store.create(&Session::empty(ID)).unwrap();
    let journal = store.journal(ID, Vec::new());
    let input = Message::user("Wait twice.");
    journal.message(&input);
    let provider = ScriptedProvider::new([ScriptedTurn::new()
        .tool_call("quick-1", "quick", json!({"ms": 10}))
        .tool_call("slow-1", "slow", json!({"ms": 60_000}))]);
    let agent = Agent::builder(provider)
        .tool(Wait("quick"))
        .tool(Wait("slow"))
        .journal(journal)
        .build();
    let _ = agent.run_to_completion(vec![input]).await;
    panic!("the slow call should not have finished");
}

#[tokio::test]
async fn journal_phase() {
    if let Ok(db) = std::env::var("KINET_JOURNAL_DB") {
        doomed(Path::new(&db)).await;
    }
}

fn tool_results(session: &Session) -> Vec<(String, String)> {
    session
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => Some((tool_call_id.clone(), format!("{content:?}"))),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_process_killed_during_a_slow_tool_resumes_with_what_completed() {
    let dir = tempfile::tempdir().unwrap();
    let db: PathBuf = dir.path().join("sessions.db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "journal_phase", "--nocapture"])
        .env("KINET_JOURNAL_DB", &db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the quick result is in the journal, then kill -9.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "the quick result never reached the journal"
        );
        if let Ok(store) = SqliteSessionStore::open(&db)
            && let Ok(Some(session)) = store.load(ID)
            && tool_results(&session).iter().any(|(id, _)| id == "quick-1")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.wait();

    let store = SqliteSessionStore::open(&db).unwrap();
    let session = store.load(ID).unwrap().unwrap();
    let results = tool_results(&session);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].1.contains("quick done"));
    // Resume: the slow call is answered as interrupted, the run completes.
    let (conversation, _) = session.resume(&[]).unwrap();
    let provider = Arc::new(ScriptedProvider::new([ScriptedTurn::text("Resumed.")]));
    let journal = store.journal(ID, Vec::new());
    let agent = Agent::builder_arc(provider.clone())
        .tool(Wait("quick"))
        .tool(Wait("slow"))
        .journal(journal)
        .build();
    let outcome = agent.run_to_completion(conversation).await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let interrupted = outcome.conversation.messages.iter().any(|m| {
        matches!(m, Message::Tool { tool_call_id, is_error: true, content, .. }
            if tool_call_id == "slow-1" && format!("{content:?}").contains("interrupted"))
    });
    assert!(interrupted, "{:?}", outcome.conversation.messages);
    assert!(outcome.conversation.unanswered_tool_calls().is_empty());
    // The journal has the answer too.
    let session = store.load(ID).unwrap().unwrap();
    assert_eq!(session.messages.last().unwrap().text(), "Resumed.");
    let check: String = rusqlite_check(&db);
    assert_eq!(check, "ok");
}

/// SQLite's own integrity check of the file.
fn rusqlite_check(db: &Path) -> String {
    let connection = rusqlite::Connection::open(db).unwrap();
    connection
        .query_row("PRAGMA integrity_check", [], |row| row.get::<_, String>(0))
        .unwrap()
}

#[tokio::test]
async fn a_fork_continues_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteSessionStore::open(dir.path().join("s.db")).unwrap();
    let mut base = Session::empty("base");
    for n in 0..4 {
        base.messages.push(Message::user(format!("m{n}")));
    }
    store.create(&base).unwrap();
    // Approved after the fork point: the fork must not have it.
    store
        .append(
            "base",
            &JournalEntry::Approval {
                tool: "shell".into(),
            },
        )
        .unwrap();
    let fork = store.fork("base", 2).unwrap();
    store
        .append(
            "base",
            &JournalEntry::Message {
                message: Message::user("base only"),
            },
        )
        .unwrap();
    store
        .append(
            &fork,
            &JournalEntry::Message {
                message: Message::user("fork only"),
            },
        )
        .unwrap();
    let base = store.load("base").unwrap().unwrap();
    let forked = store.load(&fork).unwrap().unwrap();
    let texts = |s: &Session| s.messages.iter().map(|m| m.text()).collect::<Vec<_>>();
    assert_eq!(texts(&base), ["m0", "m1", "m2", "m3", "base only"]);
    assert_eq!(texts(&forked), ["m0", "m1", "fork only"]);
    assert_eq!(forked.forked_from.as_ref().unwrap().session, "base");
    assert!(base.approvals.contains("shell"));
    assert!(forked.approvals.is_empty(), "{:?}", forked.approvals);
    let listed: Vec<String> = store.list().unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(listed.len(), 2);
    assert!(store.delete(&fork).unwrap());
    assert!(store.load(&fork).unwrap().is_none());
}

/// Two handles on one file (as two processes would have): a session is
/// claimed by one holder at a time, claiming again renews, an expired
/// claim can be taken over, and a released one is free.
#[test]
fn a_session_is_claimed_by_one_holder_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let one = SqliteSessionStore::open(&path).unwrap();
    let two = SqliteSessionStore::open(&path).unwrap();
    let long = Duration::from_secs(60);
    assert!(one.claim("s", "a", long).unwrap());
    assert!(!two.claim("s", "b", long).unwrap(), "held by a");
    assert!(one.claim("s", "a", long).unwrap(), "a renews its own");
    assert!(
        two.claim("other", "b", long).unwrap(),
        "another session is free"
    );
    two.release("s", "b").unwrap(); // not b's: nothing happens
    assert!(!two.claim("s", "b", long).unwrap());
    one.release("s", "a").unwrap();
    assert!(two.claim("s", "b", Duration::from_millis(50)).unwrap());
    std::thread::sleep(Duration::from_millis(80));
    assert!(one.claim("s", "a", long).unwrap(), "b's claim expired");
    // Renewal extends only a claim still held, and never makes one.
    assert!(one.renew("s", "a", long).unwrap());
    assert!(!two.renew("s", "b", long).unwrap(), "not b's");
    one.release("s", "a").unwrap();
    assert!(!one.renew("s", "a", long).unwrap(), "released");
    assert!(
        two.claim("s", "b", long).unwrap(),
        "no claim was left behind"
    );
    // Racing claimers: exactly one wins.
    let winners = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                scope.spawn(move || {
                    let store = SqliteSessionStore::open(&path).unwrap();
                    store.claim("race", &format!("h{i}"), long).unwrap()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|won| *won)
            .count()
    });
    assert_eq!(winners, 1);
}
