//! The editor's terminals (`terminal/*`) for the shell tool: the command
//! runs in a terminal the editor shows with the call, started through
//! kinet's launcher so its confinement holds there too.

use std::sync::Arc;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema as acp;
use async_trait::async_trait;
use kinet_core::ToolCtx;
use kinet_core::tool::{EditorTerminal, EditorTerminals, TerminalCommand, TerminalExit};

use crate::permission::ask;
use crate::updates::{PACK, Shown};

/// Starts terminals in the editor of one session.
pub(crate) struct EditorTerms {
    pub client: ConnectionTo<Client>,
    pub session: acp::SessionId,
}

/// One terminal.
struct Term {
    client: ConnectionTo<Client>,
    session: acp::SessionId,
    id: acp::TerminalId,
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

/// The terminal extension for a session's agent.
pub(crate) fn terminals(
    client: &ConnectionTo<Client>,
    session: &acp::SessionId,
    launcher: &kinet_core::sandbox::launcher::Launcher,
) -> kinet_core::tool::Terminals {
    kinet_core::tool::Terminals {
        editor: Arc::new(EditorTerms {
            client: client.clone(),
            session: session.clone(),
        }),
        launcher: launcher.clone(),
    }
}
