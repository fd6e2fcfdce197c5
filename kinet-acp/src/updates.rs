//! What an editor sees of a run: kinet's events as ACP session updates,
//! and a saved conversation replayed as the updates that made it.

use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema as acp;
use futures::StreamExt as _;
use kinet_core::{AgentEvent, Message};
use serde_json::Value;

/// The pack of [`Shown`] events.
pub(crate) const PACK: &str = "acp";

/// A terminal started for a call (by `terminal`): the editor is told to
/// show it with the call, as an event, so it reaches the editor after the
/// call itself.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Shown {
    pub call_id: String,
    pub terminal_id: String,
}

/// The kind an editor shows for a tool (its icon, how it groups calls).
pub(crate) fn kind(tool: &str) -> acp::ToolKind {
    match tool {
        "read_file" | "view_image" => acp::ToolKind::Read,
        "write_file" | "edit_file" | "apply_patch" => acp::ToolKind::Edit,
        "grep" | "glob" | "web_search" | "memory_search" => acp::ToolKind::Search,
        "shell" | "run_code" => acp::ToolKind::Execute,
        "web_fetch" => acp::ToolKind::Fetch,
        "todo_write" => acp::ToolKind::Think,
        _ => acp::ToolKind::Other,
    }
}

/// A one-line title for a call: the tool and its main argument.
pub(crate) fn title(tool: &str, arguments: &Value) -> String {
    let main = ["path", "command", "pattern", "url", "query", "file_path"]
        .iter()
        .find_map(|key| arguments.get(key).and_then(Value::as_str));
    match main {
        Some(main) => {
            let main: String = main.chars().take(120).collect();
            format!("{tool}: {main}")
        }
        None => tool.to_owned(),
    }
}

/// Turns kinet's events into session updates, remembering what each call
/// asked for (for its diff when it finishes).
pub(crate) struct Updates {
    cwd: PathBuf,
    /// The arguments of the calls in flight.
    calls: Vec<(String, String, Value)>,
    /// The editor's terminals shown with calls in flight.
    terminals: Vec<(String, String)>,
}

impl Updates {
    pub(crate) fn new(cwd: &Path) -> Self {
        Self {
            cwd: cwd.to_owned(),
            calls: Vec::new(),
            terminals: Vec::new(),
        }
    }

    /// The updates for one event (none for events an editor has no place
    /// for).
    pub(crate) fn of(&mut self, event: &AgentEvent) -> Vec<acp::SessionUpdate> {
        match event {
            AgentEvent::TextDelta { text } => vec![acp::SessionUpdate::AgentMessageChunk(
                acp::ContentChunk::new(text.clone().into()),
            )],
            AgentEvent::ReasoningDelta { text } => vec![acp::SessionUpdate::AgentThoughtChunk(
                acp::ContentChunk::new(text.clone().into()),
            )],
            AgentEvent::ToolCallStarted {
                call_id,
                name,
                arguments,
            } => {
                let call = self.started(call_id, name, arguments);
                let mut updates = vec![acp::SessionUpdate::ToolCall(call)];
                if name == "todo_write"
                    && let Some((_, _, arguments)) = self.calls.last()
                    && let Some(plan) = plan(arguments)
                {
                    updates.push(acp::SessionUpdate::Plan(plan));
                }
                updates
            }
            AgentEvent::ToolProgress { call_id, text, .. } => {
                let fields =
                    acp::ToolCallUpdateFields::new().content(vec![acp::ToolCallContent::Content(
                        acp::Content::new(text.clone()),
                    )]);
                vec![acp::SessionUpdate::ToolCallUpdate(
                    acp::ToolCallUpdate::new(call_id.clone(), fields),
                )]
            }
            AgentEvent::ToolCallFinished {
                call_id, result, ..
            } => {
                let result = result
                    .as_ref()
                    .map(|o| o.text.as_str())
                    .map_err(|e| e.message());
                vec![acp::SessionUpdate::ToolCallUpdate(
                    self.finished(call_id, result),
                )]
            }
            AgentEvent::Pack(event) if event.pack() == PACK => {
                let Some(shown) = event.downcast_ref::<Shown>() else {
                    return Vec::new();
                };
                self.terminals
                    .push((shown.call_id.clone(), shown.terminal_id.clone()));
                let fields =
                    acp::ToolCallUpdateFields::new().content(vec![acp::ToolCallContent::Terminal(
                        acp::Terminal::new(shown.terminal_id.clone()),
                    )]);
                vec![acp::SessionUpdate::ToolCallUpdate(
                    acp::ToolCallUpdate::new(shown.call_id.clone(), fields),
                )]
            }
            _ => Vec::new(),
        }
    }

