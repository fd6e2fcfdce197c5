//! The call pipeline: every tool call — from the loop, a sub-agent, a tool
//! served over MCP, the MCP hub or the host itself — runs through here, and
//! nothing else builds a call's [`ToolCtx`].
//!
//! The stages are one ordered list ([`STAGES`], shown with the host's own
//! by [`Pipeline::stages`]), in two halves:
//!
//! ```text
//! gate:      parse → policy → defence → confirm → before-tool hooks
//! execution: layers → panic guard → after-tool hooks → truncation
//!            → provenance → record
//! ```
//!
//! The gate decides whether a call runs, one call at a time; the execution
//! half runs it and records what it returned. A host puts its own stage
//! (a [`Hook`]) at a named place with [`Pipeline::with_stage`].
//!
//! The defence stage ([`Defence`]) checks a call against the conversation's
//! [`Provenance`](crate::provenance::Provenance) ledger (what the model
//! read, who wrote it, and the plan declared with [`DeclarePlan`] before
//! anything untrusted was read), which the engine passes in the call's
//! [`ToolCtx::provenance`].
//!
//! One runner drives the list: a turn's calls go through it as a batch
//! (confirmations one at a time, each phase's calls run together, see
//! [`Scheduling`](crate::tool::Scheduling)), and [`Pipeline::call`] is a
//! batch of one.

pub(crate) mod batch;
mod defence;
mod finding;
mod keys;
mod order;
mod plan;
mod rule;
mod stages;

pub use defence::{Defence, DefenceMode, Finding, FindingRule};
pub use order::{Half, Place, STAGES, StageInfo, StageName};
pub use plan::{DeclarePlan, PLAN_TOOL};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::confirm::ApprovalPolicy;
use crate::ctx::EngineCtx as _;
use crate::ctx::ToolCtx;
use crate::data::output::{ToolError, ToolOutput};
use crate::data::truncate::TruncationPolicy;
use crate::event::RunStop;
use crate::hook::Hook;
use crate::layer::{TimeoutLayer, ToolLayer};
use crate::message::{Message, ToolCall};
use crate::toolset::ToolSnapshot;

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
    /// The stages, in order: the built-in ones and the host's.
    steps: Vec<order::Step>,
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
                steps: order::builtin(),
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

    /// Puts a host's own stage, named `name`, at `place` in the list (see
    /// [`Place`]): in the gate half it runs the hook's
    /// [`before_tool_call`](Hook::before_tool_call), in the execution half
    /// its [`after_tool_call`](Hook::after_tool_call). A hook added with
    /// [`with_hook`](Self::with_hook) instead runs in the before-tool and
    /// after-tool stages.
    pub fn with_stage(
        mut self,
        place: Place,
        name: impl Into<String>,
        hook: Arc<dyn Hook>,
    ) -> Self {
        order::insert(&mut self.settings().steps, place, name.into(), hook);
        self
    }

    /// The stages a call goes through, in order, the host's included.
    pub fn stages(&self) -> Vec<StageInfo> {
        self.inner.steps.iter().map(order::Step::info).collect()
    }

    pub(crate) fn steps(&self) -> &[order::Step] {
        &self.inner.steps
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

    /// Sets the injection defence (default [`Defence::new`]: the plan and
    /// provenance checks, flagged calls asked about).
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
        self.call_in(tools, call, base, false).await
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
        call: ToolCall,
        base: &ToolCtx,
        nested: bool,
    ) -> CallRecord {
        batch::run_one(self, tools, call, base, nested).await
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
        self.pipeline
            .call_in(&self.tools, call, &base, true)
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
