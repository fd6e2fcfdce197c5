//! Events a run reports to the host.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::AgentError;
use crate::message::Message;
use crate::provider::{StopReason, Usage};
use crate::tool::{ToolError, ToolOutput};

/// One entry of the agent's todo list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TodoItem {
    /// What to do, in the imperative ("Run the tests").
    pub content: String,
    /// Where it stands.
    pub status: TodoStatus,
    /// The present-continuous form shown while it runs ("Running the tests").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_form: Option<String>,
}

/// The state of a todo item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on (at most one at a time).
    InProgress,
    /// Done.
    Completed,
}

/// Why a run ended.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RunStop {
    /// The model answered without calling tools.
    Completed,
    /// `max_turns` model calls were made; the last tool results are in the
    /// history, so the conversation can be continued.
    MaxTurns,
    /// The run was cancelled.
    Cancelled,
    /// The user chose "abort" when asked to confirm a call.
    Aborted {
        /// The tool whose confirmation aborted the run.
        tool: String,
    },
    /// A provider, hook or fatal tool error ended the run.
    Failed(AgentError),
}

impl RunStop {
    /// True for [`RunStop::Completed`].
    pub fn is_completed(&self) -> bool {
        matches!(self, Self::Completed)
    }
}

/// What happened during a run, in order.
///
/// Tool events carry the full, untruncated output; the model saw the
/// truncated copy that is in the history.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AgentEvent {
    /// A model call is about to start.
    TurnStarted {
        /// 1-based turn number within this run.
        turn: u32,
    },
    /// A piece of streamed answer text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// A piece of streamed reasoning ("thinking") text.
    ReasoningDelta {
        /// The text.
        text: String,
    },
    /// The complete assistant message of a turn, as added to the history.
    AssistantMessage {
        /// The message.
        message: Message,
    },
    /// Token usage of one model call.
    Usage {
        /// The usage.
        usage: Usage,
    },
    /// A tool call is about to be confirmed and run.
    ToolCallStarted {
        /// The call id.
        call_id: String,
        /// The tool name.
        name: String,
        /// The raw JSON arguments.
        arguments: String,
    },
    /// Output a running tool reported before finishing.
    ToolProgress {
        /// The call id.
        call_id: String,
        /// The tool name.
        name: String,
        /// The chunk.
        text: String,
    },
    /// A tool call finished (ran, failed, was denied or cancelled).
    ToolCallFinished {
        /// The call id.
        call_id: String,
        /// The tool name.
        name: String,
        /// The full result.
        result: Result<ToolOutput, ToolError>,
        /// Whether the model saw a truncated copy.
        truncated_for_model: bool,
        /// How long it ran.
        elapsed: Duration,
    },
    /// The todo list changed.
    TodoUpdated {
        /// The whole list.
        todos: Vec<TodoItem>,
    },
    /// Something the host may want to show but that did not stop the run
    /// (a tool source that was not ready in time, a duplicate tool name).
    Warning {
        /// What happened.
        message: String,
    },
    /// A model turn and its tool calls are done.
    TurnEnded {
        /// The turn number.
        turn: u32,
        /// Why the model stopped.
        stop_reason: StopReason,
    },
    /// An event of a sub-agent, tagged with its id.
    SubAgent {
        /// The sub-agent's id.
        agent_id: String,
        /// Its event.
        event: Box<AgentEvent>,
    },
    /// The run is over; always the last event.
    Done {
        /// Why it ended.
        stop: RunStop,
        /// Tokens used by the whole run.
        usage: Usage,
    },
}
