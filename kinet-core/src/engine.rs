//! The loop: call the model, run its tool calls, repeat.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::backend::Provider;
use crate::conversation::Conversation;
use crate::ctx::{EventSink, ToolCtx};
use crate::data::deferred::Decisions;
use crate::data::error::{AgentError, HookError};
use crate::data::event::{AgentEvent, RunOutcome, RunStop};
use crate::data::message::{ContentPart, Message, ToolCall};
use crate::data::model::{
    ChatRequest, GenerationParams, ProviderError, StopReason, StreamEvent, Usage,
};
use crate::pipeline::batch;
use crate::pipeline::{Pipeline, guarded};
use crate::toolset::{ToolSnapshot, Toolset};

mod deferred;

/// What the loop needs to run: the model side, the tools, and the pipeline
/// their calls go through. Nothing else of the agent reaches the engine.
#[derive(Clone)]
pub(crate) struct RunSettings {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) model: String,
    pub(crate) system_prompt: String,
    pub(crate) params: GenerationParams,
    pub(crate) tools: Toolset,
    pub(crate) pipeline: Pipeline,
    pub(crate) max_turns: u32,
    pub(crate) context: crate::context::ContextPolicy,
    pub(crate) journal: Option<Arc<dyn crate::session::Journal>>,
    pub(crate) telemetry: crate::telemetry::Telemetry,
    pub(crate) prices: Option<Arc<crate::telemetry::PriceTable>>,
    pub(crate) budget: Option<f64>,
}

/// One model response, assembled from its stream.
struct ModelTurn {
    text: String,
    calls: Vec<ToolCall>,
    provider_state: Option<serde_json::Value>,
    usage: Option<Usage>,
    stop: StopReason,
    /// The model that answered, when the server said.
    model: Option<String>,
    /// What the call cost, when the price table prices the model.
    cost: Option<f64>,
}

enum TurnFailure {
    /// Cancelled mid-stream; the text received so far.
    Cancelled(String),
    Failed(AgentError),
}

/// Runs the loop until the model stops, `max_turns`, cancellation or a
/// failure. Always emits `Done` last and returns a history in which every
/// tool call has a result.
/// Tools run in contexts derived from `base`, whose cancellation token and
/// event sink are the run's. `span` is the run's `invoke_agent` span (made
/// where the run started, so it nests under the caller's); the outcome is
/// recorded on it.
pub(crate) async fn drive(
    config: Arc<RunSettings>,
    conversation: Conversation,
    base: ToolCtx,
    span: tracing::Span,
    resume: Option<Decisions>,
) -> RunOutcome {
    let outcome = run_loop(config.clone(), conversation, base, resume)
        .instrument(span.clone())
        .await;
    crate::telemetry::spans::usage(&span, &outcome.usage, outcome.cost);
    if !span.is_disabled() {
        span.record("kinet.turns", outcome.turns);
        span.record("kinet.stop", outcome.stop.to_string().as_str());
        if let RunStop::Failed(error) = &outcome.stop {
            crate::telemetry::spans::error(
                &span,
                crate::telemetry::spans::run_error_type(error),
                &error.to_string(),
            );
        }
    }
    outcome
}

