//! The loop: call the model, run its tool calls, repeat.

use std::collections::HashSet;
use std::sync::Arc;

use tracing::Instrument as _;

use crate::backend::Provider;
use crate::ctx::EngineCtx as _;
use crate::ctx::{EventSink, ToolCtx};
use crate::data::conversation::Conversation;
use crate::data::error::AgentError;
use crate::data::model::{GenerationParams, ProviderError, StopReason, Usage};
use crate::deferred::Decisions;
use crate::event::{AgentEvent, RunOutcome, RunStop};
use crate::message::{ContentPart, Message, ToolCall};
use crate::pipeline::batch;
use crate::pipeline::{Pipeline, guarded};
use crate::session::{JournalEntry, Recorder};
use crate::toolset::{ToolSnapshot, Toolset};

mod history;
mod model_call;
mod resume;

use history::{check_history, unique_ids};
use model_call::{ModelTurn, TurnFailure};

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
    pub(crate) budget: Option<f64>,
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
    conversation: Conversation,
    base: ToolCtx,
    resume: Option<Decisions>,
) -> RunOutcome {
    let (mut run, early) = Run::start(config, conversation, base, resume).await;
    let stop = match early {
        Some(stop) => stop,
        None => loop {
            if let Err(stop) = run.turn().await {
                break stop;
            }
        },
    };
    run.recorder.events.emit(AgentEvent::Done {
        stop: stop.clone(),
        usage: run.usage,
    });
    RunOutcome {
        conversation: run.conversation,
        stop,
        model_stop: run.model_stop,
        usage: run.usage,
        cost: run.cost,
        turns: run.turn,
    }
}

/// A run in progress: its state, and what the loop keeps between turns.
///
/// Each turn goes through the same steps ([`turn`](Self::turn)): prepare
/// the request, call the model (a request that does not fit is compacted
/// and sent again), record the assistant's turn, run the tools, and decide
/// whether to go on.
struct Run {
    config: Arc<RunSettings>,
    conversation: Conversation,
    /// The run's context, with its run key.
    base: ToolCtx,
    recorder: Recorder,
    usage: Usage,
    cost: Option<f64>,
    model_stop: Option<StopReason>,
    turn: u32,
    /// Reported over estimated prompt tokens of the last request.
    calibration: f64,
    /// The tool-call ids in the history, for giving new calls unique ones.
    taken: HashSet<String>,
    /// The history came from outside and is not checked yet.
    unchecked: bool,
}

/// A turn's request, sized for the model's window when one is known.
struct Prepared {
    tools: Arc<ToolSnapshot>,
    sizer: Option<crate::context::Sizer>,
    /// The history's estimated size before calibration.
    raw: Option<u64>,
}

impl Run {
    /// Starts a run: the journal sees the new input, the conversation gets
    /// its run key (made and journalled by its first run), and a turn
    /// waiting for approvals (or, on resume, one a crash cut short) is
    /// finished first; the stop, when that ends the run.
    async fn start(
        config: Arc<RunSettings>,
        mut conversation: Conversation,
        base: ToolCtx,
        resume: Option<Decisions>,
    ) -> (Self, Option<RunStop>) {
        let recorder = Recorder::new(base.events().clone(), config.journal.clone());
        recorder.begin(&conversation.messages);
        // Every call's idempotency key starts with the conversation's run key.
        let run_key = match &conversation.run_key {
            Some(key) => key.clone(),
            None => {
                let key = crate::random::token();
                recorder.record(|| JournalEntry::RunKey { key: key.clone() });
                conversation.run_key = Some(key.clone());
                key
            }
        };
        let base = base.with_run_key(&run_key);
        let mut turn = 0;
        let mut early = None;
        let waiting = conversation.deferred.take().or_else(|| {
            resume
                .as_ref()
                .and_then(|_| resume::unfinished(&conversation))
        });
        if let Some(deferred) = waiting {
            match resume {
                None => {
                    early = Some(RunStop::Failed(AgentError::Resume(format!(
                        "it is waiting for approval of {}; finish it with Agent::resume and the decisions",
                        resume::describe(&deferred.pending)
                    ))));
                    conversation.deferred = Some(deferred);
                }
                Some(decisions) => {
                    turn = deferred.turn;
                    early = resume::finish(
                        &config,
                        &recorder,
                        &mut conversation,
                        deferred,
                        &decisions,
                        &base,
                    )
                    .await;
                }
            }
        }
        let run = Self {
            config,
            conversation,
            base,
            recorder,
            usage: Usage::default(),
            cost: None,
            model_stop: None,
            turn,
            calibration: 1.0,
            taken: HashSet::new(),
            unchecked: true,
        };
        (run, early)
    }

