//! An engine's session updates as kinet events: its answer's text, its
//! thoughts, its tool calls with their status, its plan.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use agent_client_protocol::v1::schema as acp;
use kinet_core::event::PackEvent;
use kinet_core::tool::engine::EventSink;
use kinet_core::{AgentEvent, ToolError, ToolOutput};
use serde::Serialize;

/// The plan an engine reported (ACP `plan`), as a pack event of the
/// `"engine"` pack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EnginePlan {
    /// The entries, in order.
    pub entries: Vec<EnginePlanEntry>,
}

/// One entry of an [`EnginePlan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EnginePlanEntry {
    /// What the step is.
    pub content: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: String,
}

/// An engine answered `initialize`: a pack event of the `"engine"` pack,
/// before its session's updates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EngineStarted {
    /// The agent's name and version as it gave them (`opencode 1.18.33`),
    /// when it did.
    pub agent: Option<String>,
    /// From starting its process to its answer.
    pub start: std::time::Duration,
}

/// Turns one session's updates into events on a sink, and keeps the
/// answer's text.
pub(super) struct Updates {
    events: EventSink,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The session kinet opened, once `session/new` has answered.
    session: Option<acp::SessionId>,
    /// Updates that came before that answer was read (an engine may send
    /// one right after it): judged once the session is known.
    early: Vec<acp::SessionNotification>,
    /// The answer so far (agent message chunks).
    text: String,
    /// Tool calls started and not finished: their name and start.
    calls: HashMap<String, (String, Instant)>,
    /// Updates for another session than ours (an engine out of order).
    strays: u32,
    /// Whether the answer was cut at [`MAX_ANSWER`].
    cut: bool,
}

/// The most updates kept while the session is not known yet.
const MAX_EARLY: usize = 64;

/// The most answer text kept (the events still carry all of it).
const MAX_ANSWER: usize = 4 * 1024 * 1024;

impl Updates {
    pub(super) fn new(events: EventSink) -> Self {
        Self {
            events,
            state: Mutex::default(),
        }
    }

    /// From now on, updates of this session count; those that came
    /// before are judged now, in order.
    pub(super) fn session(&self, id: acp::SessionId) {
        let mut events = Vec::new();
        if let Ok(mut state) = self.state.lock() {
            state.session = Some(id);
            for notification in std::mem::take(&mut state.early) {
                events.extend(state.judge(notification));
            }
        }
        for event in events {
            self.events.emit(event);
        }
    }

    /// Whether `id` is the session kinet opened; a request naming another
    /// counts as out of order.
    pub(super) fn is_ours(&self, id: &acp::SessionId) -> bool {
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        let ours = state.session.as_ref() == Some(id);
        if !ours {
            state.strays += 1;
        }
        ours
    }

    /// The answer's text so far.
    pub(super) fn text(&self) -> String {
        self.state
            .lock()
            .map(|s| s.text.clone())
            .unwrap_or_default()
    }

    /// How many updates and requests named a session that is not ours.
    pub(super) fn strays(&self) -> u32 {
        self.state.lock().map(|s| s.strays).unwrap_or(0)
    }

    /// Handles one notification.
    pub(super) fn handle(&self, notification: acp::SessionNotification) {
        let events = match self.state.lock() {
            Ok(mut state) if state.session.is_none() => {
                if state.early.len() < MAX_EARLY {
                    state.early.push(notification);
                } else {
                    state.strays += 1;
                }
                return;
            }
            Ok(mut state) => state.judge(notification),
            Err(_) => return,
        };
        for event in events {
            self.events.emit(event);
        }
    }

    /// Reports the engine's start.
    pub(super) fn started(&self, agent: Option<&acp::Implementation>, start: std::time::Duration) {
        let agent = agent.map(|a| format!("{} {}", a.name, a.version));
        self.events.emit(AgentEvent::Pack(PackEvent::new(
            "engine",
            EngineStarted { agent, start },
        )));
    }

    /// Says, as a warning event, something kinet did for the engine (a
    /// refusal).
    pub(super) fn warn(&self, message: String) {
        self.events.emit(AgentEvent::Warning { message });
    }
}