async fn run_loop(
    config: Arc<RunSettings>,
    mut conversation: Conversation,
    base: ToolCtx,
    resume: Option<Decisions>,
) -> RunOutcome {
    let cancel = base.cancellation().clone();
    let events = base.events().clone();
    let mut usage = Usage::default();
    let mut cost: Option<f64> = None;
    let mut model_stop: Option<StopReason> = None;
    let mut turn: u32 = 0;
    // Reported over estimated prompt tokens of the last request.
    let mut calibration = 1.0;
    // The tool-call ids in the history, for giving new calls unique ones.
    let mut taken: HashSet<String> = HashSet::new();
    let mut unchecked = true;
    // The input the journal has not seen yet (a new user message).
    if let Some(journal) = &config.journal {
        journal.begin(&conversation.messages);
    }
    // Every call's idempotency key starts with the conversation's run key,
    // made (and journalled) by its first run.
    let run_key = match &conversation.run_key {
        Some(key) => key.clone(),
        None => {
            let key = crate::random::token();
            if let Some(journal) = &config.journal {
                journal.record(&crate::session::JournalEntry::RunKey { key: key.clone() });
            }
            conversation.run_key = Some(key.clone());
            key
        }
    };
    let base = base.with_run_key(&run_key);
    // A turn waiting for approvals (or, on resume, one a crash cut short)
    // is finished first.
    let mut early = None;
    let waiting = conversation.deferred.take().or_else(|| {
        resume
            .as_ref()
            .and_then(|_| deferred::unfinished(&conversation))
    });
    if let Some(deferred) = waiting {
        match resume {
            None => {
                early = Some(RunStop::Failed(AgentError::Resume(format!(
                    "it is waiting for approval of {}; finish it with Agent::resume and the decisions",
                    deferred::describe(&deferred.pending)
                ))));
                conversation.deferred = Some(deferred);
            }
            Some(decisions) => {
                turn = deferred.turn;
                early =
                    deferred::finish(&config, &mut conversation, deferred, &decisions, &base).await;
            }
        }
    }
    let stop = loop {
        if let Some(stop) = early.take() {
            break stop;
        }
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
            tools = turn_tools(&config) => match tools {
                Ok(tools) => tools,
                Err(error) => break RunStop::Failed(error),
            },
        };
        for warning in tools.warnings() {
            events.emit(AgentEvent::Warning {
                message: warning.clone(),
            });
        }
        if turn == 1 {
            note_input(&config, &mut conversation, &tools);
        }

        // Every request goes out in a shape providers accept, whatever the
        // history was loaded from. What the loop itself adds is well formed
        // (unique call ids, a result for every call), so the whole history
        // is checked only when it came from outside: at the start and after
        // a compaction rewrote it.
        if unchecked {
            check_history(&mut conversation, &mut taken, &events);
            unchecked = false;
        }
        // Sizes are only estimated where a window is known to keep them in.
        let mut sizer = config
            .context
            .window_for(&config.model)
            .map(|_| crate::context::Sizer::new(&config.system_prompt, tools.specs(), calibration));
        let mut raw_estimate = sizer.as_ref().map(|s| s.raw(&conversation.messages));
        if let (Some(sizer), Some(raw)) = (&sizer, raw_estimate)
            && manage_context(&config, &mut conversation, sizer, raw, false, &events).await
        {
            check_history(&mut conversation, &mut taken, &events);
            raw_estimate = Some(sizer.raw(&conversation.messages));
        }
        let mut result = traced_call(&config, &conversation, &tools, &cancel, &events).await;
        // The request did not fit: learn the window the provider stated,
        // compact once and try again.
        if let Err(TurnFailure::Failed(AgentError::Provider {
            source:
                ProviderError::ContextLengthExceeded {
                    limit, requested, ..
                },
            ..
        })) = &result
        {
            let window = limit.or_else(|| requested.map(|n| n * 3 / 4));
            if let Some(window) = window {
                config.context.learn(&config.model, window);
            }
            let sizer = sizer.get_or_insert_with(|| {
                crate::context::Sizer::new(&config.system_prompt, tools.specs(), calibration)
            });
            let raw = raw_estimate.unwrap_or_else(|| sizer.raw(&conversation.messages));
            if manage_context(&config, &mut conversation, sizer, raw, true, &events).await {
                check_history(&mut conversation, &mut taken, &events);
                raw_estimate = Some(sizer.raw(&conversation.messages));
                result = traced_call(&config, &conversation, &tools, &cancel, &events).await;
            }
        }
        let model_turn = match result {
            Ok(model_turn) => model_turn,
            Err(TurnFailure::Cancelled(text)) => {
                if !text.is_empty() {
                    let message = Message::assistant(text);
                    if let Some(journal) = &config.journal {
                        journal.message(&message);
                    }
                    conversation.push(message);
                }
                break RunStop::Cancelled;
            }
            Err(TurnFailure::Failed(error)) => break RunStop::Failed(error),
        };
        if let (Some(usage), Some(raw)) = (&model_turn.usage, raw_estimate)
            && usage.input_tokens > 0
            && raw > 0
        {
            calibration = (usage.input_tokens as f64 / raw as f64).clamp(0.5, 4.0);
        }

        let calls = unique_ids(model_turn.calls, &mut taken, turn);
        model_stop = Some(model_turn.stop.clone());
        // An empty turn (only reasoning, or cut off before any output) adds
        // nothing: providers reject empty assistant messages.
        if !model_turn.text.is_empty() || !calls.is_empty() {
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
            if let Some(journal) = &config.journal {
                journal.message(&message);
            }
            conversation.push(message);
        }
        if let Some(turn_usage) = model_turn.usage {
            usage.add(&turn_usage);
            events.emit(AgentEvent::Usage { usage: turn_usage });
            if let Some(turn_cost) = model_turn.cost {
                let run_cost = cost.unwrap_or(0.0) + turn_cost;
                cost = Some(run_cost);
                events.emit(AgentEvent::Cost {
                    turn: turn_cost,
                    run: run_cost,
                });
            }
        }

        if calls.is_empty() {
            events.emit(AgentEvent::TurnEnded {
                turn,
                stop_reason: model_turn.stop,
            });
            break RunStop::Completed;
        }
        // The budget is spent: the calls of this turn are answered without
        // running, and no further model call is made.
        if let (Some(limit), Some(spent)) = (config.budget, cost)
            && spent >= limit
        {
            let stop = RunStop::BudgetReached { spent, limit };
            let results = batch::refuse_all(
                &config.pipeline,
                &tools,
                &calls,
                &base,
                config.journal.as_deref(),
                stop.clone(),
            )
            .await;
            conversation.messages.extend(results);
            events.emit(AgentEvent::TurnEnded {
                turn,
                stop_reason: model_turn.stop,
            });
            break stop;
        }

        let ran = run_calls(&config, &mut conversation, &tools, &calls, &base).await;
        let batch_stop = ran.stop;
        conversation.messages.extend(ran.messages);
        if let Some(RunStop::AwaitingApproval { pending }) = &batch_stop {
            deferred::keep(&config, &mut conversation, calls, pending, ran.saved, turn);
        }
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
        model_stop,
        usage,
        cost,
        turns: turn,
    }
}

