//! Tools served over MCP run through the agent's pipeline: confined to the
//! server's roots, stopped by its timeout, seen by the agent's layers, and
//! advertised with their annotations.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

mod common;

use kinet_core::builder::{Calls, Workspace};
use kinet_core::tool::engine::EngineCtx as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinet_core::layer::{Invocation, Next, ToolLayer};
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::{Agent, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput};
use kinet_mcp::McpServer;
use kinet_tools::agents::DispatchAgentTool;
use kinet_tools::files::{FileTracker, ReadFileTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Records every call that passes: (tool, call id, nesting depth).
#[derive(Default)]
struct Seen(Mutex<Vec<(String, String, u32)>>);

#[async_trait::async_trait]
impl ToolLayer for Seen {
    async fn call(&self, call: Invocation, next: Next<'_>) -> Result<ToolOutput, ToolError> {
        self.0.lock().unwrap().push((
            call.name().to_owned(),
            call.ctx().call_id().to_owned(),
            call.ctx().depth(),
        ));
        next.run(call).await
    }
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

/// Sleeps for a minute unless stopped.
struct Slow;

#[async_trait::async_trait]
impl Tool for Slow {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "slow"
    }
    fn description(&self) -> &str {
        "Takes a minute."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        ctx.bounded("the nap", tokio::time::sleep(Duration::from_secs(60)))
            .await?;
        Ok(ToolOutput::text("woke up"))
    }
}

/// A served root with a file, a symlink leading out, and a secret beside it.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    std::fs::create_dir(base.join("served")).unwrap();
    std::fs::create_dir(base.join("outside")).unwrap();
    std::fs::write(base.join("served/inside.txt"), "inside the root\n").unwrap();
    std::fs::write(base.join("outside/secret.txt"), "top secret\n").unwrap();
    std::os::unix::fs::symlink(base.join("outside"), base.join("served/escape")).unwrap();
    (dir, base)
}

fn agent(served: &Path, seen: Arc<Seen>) -> Agent {
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("p1", "read_file", json!({"path": "inside.txt"})),
        ScriptedTurn::new().tool_call("p2", "dispatch_agent", json!({"prompt": "read it"})),
        // The sub-agent's turns.
        ScriptedTurn::new().tool_call("s1", "read_file", json!({"path": "inside.txt"})),
        ScriptedTurn::text("it says inside the root"),
        ScriptedTurn::text("done"),
    ]);
    let files = Arc::new(FileTracker::default());
    Agent::builder(provider)
        .tool(ReadFileTool::new(files))
        .tool(DispatchAgentTool)
        .workspace(Workspace::new().cwd(served).root(served))
        .calls(Calls::new().layer(seen))
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_tools_are_confined_timed_out_counted_and_annotated() {
    let Some(python) = common::python() else {
        return;
    };
    let (_dir, base) = workspace();
    let served = base.join("served");
    let seen = Arc::new(Seen::default());
    let agent = agent(&served, Arc::clone(&seen));

    // One layer sees the loop's calls and the sub-agent's...
    let outcome = agent.run_to_completion("go").await;
    assert_eq!(outcome.final_text().as_deref(), Some("done"));
    let calls = seen.0.lock().unwrap().clone();
    assert_eq!(
        calls,
        [
            ("read_file".to_owned(), "p1".to_owned(), 0),
            ("dispatch_agent".to_owned(), "p2".to_owned(), 0),
            ("read_file".to_owned(), "s1".to_owned(), 1),
        ]
    );

    // ... and the calls of an MCP client.
    let server = McpServer::builder(agent)
        .cwd(&served)
        .expose_tool(ReadFileTool::new(Arc::new(FileTracker::default())))
        .expose_tool(Slow)
        .tool_timeout(Duration::from_millis(500))
        .build();
    let handle = server
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let url = format!("http://{}/mcp", handle.local_addr());
    let paths = [
        "inside.txt",
        "/etc/passwd",
        "../outside/secret.txt",
        "escape/secret.txt",
    ];
    let output = tokio::process::Command::new(&python)
        .arg(common::peers().join("py_pipeline.py"))
        .arg(&url)
        .args(paths)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&output.stdout).trim()).unwrap();
    handle.shutdown().await;

    // read_file has a required argument and is still advertised read-only.
    assert_eq!(report["hints"]["read_file"], true, "{report}");
    assert_eq!(report["hints"]["slow"], true, "{report}");
    let reads = &report["reads"];
    assert_eq!(reads["inside.txt"]["error"], false, "{report}");
    assert!(
        reads["inside.txt"]["text"]
            .as_str()
            .unwrap()
            .contains("inside the root")
    );
    for refused in &paths[1..] {
        let read = &reads[*refused];
        assert_eq!(read["error"], true, "{refused} was read: {report}");
        let text = read["text"].as_str().unwrap();
        assert!(
            text.contains("outside the workspace root"),
            "{refused}: {text}"
        );
        assert!(
            !text.contains("top secret") && !text.contains("root:"),
            "{text}"
        );
    }
    let slow = &report["slow"];
    assert_eq!(slow["error"], true, "{report}");
    assert!(
        slow["text"].as_str().unwrap().contains("ran out of time")
            || slow["text"].as_str().unwrap().contains("did not finish"),
        "{report}"
    );
    assert!(slow["seconds"].as_f64().unwrap() < 5.0, "{report}");

    let served_calls: Vec<_> = seen
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, id, _)| id.starts_with("mcp-"))
        .map(|(name, _, _)| name.clone())
        .collect();
    assert_eq!(
        served_calls,
        ["read_file", "read_file", "read_file", "read_file", "slow"]
    );
}

