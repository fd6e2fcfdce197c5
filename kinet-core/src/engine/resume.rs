//! Turns whose calls wait for approvals given later: keeping one when a
//! run stops at it, and finishing it when the run is resumed.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::RunSettings;
use crate::confirm::{ConfirmDecision, ConfirmRequest};
use crate::ctx::EngineCtx as _;
use crate::ctx::ToolCtx;
use crate::data::conversation::Conversation;
use crate::data::error::AgentError;
use crate::data::model::StopReason;
use crate::deferred::{Decisions, DeferredTurn, Resumption};
use crate::event::{AgentEvent, RunStop};
use crate::message::{Message, ToolCall};
use crate::session::{JournalEntry, Recorder};

/// The pending calls, for messages: "`shell` (call_1), `write_file` (call_2)".
pub(super) fn describe(pending: &[ConfirmRequest]) -> String {
    pending
        .iter()
        .map(|p| format!("`{}` ({})", p.tool, p.call_id))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Keeps the turn in the conversation and the journal: the run stops here.
/// `saved`: what calls that stopped while running need to go on.
pub(super) fn keep(
    recorder: &Recorder,
    conversation: &mut Conversation,
    calls: Vec<ToolCall>,
    pending: &[ConfirmRequest],
    saved: BTreeMap<String, serde_json::Value>,
    turn: u32,
) {
    let deferred = DeferredTurn {
        calls,
        pending: pending.to_vec(),
        turn,
        saved,
    };
    recorder.record(|| JournalEntry::Deferred {
        deferred: Some(deferred.clone()),
    });
    conversation.deferred = Some(deferred);
}

/// Finishes a deferred turn with the decisions: the calls without a
/// result run (or are denied) through the pipeline as the turn would have
/// run them, with the turn's idempotency keys. `None` when the turn is
/// done and the run goes on; otherwise why the run stops (another
/// deferral, a cancellation, an abort, a decision that does not fit).
pub(super) async fn finish(
    config: &RunSettings,
    recorder: &Recorder,
    conversation: &mut Conversation,
    deferred: DeferredTurn,
    decisions: &Decisions,
    base: &ToolCtx,
) -> Option<RunStop> {
    let events = base.events().clone();
    let turn = deferred.turn;
    let answered = answered(conversation);
    if let Err(why) = check(conversation, &answered, &deferred, decisions) {
        conversation.deferred = Some(deferred);
        return Some(RunStop::Failed(AgentError::Resume(why)));
    }
    // What runs: every call of the turn without a result (after a crash
    // mid-resume, some have one), with edited arguments where decided.
    let remaining: Vec<ToolCall> = deferred
        .calls
        .iter()
        .filter(|call| !answered.contains(&call.id))
        .map(|call| match decisions.get(&call.id) {
            Some(ConfirmDecision::Edit { arguments }) => ToolCall {
                arguments: arguments.to_string(),
                ..call.clone()
            },
            _ => call.clone(),
        })
        .collect();
    events.emit(AgentEvent::TurnStarted { turn });
    // The turn's calls see the decisions, and those that stopped while
    // running what they saved.
    let base = base.clone().with_resumption(Some(Arc::new(Resumption {
        decisions: decisions.clone(),
        saved: deferred.saved.clone(),
        flagged: deferred
            .pending
            .iter()
            .filter(|request| request.concern.is_some())
            .map(|request| request.call_id.clone())
            .collect(),
    })));
    let tools = match super::turn_tools(config).await {
        Ok(tools) => tools,
        Err(error) => {
            conversation.deferred = Some(deferred);
            return Some(RunStop::Failed(error));
        }
    };
    let ran = super::run_calls(config, recorder, conversation, &tools, &remaining, &base).await;
    conversation.messages.extend(ran.messages);
    match &ran.stop {
        Some(RunStop::AwaitingApproval { pending }) => {
            let saved = still_saved(conversation, &deferred, ran.saved);
            keep(recorder, conversation, deferred.calls, pending, saved, turn);
        }
        _ => recorder.record(|| JournalEntry::Deferred { deferred: None }),
    }
    events.emit(AgentEvent::TurnEnded {
        turn,
        stop_reason: StopReason::ToolUse,
    });
    ran.stop
}

/// What the turn's calls that still wait have saved after a resume that
/// stopped again: what they saved this time (`now`), and what they saved
/// before for those that did not run this time.
fn still_saved(
    conversation: &Conversation,
    deferred: &DeferredTurn,
    now: BTreeMap<String, serde_json::Value>,
) -> BTreeMap<String, serde_json::Value> {
    let answered = answered(conversation);
    // The turn's call that a saved entry belongs to (its own id, or the id
    // of a call it made: `<id>.<inner>`).
    let owner = |key: &str| {
        deferred.calls.iter().find(|call| {
            key == call.id
                || key
                    .strip_prefix(call.id.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
        })
    };
    let rerun: HashSet<&str> = now
        .keys()
        .filter_map(|key| owner(key).map(|call| call.id.as_str()))
        .collect();
    let mut saved: BTreeMap<String, serde_json::Value> = deferred
        .saved
        .iter()
        .filter(|(key, _)| {
            owner(key).is_some_and(|call| {
                !answered.contains(&call.id) && !rerun.contains(call.id.as_str())
            })
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    saved.extend(now);
    saved
}

/// The history's last model turn when a crash cut it short (some of its
/// calls have no result, and nothing came after it): a turn to finish with
/// no decisions pending.
pub(super) fn unfinished(conversation: &Conversation) -> Option<DeferredTurn> {
    let (index, calls) = conversation
        .messages
        .iter()
        .enumerate()
        .rev()
        .find(|(_, message)| !matches!(message, Message::Tool { .. }))
        .and_then(|(index, message)| match message {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                Some((index, tool_calls))
            }
            _ => None,
        })?;
    let answered = answered(conversation);
    let open = calls.iter().any(|call| !answered.contains(&call.id));
    let turn = conversation.messages[..=index]
        .iter()
        .filter(|m| matches!(m, Message::Assistant { .. }))
        .count();
    open.then(|| DeferredTurn {
        calls: calls.clone(),
        pending: Vec::new(),
        turn: u32::try_from(turn).unwrap_or(u32::MAX),
        saved: BTreeMap::new(),
    })
}

/// The ids of the calls that have a result in the history.
fn answered(conversation: &Conversation) -> HashSet<String> {
    conversation
        .messages
        .iter()
        .filter_map(|message| match message {
            Message::Tool { tool_call_id, .. } => Some(tool_call_id.clone()),
            _ => None,
        })
        .collect()
}

/// Whether the saved turn is the history's last model turn, and the
/// decisions answer exactly the calls still waiting.
fn check(
    conversation: &Conversation,
    answered: &HashSet<String>,
    deferred: &DeferredTurn,
    decisions: &Decisions,
) -> Result<(), String> {
    let last = conversation
        .messages
        .iter()
        .rev()
        .find_map(|message| match message {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => Some(tool_calls),
            _ => None,
        });
    let ids = |calls: &[ToolCall]| calls.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    if last.map(|calls| ids(calls)) != Some(ids(&deferred.calls)) {
        return Err(
            "the saved turn is not the history's last model turn (was the history changed after the run stopped?)"
                .into(),
        );
    }
    for request in &deferred.pending {
        if !answered.contains(&request.call_id) && decisions.get(&request.call_id).is_none() {
            return Err(format!(
                "no decision for the `{}` call {} (waiting: {})",
                request.tool,
                request.call_id,
                describe(&deferred.pending)
            ));
        }
    }
    for id in decisions.0.keys() {
        if !deferred.pending.iter().any(|p| &p.call_id == id) {
            return Err(format!(
                "call {id} is not waiting for a decision (waiting: {})",
                describe(&deferred.pending)
            ));
        }
    }
    Ok(())
}
