//! `Agent`, its builder, and `AgentRun`, the handle of one run.

use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::confirm::{ApprovalPolicy, ConfirmHandler, DenyingHandler};
use crate::ctx::{EventSink, Extensions, SubAgentSpawner, ToolCtx};
use crate::event::{AgentEvent, RunStop};
use crate::hooks::Hook;
use crate::message::{Conversation, Message};
use crate::provider::{GenerationParams, Provider, StopReason, Usage};
use crate::tool::{DynTool, Tool};
use crate::toolset::{ToolSource, Toolset};
use crate::truncate::TruncationPolicy;

#[derive(Clone)]
pub(crate) enum SpawnerSetting {
    Engine,
    Custom(Arc<dyn SubAgentSpawner>),
    Disabled,
}

/// Everything an agent is configured with; shared by its runs.
#[derive(Clone)]
pub(crate) struct AgentConfig {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) model: String,
    pub(crate) system_prompt: String,
    pub(crate) tools: Toolset,
    pub(crate) policy: ApprovalPolicy,
    pub(crate) confirm: Arc<dyn ConfirmHandler>,
    pub(crate) max_turns: u32,
    pub(crate) truncation: TruncationPolicy,
    pub(crate) truncation_overrides: HashMap<String, TruncationPolicy>,
    pub(crate) hooks: Vec<Arc<dyn Hook>>,
    pub(crate) params: GenerationParams,
    pub(crate) cwd: PathBuf,
    pub(crate) roots: Vec<PathBuf>,
    pub(crate) extensions: Extensions,
    pub(crate) tool_timeout: Option<Duration>,
    pub(crate) spawner: SpawnerSetting,
    pub(crate) max_depth: u32,
    pub(crate) depth: u32,
    /// Named engines sub-agents may run on (provider + model + prompt + tools).
    pub(crate) engines: HashMap<String, Arc<AgentConfig>>,
}

impl AgentConfig {
    pub(crate) fn truncation_for(
        &self,
        tool: Option<&dyn DynTool>,
        name: &str,
    ) -> TruncationPolicy {
        self.truncation_overrides
            .get(name)
            .copied()
            .or_else(|| tool.and_then(|t| t.truncation()))
            .unwrap_or(self.truncation)
    }

    pub(crate) fn base_ctx(
        self: &Arc<Self>,
        cancel: &CancellationToken,
        events: &EventSink,
    ) -> ToolCtx {
        let spawner: Option<Arc<dyn SubAgentSpawner>> = if self.depth >= self.max_depth {
            None
        } else {
            match &self.spawner {
                SpawnerSetting::Engine => Some(Arc::new(crate::spawner::EngineSpawner::new(
                    Arc::clone(self),
                ))),
                SpawnerSetting::Custom(spawner) => Some(Arc::clone(spawner)),
                SpawnerSetting::Disabled => None,
            }
        };
        ToolCtx::new(self.cwd.clone())
            .with_roots(self.roots.clone())
            .with_confirm_handler(Arc::clone(&self.confirm), self.policy.timeout())
            .with_cancellation(cancel.clone())
            .with_events(events.clone())
            .with_spawner(spawner)
            .with_extensions(self.extensions.clone())
            .with_depth(self.depth)
    }
}

/// Builds an [`Agent`]. Every setter documents its default.
pub struct AgentBuilder {
    config: AgentConfig,
}

