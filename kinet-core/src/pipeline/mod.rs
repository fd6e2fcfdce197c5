//! The call pipeline: every tool call — from the loop, a sub-agent, a tool
//! served over MCP, the MCP hub or the host itself — runs through here, and
//! nothing else builds a call's [`ToolCtx`].
//!
//! ```text
//! parse → policy, injection defence and confirmation → before-tool hooks
//!       → layers → panic guard → after-tool hooks → truncation for the model
//!       → provenance (what the model reads, with its trust) → events
//! ```
//!
//! The policy stage holds the injection defence ([`Defence`]): it checks a
//! call's arguments against the conversation's
//! [`Provenance`](crate::provenance::Provenance) ledger, which the engine
//! passes in the call's [`ToolCtx::provenance`].
//!
//! [`Pipeline::call`] runs one call through every stage, top to bottom; the
//! loop's scheduler runs a turn's calls through the same stages, asking for
//! confirmations one at a time and running each phase's calls together
//! (see [`Scheduling`](crate::tool::Scheduling)).

mod defence;
mod keys;
mod stages;

pub use defence::{Defence, DefenceMode, Finding};

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::confirm::ApprovalPolicy;
use crate::ctx::ToolCtx;
use crate::data::deferred::{Resolution, Suspension};
use crate::data::event::{AgentEvent, RunStop};
use crate::data::message::{Message, ToolCall};
use crate::data::output::{ToolError, ToolErrorKind, ToolOutput};
use crate::data::truncate::TruncationPolicy;
use crate::hook::Hook;
use crate::layer::{TimeoutLayer, ToolLayer};
use crate::toolset::ToolSnapshot;
use tracing::Instrument as _;

pub(crate) use stages::{Gate, Prepared, guarded, not_run, panic_message};

/// The result of a call as the host gets it (`result`, untruncated) and as
/// the model sees it (`message`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CallRecord {
    /// The full result, after the after-tool hooks.
    pub result: Result<ToolOutput, ToolError>,
    /// The tool-result message the model reads (truncated).
    pub message: Message,
    /// Whether `message` holds a truncated copy.
    pub truncated_for_model: bool,
    /// Set when the call ends the run: the user aborted, a hook ended it,
    /// or the tool failed fatally.
    pub stop: Option<RunStop>,
    /// What the model reads of the result, with its trust, for the
    /// conversation's [`Provenance`](crate::provenance::Provenance) ledger
    /// (`None` when the call did not run or the defence is off).
    pub seen: Option<crate::provenance::Seen>,
}

/// The stages every tool call goes through, with the agent's settings:
/// approval policy, hooks, layers, tool timeout and truncation. Cheap to
/// clone; clones share the locks of keyed calls (see
/// [`Scheduling::Keyed`](crate::tool::Scheduling::Keyed)).
///
/// An [`Agent`](crate::Agent) owns one ([`Agent::pipeline`](crate::Agent::pipeline));
/// a server or a host running tools by itself takes the agent's and
/// changes what differs.
#[derive(Clone)]
pub struct Pipeline {
    inner: Arc<Settings>,
}

#[derive(Clone)]
struct Settings {
    policy: ApprovalPolicy,
    hooks: Vec<Arc<dyn Hook>>,
    layers: Vec<Arc<dyn ToolLayer>>,
    /// The innermost layer: the agent's tool timeout and the tool's own.
    timeout: Arc<[Arc<dyn ToolLayer>]>,
    tool_timeout: Option<Duration>,
    truncation: TruncationPolicy,
    truncation_overrides: HashMap<String, TruncationPolicy>,
    keys: Arc<keys::KeyLocks>,
    /// Tool arguments and results on the `execute_tool` spans.
    record_content: bool,
    /// The injection defence.
    defence: Defence,
    /// Every call of a turn runs alone, in the model's order.
    one_at_a_time: bool,
}

