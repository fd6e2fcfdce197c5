//! A command in one of the editor's terminals ([`Terminals`]): the editor
//! starts this program in launcher mode, which confines the command as
//! kinet would; the call waits for it, kills it on timeout or
//! cancellation, and takes its output from the editor.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kinet_core::editor::{EditorTerminal, TerminalCommand, TerminalExit, Terminals};
use kinet_core::sandbox::Containment;
use kinet_core::sandbox::launcher::{LaunchSpec, REFUSED};
use kinet_core::{ToolCtx, ToolError};

use super::{Ended, Finished};

/// One command for a terminal.
pub(super) struct Command<'a> {
    /// The command line, for messages and the report.
    pub line: &'a str,
    /// What the launcher runs, and how.
    pub spec: &'a LaunchSpec,
    /// The launcher's arguments for `spec`.
    pub launch_args: Vec<String>,
    pub timeout: Duration,
    /// Output bytes the editor keeps.
    pub output_limit: usize,
}

/// The editor's terminals and the launcher's arguments, when `spec` can
/// run in one as it would here: the context carries [`Terminals`], the
/// agent is confined to a workspace, the command gets a PID namespace
/// (killing the launcher must end everything it started), and the spec
/// fits in an argument. Otherwise the command runs here.
pub(super) fn usable(ctx: &ToolCtx, spec: &LaunchSpec) -> Option<(Arc<Terminals>, Vec<String>)> {
    let terminals = ctx.extension::<Terminals>()?;
    if ctx.roots().is_empty() || !spec.contain || !kinet_core::sandbox::support().namespaces {
        return None;
    }
    let args = terminals.launcher.args(spec)?;
    Some((terminals, args))
}

/// Kills and releases a terminal in a task of its own.
fn kill_and_release(terminal: Arc<dyn EditorTerminal>) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = terminal.kill().await;
            terminal.release().await;
        });
    }
}

/// Kills and releases the terminal unless the call saw it to its end:
/// a dropped call (its run aborted) leaves no command running.
struct Guard(Option<Arc<dyn EditorTerminal>>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(terminal) = self.0.take() {
            kill_and_release(terminal);
        }
    }
}

type Created = Result<Arc<dyn EditorTerminal>, String>;

/// The terminal being created. Dropped before it was taken (the call
/// cancelled or dropped), it closes the channel: a terminal that arrives
/// later is killed and released by the task that created it, one that
/// arrived already is killed and released here.
struct Pending(tokio::sync::oneshot::Receiver<Created>);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.close();
        if let Ok(Ok(orphan)) = self.0.try_recv() {
            kill_and_release(orphan);
        }
    }
}

pub(super) async fn run(
    terminals: &Terminals,
    command: Command<'_>,
    ctx: &ToolCtx,
) -> Result<Finished, ToolError> {
    let started = Instant::now();
    let line = command.line;
    let sandboxed = command.spec.sandbox.is_some();
    let request = TerminalCommand::new(
        terminals.launcher.program().to_path_buf(),
        command.launch_args,
        command.spec.cwd.clone(),
        u64::try_from(command.output_limit).unwrap_or(u64::MAX),
    );
    // Created in a task of its own: if this call is cancelled or dropped
    // while the editor is still starting the terminal, the task kills and
    // releases it once it exists.
    let (created_tx, created_rx) = tokio::sync::oneshot::channel::<Created>();
    let editor = Arc::clone(&terminals.editor);
    let task_ctx = ctx.clone();
    tokio::spawn(async move {
        // Cancelled before the task started: no terminal (the call has
        // returned, and its run may have ended).
        if task_ctx.is_cancelled() {
            return;
        }
        let created = editor
            .create(&task_ctx, request)
            .await
            .map(Arc::<dyn EditorTerminal>::from);
        if let Err(Ok(orphan)) = created_tx.send(created) {
            kill_and_release(orphan);
        }
    });
    let not_started = || ToolError::cancelled(format!("`{line}` was cancelled before it started"));
    let mut pending = Pending(created_rx);
    let created = tokio::select! {
        biased;
        created = &mut pending.0 => match created {
            Ok(created) => created,
            Err(_) if ctx.is_cancelled() => return Err(not_started()),
            Err(_) => return Err(ToolError::failed(format!("the editor's terminal for `{line}` was lost"))),
        },
        _ = ctx.cancellation().cancelled() => return Err(not_started()),
    };
    drop(pending);
    let terminal = created.map_err(|why| {
        ToolError::failed(format!(
            "the editor could not start `{line}` in a terminal: {why}"
        ))
    })?;
    let mut guard = Guard(Some(Arc::clone(&terminal)));
    let (mut timed_out, mut cancelled) = (false, false);
    // One wait, kept across a kill (the editor answers it when the command
    // ends either way; a dropped request would be cancelled at the editor).
    let wait = terminal.wait_for_exit();
    tokio::pin!(wait);
    let ended = tokio::select! {
        exit = &mut wait => Some(exit),
        _ = tokio::time::sleep(command.timeout) => { timed_out = true; None }
        _ = ctx.cancellation().cancelled() => { cancelled = true; None }
    };
    let exit = match ended {
        Some(exit) => exit.map_err(|why| {
            ToolError::failed(format!("the editor lost the terminal of `{line}`: {why}"))
        })?,
        None => {
            // The launcher dies and its namespace with it.
            let _ = terminal.kill().await;
            tokio::time::timeout(Duration::from_secs(5), &mut wait)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default()
        }
    };
    let (mut output, dropped) = terminal.output().await.unwrap_or_default();
    guard.0 = None;
    terminal.release().await;
    if dropped {
        output.insert_str(0, "[... earlier output was dropped ...]\n");
    }
    if exit.exit_code == Some(REFUSED) && output.contains("kinet: the command was not started") {
        return Err(ToolError::failed(format!(
            "`{line}` was not started in the editor's terminal: {}",
            output.trim()
        )));
    }
    let TerminalExit {
        exit_code, signal, ..
    } = exit;
    let ended = Ended {
        exit_code,
        signal,
        timed_out,
        cancelled,
    };
    // Only run here with a PID namespace (see `usable`).
    Ok(Finished::new(
        line,
        output,
        ended,
        sandboxed,
        Containment::PidNamespace,
        started,
    ))
}