impl AgentBuilder {
    /// The model name sent to the provider. Default: empty (the provider's
    /// own default, where it has one).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.config.model = model.into();
        self
    }

    /// The system prompt. Default: empty.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.config.system_prompt = prompt.into();
        self
    }

    /// Adds a tool. Default: no tools.
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.config.tools.add(tool);
        self
    }

    /// Adds a tool in its dynamic form.
    pub fn dyn_tool(mut self, tool: Arc<dyn DynTool>) -> Self {
        self.config.tools.add_dyn(tool);
        self
    }

    /// Replaces the whole toolset (keeps nothing added before).
    pub fn toolset(mut self, tools: Toolset) -> Self {
        self.config.tools = tools;
        self
    }

    /// Adds a dynamic tool source (the MCP hub), asked once per turn.
    pub fn tool_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.config.tools.add_source(source);
        self
    }

    /// The approval policy. Default: [`ApprovalPolicy::ask`] (ask before
    /// mutating calls, 5-minute confirmation timeout).
    pub fn policy(mut self, policy: ApprovalPolicy) -> Self {
        self.config.policy = policy;
        self
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
        self.config.max_turns = max_turns;
        self
    }

    /// How tool output is truncated for the model. Default: 8192-char
    /// threshold, 3000 head + 3000 tail.
    pub fn truncation(mut self, policy: TruncationPolicy) -> Self {
        self.config.truncation = policy;
        self
    }

    /// A truncation policy for one tool, over the tool's own and the
    /// agent's.
    pub fn truncation_for(mut self, tool: impl Into<String>, policy: TruncationPolicy) -> Self {
        self.config.truncation_overrides.insert(tool.into(), policy);
        self
    }

    /// Adds a hook. Default: none.
    pub fn hook(mut self, hook: impl Hook + 'static) -> Self {
        self.config.hooks.push(Arc::new(hook));
        self
    }

    /// Adds a shared hook.
    pub fn hook_arc(mut self, hook: Arc<dyn Hook>) -> Self {
        self.config.hooks.push(hook);
        self
    }

    /// Sampling parameters. Default: all unset (the provider's defaults).
    pub fn params(mut self, params: GenerationParams) -> Self {
        self.config.params = params;
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

    /// A time limit for each tool call. Default: none (tools such as shell
    /// enforce their own).
    pub fn tool_timeout(mut self, timeout: Duration) -> Self {
        self.config.tool_timeout = Some(timeout);
        self
    }

    /// Replaces the built-in sub-agent spawner. Default: the engine's own,
    /// which runs a child agent with the same provider and tools and denies
    /// its mutating calls.
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
    /// current directory, and relative workspace roots from `cwd`.
    pub fn build(mut self) -> Agent {
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
/// use kinet_core::{Agent, AgentEvent, ScriptedProvider, ScriptedTurn};
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
    pub(crate) config: Arc<AgentConfig>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("provider", &self.config.provider.name())
            .field("model", &self.config.model)
            .field("tools", &self.config.tools)
            .field("max_turns", &self.config.max_turns)
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
                provider,
                model: String::new(),
                system_prompt: String::new(),
                tools: Toolset::new(),
                policy: ApprovalPolicy::default(),
                confirm: Arc::new(DenyingHandler),
                max_turns: 50,
                truncation: TruncationPolicy::default(),
                truncation_overrides: HashMap::new(),
                hooks: Vec::new(),
                params: GenerationParams::default(),
                cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
                roots: Vec::new(),
                extensions: Extensions::new(),
                tool_timeout: None,
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

    /// The agent's tools (static tools and sources).
    pub fn tools(&self) -> &Toolset {
        &self.config.tools
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
        let cancel = cancel.child_token();
        let (sender, receiver) = mpsc::unbounded_channel();
        let task = tokio::spawn(crate::engine::drive(
            Arc::clone(&self.config),
            conversation.into(),
            cancel.clone(),
            EventSink::new(sender),
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
    /// Model calls made.
    pub turns: u32,
}

impl RunOutcome {
    /// The text of the last assistant message.
    pub fn final_text(&self) -> Option<String> {
        self.conversation.last_assistant_text()
    }
}

/// A running agent: a stream of [`AgentEvent`]s ending with
/// [`AgentEvent::Done`], plus cancellation.
///
/// The stream ends right after `Done`, even if a tool kept a copy of its
/// context (and so of the event sender) alive.
pub struct AgentRun {
    events: mpsc::UnboundedReceiver<AgentEvent>,
    task: Option<JoinHandle<RunOutcome>>,
    cancel: CancellationToken,
    done: bool,
}

impl AgentRun {
    /// Asks the run to stop. Pending tool calls get a "cancelled" result;
    /// the stream then ends with `Done { stop: Cancelled }`.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The run's cancellation token (cancelling it stops the run).
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Waits for the end of the run (events not yet read are dropped) and
    /// returns the outcome.
    pub async fn finish(mut self) -> RunOutcome {
        let Some(mut task) = self.task.take() else {
            return internal_failure("the run's outcome was already taken".into());
        };
        // Drain events until `Done` or the task's end, whichever comes first:
        // a leaked event sender must not keep us waiting.
        let joined = loop {
            if self.done {
                break task.await;
            }
            tokio::select! {
                event = self.events.recv() => match event {
                    Some(AgentEvent::Done { .. }) | None => self.done = true,
                    Some(_) => {}
                },
                joined = &mut task => break joined,
            }
        };
        joined.unwrap_or_else(|error| internal_failure(format!("the agent task failed: {error}")))
    }
}

fn internal_failure(message: String) -> RunOutcome {
    RunOutcome {
        conversation: Conversation::new(),
        stop: RunStop::Failed(crate::AgentError::Internal(message)),
        model_stop: None,
        usage: Usage::default(),
        turns: 0,
    }
}

impl Stream for AgentRun {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        if self.done {
            return Poll::Ready(None);
        }
        let polled = self.events.poll_recv(cx);
        if let Poll::Ready(Some(AgentEvent::Done { .. }) | None) = &polled {
            self.done = true;
        }
        polled
    }
}

impl Drop for AgentRun {
    fn drop(&mut self) {
        // The token is the run's own child token: this stops this run only.
        self.cancel.cancel();
    }
}

impl std::fmt::Debug for AgentRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRun")
            .field("cancelled", &self.cancel.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Message {
    pub(crate) fn into_conversation(self) -> Conversation {
        vec![self].into()
    }
}
