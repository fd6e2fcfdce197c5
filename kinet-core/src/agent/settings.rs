//! The builder's groups of settings, one value per concern. Each is a
//! patch: what it sets replaces the agent's setting, what it adds (hooks,
//! layers, roots, engines) is added, and what it leaves unset keeps its
//! default or what was set before.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{AgentConfig, SpawnerSetting};
use crate::confirm::{ApprovalPolicy, ConfirmHandler};
use crate::ctx::{ExternalEngine, SubAgentSpawner};
use crate::data::truncate::TruncationPolicy;
use crate::hook::Hook;
use crate::layer::ToolLayer;
use crate::pipeline::{Defence, Pipeline, Place};
use crate::rules::Rules;

/// Who decides whether a call runs: when to ask, who answers, and the
/// injection defence.
///
/// ```
/// use kinet_core::builder::Approval;
/// use kinet_core::confirm::{ApprovalPolicy, ChannelConfirmHandler};
///
/// let (handler, _requests) = ChannelConfirmHandler::new(8);
/// let approval = Approval::new()
///     .policy(ApprovalPolicy::ask().allow("write_file"))
///     .handler(handler);
/// # let _ = approval;
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct Approval {
    policy: Option<ApprovalPolicy>,
    rules: Option<Rules>,
    handler: Option<Arc<dyn ConfirmHandler>>,
    defence: Option<Defence>,
}

impl Approval {
    /// Nothing set: the defaults below, or what was set before.
    pub fn new() -> Self {
        Self::default()
    }

