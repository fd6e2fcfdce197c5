//! kinet as the engine's client: one handler per request the engine may
//! make, each checking first that it names the session kinet opened and
//! asks for something kinet offered.

use std::sync::Arc;

use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{
    Agent as AgentRole, Client, HandleDispatchFrom, on_receive_notification, on_receive_request,
};

use super::serve::Served;
use super::terminals::Terminals;
use super::{Offers, invalid};

type AcpResult<T = ()> = Result<T, agent_client_protocol::Error>;

/// What the handlers share.
#[derive(Clone)]
pub(super) struct Peer {
    served: Arc<Served>,
    terminals: Arc<Terminals>,
    offers: Offers,
}

fn not_offered(what: &str) -> agent_client_protocol::Error {
    agent_client_protocol::Error::method_not_found()
        .data(serde_json::json!(format!("kinet did not offer {what}")))
}

impl Peer {
    pub(super) fn new(served: Arc<Served>, terminals: Arc<Terminals>, offers: Offers) -> Self {
        Self {
            served,
            terminals,
            offers,
        }
    }

    /// An error for a request that names a session kinet did not open (it
    /// also counts against the engine), or asks for what was not offered.
    fn refused(
        &self,
        session: &acp::SessionId,
        offered: Option<(bool, &str)>,
    ) -> Option<agent_client_protocol::Error> {
        if !self.served.updates.is_ours(session) {
            return Some(invalid(format!("no session `{session}` is open")));
        }
        match offered {
            Some((false, what)) => Some(not_offered(what)),
            _ => None,
        }
    }

    async fn read(
        self,
        request: acp::ReadTextFileRequest,
        responder: Responder<acp::ReadTextFileResponse>,
    ) -> AcpResult {
        if let Some(error) =
            self.refused(&request.session_id, Some((self.offers.files, "file reads")))
        {
            return responder.respond_with_error(error);
        }
        // Off the connection's thread: a file can be large.
        let served = self.served;
        let read = tokio::task::spawn_blocking(move || served.read_text_file(&request)).await;
        responder.respond_with_result(read.unwrap_or_else(|_| {
            Err(agent_client_protocol::Error::internal_error()
                .data(serde_json::json!("the read failed")))
        }))
    }

    fn permission(
        &self,
        request: &acp::RequestPermissionRequest,
        responder: Responder<acp::RequestPermissionResponse>,
    ) -> AcpResult {
        match self.refused(&request.session_id, None) {
            Some(error) => responder.respond_with_error(error),
            None => responder.respond(self.served.permission(request)),
        }
    }

    fn create_terminal(
        &self,
        request: &acp::CreateTerminalRequest,
        responder: Responder<acp::CreateTerminalResponse>,
    ) -> AcpResult {
        if let Some(error) = self.refused(
            &request.session_id,
            Some((self.offers.terminals, "terminals")),
        ) {
            return responder.respond_with_error(error);
        }
        match self.terminals.create(request) {
            Ok(id) => responder.respond(acp::CreateTerminalResponse::new(id)),
            Err(why) => {
                self.served.refuse(format!(
                    "its command `{}` was not run: {why}",
                    request.command
                ));
                responder.respond_with_error(invalid(why))
            }
        }
    }

    fn wait_for_exit(
        &self,
        request: &acp::WaitForTerminalExitRequest,
        responder: Responder<acp::WaitForTerminalExitResponse>,
        cx: &ConnectionTo<AgentRole>,
    ) -> AcpResult {
        match self.terminals.wait(&request.terminal_id) {
            // Waits off the connection's loop.
            Ok(wait) => cx.spawn(async move { responder.respond_with_result(wait.await) }),
            Err(error) => responder.respond_with_error(error),
        }
    }

    /// The client's handlers: updates, file reads (and write refusals),
    /// permissions, terminals.
    pub(super) fn builder(
        self,
    ) -> agent_client_protocol::v1::Builder<Client, impl HandleDispatchFrom<AgentRole>> {
        let (updates, read, write, permission) =
            (self.clone(), self.clone(), self.clone(), self.clone());
        let (create, output, wait, kill, release) =
            (self.clone(), self.clone(), self.clone(), self.clone(), self);
        Client
            .v1()
            .name("kinet")
            .on_receive_notification(
                async move |notification: acp::SessionNotification, _cx| {
                    updates.served.updates.handle(notification);
                    Ok(())
                },
                on_receive_notification!(),
            )
            .on_receive_request(
                async move |request: acp::ReadTextFileRequest, responder, _cx| {
                    read.clone().read(request, responder).await
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: acp::WriteTextFileRequest, responder, _cx| {
                    responder.respond_with_error(write.served.write_text_file(&request))
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: acp::RequestPermissionRequest, responder, _cx| {
                    permission.permission(&request, responder)
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: acp::CreateTerminalRequest, responder, _cx| {
                    create.create_terminal(&request, responder)
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: acp::TerminalOutputRequest, responder, _cx| {
                    responder.respond_with_result(output.terminals.output(&request.terminal_id))
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: acp::WaitForTerminalExitRequest, responder, cx| {
                    wait.wait_for_exit(&request, responder, &cx)
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: acp::KillTerminalRequest, responder, _cx| {
                    let killed = kill.terminals.kill(&request.terminal_id);
                    responder.respond_with_result(killed.map(|()| acp::KillTerminalResponse::new()))
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: acp::ReleaseTerminalRequest, responder, _cx| {
                    let released = release.terminals.release(&request.terminal_id);
                    responder
                        .respond_with_result(released.map(|()| acp::ReleaseTerminalResponse::new()))
                },
                on_receive_request!(),
            )
    }
}
