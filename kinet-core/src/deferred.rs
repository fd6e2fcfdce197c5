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

pub use crate::data::deferred::{ConfirmRequest, Decisions, DeferredTurn, Resolution};