    /// When to ask. Default: [`ApprovalPolicy::ask`] (read-only calls run,
    /// mutating ones ask; a 5-minute timeout on each question). A policy
    /// without a rules file keeps the rules set before.
    pub fn policy(mut self, policy: ApprovalPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Rules as data (a [`rules`](crate::rules) file) for the policy, in
    /// place of any set before. Default: none.
    pub fn rules(mut self, rules: Rules) -> Self {
        self.rules = Some(rules);
        self
    }

    /// The host's approval UI (an `Arc` of one is one too). Default: a
    /// handler that denies every question, so mutating calls run only
    /// under [`ApprovalPolicy::never`] or an `allow` rule. Same as
    /// [`AgentBuilder::confirm_handler`](crate::AgentBuilder::confirm_handler).
    pub fn handler(mut self, handler: impl ConfirmHandler + 'static) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// The injection defence. Default: [`Defence::new`]: once the model has
    /// read untrusted text, only actions it declared before (with
    /// `declare_plan`, which the agent is given) run, and no value comes
    /// from other untrusted text; flagged calls go to the handler.
    pub fn defence(mut self, defence: Defence) -> Self {
        self.defence = Some(defence);
        self
    }

    pub(super) fn apply(self, config: &mut AgentConfig) {
        if let Some(handler) = self.handler {
            config.confirm = handler;
        }
        let (policy, rules, defence) = (self.policy, self.rules, self.defence);
        config.pipeline(|mut pipeline| {
            if let Some(policy) = policy {
                let policy = policy.keeping_rules_of(pipeline.policy());
                pipeline = pipeline.with_policy(policy);
            }
            if let Some(rules) = rules {
                let policy = pipeline.policy().clone().with_rules(rules);
                pipeline = pipeline.with_policy(policy);
            }
            if let Some(defence) = defence {
                pipeline = pipeline.with_defence(defence);
            }
            pipeline
        });
    }
}

/// Where the agent works: its directory, the roots file tools are
/// confined to, and the names kept read-only inside them.
///
/// ```
/// use kinet_core::builder::Workspace;
///
/// let workspace = Workspace::new().cwd("/srv/repo").root("/srv/repo");
/// # let _ = workspace;
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct Workspace {
    cwd: Option<PathBuf>,
    roots: Vec<PathBuf>,
    protected: Option<Vec<String>>,
}

impl Workspace {
    /// Nothing set: the defaults below, or what was set before.
    pub fn new() -> Self {
        Self::default()
    }

    /// The directory tools resolve relative paths against; a relative one
    /// is taken from the agent's cwd so far (for
    /// [`Agent::to_builder`](crate::Agent::to_builder), the agent's).
    /// Default: the process's current directory.
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Adds a workspace root: file tools open paths beneath the roots
    /// only (with the kernel's help), and a relative root is taken from
    /// the cwd. Default: no roots (no confinement).
    pub fn root(mut self, root: impl Into<PathBuf>) -> Self {
        self.roots.push(root.into());
        self
    }

    /// The file and directory names kept read-only anywhere beneath the
    /// roots. Default: `.git` and `.kinet`.
    pub fn protected_names(mut self, names: Vec<String>) -> Self {
        self.protected = Some(names);
        self
    }

    pub(super) fn apply(self, config: &mut AgentConfig) {
        if let Some(cwd) = self.cwd {
            config.cwd = config.cwd.join(cwd);
        }
        config.roots.extend(self.roots);
        if let Some(names) = self.protected {
            config.protected = Some(names);
        }
    }
}

/// How each tool call is handled on its way through the
/// [pipeline](crate::pipeline): hooks, the host's own stages, layers,
/// truncation for the model, and whether a turn's calls may run together.
///
/// ```
/// use kinet_core::builder::Calls;
/// use kinet_core::hook::DoomLoopGuard;
/// use kinet_core::layer::ConcurrencyLimitLayer;
///
/// let calls = Calls::new()
///     .hook(DoomLoopGuard::default())
///     .layer(ConcurrencyLimitLayer::new(4));
/// # let _ = calls;
/// ```
#[derive(Default)]
#[must_use]
pub struct Calls {
    changes: Vec<Box<dyn FnOnce(Pipeline) -> Pipeline + Send>>,
}

impl Calls {
    /// Nothing set: the defaults below, or what was set before.
    pub fn new() -> Self {
        Self::default()
    }

    fn change(mut self, change: impl FnOnce(Pipeline) -> Pipeline + Send + 'static) -> Self {
        self.changes.push(Box::new(change));
        self
    }

    /// Adds a hook (model calls, before and after tool calls), after those
    /// added before; an `Arc` of one is one too. Default: none.
    pub fn hook(self, hook: impl Hook + 'static) -> Self {
        let hook: Arc<dyn Hook> = Arc::new(hook);
        self.change(move |p| p.with_hook(hook))
    }

    /// Puts a host's own stage, named `name`, at a place in the pipeline's
    /// list of stages (see [`Pipeline::with_stage`]). Default: none.
    pub fn stage(self, place: Place, name: impl Into<String>, hook: impl Hook + 'static) -> Self {
        let (name, hook): (String, Arc<dyn Hook>) = (name.into(), Arc::new(hook));
        self.change(move |p| p.with_stage(place, name, hook))
    }

    /// Adds a [layer](crate::layer) around every tool call, inside the
    /// layers added before; an `Arc` of one is one too (one counter for
    /// several agents). Default: none.
    pub fn layer(self, layer: impl ToolLayer) -> Self {
        let layer: Arc<dyn ToolLayer> = Arc::new(layer);
        self.change(move |p| p.with_layer(layer))
    }

    /// How tool output is truncated for the model (the host's events get
    /// it whole). Default: past 8192 chars, the first 3000 and the last
    /// 3000.
    pub fn truncation(self, policy: TruncationPolicy) -> Self {
        self.change(move |p| p.with_truncation(policy))
    }

    /// A truncation policy for one tool, over the tool's own and the
    /// agent's. Default: none.
    pub fn truncation_for(self, tool: impl Into<String>, policy: TruncationPolicy) -> Self {
        let tool = tool.into();
        self.change(move |p| p.with_truncation_for(tool, policy))
    }

    /// Runs every call of a turn alone, in the model's order. Default:
    /// off (consecutive calls that allow it run together; see
    /// [`Pipeline::with_one_call_at_a_time`]).
    pub fn one_at_a_time(self) -> Self {
        self.change(|p| p.with_one_call_at_a_time(true))
    }

    pub(super) fn apply(self, config: &mut AgentConfig) {
        for change in self.changes {
            config.pipeline(change);
        }
    }
}

/// Sub-agents (`dispatch_agent`, teams): whether they run, how deep they
/// nest, and the named engines they may run on.
///
/// ```
/// use kinet_core::builder::SubAgents;
///
/// let sub_agents = SubAgents::new().max_depth(1);
/// # let _ = sub_agents;
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct SubAgents {
    spawner: Option<SpawnerSetting>,
    max_depth: Option<u32>,
    engines: Vec<(String, Engine)>,
}

/// An engine sub-agents may run on: another kinet [`Agent`](super::Agent)
/// in this process (a cheaper model, another provider), or an
/// [`ExternalEngine`] (another coding agent, such as `kinet_acp::AcpEngine`).
/// Made with `From`: pass `&agent`, `agent` or the external engine to
/// [`SubAgents::engine`].
#[derive(Clone)]
pub struct Engine(pub(super) EngineKind);

#[derive(Clone)]
pub(super) enum EngineKind {
    Agent(Arc<AgentConfig>),
    External(Arc<dyn ExternalEngine>),
}

impl From<&super::Agent> for Engine {
    fn from(agent: &super::Agent) -> Self {
        Self(EngineKind::Agent(Arc::clone(&agent.config)))
    }
}

impl From<super::Agent> for Engine {
    fn from(agent: super::Agent) -> Self {
        Self(EngineKind::Agent(agent.config))
    }
}

impl<E: ExternalEngine + 'static> From<E> for Engine {
    fn from(engine: E) -> Self {
        Self(EngineKind::External(Arc::new(engine)))
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            EngineKind::Agent(_) => "Engine::Agent",
            EngineKind::External(_) => "Engine::External",
        })
    }
}

