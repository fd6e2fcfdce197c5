//! One conformance suite for every `SessionStore`: each case takes a
//! [`SessionFixture`] that opens handles on a fresh store (a SQLite file, a
//! PostgreSQL database) and checks what the trait promises, including a
//! process killed with SIGKILL mid-run. `session_suite!(fixture)` makes one
//! test per case (and the child process's entry point).
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use kinet_core::builder::Sessions;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kinet_core::provenance::{Seen, Trust};
use kinet_core::session::{Claimed, Journal, JournalEntry, Session, SessionStore, StoreJournal};
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::{Agent, Message, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Opens handles on session stores of one backend.
#[async_trait::async_trait]
pub(crate) trait SessionFixture: Send + Sync {
    /// A new, empty store; the string names it for [`SessionFixture::open`].
    async fn fresh(&self) -> String;
    /// A handle on the store `at`; a second call gives a second handle, as
    /// another process would have.
    async fn open(&self, at: &str) -> Arc<dyn SessionStore>;
}

/// One test per case on the fixture `$make` (an expression giving
/// `Option<impl SessionFixture>`; `None` skips, and the fixture says why),
/// and `journal_phase`, the process the kill test starts and kills, which
/// opens the store with `$open` (a `fn(&str) -> Arc<dyn SessionStore>`;
/// the child must not start servers of its own).
#[macro_export]
macro_rules! session_suite {
    ($make:expr, $open:expr) => {
        $crate::session_suite!(@cases $make;
            a_journal_round_trips_and_lists,
            a_fork_keeps_what_came_before_its_point,
            a_session_is_claimed_by_one_holder_at_a_time,
            a_claim_reads_the_session_and_a_save_gives_it_up,
            claims_awaited_mean_what_blocking_claims_mean,
            concurrent_appends_lose_nothing_and_keep_each_writers_order,
            an_agent_run_is_journalled_and_resumes_elsewhere,
            a_process_killed_during_a_slow_tool_resumes_with_what_completed,
        );

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn journal_phase() {
            if let Ok(at) = std::env::var("KINET_JOURNAL_AT") {
                session_conformance::doomed($open(&at)).await;
            }
        }
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if let Some(fixture) = $make {
                    session_conformance::$case(&fixture).await;
                }
            }
        )*
    };
}

fn message(text: &str) -> JournalEntry {
    JournalEntry::Message {
        message: Message::user(text),
    }
}

fn texts(session: &Session) -> Vec<String> {
    session
        .conversation
        .messages
        .iter()
        .map(Message::text)
        .collect()
}

pub(crate) async fn a_journal_round_trips_and_lists(f: &impl SessionFixture) {
    let store = f.open(&f.fresh().await).await;
    assert!(store.entries("nobody").unwrap().is_none());
    assert!(store.load("nobody").unwrap().is_none());
    let error = store.append("nobody", &message("x")).unwrap_err();
    assert!(error.to_string().contains("nobody"), "{error}");

    let mut first = Session::empty("first");
    first.conversation.messages.push(Message::user("hello"));
    first.conversation.session_approvals.insert("shell".into());
    first.state.insert("todo".into(), json!({"items": ["a"]}));
    first.conversation.provenance.record(Seen::new(
        Trust::Untrusted,
        "web_fetch",
        "IBAN US1330000001",
    ));
    store.create(&first).unwrap();
    // An id is created once.
    assert!(store.create(&Session::empty("first")).is_err());
    store
        .append(
            "first",
            &JournalEntry::Message {
                message: Message::assistant("hi"),
            },
        )
        .unwrap();
    store
        .append(
            "first",
            &JournalEntry::State {
                key: "todo".into(),
                value: json!({"items": ["a", "b"]}),
            },
        )
        .unwrap();
    let loaded = store.load("first").unwrap().unwrap();
    assert_eq!(texts(&loaded), ["hello", "hi"]);
    assert!(loaded.conversation.session_approvals.contains("shell"));
    assert_eq!(loaded.state["todo"], json!({"items": ["a", "b"]}));
    assert_eq!(
        loaded.conversation.provenance,
        first.conversation.provenance
    );
    assert_eq!(store.entries("first").unwrap().unwrap().len(), 6);

    // Unicode, NUL and quotes survive.
    let odd = "naïve \u{0} 'quoted' \"double\" \u{1F600}";
    store.append("first", &message(odd)).unwrap();
    assert_eq!(texts(&store.load("first").unwrap().unwrap())[2], odd);

    std::thread::sleep(Duration::from_millis(5));
    store.create(&Session::empty("second")).unwrap();
    let listed = store.list().unwrap();
    let ids: Vec<&str> = listed.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["second", "first"], "most recently updated first");
    assert_eq!(listed[1].messages, 3);
    assert_eq!(listed[0].messages, 0);
    assert!(
        store
            .load("second")
            .unwrap()
            .unwrap()
            .conversation
            .messages
            .is_empty()
    );

    // Another handle sees the same; deleting removes the journal.
    let other = f.open(&f.fresh().await).await;
    assert!(
        other.load("first").unwrap().is_none(),
        "a fresh store is empty"
    );
    assert!(store.delete("first").unwrap());
    assert!(!store.delete("first").unwrap());
    assert!(store.entries("first").unwrap().is_none());
    assert!(store.append("first", &message("late")).is_err());
}

