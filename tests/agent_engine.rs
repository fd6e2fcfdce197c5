//! kinet's own terminal agent (`agent --acp`, the `agent` example) as a
//! read-only `dispatch_agent` engine of another kinet agent: started over
//! ACP in kinet's sandbox, its model the llama.cpp server (reached through
//! the sandbox's proxy), its sessions and memory in its private home.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt as _;
use kinet::acp::AcpEngine;
use kinet::builder::{SubAgents, Workspace};
use kinet::core::{AgentEvent, ApprovalPolicy, Message, RunStop};
use kinet::testing::{ScriptedProvider, ScriptedTurn};

#[path = "../kinet-core/tests/support/llama.rs"]
#[allow(dead_code)]
mod llama;

/// The `agent` example, built by `cargo test` beside this test.
fn agent_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let binary = exe.parent()?.parent()?.join("examples").join("agent");
    binary.is_file().then_some(binary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_terminal_agent_answers_as_an_engine() {
    let Some(binary) = agent_binary() else {
        assert!(
            std::env::var_os("KINET_REQUIRE_LLAMA").is_none(),
            "the agent example is not built beside this test (cargo test builds it)"
        );
        kinet::core::testing::skipped(
            "the agent example is not built (run the whole `cargo test`)",
        );
        return;
    };
    if !llama::available() {
        return;
    }
    // Short answers: the server caps what the model writes per call.
    let server = llama::Server::start_with(llama::free_port(), 8192, &["-n", "64"]);
    let url = server.url();
    let host = url.trim_start_matches("http://").to_owned();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("notes.txt"), "hello\n").unwrap();

    let engine = AcpEngine::command(binary.display().to_string(), ["--acp"])
        .env("KINET_BASE_URL", format!("{url}/v1"))
        .env("KINET_MODEL", "smollm2")
        .env("KINET_DATA_DIR", "{home}/kinet")
        .allow_hosts([host])
        .start_timeout(Duration::from_secs(60));
    let model = ScriptedProvider::new([
        ScriptedTurn::new().tool_call(
            "d1",
            "dispatch_agent",
            serde_json::json!({"prompt": "What does notes.txt say?", "engine": "terminal-agent"}),
        ),
        ScriptedTurn::text("done"),
    ]);
    let agent = kinet::Agent::builder(model)
        .tool(kinet::tools::agents::DispatchAgentTool)
        .workspace(Workspace::new().cwd(work.path()).root(work.path()))
        .policy(ApprovalPolicy::never())
        .sub_agents(SubAgents::new().engine("terminal-agent", engine))
        .build();
    let mut run = agent.run(vec![Message::user("go")]);
    let mut events = Vec::new();
    while let Some(event) = run.next().await {
        events.push(event);
    }
    let outcome = run.finish().await;
    assert!(
        matches!(outcome.stop, RunStop::Completed),
        "{:?}",
        outcome.stop
    );
    let result = events
        .iter()
        .find_map(|event| match event {
            AgentEvent::ToolCallFinished { name, result, .. } if name == "dispatch_agent" => {
                Some(result.clone())
            }
            _ => None,
        })
        .expect("the dispatch finished");
    let text = result
        .map(|output| output.text)
        .unwrap_or_else(|error| panic!("the engine failed: {}", error.message()));
    let calls = events
        .iter()
        .filter(|event| matches!(event, AgentEvent::SubAgent { event, .. } if matches!(event.as_ref(), AgentEvent::ToolCallStarted { .. })))
        .count();
    eprintln!("the terminal agent answered ({calls} tool calls): {text}");
    assert!(!text.trim().is_empty());
    assert!(
        events
            .iter()
            .any(|event| matches!(event, AgentEvent::SubAgent { .. })),
        "its updates are events of this run"
    );
    // Read-only: the project has no `.kinet` of the engine's making.
    assert!(!work.path().join(".kinet").exists());
}