    /// A call as it starts (or, replayed, as it was); its arguments are
    /// kept for its end.
    fn started(&mut self, call_id: &str, name: &str, arguments: &str) -> acp::ToolCall {
        let arguments: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
        let mut call = acp::ToolCall::new(call_id.to_owned(), title(name, &arguments))
            .kind(kind(name))
            .status(acp::ToolCallStatus::InProgress)
            .raw_input(arguments.clone());
        if let Some(path) = self.path(&arguments) {
            call = call.locations(vec![acp::ToolCallLocation::new(path)]);
        }
        self.calls
            .push((call_id.to_owned(), name.to_owned(), arguments));
        call
    }

    /// A call's end: its status and what it returned; an edit's diff.
    fn finished(&mut self, call_id: &str, result: Result<&str, &str>) -> acp::ToolCallUpdate {
        let asked = self
            .calls
            .iter()
            .position(|(id, _, _)| id == call_id)
            .map(|at| self.calls.remove(at));
        let (status, text) = match result {
            Ok(text) => (acp::ToolCallStatus::Completed, text),
            Err(message) => (acp::ToolCallStatus::Failed, message),
        };
        let mut content = Vec::new();
        // A terminal shown with the call stays (the editor keeps its output).
        while let Some(at) = self.terminals.iter().position(|(id, _)| id == call_id) {
            let (_, terminal) = self.terminals.remove(at);
            content.push(acp::ToolCallContent::Terminal(acp::Terminal::new(terminal)));
        }
        if let (Ok(_), Some((_, name, arguments))) = (result, &asked)
            && let Some(diff) = self.diff(name, arguments)
        {
            content.push(acp::ToolCallContent::Diff(diff));
        }
        content.push(acp::ToolCallContent::Content(acp::Content::new(
            text.to_owned(),
        )));
        acp::ToolCallUpdate::new(
            call_id.to_owned(),
            acp::ToolCallUpdateFields::new()
                .status(status)
                .content(content),
        )
    }

    /// The absolute path a call names, if any.
    fn path(&self, arguments: &Value) -> Option<PathBuf> {
        let path = arguments
            .get("path")
            .or_else(|| arguments.get("file_path"))
            .and_then(Value::as_str)?;
        Some(self.cwd.join(path))
    }

    /// An edit's change as a diff: `edit_file`'s replaced text, or the
    /// whole content `write_file` wrote.
    fn diff(&self, name: &str, arguments: &Value) -> Option<acp::Diff> {
        let path = self.path(arguments)?;
        let text = |key: &str| arguments.get(key).and_then(Value::as_str);
        match name {
            "edit_file" => Some(
                acp::Diff::new(path, text("new_string")?).old_text(text("old_string")?.to_owned()),
            ),
            "write_file" => Some(acp::Diff::new(path, text("content")?)),
            _ => None,
        }
    }

    /// A saved conversation as the updates an editor replays when it loads
    /// the session.
    pub(crate) fn replay(&mut self, messages: &[Message]) -> Vec<acp::SessionUpdate> {
        let mut updates = Vec::new();
        for message in messages {
            match message {
                Message::User { .. } => updates.push(acp::SessionUpdate::UserMessageChunk(
                    acp::ContentChunk::new(message.text().into()),
                )),
                Message::Assistant { tool_calls, .. } => {
                    let text = message.text();
                    if !text.is_empty() {
                        updates.push(acp::SessionUpdate::AgentMessageChunk(
                            acp::ContentChunk::new(text.into()),
                        ));
                    }
                    for call in tool_calls {
                        let started = self.started(&call.id, &call.name, &call.arguments);
                        updates.push(acp::SessionUpdate::ToolCall(started));
                    }
                }
                Message::Tool {
                    tool_call_id,
                    is_error,
                    ..
                } => {
                    let text = message.text();
                    let result = if *is_error {
                        Err(text.as_str())
                    } else {
                        Ok(text.as_str())
                    };
                    updates.push(acp::SessionUpdate::ToolCallUpdate(
                        self.finished(tool_call_id, result),
                    ));
                }
                _ => {}
            }
        }
        updates
    }
}

/// A run's events with text that is already waiting merged: consecutive
/// text (or thought) deltas that have arrived by the time one is sent go
/// out as one update. Nothing waits to be merged, so the first delta of a
/// burst goes out at once; when the editor reads slower than the model
/// writes, it gets fewer, longer chunks (each message costs an editor
/// tens of microseconds to parse), the same text in the same order.
pub(crate) struct Coalesced<'a, S> {
    events: &'a mut S,
    /// An event read ahead that did not merge.
    next: Option<AgentEvent>,
    ended: bool,
}

impl<'a, S: futures::Stream<Item = AgentEvent> + Unpin> Coalesced<'a, S> {
    pub(crate) fn new(events: &'a mut S) -> Self {
        Self {
            events,
            next: None,
            ended: false,
        }
    }

