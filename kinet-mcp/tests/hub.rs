//! The hub against the official reference servers from npm
//! (`@modelcontextprotocol/server-everything`, `server-filesystem`), pinned
//! in tests/peers/package.json and installed by .ci/run.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

mod common;

use kinet_core::Toolset;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kinet_core::testing::{Expectation, ScriptedProvider, ScriptedTurn};
use kinet_core::tool::ToolErrorKind;
use kinet_core::{Agent, AgentEvent, ApprovalPolicy};
use kinet_mcp::{HubSettings, McpHub, ServerConfig, ServerState};
use serde_json::json;

fn peers() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/peers/node_modules/@modelcontextprotocol");
    if dir.join("server-everything/dist/index.js").exists() && which("node") {
        Some(dir)
    } else {
        kinet_core::testing::skipped(
            "the MCP reference servers are not installed; run `npm ci` in kinet-mcp/tests/peers (.ci/test does)",
        );
        None
    }
}

fn which(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn everything(peers: &std::path::Path) -> ServerConfig {
    ServerConfig::stdio(
        "everything",
        "node",
        vec![
            peers
                .join("server-everything/dist/index.js")
                .display()
                .to_string(),
            "stdio".into(),
        ],
    )
}

fn filesystem(peers: &std::path::Path, root: &std::path::Path) -> ServerConfig {
    ServerConfig::stdio(
        "filesystem",
        "node",
        vec![
            peers
                .join("server-filesystem/dist/index.js")
                .display()
                .to_string(),
            root.display().to_string(),
        ],
    )
}

fn settings() -> HubSettings {
    HubSettings {
        restart_backoff: Duration::from_millis(100),
        ..HubSettings::default()
    }
}

async fn ready(hub: &McpHub) {
    assert!(
        hub.wait_settled(Duration::from_secs(60)).await,
        "{:?}",
        hub.status()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_servers_list_and_call_tools() {
    let Some(peers) = peers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(root.join("hello.txt"), "hello from disk\n").unwrap();
    let hub = McpHub::start(
        vec![everything(&peers), filesystem(&peers, &root)],
        settings(),
    );
    ready(&hub).await;
    let status = hub.status();
    for server in &status {
        assert_eq!(server.state, ServerState::Ready, "{server:?}");
        assert!(server.pid.is_some());
    }
    let tools = &status[0].tools;
    for expected in [
        "mcp__everything__echo",
        "mcp__everything__get-sum",
        "mcp__everything__get-tiny-image",
    ] {
        assert!(
            tools.iter().any(|t| t == expected),
            "{expected} missing from {tools:?}"
        );
    }
    // Only what the server implements is advertised: no sampling or elicitation tools.
    assert!(
        !tools
            .iter()
            .any(|t| t.contains("sampling") || t.contains("elicitation")),
        "{tools:?}"
    );

    let echo = hub
        .call("everything", "echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert_eq!(echo.text, "Echo: hi");
    let sum = hub
        .call("everything", "get-sum", json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert_eq!(sum.text, "The sum of 2 and 3 is 5.");
    let image = hub
        .call("everything", "get-tiny-image", json!({}))
        .await
        .unwrap();
    assert_eq!(image.images.len(), 1);
    assert_eq!(image.images[0].media_type, "image/png");
    assert!(image.images[0].to_bytes().unwrap().starts_with(b"\x89PNG"));
    let error = hub
        .call(
            "everything",
            "get-resource-reference",
            json!({"resourceId": -5}),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ToolErrorKind::Failed);
    assert!(
        error.message().contains("resourceId"),
        "{}",
        error.message()
    );
    let file = hub
        .call(
            "filesystem",
            "read_text_file",
            json!({"path": root.join("hello.txt")}),
        )
        .await
        .unwrap();
    assert!(file.text.contains("hello from disk"), "{}", file.text);
    hub.shutdown().await;
    assert!(
        hub.status().iter().all(|s| s.state == ServerState::Stopped),
        "{:?}",
        hub.status()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_calls_mcp_tools_and_streams_progress() {
    let Some(peers) = peers() else { return };
    let hub = McpHub::start(vec![everything(&peers)], settings());
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .expect(Expectation::HasTools(vec!["mcp__everything__echo".into()]))
            .tool_call(
                "e",
                "mcp__everything__echo",
                json!({"message": "from the loop"}),
            )
            .tool_call(
                "p",
                "mcp__everything__trigger-long-running-operation",
                json!({"duration": 0.6, "steps": 3}),
            ),
        ScriptedTurn::text("done")
            .expect(Expectation::ToolResultContains {
                call_id: "e".into(),
                text: "Echo: from the loop".into(),
            })
            .expect(Expectation::ToolResultContains {
                call_id: "p".into(),
                text: "Long running operation completed".into(),
            }),
    ]);
    // The first turn waits for the server (a generous readiness deadline).
    let agent = Agent::builder(provider)
        .tools(
            kinet_core::Toolset::new()
                .with_source(std::sync::Arc::new(hub.clone()))
                .readiness_deadline(Duration::from_secs(60)),
        )
        .build();
    let mut run = agent.run("go");
    let mut progress = Vec::new();
    while let Some(event) = run.next().await {
        if let AgentEvent::ToolProgress { call_id, text, .. } = event {
            progress.push((call_id, text));
        }
    }
    let outcome = run.finish().await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let texts: Vec<&str> = progress
        .iter()
        .filter(|(id, _)| id == "p")
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!(
        texts,
        ["progress 1/3\n", "progress 2/3\n", "progress 3/3\n"]
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_restarted_and_the_next_call_works() {
    let Some(peers) = peers() else { return };
    let hub = McpHub::start(vec![everything(&peers)], settings());
    ready(&hub).await;
    let pid = hub.status()[0].pid.unwrap();

    // A call in flight when the server dies gets a clear error.
    let in_flight = {
        let hub = hub.clone();
        tokio::spawn(async move {
            hub.call(
                "everything",
                "trigger-long-running-operation",
                json!({"duration": 10, "steps": 2}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let error = in_flight.await.unwrap().unwrap_err();
    assert!(
        error
            .message()
            .contains("closed the connection during the call"),
        "{}",
        error.message()
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = hub.status().remove(0);
        if status.state == ServerState::Ready && status.pid != Some(pid) {
            break;
        }
        assert!(Instant::now() < deadline, "not restarted: {status:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let echo = hub
        .call("everything", "echo", json!({"message": "again"}))
        .await
        .unwrap_or_else(|e| panic!("{e}: {:?}", hub.status()));
    assert_eq!(echo.text, "Echo: again");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_starts_fails_alone_and_a_hanging_call_times_out() {
    let Some(peers) = peers() else { return };
    let broken = ServerConfig::stdio(
        "broken",
        "sh",
        vec![
            "-c".into(),
            "echo 'fatal: missing DATABASE_URL' >&2; exit 3".into(),
        ],
    );
    let slow = everything(&peers).tool_timeout(Duration::from_millis(500));
    let hub = McpHub::start(vec![broken, slow], settings());
    ready(&hub).await;
    let status = hub.status();
    match &status[0].state {
        ServerState::Failed { reason } => {
            assert!(reason.contains("missing DATABASE_URL"), "{reason}");
        }
        other => panic!("expected failure, got {other:?}"),
    }
    assert_eq!(status[1].state, ServerState::Ready);

    let started = Instant::now();
    let error = hub
        .call(
            "everything",
            "trigger-long-running-operation",
            json!({"duration": 30, "steps": 1}),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ToolErrorKind::Timeout, "{}", error.message());
    assert!(started.elapsed() < Duration::from_secs(5));
    // The server is still usable.
    let echo = hub
        .call("everything", "echo", json!({"message": "still here"}))
        .await
        .unwrap();
    assert_eq!(echo.text, "Echo: still here");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_run_cancels_the_mcp_call() {
    let Some(peers) = peers() else { return };
    let hub = McpHub::start(vec![everything(&peers)], settings());
    ready(&hub).await;
    let provider = ScriptedProvider::new([ScriptedTurn::new().tool_call(
        "p",
        "mcp__everything__trigger-long-running-operation",
        json!({"duration": 30, "steps": 30}),
    )]);
    let agent = Agent::builder(provider)
        .tools(Toolset::new().with_source(std::sync::Arc::new(hub.clone())))
        .policy(ApprovalPolicy::never())
        .build();
    let mut run = agent.run("go");
    while let Some(event) = run.next().await {
        if let AgentEvent::ToolProgress { .. } = event {
            break;
        }
    }
    let cancelled = Instant::now();
    run.cancel();
    let outcome = run.finish().await;
    assert!(matches!(outcome.stop, kinet_core::RunStop::Cancelled));
    assert!(cancelled.elapsed() < Duration::from_secs(2));
    // The connection is intact after the cancellation.
    let echo = hub
        .call("everything", "echo", json!({"message": "ok"}))
        .await
        .unwrap();
    assert_eq!(echo.text, "Echo: ok");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_servers_work_too() {
    let Some(peers) = peers() else { return };
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut child = tokio::process::Command::new("node")
        .arg(peers.join("server-everything/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Wait for the port.
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the HTTP server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let hub = McpHub::start(
        vec![ServerConfig::http(
            "remote",
            format!("http://127.0.0.1:{port}/mcp"),
        )],
        settings(),
    );
    ready(&hub).await;
    assert_eq!(
        hub.status()[0].state,
        ServerState::Ready,
        "{:?}",
        hub.status()
    );
    let echo = hub
        .call("remote", "echo", json!({"message": "over http"}))
        .await
        .unwrap();
    assert_eq!(echo.text, "Echo: over http");
    hub.shutdown().await;
    child.kill().await.unwrap();
}

/// After a kill -9 the restart reason quotes no stderr the server wrote
/// before (it had no last words); a call cut off by `shutdown()` is told
/// the server was stopped, not to try again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_shutdown_are_reported_truthfully() {
    let Some(peers) = peers() else { return };
    let script = format!(
        "echo 'warning: noise from an earlier call' >&2; exec node {} stdio",
        peers.join("server-everything/dist/index.js").display()
    );
    let noisy = ServerConfig::stdio("everything", "sh", vec!["-c".into(), script]);
    let hub = McpHub::start(
        vec![noisy],
        HubSettings {
            restart_backoff: Duration::from_secs(5),
            ..settings()
        },
    );
    ready(&hub).await;
    let pid = hub.status()[0].pid.unwrap();
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let reason = loop {
        if let ServerState::Restarting { reason, .. } = hub.status().remove(0).state {
            break reason;
        }
        assert!(Instant::now() < deadline, "{:?}", hub.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!reason.contains("noise from an earlier call"), "{reason}");

    // Back up, then a long call cut off by shutdown.
    let deadline = Instant::now() + Duration::from_secs(30);
    while hub.status()[0].state != ServerState::Ready {
        assert!(Instant::now() < deadline, "{:?}", hub.status());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let in_flight = {
        let hub = hub.clone();
        tokio::spawn(async move {
            hub.call(
                "everything",
                "trigger-long-running-operation",
                json!({"duration": 10, "steps": 2}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    hub.shutdown().await;
    let error = in_flight.await.unwrap().unwrap_err();
    assert!(
        error.message().contains("was stopped"),
        "{}",
        error.message()
    );
    assert!(
        !error.message().contains("try the call again"),
        "{}",
        error.message()
    );
}

/// The Python reference servers (`mcp-server-time`, `mcp-server-git`),
/// from `KINET_MCP_SERVERS` (a directory holding them) or the virtual
/// environment .ci/setup makes; loudly absent otherwise.
fn python_servers(repo: &std::path::Path) -> Vec<ServerConfig> {
    let dir = std::env::var("KINET_MCP_SERVERS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| "/var/tmp/kinet-mcp-servers/bin".into());
    if !dir.join("mcp-server-time").exists() {
        kinet_core::testing::skipped(
            "mcp-server-time / mcp-server-git are not installed (pip install mcp-server-time mcp-server-git; .ci/test does)",
        );
        return Vec::new();
    }
    vec![
        ServerConfig::stdio(
            "time",
            dir.join("mcp-server-time").display().to_string(),
            vec!["--local-timezone".into(), "UTC".into()],
        ),
        ServerConfig::stdio(
            "git",
            dir.join("mcp-server-git").display().to_string(),
            vec!["--repository".into(), repo.display().to_string()],
        ),
    ]
}

/// Every tool schema of the reference servers passes each provider's
/// rules once sanitised, and none keeps a `$ref` (sequential-thinking's
/// `#/properties/...` refs were left in before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reference_server_schema_passes_each_provider() {
    use kinet_core::schema::{SchemaDialect, for_dialect, violations};
    use kinet_core::tool::ToolSource;
    let Some(peers) = peers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let node = |name: &str, package: &str, args: Vec<String>| {
        let mut all = vec![
            peers
                .join(package)
                .join("dist/index.js")
                .display()
                .to_string(),
        ];
        all.extend(args);
        ServerConfig::stdio(name, "node", all)
    };
    let mut servers = vec![
        everything(&peers),
        filesystem(&peers, dir.path()),
        node("thinking", "server-sequential-thinking", vec![]),
        node("memory", "server-memory", vec![]),
    ];
    if std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(dir.path())
        .status()
        .is_ok_and(|s| s.success())
    {
        servers.extend(python_servers(dir.path()));
    }
    let count = servers.len();
    let hub = McpHub::start(
        servers,
        HubSettings {
            tool_search_budget: None,
            ..settings()
        },
    );
    ready(&hub).await;
    for status in hub.status() {
        assert_eq!(status.state, ServerState::Ready, "{status:?}");
    }
    let tools = hub
        .tools(tokio::time::Instant::now() + Duration::from_secs(5))
        .await;
    assert!(
        tools.len() > 30,
        "{} tools from {count} servers",
        tools.len()
    );
    for tool in &tools {
        let schema = tool.parameters();
        assert!(
            !schema.to_string().contains("\"$ref\""),
            "{}: {schema}",
            tool.name()
        );
        for dialect in SchemaDialect::ALL {
            let sent = for_dialect(&schema, dialect);
            let problems = violations(&sent, dialect);
            assert!(
                problems.is_empty(),
                "{} for {dialect:?}: {problems:?}\n{sent}",
                tool.name()
            );
        }
    }
    hub.shutdown().await;
}

/// Eight servers with 150+ tools in full against the same servers with
/// tool search: what a request carries, and every tool still reachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_search_keeps_large_tool_sets_small_and_every_tool_callable() {
    use kinet_core::tool::ToolSource;
    let Some(peers) = peers() else { return };
    let Some(python) = common::python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = |name: &str, package: &str, args: Vec<String>| {
        let mut all = vec![
            peers
                .join(package)
                .join("dist/index.js")
                .display()
                .to_string(),
        ];
        all.extend(args);
        ServerConfig::stdio(name, "node", all)
    };
    let catalog = |name: &str| {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/catalog_server.py");
        ServerConfig::stdio(
            name,
            python.clone(),
            vec![script.display().to_string(), name.into(), "45".into()],
        )
    };
    let root = dir.path().display().to_string();
    let set = || {
        vec![
            node("e1", "server-everything", vec!["stdio".into()]),
            node("e2", "server-everything", vec!["stdio".into()]),
            node("fs1", "server-filesystem", vec![root.clone()]),
            node("fs2", "server-filesystem", vec![root.clone()]),
            node("m1", "server-memory", vec![]),
            node("thinking", "server-sequential-thinking", vec![]),
            catalog("acme"),
            catalog("globex"),
        ]
    };
    let tokens = |tools: &[std::sync::Arc<dyn kinet_core::tool::DynTool>]| -> usize {
        tools
            .iter()
            .map(|t| {
                (t.name().len() + t.description().len() + t.parameters().to_string().len())
                    .div_ceil(4)
            })
            .sum()
    };
    let soon = || tokio::time::Instant::now() + Duration::from_secs(5);

    let full_hub = McpHub::start(
        set(),
        HubSettings {
            tool_search_budget: None,
            ..settings()
        },
    );
    ready(&full_hub).await;
    let all = full_hub.tools(soon()).await;
    let full_tokens = tokens(&all);
    full_hub.shutdown().await;

    let hub = McpHub::start(set(), settings());
    ready(&hub).await;
    let offered = hub.tools(soon()).await;
    let names: Vec<&str> = offered.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        ["mcp_list_resources", "mcp_read_resource", "mcp_tool_search"],
        "{} tools, {full_tokens} tokens in full",
        all.len()
    );
    let search_tokens = tokens(&offered);
    eprintln!(
        "tool tokens per request: {full_tokens} for {} tools in full, {search_tokens} with tool search",
        all.len()
    );
    let servers_tools = all.iter().filter(|t| t.name().starts_with("mcp__")).count();
    assert!(servers_tools >= 150, "{servers_tools}");
    assert!(search_tokens < 5_000, "{search_tokens}");

    // The model path: search, then call what it found.
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .expect(Expectation::HasTools(vec!["mcp_tool_search".into()]))
            .tool_call(
                "s1",
                "mcp_tool_search",
                json!({"query": "echo message back"}),
            ),
        ScriptedTurn::new()
            .expect(Expectation::HasTools(vec!["mcp__e1__echo".into()]))
            .tool_call("c1", "mcp__e1__echo", json!({"message": "found it"})),
        ScriptedTurn::text("done"),
    ]);
    let agent = Agent::builder(provider)
        .tools(Toolset::new().with_source(std::sync::Arc::new(hub.clone())))
        .build();
    let outcome = agent.run_to_completion("echo something").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let results: Vec<String> = outcome
        .conversation
        .messages
        .iter()
        .map(|m| m.text())
        .collect();
    assert!(
        results.iter().any(|r| r.contains("mcp__e1__echo —")),
        "{results:#?}"
    );
    assert!(
        results.iter().any(|r| r.contains("Echo: found it")),
        "{results:#?}"
    );

    // The budget follows the model's window when the agent knows it: 10%
    // of a million tokens holds every schema, 10% of 32k does not.
    let offered_for = |window| {
        let hub = hub.clone();
        async move {
            hub.tools_for_window(soon(), window)
                .await
                .iter()
                .map(|t| t.name().to_owned())
                .collect::<Vec<_>>()
        }
    };
    let roomy = offered_for(Some(1_000_000)).await;
    assert!(!roomy.contains(&"mcp_tool_search".to_owned()));
    assert_eq!(
        roomy.iter().filter(|n| n.starts_with("mcp__")).count(),
        all.iter().filter(|t| t.name().starts_with("mcp__")).count()
    );
    assert!(
        offered_for(Some(32_000))
            .await
            .contains(&"mcp_tool_search".to_owned())
    );
    assert!(
        offered_for(None)
            .await
            .contains(&"mcp_tool_search".to_owned())
    );

    // Conversations with their own source do not see what another found,
    // and what they find stays theirs.
    let first = hub.conversation_tools();
    let second = hub.conversation_tools();
    let names = |tools: Vec<std::sync::Arc<dyn kinet_core::tool::DynTool>>| -> Vec<String> {
        tools.iter().map(|t| t.name().to_owned()).collect()
    };
    assert!(!names(first.tools(soon()).await).contains(&"mcp__e1__echo".to_owned()));
    // A tool nobody has found yet.
    let offered_now = names(hub.tools(soon()).await);
    let unfound = all
        .iter()
        .map(|t| t.name().to_owned())
        .find(|n| n.starts_with("mcp__") && !offered_now.contains(n))
        .unwrap();
    let search = first
        .tools(soon())
        .await
        .into_iter()
        .find(|t| t.name() == "mcp_tool_search")
        .unwrap();
    search
        .prepare(&json!({"query": format!("select:{unfound}")}).to_string())
        .unwrap()
        .call(kinet_core::ToolCtx::new(dir.path()))
        .await
        .unwrap();
    assert!(names(first.tools(soon()).await).contains(&unfound));
    assert!(!names(second.tools(soon()).await).contains(&unfound));
    assert!(!names(hub.tools(soon()).await).contains(&unfound));

    // What a conversation found is part of its session: saved through a
    // real session store and restored when the conversation resumes.
    {
        use kinet_core::session::{Session, SessionState, SessionStore, StoreJournal};
        let store: std::sync::Arc<dyn SessionStore> = std::sync::Arc::new(
            kinet_memory::SqliteSessionStore::open(dir.path().join("sessions.db")).unwrap(),
        );
        store.create(&Session::empty("s1")).unwrap();
        let state: std::sync::Arc<dyn SessionState> = std::sync::Arc::new(first.clone());
        let journal = StoreJournal::new(store.clone(), "s1", vec![state]);
        kinet_core::session::Journal::record(
            &*journal,
            &kinet_core::session::JournalEntry::Message {
                message: kinet_core::Message::Tool {
                    tool_call_id: "c9".into(),
                    name: "mcp_tool_search".into(),
                    content: vec![kinet_core::message::ContentPart::text("found")],
                    is_error: false,
                },
            },
        );
        let resumed = hub.conversation_tools();
        assert!(!names(resumed.tools(soon()).await).contains(&unfound));
        let restored: std::sync::Arc<dyn SessionState> = std::sync::Arc::new(resumed.clone());
        store
            .load("s1")
            .unwrap()
            .unwrap()
            .resume(&[restored])
            .unwrap();
        assert!(names(resumed.tools(soon()).await).contains(&unfound));
        assert!(!names(second.tools(soon()).await).contains(&unfound));
    }

    // Every tool can be found and is then offered in full.
    let before = hub.tools(soon()).await;
    // Found by the search above.
    let already = before
        .iter()
        .filter(|t| t.name().starts_with("mcp__"))
        .count();
    let search = before
        .into_iter()
        .find(|t| t.name() == "mcp_tool_search")
        .unwrap();
    let wanted: Vec<String> = all
        .iter()
        .map(|t| t.name().to_owned())
        .filter(|name| name.starts_with("mcp__"))
        .collect();
    let prepared = search
        .prepare(&json!({"query": format!("select:{}", wanted.join(","))}).to_string())
        .unwrap();
    let listed = prepared
        .call(kinet_core::ToolCtx::new(dir.path()))
        .await
        .unwrap();
    assert_eq!(
        listed.text.lines().filter(|l| l.contains(" — ")).count(),
        wanted.len() - already
    );
    let now_offered: Vec<String> = hub
        .tools(soon())
        .await
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    for name in &wanted {
        assert!(
            now_offered.contains(name),
            "{name} not offered after it was found"
        );
    }
    hub.shutdown().await;
}

/// A long tool that reports progress is not cut off by a timeout shorter
/// than the whole call: each notification starts the timeout again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_restart_the_call_timeout() {
    let Some(peers) = peers() else { return };
    let server = everything(&peers).tool_timeout(Duration::from_millis(1500));
    let hub = McpHub::start(vec![server], settings());
    ready(&hub).await;
    let started = Instant::now();
    let done = hub
        .call(
            "everything",
            "trigger-long-running-operation",
            json!({"duration": 3, "steps": 6}),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(started.elapsed() >= Duration::from_secs(3), "{done:?}");
    hub.shutdown().await;
}

/// Resources and prompts of a real server: listed and read by the host,
/// prompts filled in, and resources read by the model through its tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_and_prompts_reach_the_host_and_the_model() {
    use kinet_mcp::resources::{HubError, ResourcePart};
    let Some(peers) = peers() else { return };
    let hub = McpHub::start(vec![everything(&peers)], settings());
    ready(&hub).await;
    let resources = hub.list_resources(None).await.unwrap();
    assert!(!resources.is_empty());
    let text = resources
        .iter()
        .find(|r| r.mime_type.as_deref() == Some("text/plain"))
        .unwrap_or(&resources[0]);
    let parts = hub.read_resource("everything", &text.uri).await.unwrap();
    assert!(
        parts.iter().any(|p| match p {
            ResourcePart::Text { text, .. } => !text.is_empty(),
            ResourcePart::Blob { base64, .. } => !base64.is_empty(),
            _ => false,
        }),
        "{parts:?}"
    );
    let prompts = hub.list_prompts(Some("everything")).await.unwrap();
    let simple = prompts
        .iter()
        .find(|p| p.arguments.iter().all(|(_, _, required)| !required))
        .unwrap_or_else(|| panic!("{prompts:?}"));
    let messages = hub
        .get_prompt("everything", &simple.name, Default::default())
        .await
        .unwrap();
    assert!(
        !messages.is_empty() && !messages[0].text().is_empty(),
        "{messages:?}"
    );
    assert!(matches!(
        hub.read_resource("nope", "x").await,
        Err(HubError::UnknownServer(_))
    ));

    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .expect(Expectation::HasTools(vec![
                "mcp_list_resources".into(),
                "mcp_read_resource".into(),
            ]))
            .tool_call("r1", "mcp_list_resources", json!({})),
        ScriptedTurn::new().tool_call(
            "r2",
            "mcp_read_resource",
            json!({"server": "everything", "uri": text.uri}),
        ),
        ScriptedTurn::text("read it"),
    ]);
    let agent = Agent::builder(provider)
        .tools(Toolset::new().with_source(std::sync::Arc::new(hub.clone())))
        .build();
    let outcome = agent.run_to_completion("what resources are there?").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let listed = outcome.conversation.messages[2].text();
    assert!(listed.contains(&text.uri), "{listed}");
    let read = outcome.conversation.messages[4].text();
    assert!(
        !read.trim().is_empty() && !read.contains("failed"),
        "{read}"
    );
    hub.shutdown().await;
}

/// A subscribed resource's updates reach the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_updates_reach_the_host() {
    let Some(peers) = peers() else { return };
    let hub = McpHub::start(vec![everything(&peers)], settings());
    ready(&hub).await;
    let uri = hub.list_resources(Some("everything")).await.unwrap()[0]
        .uri
        .clone();
    let mut updates = hub.changes();
    hub.subscribe_resource("everything", &uri).await.unwrap();
    // server-everything sends its subscribers updates once this is on.
    hub.call("everything", "toggle-subscriber-updates", json!({}))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let change = tokio::time::timeout_at(deadline.into(), updates.recv())
            .await
            .expect("no resource update within 10 s")
            .unwrap();
        if let kinet_mcp::resources::ServerChange::ResourceUpdated {
            server,
            uri: updated,
        } = change
        {
            assert_eq!(server, "everything");
            assert_eq!(updated, uri);
            break;
        }
    }
    hub.shutdown().await;
}
