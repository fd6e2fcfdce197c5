//! Sub-agents, behind trait objects: tools ask the spawner for one; the
//! agent module implements it.

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::{EventSink, ToolCtx};
use crate::data::conversation::Conversation;
use crate::data::model::Usage;
use crate::data::output::ToolError;
use crate::deferred::Decisions;
use crate::event::RunOutcome;

/// What a tool asks of a sub-agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAgentRequest {
    /// The task, as the sub-agent's first user message.
    pub prompt: String,
    /// A short label for the host's UI.
    pub description: Option<String>,
    /// A named engine registered by the host; `None` uses the parent's.
    pub engine: Option<String>,
}

/// What a sub-agent returned.
#[derive(Debug, Clone, PartialEq)]
pub struct SubAgentReport {
    /// The id its events were tagged with.
    pub agent_id: String,
    /// Its final answer.
    pub text: String,
    /// Model turns it took.
    pub turns: u32,
    /// Tokens it used.
    pub usage: Usage,
}

/// Runs sub-agents for tools such as `dispatch_agent`. The engine installs
/// one that runs a child agent with the parent's provider and tools, mutating
/// calls denied, and events forwarded to the parent tagged with the child's id.
#[async_trait]
pub trait SubAgentSpawner: Send + Sync {
    /// Runs a sub-agent to completion, in the working directory and roots of
    /// `parent` and cancelled with it.
    async fn run(
        &self,
        request: SubAgentRequest,
        parent: &ToolCtx,
    ) -> Result<SubAgentReport, ToolError>;

    /// A persistent agent for a team member: read-only, on the named engine
    /// (or the parent's settings), with its own system prompt when given,
    /// in the working directory and roots of `parent`. The default refuses:
    /// a custom spawner opts in.
    fn member_agent(
        &self,
        engine: Option<&str>,
        system_prompt: Option<&str>,
        parent: &ToolCtx,
    ) -> Result<std::sync::Arc<dyn AgentHandle>, ToolError> {
        let _ = (engine, system_prompt, parent);
        Err(ToolError::failed(
            "this agent's sub-agent spawner cannot create team members",
        ))
    }
}

/// A shared spawner is a spawner: pass an `Arc` where one is taken.
#[async_trait]
impl<S: SubAgentSpawner + ?Sized> SubAgentSpawner for std::sync::Arc<S> {
    async fn run(
        &self,
        request: SubAgentRequest,
        parent: &ToolCtx,
    ) -> Result<SubAgentReport, ToolError> {
        (**self).run(request, parent).await
    }

    fn member_agent(
        &self,
        engine: Option<&str>,
        system_prompt: Option<&str>,
        parent: &ToolCtx,
    ) -> Result<std::sync::Arc<dyn AgentHandle>, ToolError> {
        (**self).member_agent(engine, system_prompt, parent)
    }
}

/// A sub-agent engine that runs outside kinet's loop: another coding
/// agent driven over a protocol (`kinet_acp::AcpEngine` speaks the Agent
/// Client Protocol), registered by name with
/// [`SubAgents::engine`](crate::builder::SubAgents::engine) beside
/// in-process engines. It gets the task and the calling context (working
/// directory, roots, cancellation, deadline) and reports its updates as
/// events on `events`, which the parent's run sees tagged with the
/// sub-agent's id. It runs read-only, as every sub-agent does: enforcing
/// that is the engine's part, since it does its own I/O.
///
/// Cancellation: when `parent` is cancelled, or the future is dropped
/// (a timeout), nothing the engine started may go on.
#[async_trait]
pub trait ExternalEngine: Send + Sync {
    /// Runs `request.prompt` to completion and returns the engine's final
    /// text.
    async fn run(
        &self,
        request: &SubAgentRequest,
        parent: &ToolCtx,
        events: EventSink,
    ) -> Result<String, ToolError>;
}

/// A shared engine is an engine.
#[async_trait]
impl<E: ExternalEngine + ?Sized> ExternalEngine for std::sync::Arc<E> {
    async fn run(
        &self,
        request: &SubAgentRequest,
        parent: &ToolCtx,
        events: EventSink,
    ) -> Result<String, ToolError> {
        (**self).run(request, parent, events).await
    }
}

/// An agent a tool can run again and again (a team member), seen through a
/// trait object so that tools need not know the agent's type.
#[async_trait]
pub trait AgentHandle: Send + Sync {
    /// Runs the agent on `conversation` until it stops or `cancel` fires;
    /// the run stops with `cancel` but never cancels it.
    async fn run(&self, conversation: Conversation, cancel: CancellationToken) -> RunOutcome;

    /// Finishes a run of `conversation` that stopped at approvals to be
    /// given later, with the decisions (see
    /// [`Agent::resume`](crate::Agent::resume)); stops with `cancel` like
    /// [`run`](Self::run).
    async fn resume(
        &self,
        conversation: Conversation,
        decisions: Decisions,
        cancel: CancellationToken,
    ) -> RunOutcome;
}
