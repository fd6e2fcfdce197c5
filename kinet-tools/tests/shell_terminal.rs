//! The shell tool in an editor's terminals (`kinet_core::editor::Terminals`),
//! against a fake editor: what it asks the editor to start, and that a
//! command out of time, cancelled, or cancelled while its terminal is
//! still being made is killed and released.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use kinet_core::tool::engine::EngineCtx as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinet_core::editor::{
    EditorTerminal, EditorTerminals, TerminalCommand, TerminalExit, Terminals,
};
use kinet_core::sandbox::launcher::{LAUNCH_FLAG, launcher};
use kinet_core::tool::ToolErrorKind;
use kinet_core::tool::engine::Extensions;
use kinet_core::{Tool, ToolCtx};
use kinet_tools::shell::{ShellConfig, ShellTool};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Terminals whose commands never end by themselves; each step noted.
#[derive(Default)]
struct FakeEditor {
    /// How long making a terminal takes.
    delay: Duration,
    started: Mutex<Vec<TerminalCommand>>,
    log: Arc<Mutex<Vec<&'static str>>>,
    /// Cancelled just as a terminal is made: the call sees its
    /// terminal and its cancellation at once.
    cancel_on_create: Option<CancellationToken>,
    /// Told just as a terminal is made.
    made: Arc<tokio::sync::Notify>,
}

struct FakeTerminal {
    log: Arc<Mutex<Vec<&'static str>>>,
    killed: tokio::sync::watch::Sender<bool>,
}

#[async_trait::async_trait]
impl EditorTerminals for FakeEditor {
    async fn create(
        &self,
        _ctx: &ToolCtx,
        command: TerminalCommand,
    ) -> Result<Box<dyn EditorTerminal>, String> {
        tokio::time::sleep(self.delay).await;
        self.started.lock().unwrap().push(command);
        self.log.lock().unwrap().push("created");
        if let Some(cancel) = &self.cancel_on_create {
            cancel.cancel();
        }
        self.made.notify_one();
        Ok(Box::new(FakeTerminal {
            log: Arc::clone(&self.log),
            killed: tokio::sync::watch::Sender::new(false),
        }))
    }
}

#[async_trait::async_trait]
impl EditorTerminal for FakeTerminal {
    async fn wait_for_exit(&self) -> Result<TerminalExit, String> {
        let mut killed = self.killed.subscribe();
        let _ = killed.wait_for(|killed| *killed).await;
        Ok(TerminalExit::new(None, Some("SIGKILL".into())))
    }
    async fn output(&self) -> Result<(String, bool), String> {
        Ok(("some output\n".into(), false))
    }
    async fn kill(&self) -> Result<(), String> {
        self.log.lock().unwrap().push("kill");
        self.killed.send_replace(true);
        Ok(())
    }
    async fn release(&self) {
        self.log.lock().unwrap().push("release");
    }
}

/// The terminal made was killed and released, once the cleanup that
/// follows the call has run.
async fn assert_killed_and_released(editor: &FakeEditor) {
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(*editor.log.lock().unwrap(), ["created", "kill", "release"]);
}

/// A context confined to a temp dir, with the fake editor's terminals.
fn context(editor: &Arc<FakeEditor>) -> (tempfile::TempDir, ToolCtx) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let mut extensions = Extensions::new();
    extensions.insert(Terminals {
        editor: editor.clone(),
        launcher: launcher().unwrap(),
    });
    let ctx = ToolCtx::new(&root)
        .with_roots(vec![root])
        .with_extensions(extensions);
    (dir, ctx)
}

/// Whether this machine gives commands a PID namespace (the editor's
/// terminals are used only then).
fn namespaces() -> bool {
    let yes = kinet_core::sandbox::support().namespaces;
    if !yes {
        eprintln!("SKIPPED: no PID namespaces here, so commands never go to an editor's terminal");
    }
    yes
}

async fn shell(
    tool: &ShellTool,
    ctx: &ToolCtx,
    args: serde_json::Value,
) -> Result<kinet_core::ToolOutput, kinet_core::ToolError> {
    tool.call(serde_json::from_value(args).unwrap(), ctx).await
}

#[tokio::test]
async fn a_command_out_of_time_is_killed_and_released() {
    if !namespaces() {
        return;
    }
    let editor = Arc::new(FakeEditor::default());
    let (_dir, ctx) = context(&editor);
    let result = shell(
        &ShellTool::default(),
        &ctx,
        json!({"command": "echo 'a $(b)' `c`; sleep 9", "timeout_ms": 200}),
    )
    .await;
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ToolErrorKind::Timeout, "{error}");
    assert!(error.message().contains("some output"), "{error}");
    assert_eq!(*editor.log.lock().unwrap(), ["created", "kill", "release"]);
    // The editor was asked to start the launcher, the command hidden in
    // an argument no shell acts on.
    let started = editor.started.lock().unwrap();
    assert_eq!(started[0].program, std::env::current_exe().unwrap());
    assert_eq!(started[0].args[0], LAUNCH_FLAG);
    assert!(started[0].args[1].bytes().all(|b| b.is_ascii_hexdigit()));
}

