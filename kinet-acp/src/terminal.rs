//! The editor's terminals (`terminal/*`) for the shell tool: the command
//! runs in a terminal the editor shows with the call, started through
//! kinet's launcher so its confinement holds there too.
//!
//! A prompt's answer waits for its terminals ([`Open::released`]): the
//! protocol has the agent answer a cancelled prompt only once what it
//! started has stopped, and a terminal is released after its call when
//! the call was dropped mid-way.

use std::sync::Arc;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema as acp;
use async_trait::async_trait;
use kinet_core::ToolCtx;
use kinet_core::editor::{EditorTerminal, EditorTerminals, TerminalCommand, TerminalExit};

use crate::permission::ask;
use crate::updates::{PACK, Shown};

/// Starts terminals in the editor of one session.
pub(crate) struct EditorTerms {
    pub client: ConnectionTo<Client>,
    pub session: acp::SessionId,
    open: Open,
}

/// How many of a prompt's terminals are being created or not yet
/// released.
#[derive(Clone)]
pub(crate) struct Open(Arc<tokio::sync::watch::Sender<usize>>);

impl Open {
    pub(crate) fn new() -> Self {
        Self(Arc::new(tokio::sync::watch::Sender::new(0)))
    }

    /// One more terminal, until the token is dropped.
    fn counted(&self) -> Counted {
        self.0.send_modify(|n| *n += 1);
        Counted(self.clone())
    }

    /// Waits until every terminal is released, for at most `limit`.
    pub(crate) async fn released(&self, limit: std::time::Duration) {
        let mut open = self.0.subscribe();
        if tokio::time::timeout(limit, open.wait_for(|n| *n == 0))
            .await
            .is_err()
        {
            tracing::warn!("an editor terminal was not released in {limit:?}; answering anyway");
        }
    }
}

/// A terminal counted in [`Open`]: taken before the editor is asked to
/// create it (a call cancelled meanwhile leaves the creation to finish
/// and release it), dropped with the terminal's last handle, which is
/// after its release.
struct Counted(Open);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// One terminal.
struct Term {
    client: ConnectionTo<Client>,
    session: acp::SessionId,
    id: acp::TerminalId,
    _open: Counted,
}

#[async_trait]
impl EditorTerminals for EditorTerms {
    async fn create(
        &self,
        ctx: &ToolCtx,
        command: TerminalCommand,
    ) -> Result<Box<dyn EditorTerminal>, String> {
        let request = acp::CreateTerminalRequest::new(
            self.session.clone(),
            command.program.display().to_string(),
        )
        .args(command.args)
        .cwd(command.cwd)
        .output_byte_limit(command.output_limit);
        let open = self.open.counted();
        let created = ask(&self.client, request).await?;
        ctx.emit_pack(
            PACK,
            Shown {
                call_id: ctx.call_id().to_owned(),
                terminal_id: created.terminal_id.0.to_string(),
            },
        );
        Ok(Box::new(Term {
            client: self.client.clone(),
            session: self.session.clone(),
            id: created.terminal_id,
            _open: open,
        }))
    }
}

#[async_trait]
impl EditorTerminal for Term {
    async fn wait_for_exit(&self) -> Result<TerminalExit, String> {
        let request = acp::WaitForTerminalExitRequest::new(self.session.clone(), self.id.clone());
        let exit = ask(&self.client, request).await?.exit_status;
        Ok(TerminalExit::new(
            exit.exit_code.and_then(|code| i32::try_from(code).ok()),
            exit.signal,
        ))
    }

    async fn output(&self) -> Result<(String, bool), String> {
        let request = acp::TerminalOutputRequest::new(self.session.clone(), self.id.clone());
        let output = ask(&self.client, request).await?;
        Ok((output.output, output.truncated))
    }

    async fn kill(&self) -> Result<(), String> {
        let request = acp::KillTerminalRequest::new(self.session.clone(), self.id.clone());
        ask(&self.client, request).await.map(|_| ())
    }

    async fn release(&self) {
        let request = acp::ReleaseTerminalRequest::new(self.session.clone(), self.id.clone());
        if let Err(error) = ask(&self.client, request).await {
            tracing::debug!(%error, "the editor did not release a terminal");
        }
    }
}

/// The terminal extension for a prompt's agent; `open` counts its
/// terminals until they are released.
pub(crate) fn terminals(
    client: &ConnectionTo<Client>,
    session: &acp::SessionId,
    launcher: &kinet_core::sandbox::launcher::Launcher,
    open: &Open,
) -> kinet_core::editor::Terminals {
    kinet_core::editor::Terminals {
        editor: Arc::new(EditorTerms {
            client: client.clone(),
            session: session.clone(),
            open: open.clone(),
        }),
        launcher: launcher.clone(),
    }
}