pub(crate) async fn a_fork_keeps_what_came_before_its_point(f: &impl SessionFixture) {
    let store = f.open(&f.fresh().await).await;
    store.create(&Session::empty("base")).unwrap();
    for n in 0..2 {
        store.append("base", &message(&format!("m{n}"))).unwrap();
    }
    store
        .append(
            "base",
            &JournalEntry::Seen {
                seen: Seen::new(Trust::Untrusted, "web_fetch", "read before the fork"),
            },
        )
        .unwrap();
    for n in 2..4 {
        store.append("base", &message(&format!("m{n}"))).unwrap();
    }
    // Approved and read after the fork point: the fork must not have them.
    store
        .append(
            "base",
            &JournalEntry::Approval {
                tool: "shell".into(),
            },
        )
        .unwrap();
    store
        .append(
            "base",
            &JournalEntry::Seen {
                seen: Seen::new(Trust::Untrusted, "web_fetch", "read after the fork"),
            },
        )
        .unwrap();
    let fork = store.fork("base", 2).unwrap();
    store.append("base", &message("base only")).unwrap();
    store.append(&fork, &message("fork only")).unwrap();
    let base = store.load("base").unwrap().unwrap();
    let forked = store.load(&fork).unwrap().unwrap();
    assert_eq!(texts(&base), ["m0", "m1", "m2", "m3", "base only"]);
    assert_eq!(texts(&forked), ["m0", "m1", "fork only"]);
    assert_eq!(forked.forked_from.as_ref().unwrap().session, "base");
    assert_eq!(forked.forked_from.as_ref().unwrap().at, 2);
    assert!(base.conversation.session_approvals.contains("shell"));
    assert!(
        forked.conversation.session_approvals.is_empty(),
        "{:?}",
        forked.conversation.session_approvals
    );
    let read: Vec<&str> = forked
        .conversation
        .provenance
        .seen()
        .iter()
        .map(|s| s.text.as_str())
        .collect();
    assert_eq!(read, ["read before the fork"]);
    assert_eq!(base.conversation.provenance.seen().len(), 2);
    assert!(store.fork("nobody", 1).is_err());
    assert_eq!(store.list().unwrap().len(), 2);
    assert!(store.delete(&fork).unwrap());
    assert!(store.load(&fork).unwrap().is_none());
    assert_eq!(texts(&store.load("base").unwrap().unwrap()).len(), 5);
}

/// Two handles on one store (as two processes would have): a session is
/// claimed by one holder at a time, claiming again renews, an expired
/// claim can be taken over, a released one is free, and of eight racing
/// claimers exactly one wins.
pub(crate) async fn a_session_is_claimed_by_one_holder_at_a_time(f: &impl SessionFixture) {
    let at = f.fresh().await;
    let one = f.open(&at).await;
    let two = f.open(&at).await;
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
    let mut handles = Vec::new();
    for _ in 0..8 {
        handles.push(f.open(&at).await);
    }
    let winners = std::thread::scope(|scope| {
        let racing: Vec<_> = handles
            .iter()
            .enumerate()
            .map(|(i, store)| {
                scope.spawn(move || store.claim("race", &format!("h{i}"), long).unwrap())
            })
            .collect();
        racing
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|won| *won)
            .count()
    });
    assert_eq!(winners, 1);
}

