//! Validating and repairing a history before it goes to a model: every
//! provider rejects a tool call without its result ("tool_use ids were
//! found without tool_result blocks"), a result without its call, and ids
//! that repeat. A history loaded from disk, written by a process that died
//! mid-call, or edited by a host can have any of these.

use std::collections::{HashMap, HashSet};

use crate::ctx::EventSink;
use crate::data::conversation::Conversation;
use crate::event::AgentEvent;

use crate::event::Repair;
use crate::message::{ContentPart, Message, ToolCall};

/// The text an interrupted call's result carries.
pub(crate) const INTERRUPTED: &str = "[no result: this call was interrupted before it finished (the process stopped or the run was cancelled); call the tool again if the result is still needed]";

/// An id for a call whose own (`id`) is empty or taken: `id_2`, `id_3`, ...
/// or, for an empty one, `empty()` (numbered the same way if taken too).
pub(crate) fn fresh_id(
    id: &str,
    taken: &HashSet<String>,
    empty: impl FnOnce() -> String,
) -> String {
    let base = if id.trim().is_empty() {
        empty()
    } else {
        id.to_owned()
    };
    let mut candidate = base.clone();
    let mut n = 1;
    while taken.contains(&candidate) {
        n += 1;
        candidate = format!("{base}_{n}");
    }
    candidate
}

/// Repairs `messages` in place and says what it changed (nothing, for a
/// history the engine wrote itself).
pub(crate) fn repair(messages: &mut Vec<Message>) -> Vec<Repair> {
    let mut repairs = Vec::new();
    let mut out: Vec<Message> = Vec::with_capacity(messages.len() + 1);
    let mut taken: HashSet<String> = HashSet::new();
    // The calls of the latest assistant message still waiting for results:
    // (id, tool), in call order.
    let mut open: Vec<(String, String)> = Vec::new();
    // Renames made in the latest assistant message, for its results.
    let mut renamed: HashMap<String, Vec<String>> = HashMap::new();
    let close =
        |open: &mut Vec<(String, String)>, out: &mut Vec<Message>, repairs: &mut Vec<Repair>| {
            for (call_id, tool) in open.drain(..) {
                out.push(Message::Tool {
                    tool_call_id: call_id.clone(),
                    name: tool.clone(),
                    content: vec![ContentPart::Text {
                        text: INTERRUPTED.to_owned(),
                    }],
                    is_error: true,
                });
                repairs.push(Repair::Interrupted { call_id, tool });
            }
        };
    for (position, message) in std::mem::take(messages).into_iter().enumerate() {
        match message {
            Message::Assistant {
                content,
                mut tool_calls,
                provider_state,
            } => {
                close(&mut open, &mut out, &mut repairs);
                renamed.clear();
                if content.is_empty() && tool_calls.is_empty() {
                    repairs.push(Repair::EmptyAssistant);
                    continue;
                }
                for (index, call) in tool_calls.iter_mut().enumerate() {
                    if call.id.trim().is_empty() || taken.contains(&call.id) {
                        let candidate =
                            fresh_id(&call.id, &taken, || format!("call_r{position}_{index}"));
                        renamed
                            .entry(call.id.clone())
                            .or_default()
                            .push(candidate.clone());
                        repairs.push(Repair::DuplicateId {
                            from: call.id.clone(),
                            to: candidate.clone(),
                        });
                        call.id = candidate;
                    }
                    taken.insert(call.id.clone());
                    open.push((call.id.clone(), call.name.clone()));
                }
                out.push(Message::Assistant {
                    content,
                    tool_calls,
                    provider_state,
                });
            }
            Message::Tool {
                mut tool_call_id,
                name,
                content,
                is_error,
            } => {
                // A result for a renamed call takes the new id (in order).
                if let Some(new) = renamed.get_mut(&tool_call_id)
                    && !open.iter().any(|(id, _)| *id == tool_call_id)
                    && !new.is_empty()
                {
                    tool_call_id = new.remove(0);
                }
                match open.iter().position(|(id, _)| *id == tool_call_id) {
                    Some(at) => {
                        open.remove(at);
                        out.push(Message::Tool {
                            tool_call_id,
                            name,
                            content,
                            is_error,
                        });
                    }
                    None => repairs.push(Repair::OrphanResult {
                        call_id: tool_call_id,
                    }),
                }
            }
            other => {
                close(&mut open, &mut out, &mut repairs);
                out.push(other);
            }
        }
    }
    close(&mut open, &mut out, &mut repairs);
    *messages = out;
    repairs
}

