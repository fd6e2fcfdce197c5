//! `ScriptedProvider`: a deterministic, offline provider for examples and
//! tests.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::backend::{Provider, ProviderStream};
use crate::data::model::{ChatRequest, ProviderError, StopReason, StreamEvent, Usage};
use crate::message::Message;

/// What a scripted turn checks about the request it answers. A failed check
/// makes the provider return [`ProviderError::Script`], so a test notices
/// when the engine's behaviour drifts from the script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expectation {
    /// The last user message contains this text.
    LastUserContains(String),
    /// The messages after the last assistant message are tool results for
    /// exactly these call ids, in this order.
    ToolResultsFor(Vec<String>),
    /// The result of this call contains this text.
    ToolResultContains {
        /// The call id.
        call_id: String,
        /// The text.
        text: String,
    },
    /// These tools are offered.
    HasTools(Vec<String>),
    /// This tool is not offered.
    LacksTool(String),
    /// The system prompt contains this text.
    SystemContains(String),
    /// The request carries this many messages.
    MessageCount(usize),
}

/// A tool call a scripted turn makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptedCall {
    /// The call id (empty: sent without one, as some servers do).
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The arguments. A JSON string is sent as raw argument text, so a
    /// script can send malformed JSON.
    pub arguments: serde_json::Value,
}

/// One scripted model response, and what it expects of the request.
///
/// Built in code with the builder methods, or read from JSON:
///
/// ```
/// let turn: kinet_core::testing::ScriptedTurn = serde_json::from_value(serde_json::json!({
///     "expect": [{"last_user_contains": "weather"}],
///     "tool_calls": [{"id": "c1", "name": "forecast", "arguments": {"city": "Oslo"}}]
/// })).unwrap();
/// assert_eq!(turn.tool_calls.len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedTurn {
    /// Checks on the request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expect: Vec<Expectation>,
    /// Reasoning text streamed first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Answer text, streamed in word-sized pieces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Tool calls, streamed after the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptedCall>,
    /// Usage reported at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The stop reason; default `tool_use` when there are tool calls, else
    /// `end_turn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopReason>,
    /// A pause before each streamed event, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// After the content, fail the stream with this message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// After the content, never finish (to test cancellation).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hang: bool,
}

impl ScriptedTurn {
    /// An empty turn (answers with nothing and ends the turn).
    pub fn new() -> Self {
        Self::default()
    }

    /// A turn that answers with text.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new().with_text(text)
    }

    /// Sets the answer text.
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// Sets the reasoning text.
    pub fn with_reasoning(mut self, text: impl Into<String>) -> Self {
        self.reasoning = Some(text.into());
        self
    }

    /// Adds a tool call with JSON arguments.
    pub fn tool_call(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: serde_json::Value,
    ) -> Self {
        self.tool_calls.push(ScriptedCall {
            id: id.into(),
            name: name.into(),
            arguments,
        });
        self
    }

    /// Adds a tool call whose argument text is sent as it is (may be
    /// malformed).
    pub fn raw_tool_call(
        self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        self.tool_call(id, name, serde_json::Value::String(arguments.into()))
    }

    /// Adds a check on the request.
    pub fn expect(mut self, expectation: Expectation) -> Self {
        self.expect.push(expectation);
        self
    }

    /// Reports usage.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Sets the stop reason.
    pub fn with_stop(mut self, stop: StopReason) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Pauses before each streamed event.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay_ms = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// Fails the stream after the content.
    pub fn failing(mut self, message: impl Into<String>) -> Self {
        self.error = Some(message.into());
        self
    }

    /// Never finishes after the content.
    pub fn hanging(mut self) -> Self {
        self.hang = true;
        self
    }

    fn check(&self, request: &ChatRequest<'_>) -> Result<(), String> {
        for expectation in &self.expect {
            check_one(expectation, request)?;
        }
        Ok(())
    }

    fn into_events(self) -> Vec<Result<StreamEvent, ProviderError>> {
        let mut events = Vec::new();
        if let Some(reasoning) = self.reasoning {
            events.push(Ok(StreamEvent::ReasoningDelta(reasoning)));
        }
        if let Some(text) = self.text {
            events.extend(
                text.split_inclusive(' ')
                    .map(|piece| Ok(StreamEvent::TextDelta(piece.to_owned()))),
            );
        }
        let has_calls = !self.tool_calls.is_empty();
        for (index, call) in self.tool_calls.into_iter().enumerate() {
            let arguments = match call.arguments {
                serde_json::Value::String(raw) => raw,
                other => other.to_string(),
            };
            events.push(Ok(StreamEvent::ToolCallStart {
                index,
                id: call.id,
                name: call.name,
            }));
            // Two deltas, split on a char boundary, like real streams.
            let mid = (0..=arguments.len() / 2)
                .rev()
                .find(|&i| arguments.is_char_boundary(i))
                .unwrap_or(0);
            for piece in [&arguments[..mid], &arguments[mid..]] {
                if !piece.is_empty() {
                    events.push(Ok(StreamEvent::ToolCallArgumentsDelta {
                        index,
                        delta: piece.to_owned(),
                    }));
                }
            }
        }
        if let Some(message) = self.error {
            events.push(Err(ProviderError::Stream(message)));
            return events;
        }
        if let Some(usage) = self.usage {
            events.push(Ok(StreamEvent::Usage(usage)));
        }
        if !self.hang {
            let stop = self.stop.unwrap_or(if has_calls {
                StopReason::ToolUse
            } else {
                StopReason::EndTurn
            });
            events.push(Ok(StreamEvent::Finished(stop)));
        }
        events
    }
}