/// Reports two progress lines, then answers a moment later: the client
/// handles notifications in tasks of their own, so a notification sent
/// right before the result may be handled after it.
struct Chatty;

#[async_trait::async_trait]
impl Tool for Chatty {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "chatty"
    }
    fn description(&self) -> &str {
        "Reports progress."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        ctx.progress("step 1");
        tokio::time::sleep(Duration::from_millis(20)).await;
        ctx.progress("step 2");
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(ToolOutput::text("finished"))
    }
}

/// Serves `server` on loopback and connects kinet's own hub to it as
/// `remote`.
async fn connect(server: McpServer) -> (kinet_mcp::HttpServerHandle, kinet_mcp::McpHub) {
    let handle = server
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let hub = kinet_mcp::McpHub::start(
        vec![kinet_mcp::ServerConfig::http(
            "remote",
            format!("http://{}/mcp", handle.local_addr()),
        )],
        kinet_mcp::HubSettings::default(),
    );
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    (handle, hub)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_tools_progress_reaches_the_client() {
    let (_dir, base) = workspace();
    let server = McpServer::builder(Agent::builder(ScriptedProvider::new([])).build())
        .cwd(base.join("served"))
        .expose_tool(Chatty)
        .build();
    let (handle, hub) = connect(server).await;
    let (sender, mut events) = tokio::sync::mpsc::unbounded_channel();
    let ctx = ToolCtx::new(&base).with_events(kinet_core::tool::engine::EventSink::new(sender));
    let pipeline = kinet_core::pipeline::Pipeline::new();
    let record = hub
        .call_with(&pipeline, &ctx, "remote", "chatty", json!({}))
        .await;
    assert_eq!(record.result.unwrap().text, "finished");
    let mut progress = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let kinet_core::AgentEvent::ToolProgress { text, .. } = event {
            progress.push(text);
        }
    }
    assert_eq!(progress.len(), 2, "{progress:?}");
    assert!(progress[0].contains("step 1") && progress[1].contains("step 2"));
    hub.shutdown().await;
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_sub_agent_is_confined_to_the_servers_roots() {
    let (_dir, base) = workspace();
    // The agent itself has no roots; the server does.
    let provider = ScriptedProvider::new([
        // The sub-agent's turns.
        ScriptedTurn::new().tool_call("s1", "read_file", json!({"path": "/etc/passwd"})),
        ScriptedTurn::text("could not read it").expect(
            kinet_core::testing::Expectation::ToolResultContains {
                call_id: "s1".into(),
                text: "outside the workspace root".into(),
            },
        ),
    ]);
    let agent = Agent::builder(provider)
        .tool(ReadFileTool::new(Arc::new(FileTracker::default())))
        .build();
    let server = McpServer::builder(agent)
        .cwd(base.join("served"))
        .expose_tool(DispatchAgentTool)
        .build();
    let (handle, hub) = connect(server).await;
    let answer = hub
        .call(
            "remote",
            "dispatch_agent",
            json!({"prompt": "read /etc/passwd"}),
        )
        .await
        .unwrap();
    assert_eq!(answer.text, "could not read it");
    hub.shutdown().await;
    handle.shutdown().await;
}