impl SubAgents {
    /// Nothing set: the defaults below, or what was set before.
    pub fn new() -> Self {
        Self::default()
    }

    /// Turns sub-agents off. Default: on.
    pub fn disabled(mut self) -> Self {
        self.spawner = Some(SpawnerSetting::Disabled);
        self
    }

    /// Replaces the built-in spawner. Default: the engine's own, which runs
    /// a child agent with the same provider, tools and pipeline and denies
    /// its mutating calls.
    pub fn spawner(mut self, spawner: impl SubAgentSpawner + 'static) -> Self {
        self.spawner = Some(SpawnerSetting::Custom(Arc::new(spawner)));
        self
    }

    /// How deeply sub-agents may nest. Default: 2 (an agent, its
    /// sub-agents, and theirs cannot spawn).
    pub fn max_depth(mut self, depth: u32) -> Self {
        self.max_depth = Some(depth);
        self
    }

    /// Registers a named engine for sub-agents: `dispatch_agent` (and,
    /// for an in-process agent, `spawn_team`) take its name. It runs
    /// read-only, like every sub-agent. `engine` is another kinet agent
    /// (`&agent`: a cheaper model, another provider) or an
    /// [`ExternalEngine`] (another coding agent over ACP). Default: none
    /// (sub-agents use this agent's settings).
    pub fn engine(mut self, name: impl Into<String>, engine: impl Into<Engine>) -> Self {
        self.engines.push((name.into(), engine.into()));
        self
    }

    pub(super) fn apply(self, config: &mut AgentConfig) {
        if let Some(spawner) = self.spawner {
            config.spawner = spawner;
        }
        if let Some(depth) = self.max_depth {
            config.max_depth = depth;
        }
        config.engines.extend(self.engines);
    }
}

/// Limits on one run.
///
/// ```
/// use kinet_core::builder::Limits;
/// use std::time::Duration;
///
/// let limits = Limits::new().max_turns(20).tool_timeout(Duration::from_secs(120));
/// # let _ = limits;
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct Limits {
    max_turns: Option<u32>,
    budget: Option<f64>,
    tool_timeout: Option<Duration>,
}

impl Limits {
    /// Nothing set: the defaults below, or what was set before.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most model calls one run makes. Default: 50.
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.max_turns = Some(turns);
        self
    }

    /// The most one run may cost, in the price table's currency: once a
    /// model call brings the run's cost to `limit`, the calls it asked for
    /// are answered without running and the run ends with
    /// [`RunStop::BudgetReached`](crate::RunStop::BudgetReached). Needs
    /// [`Telemetry::prices`](crate::telemetry::Telemetry::prices) for the
    /// model. Each sub-agent run has the same budget for its own calls.
    /// Default: none.
    pub fn budget(mut self, limit: f64) -> Self {
        self.budget = Some(limit);
        self
    }

    /// A time limit for each tool call, enforced through
    /// [`ToolCtx::deadline`](crate::ToolCtx::deadline); a tool's own
    /// [`Tool::timeout`](crate::Tool::timeout) can only make it shorter.
    /// Default: none (only the tools' own).
    pub fn tool_timeout(mut self, timeout: Duration) -> Self {
        self.tool_timeout = Some(timeout);
        self
    }

    pub(super) fn apply(self, config: &mut AgentConfig) {
        let run = config.run_mut();
        if let Some(turns) = self.max_turns {
            run.max_turns = turns;
        }
        if let Some(limit) = self.budget {
            run.budget = Some(limit);
        }
        if let Some(timeout) = self.tool_timeout {
            config.pipeline(|p| p.with_tool_timeout(Some(timeout)));
        }
    }
}

/// Long conversations: the journal every step is written to, and how
/// requests are kept inside the model's context window.
///
/// ```
/// use kinet_core::builder::Sessions;
/// use kinet_core::context::ContextPolicy;
///
/// let sessions = Sessions::new().context(ContextPolicy::new());
/// # let _ = sessions;
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct Sessions {
    journal: Option<Arc<dyn crate::session::Journal>>,
    context: Option<crate::context::ContextPolicy>,
}

impl Sessions {
    /// Nothing set: the defaults below, or what was set before.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes every step of the agent's runs to `journal` as it happens
    /// (see [`Journal`](crate::session::Journal)). Default: none.
    pub fn journal(mut self, journal: Arc<dyn crate::session::Journal>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// How requests are kept inside the model's context window. Default:
    /// [`ContextPolicy::new`](crate::context::ContextPolicy::new) (the
    /// window by model name or learned from the provider, compaction at
    /// 80%).
    pub fn context(mut self, policy: crate::context::ContextPolicy) -> Self {
        self.context = Some(policy);
        self
    }

    pub(super) fn apply(self, config: &mut AgentConfig) {
        let run = config.run_mut();
        if let Some(journal) = self.journal {
            run.journal = Some(journal);
        }
        if let Some(policy) = self.context {
            run.context = policy;
        }
    }
}