fn check_one(expectation: &Expectation, request: &ChatRequest<'_>) -> Result<(), String> {
    let messages = &request.messages;
    match expectation {
        Expectation::LastUserContains(text) => {
            let last = messages.iter().rev().find_map(|m| match m {
                Message::User { .. } => Some(m.text()),
                _ => None,
            });
            match last {
                Some(last) if last.contains(text.as_str()) => Ok(()),
                Some(last) => Err(format!(
                    "expected the last user message to contain {text:?}, it was {last:?}"
                )),
                None => Err(format!(
                    "expected a user message containing {text:?}, there is none"
                )),
            }
        }
        Expectation::ToolResultsFor(ids) => {
            let start = messages
                .iter()
                .rposition(|m| matches!(m, Message::Assistant { .. }))
                .map_or(0, |i| i + 1);
            let got: Vec<&str> = messages[start..]
                .iter()
                .filter_map(|m| match m {
                    Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
                    _ => None,
                })
                .collect();
            if got.iter().copied().eq(ids.iter().map(String::as_str)) {
                Ok(())
            } else {
                Err(format!(
                    "expected tool results for {ids:?} after the last assistant message, got {got:?}"
                ))
            }
        }
        Expectation::ToolResultContains { call_id, text } => {
            let result = messages.iter().find_map(|m| match m {
                Message::Tool { tool_call_id, .. } if tool_call_id == call_id => Some(m.text()),
                _ => None,
            });
            match result {
                Some(result) if result.contains(text.as_str()) => Ok(()),
                Some(result) => Err(format!(
                    "expected the result of `{call_id}` to contain {text:?}, it was {result:?}"
                )),
                None => Err(format!(
                    "expected a result for call `{call_id}`, there is none"
                )),
            }
        }
        Expectation::HasTools(names) => {
            let missing: Vec<&String> = names
                .iter()
                .filter(|name| !request.tools.iter().any(|t| &t.name == *name))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("expected tools {missing:?} to be offered"))
            }
        }
        Expectation::LacksTool(name) => {
            if request.tools.iter().any(|t| &t.name == name) {
                Err(format!("expected tool `{name}` not to be offered"))
            } else {
                Ok(())
            }
        }
        Expectation::SystemContains(text) => {
            if request.system.contains(text.as_str()) {
                Ok(())
            } else {
                Err(format!(
                    "expected the system prompt to contain {text:?}, it was {:?}",
                    request.system
                ))
            }
        }
        Expectation::MessageCount(count) => {
            if messages.len() == *count {
                Ok(())
            } else {
                Err(format!(
                    "expected {count} messages, the request has {}",
                    messages.len()
                ))
            }
        }
    }
}

/// A summary of one request the provider received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// The model name.
    pub model: String,
    /// The system prompt.
    pub system: String,
    /// How many messages were sent.
    pub message_count: usize,
    /// The last message.
    pub last_message: Option<Message>,
    /// The offered tool names.
    pub tools: Vec<String>,
}

/// A script file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read script `{path}`: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The JSON is not a script.
    #[error("invalid script: {0}")]
    Json(#[from] serde_json::Error),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile {
    turns: Vec<ScriptedTurn>,
}