/// The tools of a turn, sized for the model's window.
async fn turn_tools(config: &RunSettings) -> Result<Arc<ToolSnapshot>, AgentError> {
    guarded(
        config
            .tools
            .snapshot_for_window(config.context.window_for(&config.model)),
    )
    .await
    .map_err(|panic| AgentError::Internal(format!("a tool source panicked: {panic}")))
}

/// Runs a turn's calls through the batch: checked against what the model
/// had read when it wrote them (what they return joins the ledger after),
/// with the turn's tools callable from inside a call
/// ([`ToolCtx::call_tool`]); approvals granted for the session are
/// journalled. On a resume, `base` holds the decisions given later.
async fn run_calls(
    config: &RunSettings,
    conversation: &mut Conversation,
    tools: &Arc<ToolSnapshot>,
    calls: &[ToolCall],
    base: &ToolCtx,
) -> batch::Ran {
    let approved_before = conversation.session_approvals.clone();
    let turn_base = base
        .clone()
        .with_provenance(conversation.provenance.clone())
        .with_tool_caller(Some(config.pipeline.turn_tools(tools)));
    let mut ran = batch::run(
        &config.pipeline,
        tools,
        calls,
        &mut conversation.session_approvals,
        &turn_base,
        config.journal.as_deref(),
    )
    .await;
    for seen in ran.seen.drain(..) {
        conversation.provenance.record(seen);
    }
    if let Some(journal) = &config.journal {
        for tool in conversation.session_approvals.difference(&approved_before) {
            journal.record(&crate::session::JournalEntry::Approval { tool: tool.clone() });
        }
    }
    ran
}

/// Records the run's input (the user's new messages, the system prompt) in
/// the conversation's provenance ledger, and journals it.
fn note_input(config: &RunSettings, conversation: &mut Conversation, tools: &ToolSnapshot) {
    let before = conversation.provenance.seen().len();
    config.pipeline.defence().note_input(
        &mut conversation.provenance,
        &conversation.messages,
        &config.system_prompt,
        |name| tools.get(name).map(|tool| tool.annotations()),
    );
    if let Some(journal) = &config.journal {
        for seen in &conversation.provenance.seen()[before..] {
            journal.record(&crate::session::JournalEntry::Seen { seen: seen.clone() });
        }
    }
}