    /// One turn; `Err` with the stop when the run ends.
    async fn turn(&mut self) -> Result<(), RunStop> {
        let mut prepared = self.prepare().await?;
        let model_turn = self.call_model(&mut prepared).await?;
        let (calls, stop_reason) = self.record_turn(model_turn, prepared.raw);
        self.run_tools(&prepared.tools, calls, stop_reason).await
    }

    /// Starts a turn: its tools, the input noted for the defence on the
    /// first, the history checked and compacted when needed.
    async fn prepare(&mut self) -> Result<Prepared, RunStop> {
        let cancel = self.base.cancellation().clone();
        if cancel.is_cancelled() {
            return Err(RunStop::Cancelled);
        }
        if self.turn >= self.config.max_turns {
            return Err(RunStop::MaxTurns);
        }
        self.turn += 1;
        let events = &self.recorder.events;
        events.emit(AgentEvent::TurnStarted { turn: self.turn });
        let tools = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(RunStop::Cancelled),
            tools = turn_tools(&self.config) => tools.map_err(RunStop::Failed)?,
        };
        for warning in tools.warnings() {
            events.emit(AgentEvent::Warning {
                message: warning.clone(),
            });
        }
        if self.turn == 1 {
            note_input(&self.config, &mut self.conversation, &tools, &self.recorder);
        }
        // Every request goes out in a shape providers accept, whatever the
        // history was loaded from. What the loop itself adds is well formed
        // (unique call ids, a result for every call), so the whole history
        // is checked only when it came from outside: at the start and after
        // a compaction rewrote it.
        if self.unchecked {
            check_history(&mut self.conversation, &mut self.taken, events);
            self.unchecked = false;
        }
        // Sizes are only estimated where a window is known to keep them in.
        let config = &self.config;
        let sizer = config.context.window_for(&config.model).map(|_| {
            crate::context::Sizer::new(&config.system_prompt, tools.specs(), self.calibration)
        });
        let mut raw = sizer.as_ref().map(|s| s.raw(&self.conversation.messages));
        if let (Some(sizer), Some(estimate)) = (&sizer, raw)
            && self.compact(sizer, estimate, false).await
        {
            raw = Some(sizer.raw(&self.conversation.messages));
        }
        Ok(Prepared { tools, sizer, raw })
    }

    /// Calls the model. A request that did not fit teaches the window the
    /// provider stated, is compacted once and sent again.
    async fn call_model(&mut self, prepared: &mut Prepared) -> Result<ModelTurn, RunStop> {
        let config = Arc::clone(&self.config);
        let (cancel, events) = (self.base.cancellation(), &self.recorder.events);
        let tools = &prepared.tools;
        let mut result =
            model_call::traced_call(&config, &self.conversation, tools, cancel, events).await;
        if let Err(TurnFailure::Failed(AgentError::Provider {
            source:
                ProviderError::ContextLengthExceeded {
                    limit, requested, ..
                },
            ..
        })) = &result
        {
            if let Some(window) = limit.or_else(|| requested.map(|n| n * 3 / 4)) {
                config.context.learn(&config.model, window);
            }
            let calibration = self.calibration;
            let sizer = prepared.sizer.get_or_insert_with(|| {
                crate::context::Sizer::new(&config.system_prompt, tools.specs(), calibration)
            });
            let raw = prepared
                .raw
                .unwrap_or_else(|| sizer.raw(&self.conversation.messages));
            if self.compact(sizer, raw, true).await {
                prepared.raw = Some(sizer.raw(&self.conversation.messages));
                let (cancel, events) = (self.base.cancellation(), &self.recorder.events);
                result =
                    model_call::traced_call(&config, &self.conversation, tools, cancel, events)
                        .await;
            }
        }
        match result {
            Ok(model_turn) => Ok(model_turn),
            Err(TurnFailure::Cancelled(text)) => {
                if !text.is_empty() {
                    self.recorder
                        .push(&mut self.conversation, Message::assistant(text));
                }
                Err(RunStop::Cancelled)
            }
            Err(TurnFailure::Failed(error)) => Err(RunStop::Failed(error)),
        }
    }

    /// Compacts the history when the request would pass the threshold of
    /// the window (or, `force`d, after a context-length error); then it
    /// is checked again. Whether anything changed.
    async fn compact(&mut self, sizer: &crate::context::Sizer, raw: u64, force: bool) -> bool {
        let events = &self.recorder.events;
        let changed = manage_context(
            &self.config,
            &mut self.conversation,
            sizer,
            raw,
            force,
            events,
        )
        .await;
        if changed {
            check_history(&mut self.conversation, &mut self.taken, events);
        }
        changed
    }

    /// Records the assistant's turn: calibrates the size estimate, gives
    /// its calls unique ids, adds its message (an empty turn adds nothing:
    /// providers reject empty assistant messages), and counts its usage
    /// and cost.
    fn record_turn(
        &mut self,
        model_turn: ModelTurn,
        raw: Option<u64>,
    ) -> (Vec<ToolCall>, StopReason) {
        if let (Some(usage), Some(raw)) = (&model_turn.usage, raw)
            && usage.input_tokens > 0
            && raw > 0
        {
            self.calibration = (usage.input_tokens as f64 / raw as f64).clamp(0.5, 4.0);
        }
        let calls = unique_ids(model_turn.calls, &mut self.taken, self.turn);
        self.model_stop = Some(model_turn.stop.clone());
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
            self.recorder.events.emit(AgentEvent::AssistantMessage {
                message: message.clone(),
            });
            self.recorder.push(&mut self.conversation, message);
        }
        if let Some(turn_usage) = model_turn.usage {
            self.usage.add(&turn_usage);
            let events = &self.recorder.events;
            events.emit(AgentEvent::Usage { usage: turn_usage });
            if let Some(turn_cost) = model_turn.cost {
                let run_cost = self.cost.unwrap_or(0.0) + turn_cost;
                self.cost = Some(run_cost);
                events.emit(AgentEvent::Cost {
                    turn: turn_cost,
                    run: run_cost,
                });
            }
        }
        (calls, model_turn.stop)
    }

    /// Runs the turn's calls and decides whether to go on: a turn without
    /// calls completes the run; a spent budget answers the calls without
    /// running them; a deferral keeps the turn for a resume.
    async fn run_tools(
        &mut self,
        tools: &Arc<ToolSnapshot>,
        calls: Vec<ToolCall>,
        stop_reason: StopReason,
    ) -> Result<(), RunStop> {
        let turn = self.turn;
        let ended = |recorder: &Recorder| {
            recorder.events.emit(AgentEvent::TurnEnded {
                turn,
                stop_reason: stop_reason.clone(),
            });
        };
        if calls.is_empty() {
            ended(&self.recorder);
            return Err(RunStop::Completed);
        }
        let config = Arc::clone(&self.config);
        if let (Some(limit), Some(spent)) = (config.budget, self.cost)
            && spent >= limit
        {
            let stop = RunStop::BudgetReached { spent, limit };
            let results = batch::refuse_all(
                &config.pipeline,
                tools,
                &calls,
                &self.base,
                &self.recorder,
                stop.clone(),
            )
            .await;
            self.conversation.messages.extend(results);
            ended(&self.recorder);
            return Err(stop);
        }
        let ran = run_calls(
            &config,
            &self.recorder,
            &mut self.conversation,
            tools,
            &calls,
            &self.base,
        )
        .await;
        self.conversation.messages.extend(ran.messages);
        if let Some(RunStop::AwaitingApproval { pending }) = &ran.stop {
            resume::keep(
                &self.recorder,
                &mut self.conversation,
                calls,
                pending,
                ran.saved,
                turn,
            );
        }
        ended(&self.recorder);
        match ran.stop {
            Some(stop) => Err(stop),
            None => Ok(()),
        }
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
    recorder: &Recorder,
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
        Some(recorder),
    )
    .await;
    // The turn's copy of the ledger goes first: recording into a ledger
    // still shared would copy all of it, every turn.
    drop(turn_base);
    for seen in ran.seen.drain(..) {
        conversation.provenance.record(seen);
    }
    for tool in conversation.session_approvals.difference(&approved_before) {
        recorder.record(|| JournalEntry::Approval { tool: tool.clone() });
    }
    ran
}

/// Records the run's input (the user's new messages, the system prompt) in
/// the conversation's provenance ledger, and journals it.
fn note_input(
    config: &RunSettings,
    conversation: &mut Conversation,
    tools: &ToolSnapshot,
    recorder: &Recorder,
) {
    let before = conversation.provenance.seen().len();
    config.pipeline.defence().note_input(
        &mut conversation.provenance,
        &conversation.messages,
        &config.system_prompt,
        |name| tools.get(name).map(|tool| tool.annotations()),
    );
    for seen in &conversation.provenance.seen()[before..] {
        recorder.record(|| JournalEntry::Seen { seen: seen.clone() });
    }
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
