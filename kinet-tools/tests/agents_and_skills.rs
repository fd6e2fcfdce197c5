//! dispatch_agent, teams and skills, driven by scripted and echo models.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kinet_core::builder::{Calls, SubAgents, Workspace};
use std::sync::Arc;
use std::time::Duration;

use common::result_text;
use futures::StreamExt;
use kinet_core::provider::{ChatRequest, ProviderError, ProviderStream, StopReason, StreamEvent};
use kinet_core::testing::{Expectation, ScriptedProvider, ScriptedTurn};
use kinet_core::{Agent, AgentEvent, ApprovalPolicy, Provider, Tool, ToolCtx};
use kinet_tools::*;
use kinet_tools::{agents::*, skills::*};
use serde_json::json;

#[tokio::test]
async fn a_dispatched_agent_cannot_write_and_its_events_are_tagged() {
    let dir = tempfile::tempdir().unwrap();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call(
            "d",
            "dispatch_agent",
            json!({"prompt": "Create notes.txt saying hi", "description": "write notes"}),
        ),
        ScriptedTurn::new()
            .expect(Expectation::LastUserContains("Create notes.txt".into()))
            .tool_call(
                "w",
                "write_file",
                json!({"path": "notes.txt", "content": "hi"}),
            ),
        ScriptedTurn::text("I could not write the file.").expect(Expectation::ToolResultContains {
            call_id: "w".into(),
            text: "not allowed".into(),
        }),
        ScriptedTurn::text("The helper was not allowed to write.").expect(
            Expectation::ToolResultContains {
                call_id: "d".into(),
                text: "I could not write the file.".into(),
            },
        ),
    ]);
    let agent = Agent::builder(provider)
        .tools(default_tools())
        .workspace(Workspace::new().cwd(dir.path()).root(dir.path()))
        .policy(ApprovalPolicy::never())
        .build();
    let mut run = agent.run("delegate it");
    let mut tagged = 0;
    while let Some(event) = run.next().await {
        if let AgentEvent::SubAgent { .. } = event {
            tagged += 1;
        }
    }
    let outcome = run.finish().await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert!(tagged > 0);
    assert!(!dir.path().join("notes.txt").exists());
}

#[tokio::test]
async fn dispatch_agent_runs_on_a_named_engine() {
    let cheap = Agent::builder(ScriptedProvider::new([ScriptedTurn::text(
        "answer from the cheap model",
    )
    .expect(Expectation::SystemContains("You are cheap.".into()))]))
    .system_prompt("You are cheap.")
    .build();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .tool_call(
                "a",
                "dispatch_agent",
                json!({"prompt": "summarise", "engine": "cheap"}),
            )
            .tool_call(
                "b",
                "dispatch_agent",
                json!({"prompt": "summarise", "engine": "missing"}),
            ),
        ScriptedTurn::text("ok")
            .expect(Expectation::ToolResultContains {
                call_id: "a".into(),
                text: "answer from the cheap model".into(),
            })
            .expect(Expectation::ToolResultContains {
                call_id: "b".into(),
                text: "unknown engine `missing`; engines: cheap".into(),
            }),
    ]);
    let agent = Agent::builder(provider)
        .tool(DispatchAgentTool)
        .sub_agents(SubAgents::new().engine("cheap", &cheap))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
}

/// Replies "[<system prompt>] heard: <last user message>" after a pause.
struct EchoModel;

#[async_trait::async_trait]
impl Provider for EchoModel {
    fn name(&self) -> &str {
        "echo"
    }
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let last = request
            .messages
            .last()
            .map(|m| m.text())
            .unwrap_or_default();
        let turns = request.messages.len();
        let reply = format!("[{}] heard: {last} (history {turns})", request.system);
        Ok(Box::pin(futures::stream::iter([
            Ok(StreamEvent::TextDelta(reply)),
            Ok(StreamEvent::Finished(StopReason::EndTurn)),
        ])))
    }
}

#[tokio::test]
async fn a_team_answers_broadcasts_keeps_history_and_closes_cleanly() {
    let echo = Arc::new(EchoModel);
    let members_engine = Agent::builder(echo.clone()).build();
    let tools = TeamPack::new(Team::new(), Duration::from_secs(10));
    let team = tools.team().clone();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call(
            "s",
            "spawn_team",
            json!({"members": [
                {"name": "critic", "role": "You criticise.", "engine": "echo"},
                {"name": "fan", "role": "You praise.", "engine": "echo"}
            ]}),
        ),
        ScriptedTurn::new().tool_call("b", "team_broadcast", json!({"message": "Review the plan"})),
        ScriptedTurn::new()
            .tool_call(
                "t",
                "team_send",
                json!({"member": "critic", "message": "And now?"}),
            )
            .tool_call(
                "x",
                "team_send",
                json!({"member": "ghost", "message": "hello"}),
            ),
        ScriptedTurn::new().tool_call("c", "team_close", json!({})),
        ScriptedTurn::text("done"),
    ]);
    let agent = Agent::builder(provider)
        .tools(tools.toolset())
        .sub_agents(SubAgents::new().engine("echo", &members_engine))
        .build();
    let outcome = agent.run_to_completion("run a review").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let text = |id: &str| result_text(&outcome, id).0;
    assert_eq!(text("s"), "Team started: critic, fan.");
    let broadcast = text("b");
    assert!(
        broadcast.contains("## critic\n[You criticise.] heard: Review the plan (history 1)"),
        "{broadcast}"
    );
    assert!(
        broadcast.contains("## fan\n[You praise.] heard: Review the plan (history 1)"),
        "{broadcast}"
    );
    // The member remembers: its second message sees 3 messages of history.
    assert!(
        text("t").contains("[You criticise.] heard: And now? (history 3)"),
        "{}",
        text("t")
    );
    assert!(text("x").contains("no team member `ghost`; members: critic, fan"));
    assert_eq!(text("c"), "Closed the team (2 members).");
    assert!(team.status().is_empty());
    // No member task is left holding the model.
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(agent);
    drop(members_engine);
    assert_eq!(
        Arc::strong_count(&echo),
        1,
        "member tasks were not all dropped"
    );
}