impl State {
    /// The events of one notification of a known session (none for
    /// another session's, which counts as a stray).
    fn judge(&mut self, notification: acp::SessionNotification) -> Vec<AgentEvent> {
        if self.session.as_ref() != Some(&notification.session_id) {
            self.strays += 1;
            return Vec::new();
        }
        let state = self;
        let event = match notification.update {
            acp::SessionUpdate::AgentMessageChunk(chunk) => {
                let text = block_text(&chunk.content);
                if state.text.len() + text.len() <= MAX_ANSWER {
                    state.text.push_str(&text);
                } else if !state.cut {
                    state.cut = true;
                    state
                        .text
                        .push_str("\n[... the engine's answer went on past 4 MiB ...]");
                }
                AgentEvent::TextDelta { text }
            }
            acp::SessionUpdate::AgentThoughtChunk(chunk) => AgentEvent::ReasoningDelta {
                text: block_text(&chunk.content),
            },
            acp::SessionUpdate::ToolCall(call) => {
                let id = call.tool_call_id.to_string();
                let name = tool_name(call.name.as_deref(), &call.title, call.kind);
                state
                    .calls
                    .insert(id.clone(), (name.clone(), Instant::now()));
                let started = AgentEvent::ToolCallStarted {
                    call_id: id.clone(),
                    name: name.clone(),
                    arguments: call.raw_input.map(|v| v.to_string()).unwrap_or_default(),
                };
                match finished(state, &id, call.status, &call.content) {
                    Some(done) => return vec![started, done],
                    None => started,
                }
            }
            acp::SessionUpdate::ToolCallUpdate(update) => {
                let id = update.tool_call_id.to_string();
                let fields = update.fields;
                let content = fields.content.unwrap_or_default();
                match fields.status {
                    Some(status) => match finished(state, &id, status, &content) {
                        Some(done) => done,
                        None => return Vec::new(),
                    },
                    None if !content.is_empty() => {
                        let name = state
                            .calls
                            .get(&id)
                            .map(|c| c.0.clone())
                            .unwrap_or_default();
                        AgentEvent::ToolProgress {
                            call_id: id,
                            name,
                            text: contents_text(&content),
                        }
                    }
                    None => return Vec::new(),
                }
            }
            acp::SessionUpdate::Plan(plan) => AgentEvent::Pack(PackEvent::new(
                "engine",
                EnginePlan {
                    entries: plan
                        .entries
                        .into_iter()
                        .map(|entry| EnginePlanEntry {
                            content: entry.content,
                            status: serde_json::to_value(&entry.status)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_default(),
                        })
                        .collect(),
                },
            )),
            _ => return Vec::new(),
        };
        vec![event]
    }
}

/// The finish event of call `id` when `status` ends it.
fn finished(
    state: &mut State,
    id: &str,
    status: acp::ToolCallStatus,
    content: &[acp::ToolCallContent],
) -> Option<AgentEvent> {
    let failed = match status {
        acp::ToolCallStatus::Completed => false,
        acp::ToolCallStatus::Failed => true,
        _ => return None,
    };
    let (name, started) = state
        .calls
        .remove(id)
        .unwrap_or_else(|| (String::new(), Instant::now()));
    let text = contents_text(content);
    Some(AgentEvent::ToolCallFinished {
        call_id: id.to_owned(),
        name,
        result: if failed {
            Err(ToolError::failed(text))
        } else {
            Ok(ToolOutput::text(text))
        },
        truncated_for_model: false,
        elapsed: started.elapsed(),
    })
}

/// A tool call's name for the host: the engine's own tool name when it
/// gives one, else its title, else its kind.
fn tool_name(name: Option<&str>, title: &str, kind: acp::ToolKind) -> String {
    match name {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ if !title.is_empty() => title.to_owned(),
        _ => kind_name(kind).to_owned(),
    }
}

/// ACP's name of a tool kind.
pub(super) fn kind_name(kind: acp::ToolKind) -> &'static str {
    match kind {
        acp::ToolKind::Read => "read",
        acp::ToolKind::Edit => "edit",
        acp::ToolKind::Delete => "delete",
        acp::ToolKind::Move => "move",
        acp::ToolKind::Search => "search",
        acp::ToolKind::Execute => "execute",
        acp::ToolKind::Think => "think",
        acp::ToolKind::Fetch => "fetch",
        acp::ToolKind::SwitchMode => "switch_mode",
        _ => "other",
    }
}

fn block_text(block: &acp::ContentBlock) -> String {
    match block {
        acp::ContentBlock::Text(text) => text.text.clone(),
        acp::ContentBlock::ResourceLink(link) => link.uri.clone(),
        _ => String::new(),
    }
}

fn contents_text(content: &[acp::ToolCallContent]) -> String {
    let mut text = String::new();
    for item in content {
        let part = match item {
            acp::ToolCallContent::Content(content) => block_text(&content.content),
            acp::ToolCallContent::Diff(diff) => format!("(diff of {})", diff.path.display()),
            acp::ToolCallContent::Terminal(terminal) => {
                format!("(terminal {})", terminal.terminal_id)
            }
            _ => String::new(),
        };
        if !part.is_empty() {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&part);
        }
    }
    text
}