impl Default for Pipeline {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("policy", &self.inner.policy)
            .field("hooks", &self.inner.hooks.len())
            .field("layers", &self.inner.layers.len())
            .field("tool_timeout", &self.inner.tool_timeout)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// A pipeline with the defaults: [`ApprovalPolicy::ask`], no hooks, no
    /// layers, no tool timeout (only tools' own), 8192/3000/3000 truncation.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Settings {
                policy: ApprovalPolicy::default(),
                hooks: Vec::new(),
                layers: Vec::new(),
                timeout: Arc::new([Arc::new(TimeoutLayer::tool_only(None)) as Arc<dyn ToolLayer>]),
                tool_timeout: None,
                truncation: TruncationPolicy::default(),
                truncation_overrides: HashMap::new(),
                keys: Arc::default(),
                record_content: false,
                defence: Defence::new(),
                one_at_a_time: false,
            }),
        }
    }

    fn settings(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.inner)
    }

    /// Replaces the approval policy.
    pub fn with_policy(mut self, policy: ApprovalPolicy) -> Self {
        self.settings().policy = policy;
        self
    }

    /// Adds a hook (after the ones there).
    pub fn with_hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.settings().hooks.push(hook);
        self
    }

    /// Adds a layer inside the ones there (the first added is outermost).
    pub fn with_layer(mut self, layer: Arc<dyn ToolLayer>) -> Self {
        self.settings().layers.push(layer);
        self
    }

    /// Sets the time limit for each call (`None`: only the tools' own).
    pub fn with_tool_timeout(mut self, timeout: Option<Duration>) -> Self {
        let settings = self.settings();
        settings.tool_timeout = timeout;
        settings.timeout =
            Arc::new([Arc::new(TimeoutLayer::tool_only(timeout)) as Arc<dyn ToolLayer>]);
        self
    }

    /// Runs every call of a turn alone, in the order the model made them
    /// (default: consecutive calls that allow it run together). For runs
    /// whose calls are recorded as a sequence of steps and played back (a
    /// durable run's journal), where the order must not depend on timing.
    pub fn with_one_call_at_a_time(mut self, on: bool) -> Self {
        self.settings().one_at_a_time = on;
        self
    }

    pub(crate) fn one_call_at_a_time(&self) -> bool {
        self.inner.one_at_a_time
    }

    /// Sets how output is truncated for the model.
    pub fn with_truncation(mut self, policy: TruncationPolicy) -> Self {
        self.settings().truncation = policy;
        self
    }

    /// Sets the truncation of one tool, over the tool's own and the
    /// pipeline's.
    pub fn with_truncation_for(
        mut self,
        tool: impl Into<String>,
        policy: TruncationPolicy,
    ) -> Self {
        self.settings()
            .truncation_overrides
            .insert(tool.into(), policy);
        self
    }

    /// Records tool arguments and results on the `execute_tool` spans
    /// (see [`telemetry`](crate::telemetry)). Default: off.
    pub fn with_content_recording(mut self, yes: bool) -> Self {
        self.settings().record_content = yes;
        self
    }

    pub(crate) fn records_content(&self) -> bool {
        self.inner.record_content
    }

    /// Sets the injection defence (default [`Defence::new`]: provenance
    /// checks, flagged calls asked about).
    pub fn with_defence(mut self, defence: Defence) -> Self {
        self.settings().defence = defence;
        self
    }

    /// The injection defence.
    pub fn defence(&self) -> &Defence {
        &self.inner.defence
    }

    /// The approval policy.
    pub fn policy(&self) -> &ApprovalPolicy {
        &self.inner.policy
    }

    /// The time limit for each call.
    pub fn tool_timeout(&self) -> Option<Duration> {
        self.inner.tool_timeout
    }

    pub(crate) fn hooks(&self) -> &[Arc<dyn Hook>] {
        &self.inner.hooks
    }

    /// Runs one call through every stage: the tool is looked up in `tools`
    /// and runs in a context derived from `base` (its working directory,
    /// roots, confirmation handler, events, cancellation, and the
    /// [provenance](ToolCtx::provenance) the defence checks against).
    /// Approvals for the session count for this call only. The host's events
    /// (`ToolCallStarted`, `ToolCallFinished`) go to `base`'s sink.
    pub async fn call(&self, tools: &ToolSnapshot, call: ToolCall, base: &ToolCtx) -> CallRecord {
        let span = self.tool_span(&call);
        self.call_in(tools, call, base, &span, false)
            .instrument(span.clone())
            .await
    }

    /// The turn's tools through this pipeline, for tools that call tools
    /// ([`ToolCtx::call_tool`]).
    pub(crate) fn turn_tools(&self, tools: &Arc<ToolSnapshot>) -> Arc<dyn crate::ctx::ToolCaller> {
        Arc::new(TurnTools {
            pipeline: self.clone(),
            tools: Arc::clone(tools),
        })
    }

    /// The `execute_tool` span of `call` (see [`telemetry`](crate::telemetry)).
    pub(crate) fn tool_span(&self, call: &ToolCall) -> tracing::Span {
        let span = crate::telemetry::spans::tool(&call.name, &call.id);
        if self.inner.record_content && !span.is_disabled() {
            span.record("gen_ai.tool.call.arguments", call.arguments.as_str());
        }
        span
    }

    /// `nested`: a call made by a run's call ([`ToolCtx::call_tool`]),
    /// which can stop to wait for a deferred approval: a deferral comes
    /// back as a [`ToolError::deferred`] (no `ToolCallFinished`; the call
    /// runs again on resume) instead of a denial.
    async fn call_in(
        &self,
        tools: &ToolSnapshot,
        mut call: ToolCall,
        base: &ToolCtx,
        span: &tracing::Span,
        nested: bool,
    ) -> CallRecord {
        // On a resume, a decision may have edited the call.
        if let Some(Resolution::Edit { arguments }) =
            base.resumption().and_then(|r| r.decisions.get(&call.id))
        {
            call.arguments = arguments.to_string();
        }
        base.emit(AgentEvent::ToolCallStarted {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        let started = tokio::time::Instant::now();
        let mut call = std::borrow::Cow::Owned(call);
        let mut ran = false;
        let (mut result, stop) = match self.parse(tools, &call) {
            Err(error) => (Err(error), None),
            Ok(mut prepared) => {
                let mut approvals = BTreeSet::new();
                let gate = match self
                    .approve(&call, &mut prepared, base, &mut approvals)
                    .await
                {
                    Gate::Run => {
                        self.before_tool(tools, &mut call, &mut prepared, base)
                            .await
                    }
                    other => other,
                };
                match gate {
                    Gate::Run => {
                        let cancel = base.cancellation().child_token();
                        let ctx = call_ctx(base, &call, cancel);
                        ran = true;
                        (self.execute_cancellable(prepared, ctx).await, None)
                    }
                    Gate::Refuse(error) => (Err(error), None),
                    Gate::Stop(stop) => (Err(not_run(&stop)), Some(stop)),
                    Gate::Defer(request) => (
                        Err(ToolError::deferred(Suspension::new(vec![request]))),
                        None,
                    ),
                }
            }
        };
        if let Err(error) = &result
            && error.suspension().is_some()
        {
            if nested {
                // The caller stops and runs this call again on resume.
                return CallRecord {
                    message: Message::Tool {
                        tool_call_id: call.id.clone(),
                        name: call.name.clone(),
                        content: vec![crate::data::message::ContentPart::text(error.message())],
                        is_error: true,
                    },
                    result,
                    truncated_for_model: false,
                    stop,
                    seen: None,
                };
            }
            // A call made outside a run has no run to stop and resume: a
            // deferral denies it.
            result = Err(ToolError::new(
                ToolErrorKind::Denied,
                format!(
                    "the approval of this `{}` call was deferred ({}), and a call made outside a run cannot wait for it; it did not run",
                    call.name,
                    error.message()
                ),
            ));
        }
        // The span records what the tool did (before after-tool hooks).
        crate::telemetry::spans::tool_result(span, &result, self.records_content());
        let finished = self
            .finish(tools, &call, result, started.elapsed(), base, true, ran)
            .await;
        CallRecord {
            seen: finished.seen,
            stop: stop.or(finished.stop),
            result: finished
                .result
                .unwrap_or_else(|| Err(not_run(&RunStop::Cancelled))),
            message: finished.message,
            truncated_for_model: finished.truncated,
        }
    }
}

/// A turn's tools and the pipeline their calls go through.
struct TurnTools {
    pipeline: Pipeline,
    tools: Arc<ToolSnapshot>,
}

#[async_trait::async_trait]
impl crate::ctx::ToolCaller for TurnTools {
    async fn call(
        &self,
        ctx: &ToolCtx,
        id: String,
        name: &str,
        arguments: String,
    ) -> Result<ToolOutput, ToolError> {
        // One level only: a called tool cannot call tools in turn.
        let base = ctx.clone().with_tool_caller(None);
        let call = ToolCall {
            id,
            name: name.to_owned(),
            arguments,
        };
        let span = self.pipeline.tool_span(&call);
        self.pipeline
            .call_in(&self.tools, call, &base, &span, true)
            .instrument(span.clone())
            .await
            .result
    }
}

/// The context of one call: `base` named for the call, with the call's own
/// cancellation token and no deadline yet (the timeout layer sets it).
pub(crate) fn call_ctx(
    base: &ToolCtx,
    call: &ToolCall,
    cancel: tokio_util::sync::CancellationToken,
) -> ToolCtx {
    base.for_call(&call.id, &call.name)
        .with_cancellation(cancel)
        .with_deadline(base.deadline())
}
