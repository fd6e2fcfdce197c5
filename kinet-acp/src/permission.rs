//! What the agent asks of the editor: approvals (its `ConfirmHandler`
//! sends `session/request_permission` and waits for the person's choice)
//! and files' text (`fs/read_text_file` and `fs/write_text_file`, the
//! editor's buffers).

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema as acp;
use async_trait::async_trait;
use kinet_core::ConfirmDecision;
use kinet_core::confirm::{ConfirmError, ConfirmHandler, ConfirmRequest};
use kinet_core::editor::EditorFiles;

use crate::updates::{kind, title};

/// Sends the editor a request and waits for its answer (the error as the
/// text a tool reports).
pub(crate) async fn ask<Req>(
    client: &ConnectionTo<Client>,
    request: Req,
) -> Result<Req::Response, String>
where
    Req: agent_client_protocol::JsonRpcRequest,
{
    client
        .send_request(request)
        .block_task()
        .await
        .map_err(|e| e.to_string())
}

/// Asks the editor about each call that needs approval.
pub(crate) struct EditorApproval {
    pub client: ConnectionTo<Client>,
    pub session: acp::SessionId,
}

const ALLOW: &str = "allow";
const ALLOW_ALWAYS: &str = "allow_always";
const REJECT: &str = "reject";

#[async_trait]
impl ConfirmHandler for EditorApproval {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        let mut fields = acp::ToolCallUpdateFields::new()
            .title(title(&request.tool, &request.arguments))
            .kind(kind(&request.tool))
            .status(acp::ToolCallStatus::Pending)
            .raw_input(request.arguments.clone());
        let mut shown = request.summary.clone();
        if let Some(concern) = &request.concern {
            shown = format!("{concern}\n\n{shown}");
        }
        fields = fields.content(vec![acp::ToolCallContent::Content(acp::Content::new(
            shown,
        ))]);
        let question = acp::RequestPermissionRequest::new(
            self.session.clone(),
            acp::ToolCallUpdate::new(request.call_id.clone(), fields),
            vec![
                acp::PermissionOption::new(ALLOW, "Allow", acp::PermissionOptionKind::AllowOnce),
                acp::PermissionOption::new(
                    ALLOW_ALWAYS,
                    format!("Always allow {}", request.tool),
                    acp::PermissionOptionKind::AllowAlways,
                ),
                acp::PermissionOption::new(REJECT, "Reject", acp::PermissionOptionKind::RejectOnce),
            ],
        );
        let answer = ask(&self.client, question)
            .await
            .map_err(|e| ConfirmError(format!("the editor did not answer: {e}")))?;
        Ok(match answer.outcome {
            acp::RequestPermissionOutcome::Selected(selected) => match &*selected.option_id.0 {
                ALLOW => ConfirmDecision::Allow,
                ALLOW_ALWAYS => ConfirmDecision::AllowForSession,
                _ => ConfirmDecision::Deny {
                    reason: Some("the user rejected it in the editor".into()),
                },
            },
            // The prompt was cancelled while the editor asked.
            _ => ConfirmDecision::Deny {
                reason: Some("the prompt was cancelled".into()),
            },
        })
    }
}

/// Files' text as the editor holds it (`fs/read_text_file`) and writes
/// into its buffers (`fs/write_text_file`), for the file tools, after
/// their own confinement checks; writes as the editor offers them.
pub(crate) struct EditorBuffers {
    pub client: ConnectionTo<Client>,
    pub session: acp::SessionId,
    pub writes: bool,
}

#[async_trait]
impl EditorFiles for EditorBuffers {
    async fn read_text(&self, path: &std::path::Path) -> Result<String, String> {
        let request = acp::ReadTextFileRequest::new(self.session.clone(), path.to_path_buf());
        ask(&self.client, request)
            .await
            .map(|answer| answer.content)
    }

    fn writes(&self) -> bool {
        self.writes
    }

    async fn write_text(&self, path: &std::path::Path, text: &str) -> Result<(), String> {
        let request =
            acp::WriteTextFileRequest::new(self.session.clone(), path.to_path_buf(), text);
        ask(&self.client, request).await.map(|_| ())
    }
}