/// One model call in its `chat` span, with what it cost.
async fn traced_call(
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
            turn.cost = match (&config.prices, &turn.usage) {
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

/// Compacts the conversation when the next request would pass the
/// threshold of the model's window (or, `force`d, after a context-length
/// error). Returns whether anything changed.
async fn manage_context(
    config: &RunSettings,
    conversation: &mut Conversation,
    sizer: &crate::context::Sizer,
    raw: u64,
    force: bool,
    events: &EventSink,
) -> bool {
    let Some(window) = config.context.window_for(&config.model) else {
        return false;
    };
    let request = crate::context::Request {
        sizer,
        raw,
        window,
        force,
    };
    let model = crate::context::Model {
        provider: &*config.provider,
        name: &config.model,
        params: &config.params,
    };
    match crate::context::compact(&mut conversation.messages, request, &config.context, model).await
    {
        Ok(Some(done)) => {
            events.emit(AgentEvent::ContextCompacted {
                before_tokens: done.before_tokens,
                after_tokens: done.after_tokens,
                pruned_results: done.pruned_results,
                summarized_messages: done.summarized_messages,
            });
            true
        }
        Ok(None) => false,
        Err(message) => {
            events.emit(AgentEvent::Warning { message });
            false
        }
    }
}

/// Repairs the history (see [`repair`](crate::data::repair::repair)),
/// tells the host what was repaired, and notes the call ids it holds.
fn check_history(conversation: &mut Conversation, taken: &mut HashSet<String>, events: &EventSink) {
    let repairs = crate::data::repair::repair(&mut conversation.messages);
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
fn unique_ids(mut calls: Vec<ToolCall>, taken: &mut HashSet<String>, turn: u32) -> Vec<ToolCall> {
    for (index, call) in calls.iter_mut().enumerate() {
        if !call.id.trim().is_empty() && taken.insert(call.id.clone()) {
            continue;
        }
        let candidate =
            crate::data::repair::fresh_id(&call.id, taken, || format!("call_{turn}_{index}"));
        tracing::debug!(from = %call.id, to = %candidate, "renamed a duplicate or empty tool-call id");
        taken.insert(candidate.clone());
        call.id = candidate;
    }
    calls
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
    for hook in config.pipeline.hooks() {
        let outcome = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(TurnFailure::Cancelled(String::new())),
            outcome = guarded(hook.before_model_call(&mut request)) => outcome,
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

    let mut text = String::new();
    let mut calls: Vec<PartialCall> = Vec::new();
    // Stream index -> position in `calls`.
    let mut positions: HashMap<usize, usize> = HashMap::new();
    let mut provider_state = None;
    let mut usage = None;
    let mut stop = None;
    let mut model = None;
    loop {
        let item = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(TurnFailure::Cancelled(text)),
            item = guarded(stream.next()) => item.map_err(provider_panic)?,
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
                // A new id at a known index is a new call (some servers send
                // every call at index 0).
                let reuse = positions.get(&index).copied().filter(|&pos| {
                    let known = &calls[pos].id;
                    id.is_empty() || known.is_empty() || *known == id
                });
                let pos = match reuse {
                    Some(pos) => pos,
                    None => {
                        calls.push(PartialCall::default());
                        positions.insert(index, calls.len() - 1);
                        calls.len() - 1
                    }
                };
                let call = &mut calls[pos];
                if !id.is_empty() {
                    call.id = id;
                }
                if !name.is_empty() {
                    call.name = name;
                }
            }
            StreamEvent::ToolCallArgumentsDelta { index, delta } => {
                let pos = *positions.entry(index).or_insert_with(|| {
                    calls.push(PartialCall::default());
                    calls.len() - 1
                });
                calls[pos].arguments.push_str(&delta);
            }
            StreamEvent::ProviderState(state) => provider_state = Some(state),
            StreamEvent::Usage(reported) => usage = Some(reported),
            StreamEvent::Finished(reason) => stop = Some(reason),
            StreamEvent::Model(name) => model = Some(name),
        }
    }
    let calls: Vec<ToolCall> = calls
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
        model,
        cost: None,
    })
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
