//! The engine's sub-agent spawner.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use futures::StreamExt;

use super::settings::{Engine, EngineKind};
use super::{Agent, AgentConfig};
use crate::ctx::EngineCtx as _;
use crate::ctx::{
    AgentHandle, ExternalEngine, SubAgentReport, SubAgentRequest, SubAgentSpawner, ToolCtx,
};
use crate::data::conversation::Conversation;
use crate::data::output::{ToolError, ToolErrorKind};
use crate::deferred::Suspension;
use crate::event::RunStop;
use crate::message::Message;

/// Runs sub-agents with the parent's provider, model, system prompt and
/// tools (or a named engine's), mutating calls denied, events forwarded to
/// the parent tagged with the child's id, cancelled with the parent.
pub(super) struct EngineSpawner {
    parent: Arc<AgentConfig>,
}

static SUB_AGENT_COUNTER: AtomicU64 = AtomicU64::new(1);

impl EngineSpawner {
    pub(super) fn new(parent: Arc<AgentConfig>) -> Self {
        Self { parent }
    }

    /// The engine registered as `name`.
    fn named(&self, name: &str) -> Result<&Engine, ToolError> {
        self.parent.engines.get(name).ok_or_else(|| {
            let mut known: Vec<&str> = self.parent.engines.keys().map(String::as_str).collect();
            known.sort_unstable();
            ToolError::invalid_arguments(if known.is_empty() {
                format!("unknown engine `{name}`: no engines are registered; omit `engine`")
            } else {
                format!("unknown engine `{name}`; engines: {}", known.join(", "))
            })
        })
    }

    /// Runs `request` on an external engine, its events tagged as a
    /// sub-agent's.
    async fn run_external(
        &self,
        engine: &Arc<dyn ExternalEngine>,
        request: &SubAgentRequest,
        parent: &ToolCtx,
    ) -> Result<SubAgentReport, ToolError> {
        let agent_id = format!("sub-{}", SUB_AGENT_COUNTER.fetch_add(1, Ordering::Relaxed));
        let events = parent.events().tagged(agent_id.as_str());
        let text = engine.run(request, parent, events).await?;
        Ok(SubAgentReport {
            agent_id,
            text,
            turns: 1,
            usage: Default::default(),
        })
    }

    /// The configuration a child runs with: working directory and roots are
    /// the calling context's (a served call's roots bind its sub-agents too).
    fn child_config(
        &self,
        engine: Option<&str>,
        system_prompt: Option<&str>,
        parent: &ToolCtx,
    ) -> Result<AgentConfig, ToolError> {
        let base = match engine {
            None => &self.parent,
            Some(name) => match &self.named(name)?.0 {
                EngineKind::Agent(config) => config,
                EngineKind::External(_) => {
                    return Err(ToolError::invalid_arguments(format!(
                        "engine `{name}` runs outside kinet and answers one task at a time: \
                         use it with dispatch_agent, and an in-process engine for team members"
                    )));
                }
            },
        };
        let mut config = (**base).clone();
        let policy = self.parent.run.pipeline.policy().for_sub_agent();
        let defence = self.parent.run.pipeline.defence().clone();
        let run = config.run_mut();
        // The parent's rules, also on a named engine: its trust rules and
        // unattended setting are the host's.
        run.pipeline = std::mem::take(&mut run.pipeline)
            .with_policy(policy)
            .with_defence(defence);
        // A sub-agent's own history is not the session's: the parent
        // journals the sub-agent's result as its tool call's result.
        run.journal = None;
        config.depth = self.parent.depth + 1;
        config.max_depth = self.parent.max_depth;
        config.engines = self.parent.engines.clone();
        config.confirm = Arc::clone(&self.parent.confirm);
        if let Some(system) = system_prompt {
            config.run_mut().system_prompt = system.to_owned();
        }
        config.cwd = parent.cwd().to_path_buf();
        config.roots = parent.roots().to_vec();
        config.protected = self.parent.protected.clone();
        Ok(config)
    }
}

/// What a sub-agent that stopped at a question keeps until the host
/// answers: its conversation (with the turn that waits) and the tools
/// approved for its session.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stopped {
    conversation: Conversation,
    approvals: std::collections::BTreeSet<String>,
}

