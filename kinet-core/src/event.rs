//! What a run reports: events, stop reasons, outcomes (typed ones from
//! [`Agent::run_typed`](crate::Agent::run_typed)), errors.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::data::conversation::Conversation;
pub use crate::data::error::AgentError;
use crate::data::model::{StopReason, Usage};
use crate::data::output::{ToolError, ToolOutput};
use crate::message::Message;

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
    /// A hook ended the run before a tool call
    /// ([`BeforeTool::EndRun`](crate::hook::BeforeTool::EndRun)).
    Halted {
        /// The hook's reason.
        reason: String,
    },
    /// The run's cost reached its budget
    /// ([`Limits::budget`](crate::builder::Limits::budget)); the tool
    /// calls of the last turn were answered without running.
    BudgetReached {
        /// What the run cost.
        spent: f64,
        /// The budget.
        limit: f64,
    },
    /// Calls wait for approvals to be given later (the host's handler
    /// answered [`ConfirmDecision::Defer`](crate::ConfirmDecision::Defer),
    /// or its policy defers every question). The turn is kept in the
    /// conversation ([`Conversation::deferred`]); save it (a session
    /// store's journal already has it) and finish it, in this process or
    /// another, with [`Agent::resume`](crate::Agent::resume).
    AwaitingApproval {
        /// The calls waiting, with what the user is to see.
        pending: Vec<crate::decision::ConfirmRequest>,
    },
    /// A provider, hook or fatal tool error ended the run.
    Failed(AgentError),
}

impl fmt::Display for RunStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Completed => f.write_str("completed"),
            Self::MaxTurns => f.write_str("stopped at its turn limit"),
            Self::Cancelled => f.write_str("cancelled"),
            Self::Aborted { tool } => write!(f, "aborted by the user at a `{tool}` call"),
            Self::Halted { reason } => write!(f, "ended by a hook: {reason}"),
            Self::BudgetReached { spent, limit } => {
                write!(f, "stopped at its budget: spent {spent:.4} of {limit:.4}")
            }
            Self::AwaitingApproval { pending } => {
                let tools: Vec<&str> = pending.iter().map(|p| p.tool.as_str()).collect();
                write!(f, "waiting for approval of {}", tools.join(", "))
            }
            Self::Failed(error) => write!(f, "failed: {error}"),
        }
    }
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
    /// The cost of one model call and of the run so far, from the agent's
    /// [`PriceTable`](crate::telemetry::PriceTable) (only when it prices
    /// the model).
    Cost {
        /// This model call.
        turn: f64,
        /// The run so far.
        run: f64,
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
    /// Something a tool pack reports in its own terms (the todo list
    /// changed, a team member answered).
    Pack(PackEvent),
    /// The history was repaired before a model call so providers accept
    /// it (an unanswered tool call got an "interrupted" result, an orphan
    /// result was dropped, a duplicate id renamed).
    HistoryRepaired {
        /// What was changed.
        repairs: Vec<Repair>,
    },
    /// The conversation was compacted to fit the model's window: large old
    /// tool results pruned, older turns summarised.
    ContextCompacted {
        /// Estimated prompt tokens before.
        before_tokens: u64,
        /// Estimated prompt tokens after.
        after_tokens: u64,
        /// Tool results replaced by a stub.
        pruned_results: usize,
        /// Messages replaced by the summary.
        summarized_messages: usize,
    },
    /// The injection defence flagged a call: one of its argument values
    /// came from untrusted text (or, in strict mode, the model had read
    /// untrusted text). The call was refused, or the user is asked.
    InjectionSuspected {
        /// The call.
        call_id: String,
        /// Its tool.
        tool: String,
        /// Why, naming the value and where it came from.
        reason: String,
        /// The untrusted source (a tool name).
        source: String,
        /// True when refused without asking (an unattended host).
        refused: bool,
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

/// An event of a tool pack, carried through the loop without the core
/// knowing its type: the host downcasts it to the pack's type, or reads its
/// JSON form (for logs, journals, a web UI).
///
/// ```
/// use kinet_core::event::PackEvent;
///
/// #[derive(Debug, serde::Serialize)]
/// struct Progress { done: u32 }
///
/// let event = PackEvent::new("example", Progress { done: 3 });
/// assert_eq!(event.pack(), "example");
/// assert_eq!(event.downcast_ref::<Progress>().map(|p| p.done), Some(3));
/// assert_eq!(event.json()["done"], 3);
/// ```
#[derive(Clone)]
pub struct PackEvent {
    pack: &'static str,
    value: Arc<dyn Any + Send + Sync>,
    json: serde_json::Value,
}

impl PackEvent {
    /// An event of `pack` carrying `value`.
    pub fn new<T: Serialize + Send + Sync + 'static>(pack: &'static str, value: T) -> Self {
        let json = serde_json::to_value(&value).unwrap_or(serde_json::Value::Null);
        Self {
            pack,
            value: Arc::new(value),
            json,
        }
    }

    /// The pack that sent it (`"todo"`, `"team"`).
    pub fn pack(&self) -> &'static str {
        self.pack
    }

    /// The value, when it is a `T`.
    pub fn downcast_ref<T: 'static>(&self) -> Option<&T> {
        self.value.downcast_ref::<T>()
    }

    /// The value as JSON.
    pub fn json(&self) -> &serde_json::Value {
        &self.json
    }
}

