//! `Agent` and its builder; `AgentRun`, the handle of one run; the
//! engine's sub-agent spawner.

mod compact_now;
mod run;
mod spawner;
mod typed;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::backend::Provider;
use crate::confirm::{ApprovalPolicy, ConfirmHandler, DenyingHandler};
use crate::ctx::{AgentHandle, EventSink, Extensions, SubAgentSpawner, ToolCtx};
use crate::data::conversation::Conversation;
use crate::data::model::GenerationParams;
use crate::data::truncate::TruncationPolicy;
use crate::engine::RunSettings;
use crate::event::RunOutcome;
use crate::hook::Hook;
use crate::layer::ToolLayer;
use crate::message::Message;
use crate::pipeline::Pipeline;
use crate::tooldef::{DynTool, Tool};
use crate::toolset::{ToolSource, Toolset};

pub use run::AgentRun;

#[derive(Clone)]
enum SpawnerSetting {
    Engine,
    Custom(Arc<dyn SubAgentSpawner>),
    Disabled,
}

/// Everything an agent is configured with; shared by its runs.
#[derive(Clone)]
struct AgentConfig {
    /// What the engine sees.
    run: Arc<RunSettings>,
    confirm: Arc<dyn ConfirmHandler>,
    cwd: PathBuf,
    roots: Vec<PathBuf>,
    extensions: Extensions,
    spawner: SpawnerSetting,
    max_depth: u32,
    depth: u32,
    /// Named engines sub-agents may run on (provider + model + prompt + tools).
    engines: HashMap<String, Arc<AgentConfig>>,
}

impl AgentConfig {
    /// The context every tool call of a run is derived from.
    fn base_ctx(self: &Arc<Self>, cancel: &CancellationToken, events: &EventSink) -> ToolCtx {
        let spawner: Option<Arc<dyn SubAgentSpawner>> = if self.depth >= self.max_depth {
            None
        } else {
            match &self.spawner {
                SpawnerSetting::Engine => {
                    Some(Arc::new(spawner::EngineSpawner::new(Arc::clone(self))))
                }
                SpawnerSetting::Custom(spawner) => Some(Arc::clone(spawner)),
                SpawnerSetting::Disabled => None,
            }
        };
        ToolCtx::new(self.cwd.clone())
            .with_roots(self.roots.clone())
            .with_confirm_handler(
                Arc::clone(&self.confirm),
                self.run.pipeline.policy().timeout(),
            )
            .with_cancellation(cancel.clone())
            .with_events(events.clone())
            .with_spawner(spawner)
            .with_extensions(self.extensions.clone())
            .with_depth(self.depth)
    }

    fn run_mut(&mut self) -> &mut RunSettings {
        Arc::make_mut(&mut self.run)
    }
}

/// Builds an [`Agent`]. Every setter documents its default.
pub struct AgentBuilder {
    config: AgentConfig,
}

impl AgentBuilder {
    fn pipeline(mut self, change: impl FnOnce(Pipeline) -> Pipeline) -> Self {
        let run = self.config.run_mut();
        run.pipeline = change(std::mem::take(&mut run.pipeline));
        self
    }