#[async_trait]
impl SubAgentSpawner for EngineSpawner {
    async fn run(
        &self,
        request: SubAgentRequest,
        parent: &ToolCtx,
    ) -> Result<SubAgentReport, ToolError> {
        if let Some(name) = request.engine.as_deref()
            && let EngineKind::External(engine) = &self.named(name)?.0
        {
            return self.run_external(engine, &request, parent).await;
        }
        let child = Agent {
            config: Arc::new(self.child_config(request.engine.as_deref(), None, parent)?),
        };
        let agent_id = format!("sub-{}", SUB_AGENT_COUNTER.fetch_add(1, Ordering::Relaxed));
        let forward = parent.events().tagged(agent_id.as_str());
        let cancel = parent.cancellation().child_token();
        let mut run = match parent.saved_state() {
            // It stopped at a question before: it goes on with the
            // decisions given for its calls.
            Some(saved) => {
                let saved: Stopped = serde_json::from_value(saved.clone()).map_err(|e| {
                    ToolError::failed(format!(
                        "the saved state of the sub-agent of call {} cannot be read: {e}",
                        parent.call_id()
                    ))
                })?;
                let mut conversation = saved.conversation;
                conversation.session_approvals = saved.approvals;
                child.resume_with_cancellation(conversation, parent.decisions_within(), cancel)
            }
            None => {
                // The task was written by the parent's model: the sub-agent
                // knows what that model read, and does not take the task as
                // the user's.
                let mut conversation = Conversation::from(vec![Message::user(request.prompt)]);
                conversation.provenance = parent.provenance().inherit();
                child.run_with_cancellation(conversation, cancel)
            }
        };
        while let Some(event) = run.next().await {
            forward.emit(event);
        }
        let outcome = run.finish().await;
        let text = outcome.final_text().unwrap_or_default();
        match outcome.stop {
            // Its questions wait for the host: the parent's call stops with
            // them (under ids that lead back here) and the sub-agent's state.
            RunStop::AwaitingApproval { pending } => {
                let pending = pending
                    .into_iter()
                    .map(|mut request| {
                        request.call_id = format!("{}.{}", parent.call_id(), request.call_id);
                        request
                    })
                    .collect();
                let stopped = Stopped {
                    approvals: outcome.conversation.session_approvals.clone(),
                    conversation: outcome.conversation,
                };
                let state = serde_json::to_value(&stopped).map_err(|e| {
                    ToolError::failed(format!("the sub-agent's state cannot be saved: {e}"))
                })?;
                Err(ToolError::deferred(
                    Suspension::new(pending).save(parent.call_id(), state),
                ))
            }
            RunStop::Completed => Ok(SubAgentReport {
                agent_id,
                text,
                turns: outcome.turns,
                usage: outcome.usage,
            }),
            RunStop::MaxTurns => Ok(SubAgentReport {
                agent_id,
                text: format!("{text}\n\n(the sub-agent stopped at its turn limit)"),
                turns: outcome.turns,
                usage: outcome.usage,
            }),
            RunStop::Cancelled => Err(ToolError::new(
                ToolErrorKind::Cancelled,
                "the sub-agent was cancelled",
            )),
            RunStop::Aborted { tool } => Err(ToolError::new(
                ToolErrorKind::Denied,
                format!("the sub-agent was aborted at a `{tool}` call"),
            )),
            RunStop::Halted { reason } => Err(ToolError::new(
                ToolErrorKind::Denied,
                format!("a hook ended the sub-agent's run: {reason}"),
            )),
            RunStop::Failed(error) => {
                Err(ToolError::failed(format!("the sub-agent failed: {error}")))
            }
            #[allow(unreachable_patterns)]
            other => Err(ToolError::failed(format!("the sub-agent {other}"))),
        }
    }

    fn member_agent(
        &self,
        engine: Option<&str>,
        system_prompt: Option<&str>,
        parent: &ToolCtx,
    ) -> Result<Arc<dyn AgentHandle>, ToolError> {
        Ok(Arc::new(Agent {
            config: Arc::new(self.child_config(engine, system_prompt, parent)?),
        }))
    }
}
