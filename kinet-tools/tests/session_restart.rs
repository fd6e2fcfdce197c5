//! A session saved by one process and resumed by another (this test binary
//! runs itself twice): the approvals granted for the session, the
//! read-before-edit record and the todo list all survive.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kinet_core::builder::{Approval, Workspace};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kinet_core::confirm::{ConfirmError, ConfirmRequest};
use kinet_core::session::Session;
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::{Agent, ConfirmDecision, ConfirmHandler, Message, RunOutcome};
use kinet_tools::LocalPack;
use serde_json::json;

/// Approves for the session, and counts how often it was asked.
#[derive(Default)]
struct ForSession(AtomicUsize);

#[async_trait::async_trait]
impl ConfirmHandler for ForSession {
    async fn confirm(&self, _request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(ConfirmDecision::AllowForSession)
    }
}

/// Denies, and counts how often it was asked.
#[derive(Default)]
struct Denies(AtomicUsize);

#[async_trait::async_trait]
impl ConfirmHandler for Denies {
    async fn confirm(&self, _request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(ConfirmDecision::Deny { reason: None })
    }
}

fn agent(
    dir: &Path,
    pack: &LocalPack,
    provider: ScriptedProvider,
    handler: Arc<dyn ConfirmHandler>,
) -> Agent {
    Agent::builder(provider)
        .tools(pack.toolset())
        .workspace(Workspace::new().cwd(dir).root(dir))
        // Approvals across a restart; the scripted model declares no plan,
        // so the values rule alone (the shell's output is untrusted).
        .approval(Approval::new().defence(kinet_core::pipeline::Defence::provenance()))
        .confirm_handler(handler)
        .build()
}

fn results(outcome: &RunOutcome) -> Vec<(String, bool, String)> {
    outcome
        .conversation
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                name,
                is_error,
                content,
                ..
            } => Some((name.clone(), *is_error, format!("{content:?}"))),
            _ => None,
        })
        .collect()
}

/// The first process: reads and edits a file, writes todos, runs a
/// command (edit and shell approved for the session), saves the session.
async fn save(dir: &Path) {
    std::fs::write(dir.join("notes.txt"), "alpha\nbeta\n").unwrap();
    let pack = LocalPack::new();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("c1", "read_file", json!({"path": "notes.txt"})),
        ScriptedTurn::new().tool_call(
            "c1b",
            "edit_file",
            json!({"path": "notes.txt", "old_string": "alpha", "new_string": "ALPHA"}),
        ),
        ScriptedTurn::new().tool_call(
            "c2",
            "todo_write",
            json!({"todos": [{"content": "fix beta", "status": "in_progress"}]}),
        ),
        ScriptedTurn::new().tool_call("c3", "shell", json!({"command": "echo first"})),
        ScriptedTurn::text("Saved."),
    ]);
    let handler = Arc::new(ForSession::default());
    let outcome = agent(dir, &pack, provider, handler.clone())
        .run_to_completion("Start.")
        .await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(
        handler.0.load(Ordering::SeqCst),
        2,
        "edit_file and shell were asked once each"
    );
    assert!(
        results(&outcome).iter().all(|(_, error, _)| !error),
        "{:?}",
        results(&outcome)
    );
    let session = Session::capture(&outcome.conversation, &pack.states());
    std::fs::write(dir.join("session.json"), session.to_json()).unwrap();
}

/// The second process: resumes, edits the file read before the restart,
/// runs a command without being asked, and reports what it saw.
async fn resume(dir: &Path) {
    let session =
        Session::from_json(&std::fs::read_to_string(dir.join("session.json")).unwrap()).unwrap();
    let pack = LocalPack::new();
    let (mut conversation, _) = session.resume(&pack.states()).unwrap();
    conversation.push(Message::user("Continue."));
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call(
            "d1",
            "edit_file",
            json!({"path": "notes.txt", "old_string": "beta", "new_string": "gamma"}),
        ),
        ScriptedTurn::new().tool_call("d2", "shell", json!({"command": "echo second"})),
        ScriptedTurn::text("Done."),
    ]);
    let handler = Arc::new(Denies::default());
    let outcome = agent(dir, &pack, provider, handler.clone())
        .run_to_completion(conversation)
        .await;
    let report = json!({
        "completed": outcome.stop.is_completed(),
        "asked": handler.0.load(Ordering::SeqCst),
        "results": results(&outcome).iter().rev().take(2).map(|(n, e, c)| json!([n, e, c])).collect::<Vec<_>>(),
        "todos": pack.todos.items().iter().map(|t| t.content.clone()).collect::<Vec<_>>(),
        "file": std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
    });
    std::fs::write(dir.join("report.json"), report.to_string()).unwrap();
}

/// Runs one phase when this binary is started by the test below.
#[tokio::test]
async fn session_phase() {
    let (Ok(phase), Ok(dir)) = (
        std::env::var("KINET_SESSION_PHASE"),
        std::env::var("KINET_SESSION_DIR"),
    ) else {
        return;
    };
    let dir = PathBuf::from(dir);
    match phase.as_str() {
        "save" => save(&dir).await,
        "resume" => resume(&dir).await,
        other => panic!("unknown phase {other}"),
    }
}

#[test]
fn a_session_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    for phase in ["save", "resume"] {
        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "session_phase",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("KINET_SESSION_PHASE", phase)
            .env("KINET_SESSION_DIR", &root)
            .status()
            .unwrap();
        assert!(status.success(), "the {phase} process failed");
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["completed"], true, "{report}");
    // Approved for the session before the restart: not asked again.
    assert_eq!(report["asked"], 0, "{report}");
    // edit_file accepted a file read before the restart.
    assert_eq!(report["file"], "ALPHA\ngamma\n", "{report}");
    for result in report["results"].as_array().unwrap() {
        assert_eq!(result[1], false, "{report}");
    }
    assert_eq!(report["todos"], json!(["fix beta"]), "{report}");
}