/// A replica's turn in two steps: claiming reads what `load` reads (a
/// fork's point included) or finds it busy; appending with the release
/// stores the entries and frees the session, but a failed append keeps the
/// claim.
pub(crate) async fn a_claim_reads_the_session_and_a_save_gives_it_up(f: &impl SessionFixture) {
    let at = f.fresh().await;
    let one = f.open(&at).await;
    let two = f.open(&at).await;
    let long = Duration::from_secs(60);
    let mut session = Session::empty("s");
    session.conversation.messages.push(Message::user("hello"));
    session.state.insert("k".into(), json!(1));
    one.create(&session).unwrap();
    let forked = one.fork("s", 1).unwrap();

    for id in ["s", forked.as_str()] {
        let read = one.claim_and_load(id, "a", long).unwrap();
        assert_eq!(read, Claimed::Held(one.load(id).unwrap()), "{id}");
        assert_eq!(two.claim_and_load(id, "b", long).unwrap(), Claimed::Busy);
    }
    let Claimed::Held(Some(fork)) = one.claim_and_load(&forked, "a", long).unwrap() else {
        panic!("a renews its own claim and reads the fork");
    };
    assert_eq!(fork.forked_from.map(|p| p.session), Some("s".to_owned()));
    assert_eq!(
        two.claim_and_load("nobody", "b", long).unwrap(),
        Claimed::Held(None)
    );

    one.append_and_release("s", &[message("again"), message("more")], "a")
        .unwrap();
    let Claimed::Held(Some(after)) = two.claim_and_load("s", "b", long).unwrap() else {
        panic!("released with the save");
    };
    assert_eq!(texts(&after), ["hello", "again", "more"]);
    // Another holder's save does not free b's claim.
    one.append_and_release("s", &[message("late")], "a")
        .unwrap();
    assert!(!one.claim("s", "a", long).unwrap(), "still b's");
    // Nothing to append to: an error naming it, and the claim stays.
    let error = two
        .append_and_release("nobody", &[message("x")], "b")
        .unwrap_err();
    assert!(error.to_string().contains("nobody"), "{error}");
    assert!(!one.claim("nobody", "a", long).unwrap(), "b kept it");
}

/// A store's claims for async callers ([`SessionStore::nonblocking`]),
/// when it has them, are the same claims as its blocking calls': each
/// sees what the other took, renewed and gave up. (A store without them
/// leaves its callers to the blocking calls; nothing to check.)
pub(crate) async fn claims_awaited_mean_what_blocking_claims_mean(f: &impl SessionFixture) {
    let at = f.fresh().await;
    let one = f.open(&at).await;
    let two = f.open(&at).await;
    let (Some(one_async), Some(two_async)) = (one.nonblocking(), two.nonblocking()) else {
        return;
    };
    let long = Duration::from_secs(60);
    let mut session = Session::empty("s");
    session.conversation.messages.push(Message::user("hello"));
    one.create(&session).unwrap();

    let read = one_async.claim_and_load("s", "a", long).await.unwrap();
    assert_eq!(read, Claimed::Held(one.load("s").unwrap()));
    assert!(!two.claim("s", "b", long).unwrap(), "held by a (awaited)");
    assert_eq!(
        two_async.claim_and_load("s", "b", long).await.unwrap(),
        Claimed::Busy
    );
    assert!(one_async.renew("s", "a", long).await.unwrap());
    assert!(
        !two_async.renew("s", "b", long).await.unwrap(),
        "b holds none"
    );

    one_async
        .append_and_release("s", &[message("again")], "a")
        .await
        .unwrap();
    assert!(two.claim("s", "b", long).unwrap(), "released with the save");
    let Claimed::Held(Some(after)) = two_async.claim_and_load("s", "b", long).await.unwrap() else {
        panic!("b renews its own claim and reads the session");
    };
    assert_eq!(texts(&after), ["hello", "again"]);
    two_async.release("s", "b").await.unwrap();
    assert!(one.claim("s", "a", long).unwrap(), "released (awaited)");

    let error = one_async
        .append_and_release("nobody", &[message("x")], "a")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("nobody"), "{error}");
}

/// Four handles append to one session from four threads at once: every
/// entry is there once, and each writer's entries are in its order.
pub(crate) async fn concurrent_appends_lose_nothing_and_keep_each_writers_order(
    f: &impl SessionFixture,
) {
    let at = f.fresh().await;
    let store = f.open(&at).await;
    store.create(&Session::empty("busy")).unwrap();
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(f.open(&at).await);
    }
    std::thread::scope(|scope| {
        for (writer, handle) in handles.iter().enumerate() {
            scope.spawn(move || {
                for i in 0..50 {
                    handle
                        .append("busy", &message(&format!("w{writer}-{i}")))
                        .unwrap();
                }
            });
        }
    });
    let all = texts(&store.load("busy").unwrap().unwrap());
    assert_eq!(all.len(), 200);
    for writer in 0..4 {
        let mine: Vec<&String> = all
            .iter()
            .filter(|t| t.starts_with(&format!("w{writer}-")))
            .collect();
        let expected: Vec<String> = (0..50).map(|i| format!("w{writer}-{i}")).collect();
        assert_eq!(mine, expected.iter().collect::<Vec<_>>());
    }
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct Ms {
    /// How long to take.
    ms: u64,
}