fn skill(dir: &std::path::Path, folder: &str, text: &str) {
    std::fs::create_dir_all(dir.join(folder)).unwrap();
    std::fs::write(dir.join(folder).join("SKILL.md"), text).unwrap();
}

#[tokio::test]
async fn skills_are_discovered_listed_and_loaded() {
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    skill(
        first.path(),
        "pdf",
        "---\nname: pdf-forms\ndescription: \"Fill in PDF forms: fields, checkboxes, signatures.\"\n---\n# Filling PDF forms\n\nRun `scripts/fill.py` with the field map.\n",
    );
    skill(
        first.path(),
        "release",
        "---\nname: release\ndescription: >\n  How to cut a release:\n  tag, changelog, publish.\nlicense: MIT\n---\nSteps...\n",
    );
    skill(
        second.path(),
        "broken",
        "name: nope\n\nno front matter here\n",
    );
    skill(second.path(), "unclosed", "---\nname: x\ndescription: y\n");
    skill(
        second.path(),
        "nameless",
        "---\ndescription: has no name\n---\nbody\n",
    );
    skill(
        second.path(),
        "dupe",
        "---\nname: release\ndescription: again\n---\n",
    );
    let registry = Arc::new(SkillRegistry::discover(&[
        first.path().into(),
        second.path().into(),
        "/nonexistent".into(),
    ]));
    let names: Vec<&str> = registry.skills().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["pdf-forms", "release"]);
    assert_eq!(
        registry.get("release").unwrap().description,
        "How to cut a release: tag, changelog, publish."
    );
    let problems: Vec<String> = registry
        .problems()
        .iter()
        .map(|p| {
            format!(
                "{}: {}",
                p.file
                    .parent()
                    .unwrap()
                    .file_name()
                    .unwrap()
                    .to_string_lossy(),
                p.message
            )
        })
        .collect();
    assert_eq!(
        problems,
        [
            "broken: the file must start with a `---` front matter line",
            "dupe: a skill named `release` already exists",
            "nameless: the front matter has no `name`",
            "unclosed: the front matter is not closed with a `---` line",
        ]
    );

    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .expect(Expectation::SystemContains(
                "- pdf-forms: Fill in PDF forms: fields, checkboxes, signatures.".into(),
            ))
            .tool_call("l", "load_skill", json!({"name": "pdf-forms"}))
            .tool_call("m", "load_skill", json!({"name": "tax"})),
        ScriptedTurn::text("ok")
            .expect(Expectation::ToolResultContains {
                call_id: "l".into(),
                text: "Run `scripts/fill.py` with the field map.".into(),
            })
            .expect(Expectation::ToolResultContains {
                call_id: "m".into(),
                text: "no skill named `tax`; skills: pdf-forms, release".into(),
            }),
    ]);
    let agent = Agent::builder(provider)
        .tool(LoadSkillTool::new(Arc::clone(&registry)))
        .calls(Calls::new().hook(SkillsHook::new(Arc::clone(&registry))))
        .build();
    let outcome = agent.run_to_completion("fill the form").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let _ = ToolCtx::new(".");
    let _ = LoadSkillTool::new(registry).name().to_owned();
}

#[tokio::test]
async fn team_members_keep_their_history_across_a_session_restore() {
    use kinet_core::session::{Session, SessionState};
    let echo = Arc::new(EchoModel);
    let members_engine = Agent::builder(echo.clone()).build();
    // First process: a member hears one message.
    let tools = TeamPack::new(Team::new(), Duration::from_secs(10));
    let states: Vec<Arc<dyn SessionState>> = vec![Arc::new(tools.team().clone())];
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call(
            "s",
            "spawn_team",
            json!({"members": [{"name": "critic", "role": "You criticise.", "engine": "echo"}]}),
        ),
        ScriptedTurn::new().tool_call(
            "b",
            "team_send",
            json!({"member": "critic", "message": "Review the plan"}),
        ),
        ScriptedTurn::text("done"),
    ]);
    let agent = Agent::builder(provider)
        .tools(tools.toolset())
        .sub_agents(SubAgents::new().engine("echo", &members_engine))
        .build();
    let outcome = agent.run_to_completion("start").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let json = Session::capture(&outcome.conversation, &states).to_json();
    tools.team().close();

    // Second process: a fresh team, restored; the member remembers.
    let tools = TeamPack::new(Team::new(), Duration::from_secs(10));
    let states: Vec<Arc<dyn SessionState>> = vec![Arc::new(tools.team().clone())];
    let (mut conversation, _) = Session::from_json(&json).unwrap().resume(&states).unwrap();
    assert_eq!(tools.team().status().len(), 1);
    conversation.push(kinet_core::Message::user("go on"));
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call(
            "t",
            "team_send",
            json!({"member": "critic", "message": "And now?"}),
        ),
        ScriptedTurn::text("done"),
    ]);
    let agent = Agent::builder(provider)
        .tools(tools.toolset())
        .sub_agents(SubAgents::new().engine("echo", &members_engine))
        .build();
    let outcome = agent.run_to_completion(conversation).await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let reply = result_text(&outcome, "t").0;
    // Two messages from before the restart, and the new one.
    assert!(reply.contains("heard: And now? (history 3)"), "{reply}");
    tools.team().close();
}