    /// The model name sent to the provider. Default: empty (the provider's
    /// own default, where it has one).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.config.run_mut().model = model.into();
        self
    }

    /// The system prompt. Default: empty.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.config.run_mut().system_prompt = prompt.into();
        self
    }

    /// Adds a tool. Default: no tools.
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.config.run_mut().tools.add(tool);
        self
    }

    /// Adds a tool in its dynamic form.
    pub fn dyn_tool(mut self, tool: Arc<dyn DynTool>) -> Self {
        self.config.run_mut().tools.add_dyn(tool);
        self
    }

    /// Replaces the whole toolset (keeps nothing added before).
    pub fn toolset(mut self, tools: Toolset) -> Self {
        self.config.run_mut().tools = tools;
        self
    }

    /// Adds a dynamic tool source (the MCP hub), asked once per turn.
    pub fn tool_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.config.run_mut().tools.add_source(source);
        self
    }

    /// The approval policy. Default: [`ApprovalPolicy::ask`] (ask before
    /// mutating calls, 5-minute confirmation timeout).
    pub fn policy(self, policy: ApprovalPolicy) -> Self {
        self.pipeline(|p| p.with_policy(policy))
    }

    /// The injection defence (see [`Defence`](crate::pipeline::Defence)).
    /// Default: [`Defence::new`](crate::pipeline::Defence::new): once the
    /// model has read untrusted text, only actions it declared before
    /// (with `declare_plan`, which the agent is given) run, and no value
    /// comes from other untrusted text; flagged calls go to the
    /// confirmation handler.
    pub fn defence(self, defence: crate::pipeline::Defence) -> Self {
        self.pipeline(|p| p.with_defence(defence))
    }

    /// The host's approval UI. Default: a handler that denies, so without
    /// one mutating calls only run under [`ApprovalPolicy::never`].
    pub fn confirm_handler(mut self, handler: impl ConfirmHandler + 'static) -> Self {
        self.config.confirm = Arc::new(handler);
        self
    }

    /// The approval UI, shared.
    pub fn confirm_handler_arc(mut self, handler: Arc<dyn ConfirmHandler>) -> Self {
        self.config.confirm = handler;
        self
    }

    /// The most model calls one run makes. Default: 50.
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.config.run_mut().max_turns = max_turns;
        self
    }

    /// Writes every step of the agent's runs to `journal` as it happens
    /// (see [`Journal`](crate::session::Journal)). Default: none.
    pub fn journal(mut self, journal: Arc<dyn crate::session::Journal>) -> Self {
        self.config.run_mut().journal = Some(journal);
        self
    }

    /// How the agent's runs are traced (see [`telemetry`](crate::telemetry)):
    /// its name on the spans, and whether prompts, completions and tool
    /// arguments and results are recorded. Default:
    /// [`Telemetry::new`](crate::telemetry::Telemetry::new) (no name, no
    /// content).
    pub fn telemetry(mut self, telemetry: crate::telemetry::Telemetry) -> Self {
        let content = telemetry.records_content();
        self.config.run_mut().telemetry = telemetry;
        self.pipeline(|p| p.with_content_recording(content))
    }

    /// Prices per model, for the cost of each model call and run
    /// ([`AgentEvent::Cost`](crate::AgentEvent::Cost),
    /// [`RunOutcome::cost`]). Default: none (no cost reported).
    pub fn prices(mut self, prices: crate::telemetry::PriceTable) -> Self {
        self.config.run_mut().prices = Some(Arc::new(prices));
        self
    }

    /// The most one run may cost, in the price table's currency: once a
    /// model call brings the run's cost to `limit`, the calls it asked for
    /// are answered without running and the run ends with
    /// [`RunStop::BudgetReached`](crate::RunStop::BudgetReached). Needs
    /// [`prices`](Self::prices) for the model. Each sub-agent run has the
    /// same budget for its own calls. Default: none.
    pub fn budget(mut self, limit: f64) -> Self {
        self.config.run_mut().budget = Some(limit);
        self
    }

    /// How requests are kept inside the model's context window. Default:
    /// [`ContextPolicy::new`](crate::context::ContextPolicy::new) (the
    /// window by model name or learned from the provider, compaction at
    /// 80%).
    pub fn context(mut self, policy: crate::context::ContextPolicy) -> Self {
        self.config.run_mut().context = policy;
        self
    }

    /// How tool output is truncated for the model. Default: 8192-char
    /// threshold, 3000 head + 3000 tail.
    pub fn truncation(self, policy: TruncationPolicy) -> Self {
        self.pipeline(|p| p.with_truncation(policy))
    }

    /// A truncation policy for one tool, over the tool's own and the
    /// agent's.
    pub fn truncation_for(self, tool: impl Into<String>, policy: TruncationPolicy) -> Self {
        self.pipeline(|p| p.with_truncation_for(tool, policy))
    }

    /// Adds a hook (model calls, before and after tool calls). Default:
    /// none.
    pub fn hook(self, hook: impl Hook + 'static) -> Self {
        self.hook_arc(Arc::new(hook))
    }

    /// Adds a shared hook.
    pub fn hook_arc(self, hook: Arc<dyn Hook>) -> Self {
        self.pipeline(|p| p.with_hook(hook))
    }

    /// Puts a host's own stage, named `name`, at a place in the call
    /// pipeline's list of stages (see [`Pipeline::with_stage`]). Default:
    /// none.
    pub fn stage(
        self,
        place: crate::pipeline::Place,
        name: impl Into<String>,
        hook: impl Hook + 'static,
    ) -> Self {
        let hook: Arc<dyn Hook> = Arc::new(hook);
        self.pipeline(|p| p.with_stage(place, name, hook))
    }

    /// Adds a [layer](crate::layer) around every tool call, inside the
    /// layers added before. Default: none.
    pub fn layer(self, layer: impl ToolLayer) -> Self {
        self.layer_arc(Arc::new(layer))
    }

    /// Adds a shared layer (one counter for several agents or servers).
    pub fn layer_arc(self, layer: Arc<dyn ToolLayer>) -> Self {
        self.pipeline(|p| p.with_layer(layer))
    }

    /// Runs every call of a turn alone, in the model's order. Default:
    /// off (consecutive calls that allow it run together); see
    /// [`Pipeline::with_one_call_at_a_time`].
    pub fn one_call_at_a_time(self) -> Self {
        self.pipeline(|p| p.with_one_call_at_a_time(true))
    }

    /// Sampling parameters. Default: all unset (the provider's defaults).
    pub fn params(mut self, params: GenerationParams) -> Self {
        self.config.run_mut().params = params;
        self
    }

    /// The working directory tools resolve relative paths against. Default:
    /// the process's current directory.
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.config.cwd = cwd.into();
        self
    }

    /// Adds a workspace root; file tools refuse paths outside the roots.
    /// Default: no roots (no confinement).
    pub fn workspace_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.config.roots.push(root.into());
        self
    }

    /// Makes host state available to tools through [`ToolCtx::extension`].
    pub fn extension<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.config.extensions.insert(value);
        self
    }

    /// A time limit for each tool call, enforced through
    /// [`ToolCtx::deadline`]; a tool's own [`Tool::timeout`] can only make
    /// it shorter. Default: none (only the tools' own).
    pub fn tool_timeout(self, timeout: Duration) -> Self {
        self.pipeline(|p| p.with_tool_timeout(Some(timeout)))
    }

    /// Replaces the built-in sub-agent spawner. Default: the engine's own,
    /// which runs a child agent with the same provider, tools and pipeline
    /// and denies its mutating calls.
    pub fn sub_agent_spawner(mut self, spawner: Arc<dyn SubAgentSpawner>) -> Self {
        self.config.spawner = SpawnerSetting::Custom(spawner);
        self
    }

    /// Turns sub-agents off.
    pub fn without_sub_agents(mut self) -> Self {
        self.config.spawner = SpawnerSetting::Disabled;
        self
    }

    /// How deeply sub-agents may nest. Default: 2 (an agent, its sub-agents,
    /// and theirs cannot spawn).
    pub fn max_sub_agent_depth(mut self, depth: u32) -> Self {
        self.config.max_depth = depth;
        self
    }

    /// Registers a named engine for sub-agents and team members (e.g. a
    /// cheaper model, or another provider): `dispatch_agent` and
    /// `spawn_team` take its name. The engine runs read-only, like every
    /// sub-agent. Default: none (sub-agents use this agent's settings).
    pub fn engine(mut self, name: impl Into<String>, agent: &Agent) -> Self {
        self.config
            .engines
            .insert(name.into(), Arc::clone(&agent.config));
        self
    }

    /// Finishes the agent. A relative `cwd` is taken from the process's
    /// current directory, and relative workspace roots from `cwd`. When the
    /// defence wants a plan (the default,
    /// [`DefenceMode::Planned`](crate::pipeline::DefenceMode::Planned)),
    /// an agent with a tool that may act (or a tool source) is also given
    /// the
    /// [`declare_plan`](crate::pipeline::DeclarePlan) tool, unless a tool
    /// of that name is there already (an agent that only reads has nothing
    /// to plan).
    pub fn build(mut self) -> Agent {
        let run = self.config.run_mut();
        if run.pipeline.defence().wants_plan()
            && run.tools.may_act()
            && run
                .tools
                .static_tools()
                .get(crate::pipeline::PLAN_TOOL)
                .is_none()
        {
            run.tools.add(crate::pipeline::DeclarePlan);
        }
        if self.config.cwd.is_relative()
            && let Ok(current) = std::env::current_dir()
        {
            self.config.cwd = current.join(&self.config.cwd);
        }
        let cwd = self.config.cwd.clone();
        for root in &mut self.config.roots {
            if root.is_relative() {
                *root = cwd.join(&*root);
            }
        }
        Agent {
            config: Arc::new(self.config),
        }
    }
}

