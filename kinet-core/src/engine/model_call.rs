//! One model call: the hooks before it, the provider's stream assembled
//! into a turn, its `chat` span and cost.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::RunSettings;
use crate::ctx::EventSink;
use crate::data::conversation::Conversation;
use crate::data::error::{AgentError, HookError};
use crate::data::model::{ChatRequest, ProviderError, StopReason, StreamEvent, Usage};
use crate::event::AgentEvent;
use crate::message::ToolCall;
use crate::pipeline::guarded;
use crate::toolset::ToolSnapshot;

/// One model response, assembled from its stream.
pub(super) struct ModelTurn {
    pub(super) text: String,
    pub(super) calls: Vec<ToolCall>,
    pub(super) provider_state: Option<serde_json::Value>,
    pub(super) usage: Option<Usage>,
    pub(super) stop: StopReason,
    /// The model that answered, when the server said.
    pub(super) model: Option<String>,
    /// What the call cost, when the price table prices the model.
    pub(super) cost: Option<f64>,
}

/// Why a model call gave no turn.
pub(super) enum TurnFailure {
    /// Cancelled mid-stream; the text received so far.
    Cancelled(String),
    /// It failed.
    Failed(AgentError),
}

/// One model call in its `chat` span, with what it cost.
pub(super) async fn traced_call(
    config: &RunSettings,
    conversation: &Conversation,
    tools: &ToolSnapshot,
    cancel: &CancellationToken,
    events: &EventSink,
) -> Result<ModelTurn, TurnFailure> {
    use crate::telemetry::spans;
    let span = spans::chat(config.provider.name(), &config.model);
    let content = config.telemetry.records_content() && !span.is_disabled();
    if content {
        span.record("gen_ai.system_instructions", config.system_prompt.as_str());
        if let Ok(messages) = serde_json::to_string(&conversation.messages) {
            span.record("gen_ai.input.messages", messages.as_str());
        }
    }
    let mut result = call_model(config, conversation, tools, cancel, events)
        .instrument(span.clone())
        .await;
    match &mut result {
        Ok(turn) => {
            turn.cost = match (config.telemetry.price_table(), &turn.usage) {
                (Some(prices), Some(usage)) => {
                    let model = turn.model.as_deref().unwrap_or(&config.model);
                    prices
                        .cost(&config.model, usage)
                        .or_else(|| prices.cost(model, usage))
                }
                _ => None,
            };
            if !span.is_disabled() {
                if let Some(model) = &turn.model {
                    span.record("gen_ai.response.model", model.as_str());
                }
                span.record(
                    "gen_ai.response.finish_reasons",
                    spans::finish_reason(&turn.stop),
                );
                if let Some(usage) = &turn.usage {
                    spans::usage(&span, usage, turn.cost);
                }
                if content {
                    let output = serde_json::json!([{
                        "role": "assistant",
                        "content": turn.text,
                        "tool_calls": turn.calls,
                    }]);
                    span.record("gen_ai.output.messages", output.to_string().as_str());
                }
            }
        }
        Err(TurnFailure::Failed(error)) => {
            spans::error(&span, spans::run_error_type(error), &error.to_string());
        }
        Err(TurnFailure::Cancelled(_)) => spans::error(&span, "cancelled", "the run was cancelled"),
    }
    result
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Runs the hooks, calls the provider and assembles its stream.
async fn call_model(
    config: &RunSettings,
    conversation: &Conversation,
    tools: &ToolSnapshot,
    cancel: &CancellationToken,
    events: &EventSink,
) -> Result<ModelTurn, TurnFailure> {
    let mut request = ChatRequest {
        model: Cow::Borrowed(&config.model),
        system: Cow::Borrowed(&config.system_prompt),
        messages: Cow::Borrowed(&conversation.messages),
        tools: Cow::Borrowed(tools.specs()),
        params: Cow::Borrowed(&config.params),
    };
    before_model_call(config, &mut request, cancel).await?;
    let provider_error = |source| {
        TurnFailure::Failed(AgentError::Provider {
            provider: config.provider.name().to_owned(),
            source,
        })
    };
    let provider_panic = |panic: String| {
        TurnFailure::Failed(AgentError::Provider {
            provider: config.provider.name().to_owned(),
            source: ProviderError::Stream(format!("the provider panicked: {panic}")),
        })
    };
    let mut stream = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Err(TurnFailure::Cancelled(String::new())),
        stream = guarded(config.provider.stream(request)) => {
            stream.map_err(provider_panic)?.map_err(provider_error)?
        }
    };
    let mut turn = Assembler::default();
    loop {
        let item = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(TurnFailure::Cancelled(turn.text)),
            item = guarded(stream.next()) => item.map_err(provider_panic)?,
        };
        let Some(item) = item else { break };
        turn.add(item.map_err(provider_error)?, events);
    }
    Ok(turn.finish())
}

