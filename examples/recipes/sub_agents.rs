//! Recipe: sub-agents and teams. `dispatch_agent` runs a task in a fresh,
//! read-only sub-agent and returns its answer; `spawn_team` starts named
//! members that keep their own conversations and answer `team_send`.
//! Sub-agent events reach the host tagged with their id.
//! `cargo run --example recipe_sub_agents`
#![allow(clippy::print_stdout, missing_docs)]

use kinet::builder::SubAgents;
use std::time::Duration;

use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
use kinet::tools::agents::{Team, TeamPack};
use kinet::{Agent, AgentEvent};
use serde_json::json;

#[tokio::main]
async fn main() {
    // The scripted model plays the parent, then the sub-agent, then the parent.
    let model = ScriptedProvider::new([
        ScriptedTurn::new().tool_call(
            "c1",
            "dispatch_agent",
            json!({"prompt": "List the files in this directory and say which is the entry point.", "description": "find the entry point"}),
        ),
        ScriptedTurn::new().tool_call("s1", "glob", json!({"pattern": "*.rs"})),
        ScriptedTurn::text("main.rs is the entry point."),
        ScriptedTurn::text("The sub-agent found that main.rs is the entry point."),
    ]);
    let team = Team::new(); // members live as long as this handle and the agent
    let tools = kinet::tools::default_tools() // includes dispatch_agent
        .merged(TeamPack::new(team.clone(), Duration::from_secs(120)).toolset());
    let agent = Agent::builder(model)
        .tools(tools)
        .sub_agents(SubAgents::new().max_depth(1)) // sub-agents may not start their own
        .build();
    let mut run = agent.run("Which file is the entry point?");
    while let Some(event) = futures::StreamExt::next(&mut run).await {
        if let AgentEvent::SubAgent { agent_id, event } = event
            && let AgentEvent::ToolCallStarted { name, .. } = *event
        {
            println!("[{agent_id}] {name}");
        }
    }
    println!("{}", run.finish().await.final_text().unwrap_or_default());
    println!("team members: {}", team.status().len());
}
