//! The loop: call the model, run its tool calls, repeat.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentConfig, RunOutcome};
use crate::batch;
use crate::ctx::EventSink;
use crate::error::AgentError;
use crate::event::{AgentEvent, RunStop};
use crate::message::{ContentPart, Conversation, Message, ToolCall};
use crate::provider::{ChatRequest, StopReason, StreamEvent, Usage};
use crate::toolset::ToolSnapshot;

/// One model response, assembled from its stream.
struct ModelTurn {
    text: String,
    calls: Vec<ToolCall>,
    provider_state: Option<serde_json::Value>,
    usage: Option<Usage>,
    stop: StopReason,
}

enum TurnFailure {
    /// Cancelled mid-stream; the text received so far.
    Cancelled(String),
    Failed(AgentError),
}

/// Runs the loop until the model stops, `max_turns`, cancellation or a
/// failure. Always emits `Done` last and returns a history in which every
/// tool call has a result.
pub(crate) async fn drive(
    config: Arc<AgentConfig>,
    mut conversation: Conversation,
    cancel: CancellationToken,
    events: EventSink,
) -> RunOutcome {
    let base_ctx = config.base_ctx(&cancel, &events);
    let mut usage = Usage::default();
    let mut turn: u32 = 0;
    let stop = loop {
        if cancel.is_cancelled() {
            break RunStop::Cancelled;
        }
        if turn >= config.max_turns {
            break RunStop::MaxTurns;
        }
        turn += 1;
        events.emit(AgentEvent::TurnStarted { turn });

        let tools = tokio::select! {
            biased;
            _ = cancel.cancelled() => break RunStop::Cancelled,
            tools = config.tools.snapshot() => tools,
        };
        for warning in tools.warnings() {
            events.emit(AgentEvent::Warning {
                message: warning.clone(),
            });
        }

        let model_turn =
            match call_model(&config, &conversation, &tools, &cancel, &events, turn).await {
                Ok(model_turn) => model_turn,
                Err(TurnFailure::Cancelled(text)) => {
                    if !text.is_empty() {
                        conversation.push(Message::assistant(text));
                    }
                    break RunStop::Cancelled;
                }
                Err(TurnFailure::Failed(error)) => break RunStop::Failed(error),
            };

        let calls = model_turn.calls;
        let message = Message::Assistant {
            content: if model_turn.text.is_empty() {
                Vec::new()
            } else {
                vec![ContentPart::Text {
                    text: model_turn.text,
                }]
            },
            tool_calls: calls.clone(),
            provider_state: model_turn.provider_state,
        };
        events.emit(AgentEvent::AssistantMessage {
            message: message.clone(),
        });
        conversation.push(message);
        if let Some(turn_usage) = model_turn.usage {
            usage.add(&turn_usage);
            events.emit(AgentEvent::Usage { usage: turn_usage });
        }

        if calls.is_empty() {
            events.emit(AgentEvent::TurnEnded {
                turn,
                stop_reason: model_turn.stop,
            });
            break RunStop::Completed;
        }

        let batch_stop = batch::run(
            &config,
            &tools,
            &calls,
            &mut conversation,
            &base_ctx,
            &cancel,
            &events,
        )
        .await;
        events.emit(AgentEvent::TurnEnded {
            turn,
            stop_reason: model_turn.stop,
        });
        if let Some(stop) = batch_stop {
            break stop;
        }
    };
    events.emit(AgentEvent::Done {
        stop: stop.clone(),
        usage,
    });
    RunOutcome {
        conversation,
        stop,
        usage,
        turns: turn,
    }
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Runs the hooks, calls the provider and assembles its stream.
async fn call_model(
    config: &AgentConfig,
    conversation: &Conversation,
    tools: &ToolSnapshot,
    cancel: &CancellationToken,
    events: &EventSink,
    turn: u32,
) -> Result<ModelTurn, TurnFailure> {
    let mut request = ChatRequest {
        model: Cow::Borrowed(&config.model),
        system: Cow::Borrowed(&config.system_prompt),
        messages: Cow::Borrowed(&conversation.messages),
        tools: Cow::Borrowed(tools.specs()),
        params: Cow::Borrowed(&config.params),
    };
    for hook in &config.hooks {
        hook.before_model_call(&mut request)
            .await
            .map_err(|e| TurnFailure::Failed(AgentError::Hook(e)))?;
    }
    let provider_error = |source| {
        TurnFailure::Failed(AgentError::Provider {
            provider: config.provider.name().to_owned(),
            source,
        })
    };
    let mut stream = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Err(TurnFailure::Cancelled(String::new())),
        stream = config.provider.stream(request) => stream.map_err(provider_error)?,
    };

    let mut text = String::new();
    let mut partial: BTreeMap<usize, PartialCall> = BTreeMap::new();
    let mut provider_state = None;
    let mut usage = None;
    let mut stop = None;
    loop {
        let item = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(TurnFailure::Cancelled(text)),
            item = stream.next() => item,
        };
        let Some(item) = item else { break };
        match item.map_err(provider_error)? {
            StreamEvent::TextDelta(delta) => {
                text.push_str(&delta);
                events.emit(AgentEvent::TextDelta { text: delta });
            }
            StreamEvent::ReasoningDelta(delta) => {
                events.emit(AgentEvent::ReasoningDelta { text: delta });
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                let call = partial.entry(index).or_default();
                if !id.is_empty() {
                    call.id = id;
                }
                if !name.is_empty() {
                    call.name = name;
                }
            }
            StreamEvent::ToolCallArgumentsDelta { index, delta } => {
                partial.entry(index).or_default().arguments.push_str(&delta);
            }
            StreamEvent::ProviderState(state) => provider_state = Some(state),
            StreamEvent::Usage(reported) => usage = Some(reported),
            StreamEvent::Finished(reason) => stop = Some(reason),
        }
    }
    let calls: Vec<ToolCall> = partial
        .into_iter()
        .map(|(index, call)| ToolCall {
            id: if call.id.is_empty() {
                format!("call_{turn}_{index}")
            } else {
                call.id
            },
            name: call.name,
            arguments: call.arguments,
        })
        .collect();
    let stop = stop.unwrap_or(if calls.is_empty() {
        StopReason::EndTurn
    } else {
        StopReason::ToolUse
    });
    Ok(ModelTurn {
        text,
        calls,
        provider_state,
        usage,
        stop,
    })
}