impl fmt::Debug for PackEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackEvent")
            .field("pack", &self.pack)
            .field("json", &self.json)
            .finish()
    }
}

/// How a run ended, with the conversation to continue from.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The history, including everything this run added. Every tool call in
    /// it has a result, whatever the stop reason.
    pub conversation: Conversation,
    /// Why the run ended.
    pub stop: RunStop,
    /// Why the model stopped generating in the last turn (e.g.
    /// [`StopReason::MaxTokens`] for a cut-off answer); `None` when no model
    /// turn completed.
    pub model_stop: Option<StopReason>,
    /// Tokens used by this run.
    pub usage: Usage,
    /// What this run's model calls cost, when the agent's price table
    /// prices the model (sub-agents' runs report their own).
    pub cost: Option<f64>,
    /// Model calls made.
    pub turns: u32,
}

impl RunOutcome {
    /// The text of the last assistant message.
    pub fn final_text(&self) -> Option<String> {
        self.conversation.last_assistant_text()
    }

    /// An outcome for a run that could not take place.
    pub fn failed(error: AgentError) -> Self {
        Self {
            conversation: Conversation::new(),
            stop: RunStop::Failed(error),
            model_stop: None,
            usage: Usage::default(),
            cost: None,
            turns: 0,
        }
    }
}

/// A run's outcome with its answer parsed as `T`.
#[derive(Debug)]
pub struct Typed<T> {
    /// The answer.
    pub value: T,
    /// The whole run, the structured answer included as the last message.
    pub outcome: RunOutcome,
}

/// Why [`Agent::run_typed`](crate::Agent::run_typed) has no value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TypedError {
    /// The run itself did not complete (cancelled, failed, out of turns).
    #[error("the run did not complete: {}", .0.stop)]
    Run(Box<RunOutcome>),
    /// The model's answer did not match the schema, twice.
    #[error("the answer does not match the schema: {message}")]
    Invalid {
        /// What was wrong with the last answer.
        message: String,
        /// The run, the answers included.
        outcome: Box<RunOutcome>,
    },
}

/// One change made to a history so providers accept it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Repair {
    /// A tool call had no result: one saying it was interrupted was added,
    /// and the model decides whether to call again.
    Interrupted {
        /// The call's id.
        call_id: String,
        /// The tool.
        tool: String,
    },
    /// A tool result answered no call before it and was dropped.
    OrphanResult {
        /// The id it named.
        call_id: String,
    },
    /// A tool call reused an id (or had none): it and its result got a new one.
    DuplicateId {
        /// The id it had.
        from: String,
        /// The id it has now.
        to: String,
    },
    /// An assistant message with neither text nor calls was dropped.
    EmptyAssistant,
}