    pub(crate) async fn next(&mut self) -> Option<AgentEvent> {
        use futures::FutureExt as _;
        let first = match self.next.take() {
            Some(event) => event,
            None if self.ended => return None,
            None => self.events.next().await?,
        };
        let (mut text, thought) = match first {
            AgentEvent::TextDelta { text } => (text, false),
            AgentEvent::ReasoningDelta { text } => (text, true),
            other => return Some(other),
        };
        while let Some(ready) = self.events.next().now_or_never() {
            match (ready, thought) {
                (Some(AgentEvent::TextDelta { text: more }), false)
                | (Some(AgentEvent::ReasoningDelta { text: more }), true) => text.push_str(&more),
                (Some(other), _) => {
                    self.next = Some(other);
                    break;
                }
                (None, _) => {
                    self.ended = true;
                    break;
                }
            }
        }
        Some(if thought {
            AgentEvent::ReasoningDelta { text }
        } else {
            AgentEvent::TextDelta { text }
        })
    }
}

/// `todo_write`'s list as the agent's plan.
fn plan(arguments: &Value) -> Option<acp::Plan> {
    let todos = arguments.get("todos")?.as_array()?;
    let entries = todos
        .iter()
        .filter_map(|todo| {
            let content = todo.get("content")?.as_str()?;
            let status = match todo.get("status").and_then(Value::as_str) {
                Some("completed") => acp::PlanEntryStatus::Completed,
                Some("in_progress") => acp::PlanEntryStatus::InProgress,
                _ => acp::PlanEntryStatus::Pending,
            };
            Some(acp::PlanEntry::new(
                content,
                acp::PlanEntryPriority::Medium,
                status,
            ))
        })
        .collect();
    Some(acp::Plan::new(entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(text: &str) -> AgentEvent {
        AgentEvent::TextDelta { text: text.into() }
    }

    /// An event of the property test: text, a thought, or another event.
    fn event(kind: u8, text: String) -> AgentEvent {
        match kind {
            0 => AgentEvent::TextDelta { text },
            1 => AgentEvent::ReasoningDelta { text },
            _ => AgentEvent::TurnStarted { turn: 7 },
        }
    }

    fn key(event: &AgentEvent) -> (u8, String) {
        match event {
            AgentEvent::TextDelta { text } => (0, text.clone()),
            AgentEvent::ReasoningDelta { text } => (1, text.clone()),
            _ => (2, String::new()),
        }
    }

    proptest::proptest! {
        /// Events all waiting: each run of text (or of thoughts) becomes
        /// one event with the run's text; everything else keeps its place.
        #[test]
        fn merging_keeps_every_character_and_the_order(
            events in proptest::collection::vec((0u8..3, ".{0,6}"), 0..40),
        ) {
            let mut expected: Vec<(u8, String)> = Vec::new();
            for (kind, text) in &events {
                match expected.last_mut() {
                    Some((last, merged)) if *last == *kind && *kind < 2 => merged.push_str(text),
                    _ => expected.push(key(&event(*kind, text.clone()))),
                }
            }
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let got = runtime.block_on(async {
                let mut queued = futures::stream::iter(
                    events.iter().map(|(kind, text)| event(*kind, text.clone())),
                );
                let mut merged = Coalesced::new(&mut queued);
                let mut got = Vec::new();
                while let Some(event) = merged.next().await {
                    got.push(key(&event));
                }
                got
            });
            proptest::prop_assert_eq!(got, expected);
        }
    }

    #[tokio::test]
    async fn waiting_text_is_merged_and_nothing_waits_to_be() {
        let (sender, receiver) = futures::channel::mpsc::unbounded();
        let mut receiver = receiver;
        let mut events = Coalesced::new(&mut receiver);
        // One delta and nothing behind it: out at once, alone.
        sender.unbounded_send(text("a")).unwrap();
        assert!(matches!(events.next().await, Some(AgentEvent::TextDelta { text }) if text == "a"));
        // A burst: the text merges up to the next other event, which
        // keeps its place; thoughts merge apart from text.
        for event in [
            text("b"),
            text("c"),
            AgentEvent::ReasoningDelta { text: "t1".into() },
            AgentEvent::ReasoningDelta { text: "t2".into() },
            text("d"),
            AgentEvent::TurnStarted { turn: 2 },
            text("e"),
        ] {
            sender.unbounded_send(event).unwrap();
        }
        drop(sender);
        let mut got = Vec::new();
        while let Some(event) = events.next().await {
            got.push(match event {
                AgentEvent::TextDelta { text } => format!("text {text}"),
                AgentEvent::ReasoningDelta { text } => format!("thought {text}"),
                other => format!("{other:?}"),
            });
        }
        assert_eq!(
            got,
            [
                "text bc",
                "thought t1t2",
                "text d",
                "TurnStarted { turn: 2 }",
                "text e"
            ]
        );
    }
}
