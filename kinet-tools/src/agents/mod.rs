//! `dispatch_agent` (one-shot sub-agents) and agent teams (`spawn_team`,
//! `team_broadcast`, `team_send`, `team_close`).

use async_trait::async_trait;
use kinet_core::tool::engine::EngineCtx as _;
use kinet_core::tool::engine::SubAgentRequest;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `dispatch_agent`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DispatchAgentArgs {
    /// The complete task for the sub-agent: it sees nothing of this
    /// conversation, so include every detail it needs and say what to return.
    pub prompt: String,
    /// A short label for the user (3-5 words).
    #[serde(default)]
    pub description: Option<String>,
    /// A named engine registered by the host (another model, or another
    /// coding agent); omit to use the current one.
    #[serde(default)]
    pub engine: Option<String>,
}

/// Runs a sub-agent with its own context and a read-only toolset (its
/// mutating calls are denied, except those the host's approval policy
/// asks about: those are asked through the host's handler, or, when the
/// policy defers questions, stop the sub-agent and this run until the host
/// decides; see [`kinet_core::deferred`]) and returns its final answer. Its events
/// reach the host tagged with its id; cancelling the run cancels it; nesting
/// is limited by the agent's sub-agent depth.
#[derive(Debug, Clone, Default)]
pub struct DispatchAgentTool;

const DISPATCH_DESCRIPTION: &str = "\
Launches a sub-agent for a self-contained task (research, searching a codebase, \
reading many files) and returns its final answer. The sub-agent starts with no \
knowledge of this conversation: give it the whole task and what to report back. It \
can read and search; it changes nothing without the user's approval. Several dispatch_agent calls in one \
turn run in parallel.";

#[async_trait]
impl Tool for DispatchAgentTool {
    type Args = DispatchAgentArgs;

    fn name(&self) -> &str {
        "dispatch_agent"
    }

    fn description(&self) -> &str {
        DISPATCH_DESCRIPTION
    }

    // The sub-agent's own mutating calls are denied or asked about one by
    // one, so this call itself changes nothing; its model may be remote.
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only().open_world(true)
    }

    async fn call(&self, args: DispatchAgentArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        if args.prompt.trim().is_empty() {
            return Err(ToolError::invalid_arguments("the prompt is empty"));
        }
        let spawner = ctx.spawner().ok_or_else(|| {
            ToolError::failed(format!(
                "sub-agents are not available here (nesting depth {} reached, or turned off by the host)",
                ctx.depth()
            ))
        })?;
        let report = spawner
            .run(
                SubAgentRequest {
                    prompt: args.prompt,
                    description: args.description,
                    engine: args.engine,
                },
                ctx,
            )
            .await?;
        let text = if report.text.trim().is_empty() {
            "(the sub-agent returned no text)".to_owned()
        } else {
            report.text
        };
        Ok(ToolOutput::text(text).with_structured(serde_json::json!({
            "agent_id": report.agent_id,
            "turns": report.turns,
            "input_tokens": report.usage.input_tokens,
            "output_tokens": report.usage.output_tokens,
        })))
    }
}

mod team;

pub use team::{
    MemberStatus, SpawnTeamArgs, Team, TeamBroadcastArgs, TeamCloseArgs, TeamMemberSpec, TeamPack,
    TeamSendArgs,
};