/// The hooks' [`before_model_call`](crate::hook::Hook::before_model_call),
/// in order: an error or a panic ends the run.
async fn before_model_call(
    config: &RunSettings,
    request: &mut ChatRequest<'_>,
    cancel: &CancellationToken,
) -> Result<(), TurnFailure> {
    for hook in config.pipeline.hooks() {
        let outcome = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(TurnFailure::Cancelled(String::new())),
            outcome = guarded(hook.before_model_call(request)) => outcome,
        };
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(TurnFailure::Failed(AgentError::Hook(error))),
            Err(panic) => {
                return Err(TurnFailure::Failed(AgentError::Hook(HookError(format!(
                    "a before-model-call hook panicked: {panic}"
                )))));
            }
        }
    }
    Ok(())
}

/// A model turn being assembled from its stream.
#[derive(Default)]
struct Assembler {
    text: String,
    calls: Vec<PartialCall>,
    /// Stream index -> position in `calls`.
    positions: HashMap<usize, usize>,
    provider_state: Option<serde_json::Value>,
    usage: Option<Usage>,
    stop: Option<StopReason>,
    model: Option<String>,
}

impl Assembler {
    /// Takes one event of the stream; text and reasoning also go to the
    /// host as they come.
    fn add(&mut self, event: StreamEvent, events: &EventSink) {
        match event {
            StreamEvent::TextDelta(delta) => {
                self.text.push_str(&delta);
                events.emit(AgentEvent::TextDelta { text: delta });
            }
            StreamEvent::ReasoningDelta(delta) => {
                events.emit(AgentEvent::ReasoningDelta { text: delta });
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                // A new id at a known index is a new call (some servers send
                // every call at index 0).
                let calls = &self.calls;
                let reuse = self.positions.get(&index).copied().filter(|&pos| {
                    let known = &calls[pos].id;
                    id.is_empty() || known.is_empty() || *known == id
                });
                let pos = match reuse {
                    Some(pos) => pos,
                    None => {
                        self.calls.push(PartialCall::default());
                        self.positions.insert(index, self.calls.len() - 1);
                        self.calls.len() - 1
                    }
                };
                let call = &mut self.calls[pos];
                if !id.is_empty() {
                    call.id = id;
                }
                if !name.is_empty() {
                    call.name = name;
                }
            }
            StreamEvent::ToolCallArgumentsDelta { index, delta } => {
                let calls = &mut self.calls;
                let pos = *self.positions.entry(index).or_insert_with(|| {
                    calls.push(PartialCall::default());
                    calls.len() - 1
                });
                self.calls[pos].arguments.push_str(&delta);
            }
            StreamEvent::ProviderState(state) => self.provider_state = Some(state),
            StreamEvent::Usage(reported) => self.usage = Some(reported),
            StreamEvent::Finished(reason) => self.stop = Some(reason),
            StreamEvent::Model(name) => self.model = Some(name),
        }
    }

    /// The turn: calls the server sent without an id get one.
    fn finish(self) -> ModelTurn {
        let calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .map(|call| ToolCall {
                id: if call.id.is_empty() {
                    generated_call_id()
                } else {
                    call.id
                },
                name: call.name,
                arguments: call.arguments,
            })
            .collect();
        let stop = self.stop.unwrap_or(if calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        });
        ModelTurn {
            text: self.text,
            calls,
            provider_state: self.provider_state,
            usage: self.usage,
            stop,
            model: self.model,
            cost: None,
        }
    }
}

/// An id for a tool call the server sent without one: unique within the
/// process and unlikely to repeat across processes, so a resumed
/// conversation never holds two calls with one id.
fn generated_call_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static NONCE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nonce = *NONCE.get_or_init(|| {
        // Truncation intended: 32 random bits are plenty.
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish() as u32
    });
    format!(
        "call_{nonce:08x}{:06x}",
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}
