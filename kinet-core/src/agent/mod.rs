//! `Agent` and its builder; `AgentRun`, the handle of one run; the
//! engine's sub-agent spawner.

mod compact_now;
mod run;
mod settings;
mod spawner;
mod typed;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::backend::Provider;
use crate::confirm::{ConfirmHandler, DenyingHandler};
use crate::ctx::EngineCtx as _;
use crate::ctx::{AgentHandle, EventSink, Extensions, SubAgentSpawner, ToolCtx};
use crate::data::conversation::Conversation;
use crate::data::model::GenerationParams;
use crate::engine::RunSettings;
use crate::event::RunOutcome;
use crate::message::Message;
use crate::pipeline::Pipeline;
use crate::tooldef::Tool;
use crate::toolset::Toolset;

pub use run::AgentRun;
pub use settings::{Approval, Calls, Engine, Limits, Sessions, SubAgents, Workspace};

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
    /// Names kept read-only beneath the roots; `None`: the defaults.
    protected: Option<Vec<String>>,
    extensions: Extensions,
    spawner: SpawnerSetting,
    max_depth: u32,
    depth: u32,
    /// Named engines sub-agents may run on: in-process agents (provider +
    /// model + prompt + tools) and external engines.
    engines: HashMap<String, settings::Engine>,
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
        let ctx = ToolCtx::new(self.cwd.clone()).with_roots(self.roots.clone());
        let ctx = match &self.protected {
            Some(names) => ctx.with_protected_names(names.clone()),
            None => ctx,
        };
        ctx.with_confirm_handler(
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

    fn pipeline(&mut self, change: impl FnOnce(Pipeline) -> Pipeline) {
        let run = self.run_mut();
        run.pipeline = change(std::mem::take(&mut run.pipeline));
    }
}

/// Builds an [`Agent`]: the everyday settings are methods here, the rest
/// come in groups, one value per concern ([`builder`](crate::builder):
/// [`Approval`](crate::builder::Approval),
/// [`Workspace`](crate::builder::Workspace),
/// [`Calls`](crate::builder::Calls), [`Limits`](crate::builder::Limits),
/// [`Sessions`](crate::builder::Sessions),
/// [`SubAgents`](crate::builder::SubAgents),
/// [`Telemetry`](crate::telemetry::Telemetry)). Every setting documents
/// its default. A group sets only what it names: later groups add to or
/// override earlier ones, field by field.
///
/// ```
/// use kinet_core::builder::{Limits, Workspace};
/// use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
/// use kinet_core::{Agent, ApprovalPolicy};
///
/// let agent = Agent::builder(ScriptedProvider::new([ScriptedTurn::text("ok")]))
///     .system_prompt("You are terse.")
///     .workspace(Workspace::new().cwd(".").root("."))
///     .limits(Limits::new().max_turns(10))
///     .policy(ApprovalPolicy::ask())
///     .build();
/// # let _ = agent;
/// ```
#[must_use]
pub struct AgentBuilder {
    config: AgentConfig,
}

impl AgentBuilder {
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

    /// Sampling parameters. Default: all unset (the provider's defaults).
    pub fn params(mut self, params: GenerationParams) -> Self {
        self.config.run_mut().params = params;
        self
    }

