//! The run state: a conversation's history and what continuing it needs.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::message::Message;
use crate::provenance::Provenance;

/// A conversation: the message history plus the rest of a run's state —
/// tools approved for the session, the provenance ledger, a turn waiting
/// for approvals, the run key. It is the one run state: a
/// [`Session`](crate::session::Session) embeds it, and the journal's
/// entries are made from it ([`journal_entries`](Self::journal_entries))
/// and applied to it ([`apply`](Self::apply)).
///
/// Serialise it to persist a conversation; deserialise it to resume.
///
/// ```
/// use kinet_core::{Conversation, Message};
///
/// let mut conversation = Conversation::new();
/// conversation.push(Message::user("hello"));
/// let json = serde_json::to_string(&conversation).unwrap();
/// let resumed: Conversation = serde_json::from_str(&json).unwrap();
/// assert_eq!(resumed.messages, conversation.messages);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// The history, oldest first.
    pub messages: Vec<Message>,
    /// Tools the user approved for the rest of this session.
    #[serde(
        default,
        rename = "approvals",
        skip_serializing_if = "BTreeSet::is_empty"
    )]
    pub session_approvals: BTreeSet<String>,
    /// What the model has read and who wrote it, for the injection
    /// defence (kept with the conversation and its sessions).
    #[serde(default, skip_serializing_if = "Provenance::is_empty")]
    pub provenance: Provenance,
    /// Set when the last run stopped at approvals to be given later
    /// ([`RunStop::AwaitingApproval`](crate::RunStop::AwaitingApproval)):
    /// the turn and its pending calls. [`Agent::resume`](crate::Agent::resume)
    /// finishes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred: Option<crate::deferred::DeferredTurn>,
    /// The key of this conversation's runs, set by the first run: with a
    /// call's id, the call's
    /// [`idempotency_key`](crate::ToolCtx::idempotency_key), the same in
    /// every process that continues the conversation. A fork gets its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_key: Option<String>,
}

impl Conversation {
    /// An empty conversation.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a message.
    pub fn push(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// Appends a user text message.
    pub fn push_user(&mut self, text: impl Into<String>) {
        self.messages.push(Message::user(text));
    }

    /// The text of the last assistant message, if any.
    pub fn last_assistant_text(&self) -> Option<String> {
        self.messages.iter().rev().find_map(|m| match m {
            Message::Assistant { .. } => Some(m.text()),
            _ => None,
        })
    }

    /// Tool call ids that have no result message after them.
    ///
    /// An engine-produced history always returns an empty list here, also
    /// after cancellation; hosts can use it to check a history before resuming.
    pub fn unanswered_tool_calls(&self) -> Vec<String> {
        let mut open: Vec<String> = Vec::new();
        for message in &self.messages {
            match message {
                Message::Assistant { tool_calls, .. } => {
                    open.extend(tool_calls.iter().map(|c| c.id.clone()));
                }
                Message::Tool { tool_call_id, .. } => open.retain(|id| id != tool_call_id),
                _ => {}
            }
        }
        open
    }
}

impl From<Vec<Message>> for Conversation {
    fn from(messages: Vec<Message>) -> Self {
        Self {
            messages,
            session_approvals: BTreeSet::new(),
            provenance: Provenance::new(),
            deferred: None,
            run_key: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;

    #[test]
    fn unanswered_calls_are_listed() {
        let mut conversation = Conversation::new();
        conversation.push(Message::Assistant {
            content: vec![],
            tool_calls: vec![
                ToolCall {
                    id: "a".into(),
                    name: "x".into(),
                    arguments: "{}".into(),
                },
                ToolCall {
                    id: "b".into(),
                    name: "x".into(),
                    arguments: "{}".into(),
                },
            ],
            provider_state: None,
        });
        conversation.push(Message::Tool {
            tool_call_id: "a".into(),
            name: "x".into(),
            content: vec![],
            is_error: false,
        });
        assert_eq!(conversation.unanswered_tool_calls(), vec!["b".to_string()]);
    }
}
