//! Approvals answered later: a run that stops at one
//! ([`RunStop::AwaitingApproval`](crate::RunStop::AwaitingApproval)), what
//! it keeps ([`DeferredTurn`], in the conversation and its session), and
//! the decisions that finish it in any process ([`Agent::resume`](crate::Agent::resume)).
//!
//! A run stops at a question when the host's handler answers
//! [`ConfirmDecision::Defer`](crate::ConfirmDecision::Defer), or for every
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

pub use crate::data::deferred::{ConfirmRequest, Decisions, DeferredTurn, Resolution, Suspension};