/// A read-only tool that takes `ms` milliseconds.
pub(crate) struct Wait(pub(crate) &'static str);

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

/// A run journalled through one handle is loaded through another and
/// continued; the journal then holds the whole conversation once.
pub(crate) async fn an_agent_run_is_journalled_and_resumes_elsewhere(f: &impl SessionFixture) {
    let at = f.fresh().await;
    let here = f.open(&at).await;
    here.create(&Session::empty("run")).unwrap();
    let journal = StoreJournal::new(Arc::clone(&here), "run", Vec::new());
    let input = Message::user("Wait once.");
    journal.message(&input);
    let agent = Agent::builder(ScriptedProvider::new([
        ScriptedTurn::new().tool_call("w", "quick", json!({"ms": 1})),
        ScriptedTurn::text("Waited."),
    ]))
    .tool(Wait("quick"))
    .sessions(Sessions::new().journal(journal.clone()))
    .build();
    let outcome = agent.run_to_completion(vec![input]).await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert!(journal.take_errors().is_empty());

    let elsewhere = f.open(&at).await;
    let session = elsewhere.load("run").unwrap().unwrap();
    assert_eq!(session.conversation.messages, outcome.conversation.messages);
    let (mut conversation, _) = session.resume(&[]).unwrap();
    conversation.messages.push(Message::user("Again?"));
    let journal = StoreJournal::new(Arc::clone(&elsewhere), "run", Vec::new());
    let agent = Agent::builder(ScriptedProvider::new([ScriptedTurn::text("Done again.")]))
        .tool(Wait("quick"))
        .sessions(Sessions::new().journal(journal))
        .build();
    let outcome = agent.run_to_completion(conversation).await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let session = here.load("run").unwrap().unwrap();
    assert_eq!(session.conversation.messages, outcome.conversation.messages);
    assert_eq!(
        texts(&session).last().map(String::as_str),
        Some("Done again.")
    );
}

const ID: &str = "crash-session";

/// The process that gets killed: two parallel calls, one quick, one that
/// would take a minute.
pub(crate) async fn doomed(store: Arc<dyn SessionStore>) {
    store.create(&Session::empty(ID)).unwrap();
    let journal = StoreJournal::new(store, ID, Vec::new());
    let input = Message::user("Wait twice.");
    journal.message(&input);
    let provider = ScriptedProvider::new([ScriptedTurn::new()
        .tool_call("quick-1", "quick", json!({"ms": 10}))
        .tool_call("slow-1", "slow", json!({"ms": 60_000}))]);
    let agent = Agent::builder(provider)
        .tool(Wait("quick"))
        .tool(Wait("slow"))
        .sessions(Sessions::new().journal(journal))
        .build();
    let _ = agent.run_to_completion(vec![input]).await;
    panic!("the slow call should not have finished");
}

fn tool_results(session: &Session) -> Vec<(String, String)> {
    session
        .conversation
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

/// A process journalling a run is killed with SIGKILL while a slow call
/// runs: the store gives back every completed step, the interrupted call
/// is answered as interrupted, and the run completes in this process.
pub(crate) async fn a_process_killed_during_a_slow_tool_resumes_with_what_completed(
    f: &impl SessionFixture,
) {
    let at = f.fresh().await;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "journal_phase", "--nocapture"])
        .env("KINET_JOURNAL_AT", &at)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the quick result is in the journal, then kill -9.
    let store = f.open(&at).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            Instant::now() < deadline,
            "the quick result never reached the journal"
        );
        if let Ok(Some(session)) = store.load(ID)
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

    let session = store.load(ID).unwrap().unwrap();
    let results = tool_results(&session);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].1.contains("quick done"));
    // Resume: the slow call is answered as interrupted, the run completes.
    let (conversation, _) = session.resume(&[]).unwrap();
    let journal = StoreJournal::new(Arc::clone(&store), ID, Vec::new());
    let agent = Agent::builder(ScriptedProvider::new([ScriptedTurn::text("Resumed.")]))
        .tool(Wait("quick"))
        .tool(Wait("slow"))
        .sessions(Sessions::new().journal(journal))
        .build();
    let outcome = agent.run_to_completion(conversation).await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let interrupted = outcome.conversation.messages.iter().any(|m| {
        matches!(m, Message::Tool { tool_call_id, is_error: true, content, .. }
            if tool_call_id == "slow-1" && format!("{content:?}").contains("interrupted"))
    });
    assert!(interrupted, "{:?}", outcome.conversation.messages);
    assert!(outcome.conversation.unanswered_tool_calls().is_empty());
    // The journal holds every completed step once; the interrupted
    // call's answer is not journalled but made again by the repair on
    // every resume, the same each time.
    let session = store.load(ID).unwrap().unwrap();
    assert_eq!(
        session.conversation.messages.last().unwrap().text(),
        "Resumed."
    );
    let completed: Vec<&Message> = outcome
        .conversation
        .messages
        .iter()
        .filter(|m| !matches!(m, Message::Tool { tool_call_id, .. } if tool_call_id == "slow-1"))
        .collect();
    assert_eq!(
        session.conversation.messages.iter().collect::<Vec<_>>(),
        completed
    );
}
