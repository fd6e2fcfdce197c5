//! Approvals answered later: a run that stops at one
//! ([`RunStop::AwaitingApproval`](crate::RunStop::AwaitingApproval)), what
//! it keeps ([`DeferredTurn`], in the conversation and its session), and
//! the decisions that finish it in any process ([`Agent::resume`](crate::Agent::resume)).
//!
//! A run stops at a question when the host's handler answers
//! [`ConfirmDecision::Defer`], or for every
//! question when its policy says
//! [`defer_questions`](crate::ApprovalPolicy::defer_questions). The calls
//! of the turn that ran before the question keep their results; the rest
//! of the turn waits. Every call has an
//! [`idempotency_key`](crate::ToolCtx::idempotency_key) that stays the same
//! across the stop, the resume and any resume after a crash.
//!
//! A call can also stop while it runs: a Code Mode script whose tool call
//! waits, a sub-agent whose run stopped at a question. The tool returns
//! [`ToolError::deferred`](crate::ToolError::deferred) with a
//! [`Suspension`] (what waits, and what it needs to go on); on resume it
//! runs again with [`ToolCtx::saved_state`](crate::ToolCtx::saved_state)
//! and the decisions, and picks up where it stopped.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::message::ToolCall;
use crate::decision::{ConfirmDecision, ConfirmRequest};

/// A turn whose calls wait for approvals given later: kept in the
/// [`Conversation`](crate::Conversation) (and its session) when a run
/// stops with [`RunStop::AwaitingApproval`](crate::RunStop::AwaitingApproval).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeferredTurn {
    /// Every call of the turn, as the model made them; those with a result
    /// in the history ran (or were answered) before the stop.
    pub calls: Vec<ToolCall>,
    /// The calls waiting for a decision, with what the user is to see
    /// (empty for a turn a crash interrupted, which
    /// [`Agent::resume`](crate::Agent::resume) also finishes).
    pub pending: Vec<ConfirmRequest>,
    /// The turn's number in its run.
    pub turn: u32,
    /// What each call that stopped while running (a Code Mode script, a
    /// sub-agent) needs to go on, by call id (see [`Suspension`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub saved: BTreeMap<String, serde_json::Value>,
}

/// Why a call stopped while running: calls it made wait for decisions
/// given later. A tool returns it ([`ToolError::deferred`](crate::ToolError::deferred))
/// when a call it made through [`ToolCtx::call_tool`](crate::ToolCtx::call_tool)
/// or a run it started (a sub-agent) stopped at a deferred approval; the
/// run stops with [`RunStop::AwaitingApproval`](crate::RunStop::AwaitingApproval)
/// listing `pending`, keeps `saved` in its [`DeferredTurn`], and on
/// [`Agent::resume`](crate::Agent::resume) runs the call again in a context
/// that holds the decisions and its saved state
/// ([`ToolCtx::saved_state`](crate::ToolCtx::saved_state)).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Suspension {
    /// The calls waiting for a decision. Their ids must start with the
    /// id of the call that made them and a dot (`call_1.3`), so that
    /// decisions find their way back.
    pub pending: Vec<ConfirmRequest>,
    /// What the stopped calls need to go on, by call id: the tool's own
    /// state under its call id, and that of calls it made under theirs.
    pub saved: BTreeMap<String, serde_json::Value>,
}

impl Suspension {
    /// A suspension waiting for these calls, with nothing saved.
    pub fn new(pending: Vec<ConfirmRequest>) -> Self {
        Self {
            pending,
            saved: BTreeMap::new(),
        }
    }

    /// Saves what the call `call_id` needs to go on.
    pub fn save(mut self, call_id: impl Into<String>, state: serde_json::Value) -> Self {
        self.saved.insert(call_id.into(), state);
        self
    }
}

/// What a resumed turn's calls run with: the decisions for the calls that
/// waited, and what stopped calls saved.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Resumption {
    pub(crate) decisions: Decisions,
    pub(crate) saved: BTreeMap<String, serde_json::Value>,
    /// The calls the injection defence flagged when they were asked
    /// about: an approval for the session covers such a call only.
    pub(crate) flagged: std::collections::BTreeSet<String>,
}

/// The decisions that finish a deferred turn, by call id.
///
/// ```
/// use kinet_core::deferred::Decisions;
///
/// let decisions = Decisions::new()
///     .allow("call_1")
///     .deny("call_2", "not on Fridays");
/// assert_eq!(decisions.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Decisions(pub BTreeMap<String, ConfirmDecision>);

impl Decisions {
    /// No decisions yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the decision for a call.
    pub fn set(mut self, call_id: impl Into<String>, decision: ConfirmDecision) -> Self {
        self.0.insert(call_id.into(), decision);
        self
    }

    /// Allows a call.
    pub fn allow(self, call_id: impl Into<String>) -> Self {
        self.set(call_id, ConfirmDecision::Allow)
    }

    /// Denies a call, telling the model why.
    pub fn deny(self, call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        self.set(
            call_id,
            ConfirmDecision::Deny {
                reason: Some(reason.into()),
            },
        )
    }

    /// Runs a call with other arguments.
    pub fn edit(self, call_id: impl Into<String>, arguments: serde_json::Value) -> Self {
        self.set(call_id, ConfirmDecision::Edit { arguments })
    }

    /// The decision for a call.
    pub fn get(&self, call_id: &str) -> Option<&ConfirmDecision> {
        self.0.get(call_id)
    }

    /// How many decisions there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The decisions for the calls made by the call `call_id` (ids
    /// `<call_id>.<id>`), under their own ids: what a tool that ran a
    /// sub-agent passes to the sub-agent's resume.
    ///
    /// ```
    /// use kinet_core::deferred::Decisions;
    ///
    /// let all = Decisions::new().allow("c1.s1").allow("c2");
    /// assert_eq!(all.within("c1"), Decisions::new().allow("s1"));
    /// ```
    pub fn within(&self, call_id: &str) -> Decisions {
        let prefix = format!("{call_id}.");
        Decisions(
            self.0
                .iter()
                .filter_map(|(id, resolution)| {
                    id.strip_prefix(&prefix)
                        .map(|inner| (inner.to_owned(), resolution.clone()))
                })
                .collect(),
        )
    }
}