/// Plays back scripted turns, one per model call, checking each request
/// against the turn's expectations.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use kinet_core::Agent;
/// use kinet_core::testing::{Expectation, ScriptedProvider, ScriptedTurn};
///
/// let provider = ScriptedProvider::new([
///     ScriptedTurn::text("Hello!").expect(Expectation::LastUserContains("hi".into())),
/// ]);
/// let agent = Agent::builder(provider).build();
/// let outcome = agent.run_to_completion("hi").await;
/// assert_eq!(outcome.final_text().as_deref(), Some("Hello!"));
/// # }
/// ```
#[derive(Debug)]
pub struct ScriptedProvider {
    turns: Mutex<VecDeque<ScriptedTurn>>,
    played: Mutex<Vec<RecordedRequest>>,
}

impl ScriptedProvider {
    /// Plays `turns` in order.
    pub fn new(turns: impl IntoIterator<Item = ScriptedTurn>) -> Self {
        Self {
            turns: Mutex::new(turns.into_iter().collect()),
            played: Mutex::new(Vec::new()),
        }
    }

    /// Reads a script: `{"turns": [ScriptedTurn, ...]}`.
    pub fn from_json(json: &str) -> Result<Self, ScriptError> {
        let file: ScriptFile = serde_json::from_str(json)?;
        Ok(Self::new(file.turns))
    }

    /// Reads a script file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScriptError> {
        let path = path.as_ref();
        let json = std::fs::read_to_string(path).map_err(|source| ScriptError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&json)
    }

    /// Replays a recorded conversation: each assistant message becomes a
    /// turn that expects the tool results (or the user message) that came
    /// before it in the recording.
    pub fn from_transcript(messages: &[Message]) -> Self {
        let mut turns = Vec::new();
        let mut pending_calls: Vec<String> = Vec::new();
        let mut last_user: Option<String> = None;
        for message in messages {
            match message {
                Message::User { .. } => last_user = Some(message.text()),
                Message::Assistant {
                    content,
                    tool_calls,
                    ..
                } => {
                    let mut turn = ScriptedTurn::new();
                    if !pending_calls.is_empty() {
                        turn = turn.expect(Expectation::ToolResultsFor(std::mem::take(
                            &mut pending_calls,
                        )));
                    } else if let Some(user) = last_user.take() {
                        turn = turn.expect(Expectation::LastUserContains(user));
                    }
                    let text = crate::message::join_text(content);
                    if !text.is_empty() {
                        turn = turn.with_text(text);
                    }
                    for call in tool_calls {
                        let arguments = serde_json::from_str(&call.arguments)
                            .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
                        turn = turn.tool_call(&call.id, &call.name, arguments);
                        pending_calls.push(call.id.clone());
                    }
                    turns.push(turn);
                }
                _ => {}
            }
        }
        Self::new(turns)
    }

    /// Turns not yet played.
    pub fn remaining(&self) -> usize {
        self.turns.lock().map_or(0, |turns| turns.len())
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.played
            .lock()
            .map(|played| played.clone())
            .unwrap_or_default()
    }

    /// Fails unless every turn was played.
    pub fn assert_finished(&self) -> Result<(), ProviderError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(ProviderError::Script(format!(
                "{n} scripted turn(s) were never requested"
            ))),
        }
    }
}

#[async_trait]
impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let number = {
            let mut played = self
                .played
                .lock()
                .map_err(|_| ProviderError::Script("the script state is poisoned".into()))?;
            played.push(RecordedRequest {
                model: request.model.to_string(),
                system: request.system.to_string(),
                message_count: request.messages.len(),
                last_message: request.messages.last().cloned(),
                tools: request.tools.iter().map(|t| t.name.clone()).collect(),
            });
            played.len()
        };
        let turn = self
            .turns
            .lock()
            .map_err(|_| ProviderError::Script("the script state is poisoned".into()))?
            .pop_front()
            .ok_or_else(|| {
                ProviderError::Script(format!(
                    "request {number} arrived but the script has no turn left"
                ))
            })?;
        turn.check(&request)
            .map_err(|e| ProviderError::Script(format!("request {number}: {e}")))?;
        let delay = turn.delay_ms.map(Duration::from_millis);
        let hang = turn.hang;
        let events = futures::stream::iter(turn.into_events());
        let stream: ProviderStream = match delay {
            Some(delay) => Box::pin(events.then(move |event| async move {
                tokio::time::sleep(delay).await;
                event
            })),
            None => Box::pin(events),
        };
        Ok(if hang {
            Box::pin(stream.chain(futures::stream::pending()))
        } else {
            stream
        })
    }
}