/// A configured agent. Cheap to clone; each [`Agent::run`] is independent.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use futures::StreamExt;
/// use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
/// use kinet_core::{Agent, AgentEvent};
///
/// let agent = Agent::builder(ScriptedProvider::new([ScriptedTurn::text("Hi there")]))
///     .system_prompt("Be brief.")
///     .build();
/// let mut run = agent.run("hello");
/// let mut streamed = String::new();
/// while let Some(event) = run.next().await {
///     if let AgentEvent::TextDelta { text } = event {
///         streamed.push_str(&text);
///     }
/// }
/// let outcome = run.finish().await;
/// assert_eq!(streamed, "Hi there");
/// assert!(outcome.stop.is_completed());
/// # }
/// ```
#[derive(Clone)]
pub struct Agent {
    config: Arc<AgentConfig>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("provider", &self.config.run.provider.name())
            .field("model", &self.config.run.model)
            .field("tools", &self.config.run.tools)
            .field("max_turns", &self.config.run.max_turns)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts building an agent around a provider.
    pub fn builder(provider: impl Provider + 'static) -> AgentBuilder {
        Self::builder_arc(Arc::new(provider))
    }

    /// Starts building an agent around a shared provider.
    pub fn builder_arc(provider: Arc<dyn Provider>) -> AgentBuilder {
        AgentBuilder {
            config: AgentConfig {
                run: Arc::new(RunSettings {
                    provider,
                    model: String::new(),
                    system_prompt: String::new(),
                    params: GenerationParams::default(),
                    tools: Toolset::new(),
                    pipeline: Pipeline::new(),
                    max_turns: 50,
                    context: crate::context::ContextPolicy::default(),
                    journal: None,
                    telemetry: crate::telemetry::Telemetry::default(),
                    prices: None,
                    budget: None,
                }),
                confirm: Arc::new(DenyingHandler),
                cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
                roots: Vec::new(),
                extensions: Extensions::new(),
                spawner: SpawnerSetting::Engine,
                max_depth: 2,
                depth: 0,
                engines: HashMap::new(),
            },
        }
    }