    /// Adds a tool. Default: no tools.
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.config.run_mut().tools.add(tool);
        self
    }

    /// Adds a set of tools: its tools, its dynamic sources (the MCP hub,
    /// asked once per turn) and its layers; the first set also brings its
    /// readiness deadline. Default: no tools.
    pub fn tools(mut self, tools: Toolset) -> Self {
        let current = &mut self.config.run_mut().tools;
        if current.is_empty() {
            // The set's own layers wrap its tools only, as when merged.
            *current = Toolset::new().readiness_deadline(tools.readiness());
        }
        current.merge(tools);
        self
    }

    /// When to ask before a call runs. Default: [`ApprovalPolicy::ask`](crate::ApprovalPolicy::ask)
    /// (read-only calls run, mutating ones ask). Same as
    /// [`Approval::policy`](crate::builder::Approval::policy).
    pub fn policy(self, policy: crate::confirm::ApprovalPolicy) -> Self {
        self.approval(settings::Approval::new().policy(policy))
    }

    /// The host's approval UI (an `Arc` of one is one too). Default: a
    /// handler that denies every question, so without one mutating calls
    /// run only under [`ApprovalPolicy::never`](crate::ApprovalPolicy::never) or an `allow` rule. Same as
    /// [`Approval::handler`](crate::builder::Approval::handler).
    pub fn confirm_handler(self, handler: impl ConfirmHandler + 'static) -> Self {
        self.approval(settings::Approval::new().handler(handler))
    }

    /// Who decides whether a call runs: policy, rules, handler, injection
    /// defence (see [`Approval`](crate::builder::Approval)).
    pub fn approval(mut self, approval: settings::Approval) -> Self {
        approval.apply(&mut self.config);
        self
    }

    /// Where the agent works: cwd, workspace roots, protected names (see
    /// [`Workspace`](crate::builder::Workspace)).
    pub fn workspace(mut self, workspace: settings::Workspace) -> Self {
        workspace.apply(&mut self.config);
        self
    }

    /// How tool calls are handled: hooks, stages, layers, truncation (see
    /// [`Calls`](crate::builder::Calls)).
    pub fn calls(mut self, calls: settings::Calls) -> Self {
        calls.apply(&mut self.config);
        self
    }

    /// Limits on a run: turns, budget, tool timeout (see
    /// [`Limits`](crate::builder::Limits)).
    pub fn limits(mut self, limits: settings::Limits) -> Self {
        limits.apply(&mut self.config);
        self
    }

    /// The journal and the context-window policy (see
    /// [`Sessions`](crate::builder::Sessions)).
    pub fn sessions(mut self, sessions: settings::Sessions) -> Self {
        sessions.apply(&mut self.config);
        self
    }

    /// Sub-agents: on or off, depth, named engines (see
    /// [`SubAgents`](crate::builder::SubAgents)).
    pub fn sub_agents(mut self, sub_agents: settings::SubAgents) -> Self {
        sub_agents.apply(&mut self.config);
        self
    }

    /// How runs are traced and priced (see
    /// [`Telemetry`](crate::telemetry::Telemetry)). Default:
    /// [`Telemetry::new`](crate::telemetry::Telemetry::new) (no name, no
    /// content, no prices).
    pub fn telemetry(mut self, telemetry: crate::telemetry::Telemetry) -> Self {
        let run = self.config.run_mut();
        run.telemetry.merge(telemetry);
        let content = run.telemetry.records_content();
        self.config.pipeline(|p| p.with_content_recording(content));
        self
    }

    /// Makes host state available to tools through
    /// [`ToolCtx::extension`] (replacing a value of the same type).
    /// Default: none.
    pub fn extension<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.config.extensions.insert(value);
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
    /// An `Arc` of a provider is one too, for sharing it between agents.
    pub fn builder(provider: impl Provider + 'static) -> AgentBuilder {
        let provider: Arc<dyn Provider> = Arc::new(provider);
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
                    budget: None,
                }),
                confirm: Arc::new(DenyingHandler),
                cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
                roots: Vec::new(),
                protected: None,
                extensions: Extensions::new(),
                spawner: SpawnerSetting::Engine,
                max_depth: 2,
                depth: 0,
                engines: HashMap::new(),
            },
        }
    }

    /// A builder holding this agent's settings, for a copy that differs
    /// in some: another working directory or approval UI per session,
    /// another extension per request. The copy shares the provider, tools
    /// and hooks.
    ///
    /// ```
    /// use kinet_core::builder::Workspace;
    /// use kinet_core::testing::ScriptedProvider;
    /// use kinet_core::Agent;
    ///
    /// let agent = Agent::builder(ScriptedProvider::new([])).build();
    /// let in_tmp = agent.to_builder().workspace(Workspace::new().cwd("/tmp")).build();
    /// # let _ = in_tmp;
    /// ```
    pub fn to_builder(&self) -> AgentBuilder {
        AgentBuilder {
            config: (*self.config).clone(),
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
