//! A command in one of the editor's terminals ([`Terminals`]): the editor
//! starts this program in launcher mode, which confines the command as
//! kinet would; the call waits for it, kills it on timeout or
//! cancellation, and takes its output from the editor.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kinet_core::sandbox::Containment;
use kinet_core::sandbox::launcher::{LaunchSpec, REFUSED};
use kinet_core::tool::{EditorTerminal, TerminalCommand, TerminalExit, Terminals};
use kinet_core::{ToolCtx, ToolError};

use super::{Ended, Finished};

/// One command for a terminal.
pub(super) struct Command<'a> {
    /// The command line, for messages and the report.
    pub line: &'a str,
    /// What the launcher runs, and how.
    pub spec: LaunchSpec,
    pub timeout: Duration,
    /// Output bytes the editor keeps.
    pub output_limit: usize,
}

/// Kills and releases the terminal unless the call saw it to its end:
/// a dropped call (its run aborted) leaves no command running.
struct Guard(Option<Arc<dyn EditorTerminal>>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(terminal) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = terminal.kill().await;
                terminal.release().await;
            });
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
    let containment = if command.spec.contain && kinet_core::sandbox::support().namespaces {
        Containment::PidNamespace
    } else {
        Containment::ProcessGroup
    };
    let launcher = &terminals.launcher;
    let request = TerminalCommand::new(
        launcher.program().to_path_buf(),
        launcher.args(&command.spec),
        command.spec.cwd.clone(),
        u64::try_from(command.output_limit).unwrap_or(u64::MAX),
    );
    let terminal: Arc<dyn EditorTerminal> =
        Arc::from(terminals.editor.create(ctx, request).await.map_err(|why| {
            ToolError::failed(format!(
                "the editor could not start `{line}` in a terminal: {why}"
            ))
        })?);
    let mut guard = Guard(Some(Arc::clone(&terminal)));
    let (mut timed_out, mut cancelled) = (false, false);
    let ended = tokio::select! {
        exit = terminal.wait_for_exit() => Some(exit),
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
            tokio::time::timeout(Duration::from_secs(5), terminal.wait_for_exit())
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
    Ok(Finished::new(
        line,
        output,
        ended,
        sandboxed,
        containment,
        started,
    ))
}
