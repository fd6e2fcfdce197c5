//! A call's question and its answer: what the pipeline asks the host's
//! handler, and what comes back (now or on a resume).

use serde::{Deserialize, Serialize};

/// What the user is asked to approve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfirmRequest {
    /// The tool name.
    pub tool: String,
    /// The tool call id.
    pub call_id: String,
    /// The arguments as the model gave them (parsed JSON when they parse).
    pub arguments: serde_json::Value,
    /// A human-readable summary: the shell command, a unified diff, or the
    /// pretty-printed arguments.
    pub summary: String,
    /// Set when the injection defence flagged the call: why, naming the
    /// untrusted source its arguments came from (see
    /// [`Defence`](crate::pipeline::Defence)). Show it to the user; an
    /// approval then covers this call only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concern: Option<String>,
}

impl ConfirmRequest {
    /// A request with no concern.
    pub fn new(
        tool: impl Into<String>,
        call_id: impl Into<String>,
        arguments: serde_json::Value,
        summary: impl Into<String>,
    ) -> Self {
        Self {
            tool: tool.into(),
            call_id: call_id.into(),
            arguments,
            summary: summary.into(),
            concern: None,
        }
    }
}

/// The user's answer about one call: what a [`ConfirmHandler`](crate::ConfirmHandler) returns, and
/// what a host gives for a deferred call when it resumes the run
/// ([`Decisions`](crate::deferred::Decisions)).
///
/// Spelled like the rules' [`Decision`](crate::rules::Decision) (`Allow`, `Deny`); the rules say
/// `Ask` where this is the answer to the question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ConfirmDecision {
    /// Run this call.
    #[serde(alias = "approve")]
    Allow,
    /// Run this call and every later call of the same tool in this
    /// conversation without asking. (For a call the injection defence
    /// flagged, this call only.)
    #[serde(alias = "approve_for_session")]
    AllowForSession,
    /// Do not run it; the model is told, with the reason if one is given.
    Deny {
        /// Shown to the model.
        reason: Option<String>,
    },
    /// Run it with these arguments instead of the model's. They are read
    /// again as the tool's arguments (a call they do not fit is refused),
    /// and a command line in them is planned again.
    Edit {
        /// The arguments to run with.
        arguments: serde_json::Value,
    },
    /// Do not run it and end the run.
    Abort,
    /// Answer later, perhaps in another process: the run stops with
    /// [`RunStop::AwaitingApproval`](crate::RunStop::AwaitingApproval),
    /// the pending calls and the turn saved in the conversation (and its
    /// session), and [`Agent::resume`](crate::Agent::resume) finishes it
    /// with the decisions. As a resumed decision it leaves the call
    /// waiting: it is asked about again.
    Defer,
}