#[tokio::test]
async fn a_cancelled_command_is_killed_and_released() {
    if !namespaces() {
        return;
    }
    let editor = Arc::new(FakeEditor::default());
    let (_dir, ctx) = context(&editor);
    let cancel = CancellationToken::new();
    let ctx = ctx.with_cancellation(cancel.clone());
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let error = shell(&ShellTool::default(), &ctx, json!({"command": "sleep 9"}))
        .await
        .unwrap_err();
    canceller.await.unwrap();
    assert_eq!(error.kind(), ToolErrorKind::Cancelled, "{error}");
    assert_eq!(*editor.log.lock().unwrap(), ["created", "kill", "release"]);
}

#[tokio::test]
async fn a_terminal_made_after_its_call_was_cancelled_is_killed() {
    if !namespaces() {
        return;
    }
    let editor = Arc::new(FakeEditor {
        delay: Duration::from_millis(300),
        ..FakeEditor::default()
    });
    let (_dir, ctx) = context(&editor);
    let cancel = CancellationToken::new();
    let ctx = ctx.with_cancellation(cancel.clone());
    let call = tokio::spawn({
        let ctx = ctx.clone();
        async move { shell(&ShellTool::default(), &ctx, json!({"command": "sleep 9"})).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    cancel.cancel();
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.kind(), ToolErrorKind::Cancelled, "{error}");
    assert!(editor.log.lock().unwrap().is_empty());
    // The editor finishes making it: it is killed and released at once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(*editor.log.lock().unwrap(), ["created", "kill", "release"]);
}

#[tokio::test]
async fn a_terminal_made_as_its_call_is_cancelled_is_killed() {
    if !namespaces() {
        return;
    }
    let cancel = CancellationToken::new();
    let editor = Arc::new(FakeEditor {
        cancel_on_create: Some(cancel.clone()),
        ..FakeEditor::default()
    });
    let (_dir, ctx) = context(&editor);
    let ctx = ctx.with_cancellation(cancel);
    let error = shell(&ShellTool::default(), &ctx, json!({"command": "sleep 9"}))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ToolErrorKind::Cancelled, "{error}");
    assert_killed_and_released(&editor).await;
}

/// The call is dropped (its run aborted) after its terminal was handed
/// over and before the call took it: the terminal is still killed and
/// released. On this single-threaded runtime, tasks run in the order
/// they are woken: the one that aborts the call (woken as the terminal
/// is made) runs before the call (woken when it is handed over).
#[tokio::test]
async fn a_terminal_handed_to_a_dropped_call_is_killed() {
    if !namespaces() {
        return;
    }
    let editor = Arc::new(FakeEditor::default());
    let (_dir, ctx) = context(&editor);
    let call = tokio::spawn(async move {
        shell(&ShellTool::default(), &ctx, json!({"command": "sleep 9"})).await
    });
    let abort = call.abort_handle();
    let made = Arc::clone(&editor.made);
    tokio::spawn(async move {
        made.notified().await;
        abort.abort();
    });
    assert!(call.await.unwrap_err().is_cancelled());
    assert_killed_and_released(&editor).await;
}

#[tokio::test]
async fn a_call_cancelled_before_it_starts_makes_no_terminal() {
    if !namespaces() {
        return;
    }
    let editor = Arc::new(FakeEditor::default());
    let (_dir, ctx) = context(&editor);
    let cancel = CancellationToken::new();
    cancel.cancel();
    let ctx = ctx.with_cancellation(cancel);
    let error = shell(&ShellTool::default(), &ctx, json!({"command": "sleep 9"}))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ToolErrorKind::Cancelled, "{error}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(editor.log.lock().unwrap().is_empty());
    assert!(editor.started.lock().unwrap().is_empty());
}

#[tokio::test]
async fn without_containment_commands_stay_here() {
    let editor = Arc::new(FakeEditor::default());
    let (_dir, ctx) = context(&editor);
    let tool = ShellTool::new(ShellConfig {
        contain: false,
        ..ShellConfig::default()
    });
    let output = shell(&tool, &ctx, json!({"command": "echo here"}))
        .await
        .unwrap();
    assert!(output.text.starts_with("here\n"), "{}", output.text);
    assert!(editor.started.lock().unwrap().is_empty());
}