/// Repairs the history (see [`repair`]),
/// tells the host what was repaired, and notes the call ids it holds.
pub(super) fn check_history(
    conversation: &mut Conversation,
    taken: &mut HashSet<String>,
    events: &EventSink,
) {
    let repairs = repair(&mut conversation.messages);
    if !repairs.is_empty() {
        events.emit(AgentEvent::HistoryRepaired { repairs });
    }
    taken.clear();
    for message in &conversation.messages {
        if let Message::Assistant { tool_calls, .. } = message {
            taken.extend(tool_calls.iter().map(|call| call.id.clone()));
        }
    }
}

/// Gives every call of the turn an id no other call in the conversation
/// has (`taken` holds theirs and gets these): a model can send two calls
/// with one id, or none at all, and real providers reject the next request
/// when ids repeat. The assistant message and the results carry the new
/// ids, so the pairing stays valid.
pub(super) fn unique_ids(
    mut calls: Vec<ToolCall>,
    taken: &mut HashSet<String>,
    turn: u32,
) -> Vec<ToolCall> {
    for (index, call) in calls.iter_mut().enumerate() {
        if !call.id.trim().is_empty() && taken.insert(call.id.clone()) {
            continue;
        }
        let candidate = fresh_id(&call.id, taken, || format!("call_{turn}_{index}"));
        tracing::debug!(from = %call.id, to = %candidate, "renamed a duplicate or empty tool-call id");
        taken.insert(candidate.clone());
        call.id = candidate;
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "look".into(),
            arguments: "{}".into(),
        }
    }

    fn assistant(calls: &[&str]) -> Message {
        Message::Assistant {
            content: Vec::new(),
            tool_calls: calls.iter().map(|id| call(id)).collect(),
            provider_state: None,
        }
    }

    fn result(id: &str) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: "look".into(),
            content: vec![ContentPart::Text { text: "ok".into() }],
            is_error: false,
        }
    }

    #[test]
    fn a_clean_history_is_left_alone() {
        let mut messages = vec![
            Message::user("hi"),
            assistant(&["a"]),
            result("a"),
            Message::assistant("done"),
        ];
        let before = messages.clone();
        assert!(repair(&mut messages).is_empty());
        assert_eq!(messages, before);
    }

    #[test]
    fn unanswered_orphan_duplicate_and_empty_are_repaired() {
        let mut messages = vec![
            Message::user("hi"),
            assistant(&["a", "b"]),
            result("a"),
            // "b" unanswered; then an orphan result; then a reused id.
            Message::user("again"),
            result("zzz"),
            assistant(&["a"]),
            result("a"),
            Message::Assistant {
                content: Vec::new(),
                tool_calls: Vec::new(),
                provider_state: None,
            },
        ];
        let repairs = repair(&mut messages);
        assert_eq!(
            repairs,
            vec![
                Repair::Interrupted {
                    call_id: "b".into(),
                    tool: "look".into()
                },
                Repair::OrphanResult {
                    call_id: "zzz".into()
                },
                Repair::DuplicateId {
                    from: "a".into(),
                    to: "a_2".into()
                },
                Repair::EmptyAssistant,
            ]
        );
        let conversation = crate::data::conversation::Conversation::from(messages.clone());
        assert!(conversation.unanswered_tool_calls().is_empty());
        // Every result follows its own call, and ids are unique.
        let ids: Vec<_> = messages
            .iter()
            .flat_map(|m| m.tool_calls().iter().map(|c| c.id.clone()))
            .collect();
        assert_eq!(ids, vec!["a", "b", "a_2"]);
        assert!(
            matches!(&messages[3], Message::Tool { tool_call_id, is_error: true, .. } if tool_call_id == "b")
        );
        assert!(
            matches!(&messages[6], Message::Tool { tool_call_id, .. } if tool_call_id == "a_2")
        );
        // Repairing again changes nothing.
        assert!(repair(&mut messages).is_empty());
    }
}