    /// A copy of this agent working in `cwd` (relative to the current one);
    /// workspace roots and everything else stay as they are.
    pub fn with_cwd(&self, cwd: impl Into<PathBuf>) -> Agent {
        let mut config = (*self.config).clone();
        config.cwd = self.config.cwd.join(cwd.into());
        Agent {
            config: Arc::new(config),
        }
    }

    /// A copy of this agent asking `handler` for confirmations.
    pub fn with_confirm_handler(&self, handler: Arc<dyn ConfirmHandler>) -> Agent {
        let mut config = (*self.config).clone();
        config.confirm = handler;
        Agent {
            config: Arc::new(config),
        }
    }

    /// A copy of this agent whose tool calls carry `value` as an extension
    /// (replacing one of the same type): per-request facts a host's tools
    /// read with [`ToolCtx::extension`](crate::ToolCtx::extension), such as
    /// who asked.
    pub fn with_extension<T: Send + Sync + 'static>(&self, value: T) -> Agent {
        let mut config = (*self.config).clone();
        config.extensions.insert(value);
        Agent {
            config: Arc::new(config),
        }
    }

    /// The agent's tools (static tools and sources).
    pub fn tools(&self) -> &Toolset {
        &self.config.run.tools
    }

    /// The pipeline the agent's tool calls go through (policy, hooks,
    /// layers, timeout, truncation): for running tools the way the agent
    /// would, as [`Pipeline::call`].
    pub fn pipeline(&self) -> &Pipeline {
        &self.config.run.pipeline
    }

    /// The context the agent's tool calls are derived from (working
    /// directory, roots, confirmation handler, extensions, sub-agents),
    /// with `cancel` as its cancellation and no event sink.
    pub fn tool_context(&self, cancel: CancellationToken) -> ToolCtx {
        self.config.base_ctx(&cancel, &EventSink::discard())
    }

    /// Starts a run on a conversation (a `&str` or `String` starts a new
    /// conversation with that user message). Needs a tokio runtime.
    ///
    /// The run proceeds in a background task; read its events from the
    /// returned [`AgentRun`] and call [`AgentRun::finish`] for the outcome.
    /// Dropping the `AgentRun` cancels the run.
    pub fn run(&self, conversation: impl Into<Conversation>) -> AgentRun {
        self.run_with_cancellation(conversation, CancellationToken::new())
    }

    /// Starts a run that also stops when `cancel` is cancelled (for example
    /// a child token of a parent run). The run uses a child of `cancel`:
    /// cancelling or dropping the run never cancels `cancel` itself.
    pub fn run_with_cancellation(
        &self,
        conversation: impl Into<Conversation>,
        cancel: CancellationToken,
    ) -> AgentRun {
        self.start(conversation.into(), cancel, None)
    }

    /// Finishes a run that stopped at approvals to be given later
    /// ([`RunStop::AwaitingApproval`](crate::RunStop::AwaitingApproval)),
    /// in this process or another: `conversation` is the stopped run's (or
    /// its session's, loaded from a store), `decisions` answer each
    /// pending call ([`DeferredTurn::pending`](crate::deferred::DeferredTurn)).
    /// The turn's calls without a result go through the pipeline as they
    /// would have in place (the approved ones run, once; the denied ones
    /// get the denial as their result; the policy's own denials still
    /// hold), with the idempotency keys they had, and the run goes on as
    /// usual. It may stop at approvals again.
    ///
    /// It also continues a run a crash cut short: loaded from its session
    /// store, a conversation whose last model turn has calls without a
    /// result runs those calls (a plain [`run`](Self::run) would answer
    /// them "interrupted") and goes on. So after a crash, during a resume
    /// or any run, resume again with the same decisions: calls that already
    /// have a result do not run again, and a call that was running when
    /// the process died runs again with the same
    /// [`ToolCtx::idempotency_key`](crate::ToolCtx::idempotency_key). A
    /// conversation with nothing unfinished simply runs.
    ///
    /// The run fails (`AgentError::Resume`) when a pending call has no
    /// decision, a decision names a call that is not waiting, or the saved
    /// turn is not the history's last model turn.
    pub fn resume(
        &self,
        conversation: Conversation,
        decisions: crate::deferred::Decisions,
    ) -> AgentRun {
        self.start(conversation, CancellationToken::new(), Some(decisions))
    }

    /// [`resume`](Self::resume) that also stops when `cancel` is cancelled
    /// (as [`run_with_cancellation`](Self::run_with_cancellation)).
    pub fn resume_with_cancellation(
        &self,
        conversation: Conversation,
        decisions: crate::deferred::Decisions,
        cancel: CancellationToken,
    ) -> AgentRun {
        self.start(conversation, cancel, Some(decisions))
    }

    fn start(
        &self,
        conversation: Conversation,
        cancel: CancellationToken,
        resume: Option<crate::deferred::Decisions>,
    ) -> AgentRun {
        let cancel = cancel.child_token();
        let (sender, receiver) = mpsc::unbounded_channel();
        let base = self.config.base_ctx(&cancel, &EventSink::new(sender));
        let settings = &self.config.run;
        // Made here, so a sub-agent's run nests under the tool call that
        // started it.
        let span = crate::telemetry::spans::run(
            settings.telemetry.name(),
            settings.provider.name(),
            &settings.model,
        );
        let task = tokio::spawn(crate::engine::drive(
            Arc::clone(settings),
            conversation,
            base,
            span,
            resume,
        ));
        AgentRun {
            events: receiver,
            task: Some(task),
            cancel,
            done: false,
        }
    }

    /// Runs to the end and returns the outcome: the event stream of
    /// [`Agent::run`], collected.
    pub async fn run_to_completion(&self, conversation: impl Into<Conversation>) -> RunOutcome {
        self.run(conversation).finish().await
    }
}

#[async_trait]
impl AgentHandle for Agent {
    async fn run(&self, conversation: Conversation, cancel: CancellationToken) -> RunOutcome {
        self.run_with_cancellation(conversation, cancel)
            .finish()
            .await
    }

    async fn resume(
        &self,
        conversation: Conversation,
        decisions: crate::deferred::Decisions,
        cancel: CancellationToken,
    ) -> RunOutcome {
        self.resume_with_cancellation(conversation, decisions, cancel)
            .finish()
            .await
    }
}

impl From<&str> for Conversation {
    fn from(text: &str) -> Self {
        vec![Message::user(text)].into()
    }
}

impl From<String> for Conversation {
    fn from(text: String) -> Self {
        vec![Message::user(text)].into()
    }
}
