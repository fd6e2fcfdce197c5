//! What kinet serves a read-only engine: file reads through its confined
//! workspace, refusals of writes, and answers to permission requests.

use std::io::Read as _;
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema as acp;
use kinet_core::ToolCtx;

use super::events::{Updates, kind_name};

/// The largest file an engine may read through kinet.
const MAX_READ: u64 = 16 * 1024 * 1024;

/// The kinds of tool call a read-only engine may be allowed to make.
fn reads(kind: acp::ToolKind) -> bool {
    matches!(
        kind,
        acp::ToolKind::Read | acp::ToolKind::Search | acp::ToolKind::Think | acp::ToolKind::Fetch
    )
}

/// The engine's side of the call: its name, the calling context, what
/// kinet refused it.
pub(super) struct Served {
    pub(super) engine: String,
    pub(super) ctx: ToolCtx,
    pub(super) updates: Arc<Updates>,
    refusals: Mutex<Vec<String>>,
}

impl Served {
    pub(super) fn new(engine: String, ctx: ToolCtx, updates: Arc<Updates>) -> Self {
        Self {
            engine,
            ctx,
            updates,
            refusals: Mutex::default(),
        }
    }

    /// Records (and reports as a warning event) something refused.
    pub(super) fn refuse(&self, what: String) {
        self.updates
            .warn(format!("engine `{}`: {what}", self.engine));
        if let Ok(mut refusals) = self.refusals.lock()
            && refusals.len() < 20
        {
            refusals.push(what);
        }
    }

    /// What was refused, in order.
    pub(super) fn refusals(&self) -> Vec<String> {
        self.refusals.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// `fs/read_text_file`: the file's text, read beneath the workspace
    /// roots with the kernel's help (a symlink or `..` out of them fails),
    /// from line `line` (1-based) for `limit` lines.
    pub(super) fn read_text_file(
        &self,
        request: &acp::ReadTextFileRequest,
    ) -> Result<acp::ReadTextFileResponse, agent_client_protocol::Error> {
        let shown = request.path.display().to_string();
        let refused = |why: String| {
            self.refuse(format!("a read of `{shown}` failed: {why}"));
            super::invalid(why)
        };
        let path = self
            .ctx
            .workspace_path(&shown)
            .map_err(|e| refused(e.message().to_owned()))?;
        let file = path
            .open_read()
            .map_err(|e| refused(path.error("read", e).message().to_owned()))?;
        let metadata = file
            .metadata()
            .map_err(|e| refused(path.error("read", e).message().to_owned()))?;
        if !metadata.is_file() {
            return Err(refused("it is not a regular file".into()));
        }
        if metadata.len() > MAX_READ {
            return Err(refused(format!(
                "it is {} bytes; kinet serves files up to {MAX_READ} bytes",
                metadata.len()
            )));
        }
        let mut bytes = Vec::new();
        file.take(MAX_READ)
            .read_to_end(&mut bytes)
            .map_err(|e| refused(path.error("read", e).message().to_owned()))?;
        let text = String::from_utf8_lossy(&bytes);
        let start = request.line.map_or(0, |l| l.saturating_sub(1) as usize);
        let limit = request.limit.map_or(usize::MAX, |l| l as usize);
        let content = if start == 0 && limit == usize::MAX {
            text.into_owned()
        } else {
            text.split_inclusive('\n').skip(start).take(limit).collect()
        };
        Ok(acp::ReadTextFileResponse::new(content))
    }

    /// `fs/write_text_file`: refused, the engine is read-only.
    pub(super) fn write_text_file(
        &self,
        request: &acp::WriteTextFileRequest,
    ) -> agent_client_protocol::Error {
        let why = format!(
            "a write of `{}` was refused: the engine is read-only",
            request.path.display()
        );
        self.refuse(why.clone());
        agent_client_protocol::Error::new(-32000, why)
    }

    /// `session/request_permission`: reading kinds (read, search, think,
    /// fetch) are allowed once; anything that edits, deletes, moves,
    /// executes or is unknown is rejected (the engine is read-only).
    pub(super) fn permission(
        &self,
        request: &acp::RequestPermissionRequest,
    ) -> acp::RequestPermissionResponse {
        let kind = request
            .tool_call
            .fields
            .kind
            .unwrap_or(acp::ToolKind::Other);
        let title = request
            .tool_call
            .fields
            .title
            .clone()
            .unwrap_or_else(|| request.tool_call.tool_call_id.to_string());
        let pick = |kinds: &[acp::PermissionOptionKind]| {
            kinds.iter().find_map(|kind| {
                request
                    .options
                    .iter()
                    .find(|option| option.kind == *kind)
                    .map(|option| option.option_id.clone())
            })
        };
        let chosen = if reads(kind) {
            pick(&[acp::PermissionOptionKind::AllowOnce])
        } else {
            self.refuse(format!(
                "its `{}` call \"{title}\" was rejected: the engine is read-only",
                kind_name(kind)
            ));
            pick(&[
                acp::PermissionOptionKind::RejectOnce,
                acp::PermissionOptionKind::RejectAlways,
            ])
        };
        acp::RequestPermissionResponse::new(match chosen {
            Some(id) => {
                acp::RequestPermissionOutcome::Selected(acp::SelectedPermissionOutcome::new(id))
            }
            None => acp::RequestPermissionOutcome::Cancelled,
        })
    }
}
