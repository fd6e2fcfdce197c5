//! The MCP server side against real clients: the official Python SDK
//! client, the MCP Inspector CLI, and kinet's own hub.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

mod common;

use kinet_core::Toolset;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kinet_core::provider::{ChatRequest, ProviderError, ProviderStream, StopReason, StreamEvent};
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::{Agent, AgentEvent, Provider, Tool, ToolCtx, ToolError, ToolOutput};
use kinet_mcp::{HubSettings, McpHub, McpServer, ServeError, ServerConfig, ServerState};
use serde_json::json;

/// Answers "echo: <last user message> (<n> messages)".
struct Echo;

#[async_trait::async_trait]
impl Provider for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let last = request
            .messages
            .last()
            .map(|m| m.text())
            .unwrap_or_default();
        let text = format!("echo: {last} ({} messages)", request.messages.len());
        Ok(Box::pin(futures::stream::iter([
            Ok(StreamEvent::TextDelta(text)),
            Ok(StreamEvent::Finished(StopReason::EndTurn)),
        ])))
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

struct Add;

#[async_trait::async_trait]
impl Tool for Add {
    type Args = AddArgs;
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "Adds two integers."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, args: AddArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text((args.a + args.b).to_string()))
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

struct Wipe;

#[async_trait::async_trait]
impl Tool for Wipe {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "wipe"
    }
    fn description(&self) -> &str {
        "Deletes everything."
    }
    async fn call(&self, _: NoArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        panic!("must never run")
    }
}

fn echo_server() -> McpServer {
    McpServer::builder(Agent::builder(Echo).build())
        .expose_tool(Add)
        .expose_tool(Wipe)
        .max_concurrent_runs(64)
        .build()
}

fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/echo_server")
}

fn run_python(python: &str, args: &[&str]) -> serde_json::Value {
    let output = std::process::Command::new(python)
        .arg(common::peers().join("py_client.py"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim().lines().last().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_lists_and_calls_over_stdio_and_http() {
    let Some(python) = common::python() else {
        return;
    };
    let expect = |result: serde_json::Value| {
        assert_eq!(
            result["first"], "echo: hello from python (1 messages)",
            "{result}"
        );
        assert_eq!(result["second"], "echo: and again (3 messages)", "{result}");
        assert_eq!(result["second_error"], false);
    };
    let binary = example_binary();
    let stdio = tokio::task::spawn_blocking({
        let python = python.clone();
        move || run_python(&python, &["stdio", binary.to_str().unwrap()])
    })
    .await
    .unwrap();
    assert_eq!(stdio["tools"], json!(["agent", "reply"]));
    // The served agent's mutating tool call was confirmed by the client's
    // user through MCP elicitation.
    assert_eq!(stdio["written"], "tool said: saved `buy milk`", "{stdio}");
    assert!(
        stdio["asked"][0]
            .as_str()
            .unwrap()
            .contains("wants to run `save_note`"),
        "{stdio}"
    );
    expect(stdio);

    let handle = echo_server()
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let url = format!("http://{}/mcp", handle.local_addr());
    let http = tokio::task::spawn_blocking(move || run_python(&python, &["http", &url]))
        .await
        .unwrap();
    assert_eq!(http["tools"], json!(["add", "agent", "reply", "wipe"]));
    expect(http);
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_inspector_cli_lists_and_calls() {
    let cli = common::peers().join("node_modules/@modelcontextprotocol/inspector/cli/build/cli.js");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !cli.exists() || !node {
        kinet_core::testing::skipped(
            "the MCP Inspector or Node.js is not installed; run `npm ci` in kinet-mcp/tests/peers (.ci/test does)",
        );
        return;
    }
    let binary = example_binary();
    let inspect = move |args: Vec<String>| {
        let output = std::process::Command::new("node")
            .arg(&cli)
            .arg("--cli")
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "inspector failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    let stdio = binary.display().to_string();
    let listed = inspect(vec![stdio.clone(), "--method".into(), "tools/list".into()]);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["agent", "reply"]);
    let called = inspect(vec![
        stdio,
        "--method".into(),
        "tools/call".into(),
        "--tool-name".into(),
        "agent".into(),
        "--tool-arg".into(),
        "prompt=inspect me".into(),
    ]);
    assert_eq!(
        called["content"][0]["text"],
        "echo: inspect me (1 messages)"
    );

    let handle = echo_server()
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let url = format!("http://{}/mcp", handle.local_addr());
    let listed = tokio::task::spawn_blocking(move || {
        inspect(vec![
            url,
            "--transport".into(),
            "http".into(),
            "--method".into(),
            "tools/list".into(),
        ])
    })
    .await
    .unwrap();
    assert_eq!(listed["tools"].as_array().unwrap().len(), 4);
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinets_own_client_uses_the_server_and_exposed_tools() {
    let handle = echo_server()
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let hub = McpHub::start(
        vec![
            ServerConfig::http("remote", format!("http://{}/mcp", handle.local_addr())),
            ServerConfig::stdio("local", example_binary().display().to_string(), vec![]),
        ],
        HubSettings::default(),
    );
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let status = hub.status();
    assert!(
        status.iter().all(|s| s.state == ServerState::Ready),
        "{status:?}"
    );
    assert!(status[0].tools.contains(&"mcp__remote__add".to_owned()));
    let first = hub
        .call("remote", "agent", json!({"prompt": "hi"}))
        .await
        .unwrap();
    assert_eq!(first.text, "echo: hi (1 messages)");
    let id = first.structured.unwrap()["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = hub
        .call(
            "remote",
            "reply",
            json!({"conversation_id": id, "prompt": "more"}),
        )
        .await
        .unwrap();
    assert_eq!(second.text, "echo: more (3 messages)");
    let sum = hub
        .call("remote", "add", json!({"a": 2, "b": 40}))
        .await
        .unwrap();
    assert_eq!(sum.text, "42");
    let refused = hub.call("remote", "wipe", json!({})).await.unwrap_err();
    assert!(
        refused.message().contains("are not allowed"),
        "{}",
        refused.message()
    );
    let unknown = hub
        .call(
            "remote",
            "reply",
            json!({"conversation_id": "nope", "prompt": "x"}),
        )
        .await
        .unwrap_err();
    assert!(unknown.message().contains("no conversation `nope`"));
    let local = hub
        .call("local", "agent", json!({"prompt": "over stdio"}))
        .await
        .unwrap();
    assert_eq!(local.text, "echo: over stdio (1 messages)");
    hub.shutdown().await;
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_loopback_binds_need_a_token_and_check_it() {
    let error = echo_server()
        .serve_http("0.0.0.0:0".parse().unwrap(), None)
        .await
        .unwrap_err();
    assert!(matches!(error, ServeError::TokenRequired(_)), "{error}");

    let handle = echo_server()
        .serve_http("0.0.0.0:0".parse().unwrap(), Some("s3cret".into()))
        .await
        .unwrap();
    let url = format!("http://127.0.0.1:{}/mcp", handle.local_addr().port());
    let client = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    for token in [None, Some("wrong")] {
        let mut request = client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(initialize.to_string());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        assert_eq!(
            request.send().await.unwrap().status(),
            401,
            "token {token:?}"
        );
    }
    let mut config = ServerConfig::http("guarded", url.clone());
    if let kinet_mcp::ServerTransport::Http { bearer_token, .. } = &mut config.transport {
        *bearer_token = Some("s3cret".into());
    }
    let hub = McpHub::start(vec![config], HubSettings::default());
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let answer = hub
        .call("guarded", "agent", json!({"prompt": "let me in"}))
        .await
        .unwrap();
    assert_eq!(answer.text, "echo: let me in (1 messages)");

    // A malformed JSON-RPC body gets an error; the server stays up.
    let response = client
        .post(&url)
        .bearer_auth("s3cret")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body("{this is not json")
        .send()
        .await
        .unwrap();
    assert!(response.status().is_client_error(), "{}", response.status());
    let again = hub
        .call("guarded", "agent", json!({"prompt": "still up?"}))
        .await
        .unwrap();
    assert_eq!(again.text, "echo: still up? (1 messages)");
    hub.shutdown().await;
    handle.shutdown().await;
}

/// An HTTP server that goes away is noticed (a ping fails), not shown
/// Ready forever; its tools leave, and a call says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_that_went_away_is_not_reported_ready() {
    let handle = echo_server()
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let url = format!("http://127.0.0.1:{}/mcp", handle.local_addr().port());
    let hub = McpHub::start(
        vec![ServerConfig::http("remote", url)],
        HubSettings {
            health_check: Duration::from_millis(200),
            restart_backoff: Duration::from_millis(50),
            max_restarts: 1,
            ..HubSettings::default()
        },
    );
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    assert_eq!(hub.status()[0].state, kinet_mcp::ServerState::Ready);
    handle.shutdown().await;
    let started = std::time::Instant::now();
    loop {
        let state = hub.status()[0].state.clone();
        if !matches!(state, kinet_mcp::ServerState::Ready) {
            let text = format!("{state:?}");
            assert!(
                text.contains("stopped answering") || text.contains("refused"),
                "{text}"
            );
            assert!(!text.contains("rmcp::"), "{text}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "still Ready after the server went away"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    hub.shutdown().await;
}

/// A server restarted on the same address forgets the client's session
/// (404 "session not found" to the old id): the hub notices, starts a new
/// session and calls work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_session_the_server_forgot_is_started_again() {
    let first = echo_server()
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let addr = first.local_addr();
    let hub = McpHub::start(
        vec![ServerConfig::http("remote", format!("http://{addr}/mcp"))],
        HubSettings {
            health_check: Duration::from_millis(200),
            restart_backoff: Duration::from_millis(50),
            ..HubSettings::default()
        },
    );
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let before = hub
        .call("remote", "agent", json!({"prompt": "one"}))
        .await
        .unwrap();
    assert_eq!(before.text, "echo: one (1 messages)");
    first.shutdown().await;
    let second = echo_server().serve_http(addr, None).await.unwrap();
    let started = Instant::now();
    loop {
        match hub.call("remote", "agent", json!({"prompt": "two"})).await {
            Ok(answer) => {
                assert_eq!(answer.text, "echo: two (1 messages)");
                break;
            }
            Err(error) => {
                assert!(!error.message().contains("rmcp::"), "{}", error.message());
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "never recovered: {error}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    hub.shutdown().await;
    second.shutdown().await;
}

/// What the Python client and browsers met: a lower-case `bearer`
/// scheme, a foreign `Origin`, and a session DELETE answered 202.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_follows_the_spec_on_auth_origin_and_delete() {
    let handle = McpServer::builder(Agent::builder(Echo).build())
        .allow_origin("https://app.example.com")
        .build()
        .serve_http("127.0.0.1:0".parse().unwrap(), Some("s3cret".into()))
        .await
        .unwrap();
    let url = format!("http://127.0.0.1:{}/mcp", handle.local_addr().port());
    let client = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let post = |auth: &str, origin: Option<&str>| {
        let mut request = client
            .post(&url)
            .header("authorization", auth)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(initialize.to_string());
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    let lower = post("bearer s3cret", None).await.unwrap();
    assert_eq!(lower.status(), 200, "the scheme is case-insensitive");
    let session = lower.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(post("BEARER s3cret", None).await.unwrap().status(), 200);
    assert_eq!(post("Basic s3cret", None).await.unwrap().status(), 401);
    let foreign = post("Bearer s3cret", Some("https://evil.example"))
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    assert!(
        foreign
            .text()
            .await
            .unwrap()
            .contains("https://evil.example")
    );
    for allowed in ["http://localhost:5173", "https://app.example.com"] {
        assert_eq!(
            post("Bearer s3cret", Some(allowed)).await.unwrap().status(),
            200,
            "{allowed}"
        );
    }
    let deleted = client
        .delete(&url)
        .header("authorization", "Bearer s3cret")
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_sessions_do_not_cross_talk() {
    let handle = echo_server()
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let url = format!("http://{}/mcp", handle.local_addr());
    let configs: Vec<ServerConfig> = (0..50)
        .map(|i| ServerConfig::http(format!("s{i}"), url.clone()))
        .collect();
    let hub = McpHub::start(configs, HubSettings::default());
    assert!(hub.wait_settled(Duration::from_secs(60)).await);
    let calls = (0..50).map(|i| {
        let hub = hub.clone();
        async move {
            let first = hub
                .call(
                    &format!("s{i}"),
                    "agent",
                    json!({"prompt": format!("from s{i}")}),
                )
                .await
                .unwrap();
            let id = first.structured.unwrap()["conversation_id"]
                .as_str()
                .unwrap()
                .to_owned();
            let second = hub
                .call(
                    &format!("s{i}"),
                    "reply",
                    json!({"conversation_id": id, "prompt": format!("again s{i}")}),
                )
                .await
                .unwrap();
            (i, first.text, id, second.text)
        }
    });
    let mut ids = std::collections::HashSet::new();
    for (i, first, id, second) in futures::future::join_all(calls).await {
        assert_eq!(first, format!("echo: from s{i} (1 messages)"));
        assert_eq!(second, format!("echo: again s{i} (3 messages)"));
        // The hub speaks 2026-07-28: no sessions, so conversation ids are
        // the server's and unguessable.
        assert!(id.len() > 20, "{id}");
        ids.insert(id);
    }
    assert_eq!(ids.len(), 50);
    hub.shutdown().await;
    handle.shutdown().await;
}

/// Never answers; records when its stream is dropped.
struct Stuck {
    dropped: Arc<AtomicBool>,
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Provider for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }
    async fn stream(&self, _request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let flag = DropFlag(Arc::clone(&self.dropped));
        Ok(Box::pin(futures::stream::once(async move {
            let _flag = flag;
            futures::future::pending::<()>().await;
            Ok(StreamEvent::Finished(StopReason::EndTurn))
        })))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cancellation_stops_the_served_run() {
    let dropped = Arc::new(AtomicBool::new(false));
    let server = McpServer::builder(
        Agent::builder(Stuck {
            dropped: Arc::clone(&dropped),
        })
        .build(),
    )
    .build();
    let handle = server
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let hub = McpHub::start(
        vec![ServerConfig::http(
            "slow",
            format!("http://{}/mcp", handle.local_addr()),
        )],
        HubSettings::default(),
    );
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    // A client-side agent calls the served agent, then is cancelled.
    let provider = ScriptedProvider::new([ScriptedTurn::new().tool_call(
        "c",
        "mcp__slow__agent",
        json!({"prompt": "think forever"}),
    )]);
    let client = Agent::builder(provider)
        .tools(Toolset::new().with_source(Arc::new(hub.clone())))
        .policy(kinet_core::ApprovalPolicy::never())
        .build();
    let mut run = client.run("go");
    while let Some(event) = run.next().await {
        if let AgentEvent::ToolCallStarted { .. } = event {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    run.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), run.finish())
        .await
        .unwrap();
    assert!(
        matches!(outcome.stop, kinet_core::RunStop::Cancelled),
        "{:?} {:?}",
        outcome.stop,
        outcome.conversation.messages
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !dropped.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "the served run was not cancelled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    hub.shutdown().await;
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_beyond_the_limit_get_a_busy_error() {
    let dropped = Arc::new(AtomicBool::new(false));
    let server = McpServer::builder(Agent::builder(Stuck { dropped }).build())
        .max_concurrent_runs(1)
        .build();
    let handle = server
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let url = format!("http://{}/mcp", handle.local_addr());
    let hub = McpHub::start(
        vec![
            ServerConfig::http("a", url.clone()),
            ServerConfig::http("b", url),
        ],
        HubSettings::default(),
    );
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let first = {
        let hub = hub.clone();
        tokio::spawn(async move { hub.call("a", "agent", json!({"prompt": "long"})).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let busy = hub
        .call("b", "agent", json!({"prompt": "me too"}))
        .await
        .unwrap_err();
    assert!(
        busy.message()
            .contains("busy: 1 agent runs are in progress"),
        "{}",
        busy.message()
    );
    first.abort();
    hub.shutdown().await;
    handle.shutdown().await;
}

/// A mutating served tool that records it ran.
struct Mark(Arc<AtomicBool>);

#[async_trait::async_trait]
impl Tool for Mark {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "mark"
    }
    fn description(&self) -> &str {
        "Marks the record."
    }
    async fn call(&self, _: NoArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        self.0.store(true, Ordering::SeqCst);
        Ok(ToolOutput::text("marked"))
    }
}

/// The host's form: records what it was asked and approves.
#[derive(Default)]
struct Form(std::sync::Mutex<Vec<kinet_mcp::elicit::ElicitationRequest>>);

#[async_trait::async_trait]
impl kinet_mcp::elicit::Elicitation for Form {
    async fn elicit(
        &self,
        request: kinet_mcp::elicit::ElicitationRequest,
    ) -> kinet_mcp::elicit::ElicitationAnswer {
        self.0.lock().unwrap().push(request);
        let mut fields = serde_json::Map::new();
        fields.insert("approve".into(), json!(true));
        kinet_mcp::elicit::ElicitationAnswer::Accept(fields)
    }
}

/// A server's question (here: kinet's own server asking to approve a
/// mutating call) reaches the host's form when the hub has one; without
/// one the capability is not advertised and nothing is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_reaches_the_hosts_form_only_when_it_has_one() {
    let ran = Arc::new(AtomicBool::new(false));
    let handle = McpServer::builder(Agent::builder(Echo).build())
        .expose_tool(Mark(ran.clone()))
        .tool_policy(kinet_core::ApprovalPolicy::ask())
        .build()
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let url = format!("http://{}/mcp", handle.local_addr());
    let form = Arc::new(Form::default());
    let hub = McpHub::start_with_elicitation(
        vec![ServerConfig::http("served", url.clone())],
        HubSettings::default(),
        form.clone(),
    );
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let out = hub.call("served", "mark", json!({})).await.unwrap();
    assert_eq!(out.text, "marked");
    assert!(ran.swap(false, Ordering::SeqCst));
    {
        let asked = form.0.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].server, "served");
        assert!(asked[0].message.contains("mark"), "{}", asked[0].message);
        assert!(
            asked[0].schema["properties"]["approve"].is_object(),
            "{}",
            asked[0].schema
        );
    }
    hub.shutdown().await;

    let plain = McpHub::start(
        vec![ServerConfig::http("served", url)],
        HubSettings::default(),
    );
    assert!(plain.wait_settled(Duration::from_secs(30)).await);
    let refused = plain.call("served", "mark", json!({})).await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(!ran.load(Ordering::SeqCst));
    plain.shutdown().await;
    handle.shutdown().await;
}

/// A round-robin HTTP proxy: each request goes to the next backend.
async fn round_robin(backends: Vec<String>) -> (String, Arc<Vec<std::sync::atomic::AtomicUsize>>) {
    let counts: Arc<Vec<std::sync::atomic::AtomicUsize>> =
        Arc::new(backends.iter().map(|_| Default::default()).collect());
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = reqwest::Client::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen = counts.clone();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let (backends, client, next, seen) =
            (backends.clone(), client.clone(), next.clone(), seen.clone());
        async move {
            let i = next.fetch_add(1, Ordering::SeqCst) % backends.len();
            seen[i].fetch_add(1, Ordering::SeqCst);
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, 1 << 24).await.unwrap();
            let mut forward = client.request(parts.method, &backends[i]).body(body);
            for (name, value) in &parts.headers {
                if name != "host" && name != "content-length" {
                    forward = forward.header(name, value);
                }
            }
            let answer = forward.send().await.unwrap();
            let mut response = axum::http::Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                response = response.header(name, value);
            }
            response
                .body(axum::body::Body::from_stream(answer.bytes_stream()))
                .unwrap()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, counts)
}

/// Two stateless replicas behind a round-robin proxy serve one client:
/// a conversation started on one continues on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_replicas_behind_a_proxy_share_conversations() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("conversations.db");
    let mut replicas = Vec::new();
    let mut urls = Vec::new();
    for _ in 0..2 {
        let mut child = tokio::process::Command::new(example_binary())
            .args(["--http", "127.0.0.1:0", "--stateless"])
            .arg(&db)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stdout);
        let mut url = String::new();
        tokio::io::AsyncBufReadExt::read_line(&mut lines, &mut url)
            .await
            .unwrap();
        urls.push(url.trim().to_owned());
        replicas.push(child);
    }
    let (proxy, served) = round_robin(urls).await;
    let hub = McpHub::start(
        vec![ServerConfig::http("replicated", proxy)],
        HubSettings::default(),
    );
    assert!(
        hub.wait_settled(Duration::from_secs(30)).await,
        "{:?}",
        hub.status()
    );
    assert_eq!(
        hub.status()[0].state,
        ServerState::Ready,
        "{:?}",
        hub.status()
    );
    let first = hub
        .call("replicated", "agent", json!({"prompt": "one"}))
        .await
        .unwrap();
    assert_eq!(first.text, "echo: one (1 messages)");
    let id = first.structured.as_ref().unwrap()["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(id.len() > 30, "an unguessable id: {id}");
    for (round, expected) in [(2, 3), (3, 5), (4, 7)] {
        let next = hub
            .call(
                "replicated",
                "reply",
                json!({"conversation_id": id, "prompt": format!("turn {round}")}),
            )
            .await
            .unwrap();
        assert_eq!(
            next.text,
            format!("echo: turn {round} ({expected} messages)")
        );
    }
    for (i, count) in served.iter().enumerate() {
        assert!(
            count.load(Ordering::SeqCst) >= 2,
            "replica {i} served {count:?}"
        );
    }

    // Two replies at once to one conversation, on the two replicas: one
    // runs, the other is refused, and the messages never interleave.
    let racing = |prompt: &'static str| {
        let hub = hub.clone();
        let id = id.clone();
        async move {
            hub.call(
                "replicated",
                "reply",
                json!({"conversation_id": id, "prompt": prompt}),
            )
            .await
        }
    };
    let (a, b) = tokio::join!(racing("slow: a"), racing("slow: b"));
    let (won, lost) = match (a, b) {
        (Ok(won), Err(lost)) | (Err(lost), Ok(won)) => (won, lost.to_string()),
        other => panic!("one reply should run and one be refused: {other:?}"),
    };
    assert!(won.text.ends_with("(9 messages)"), "{}", won.text);
    assert!(lost.contains("busy with another reply"), "{lost}");
    // The claim is released with the reply: the conversation goes on.
    let next = hub
        .call(
            "replicated",
            "reply",
            json!({"conversation_id": id, "prompt": "after"}),
        )
        .await
        .unwrap();
    assert_eq!(next.text, "echo: after (11 messages)");
    hub.shutdown().await;
}

/// A server that wants a token the hub was not given: the status says
/// "401 from <url>" and what to check, without the SDK's type names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_token_is_reported_as_a_401_to_fix() {
    let handle = echo_server()
        .serve_http("127.0.0.1:0".parse().unwrap(), Some("s3cret".into()))
        .await
        .unwrap();
    let url = format!("http://{}/mcp", handle.local_addr());
    let hub = McpHub::start(
        vec![ServerConfig::http("guarded", url.clone())],
        HubSettings::default(),
    );
    hub.wait_settled(Duration::from_secs(30)).await;
    match &hub.status()[0].state {
        ServerState::Failed { reason } => {
            assert!(reason.starts_with(&format!("401 from {url}")), "{reason}");
            assert!(reason.contains("check the token"), "{reason}");
            assert!(
                !reason.contains("rmcp") && !reason.contains("Transport ["),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    hub.shutdown().await;
    handle.shutdown().await;
}

/// Claude Code's `headersHelper`: the command's JSON output is sent as
/// headers (over the configured ones), it learns the server's name and URL
/// from its environment, and a failing or hanging helper is reported in
/// words naming the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headers_helper_supplies_the_token_and_its_failures_are_named() {
    let handle = echo_server()
        .serve_http("127.0.0.1:0".parse().unwrap(), Some("s3cret".into()))
        .await
        .unwrap();
    let url = format!("http://{}/mcp", handle.local_addr());
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let helper = format!(
        r#"printf '%s %s' "$CLAUDE_CODE_MCP_SERVER_NAME" "$CLAUDE_CODE_MCP_SERVER_URL" > '{}'; echo '{{"Authorization": "Bearer s3cret"}}'"#,
        seen.display()
    );
    let mut configured = ServerConfig::http("guarded", url.clone()).headers_helper(helper);
    if let kinet_mcp::ServerTransport::Http { headers, .. } = &mut configured.transport {
        headers.insert("Authorization".into(), "Bearer wrong".into());
    }
    let failing = ServerConfig::http("failing", url.clone())
        .headers_helper("echo 'token service down' >&2; exit 3");
    let hanging = ServerConfig::http("hanging", url.clone()).headers_helper("sleep 60");
    let garbage = ServerConfig::http("garbage", url.clone()).headers_helper("echo '[1, 2]'");
    // Endless output (and endless stderr): stopped at once, not at the
    // time limit.
    let flooding = ServerConfig::http("flooding", url.clone())
        .headers_helper("yes x >&2 & yes '{\"a\": \"b\"}'");
    // Good headers, and a child left writing to stderr forever: the
    // helper's exit counts, not the end of its stderr.
    let chatty = ServerConfig::http("chatty", url.clone())
        .headers_helper("(yes noise >&2 &); echo '{\"Authorization\": \"Bearer s3cret\"}'");
    let started = std::time::Instant::now();
    let hub = McpHub::start(
        vec![configured, failing, hanging, garbage, flooding, chatty],
        HubSettings::default(),
    );
    hub.wait_settled(Duration::from_secs(30)).await;
    let status = hub.status();
    let state = |name: &str| {
        status
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.state.clone())
            .unwrap()
    };
    assert!(
        matches!(state("guarded"), ServerState::Ready),
        "{:?}",
        state("guarded")
    );
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        format!("guarded {url}")
    );
    let reason = |name: &str| match state(name) {
        ServerState::Failed { reason } => reason,
        other => panic!("{name}: {other:?}"),
    };
    let failing = reason("failing");
    assert!(
        failing.contains("the headersHelper of `failing` failed")
            && failing.contains("token service down"),
        "{failing}"
    );
    let hanging = reason("hanging");
    assert!(
        hanging.contains("ran past 10 s and was stopped"),
        "{hanging}"
    );
    let garbage = reason("garbage");
    assert!(garbage.contains("must print a JSON object"), "{garbage}");
    let flooding = reason("flooding");
    assert!(flooding.contains("printed more than 64 KiB"), "{flooding}");
    assert!(
        matches!(state("chatty"), ServerState::Ready),
        "{:?}",
        state("chatty")
    );
    // Only the hanging helper waited for the time limit.
    assert!(started.elapsed() < Duration::from_secs(20));
    hub.shutdown().await;
    handle.shutdown().await;
}

/// Asks the caller's user for a name through the MCP client that called.
struct AskName;

#[async_trait::async_trait]
impl Tool for AskName {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "ask_name"
    }
    fn description(&self) -> &str {
        "Greets the caller's user by name."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let client = ctx
            .extension::<kinet_mcp::served::ClientInput>()
            .ok_or_else(|| ToolError::failed("not called over MCP"))?;
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
        let first = client
            .elicit("name", "What is your name?", schema.clone())
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?;
        // A second question after the first answer: a second round.
        let second = client
            .elicit("surname", "And your surname?", schema)
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?;
        let name = |answer: &kinet_mcp::served::Elicited| {
            answer
                .content
                .as_ref()
                .and_then(|c| c["name"].as_str())
                .unwrap_or_default()
                .to_owned()
        };
        Ok(ToolOutput::text(format!(
            "Hello, {} {}!",
            name(&first),
            name(&second)
        )))
    }
}

/// Answers every question with a name, counting them.
struct Namer(std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl kinet_mcp::elicit::Elicitation for Namer {
    async fn elicit(
        &self,
        request: kinet_mcp::elicit::ElicitationRequest,
    ) -> kinet_mcp::elicit::ElicitationAnswer {
        self.0.fetch_add(1, Ordering::SeqCst);
        let name = if request.message.contains("surname") {
            "Lovelace"
        } else {
            "Ada"
        };
        let mut fields = serde_json::Map::new();
        fields.insert("name".into(), json!(name));
        kinet_mcp::elicit::ElicitationAnswer::Accept(fields)
    }
}

/// One hub, two revisions: the npm reference server (2025-11-25, with the
/// `initialize` handshake) and kinet's server (2026-07-28: `server/discover`
/// and self-contained requests), each negotiated on its own connection; a
/// served tool's questions reach the hub's form as rounds of
/// `input_required` and are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hub_speaks_2025_11_25_and_2026_07_28_at_once() {
    let everything =
        common::peers().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !everything.exists() {
        kinet_core::testing::skipped(
            "the npm reference servers are not installed (npm ci in kinet-mcp/tests/peers; .ci/test does)",
        );
        return;
    }
    let server = McpServer::builder(Agent::builder(Echo).build())
        .expose_tool(AskName)
        .build();
    let handle = server
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let namer = Arc::new(Namer(std::sync::atomic::AtomicUsize::new(0)));
    let hub = McpHub::start_with_elicitation(
        vec![
            ServerConfig::stdio(
                "legacy",
                "node",
                vec![everything.display().to_string(), "stdio".into()],
            ),
            ServerConfig::http("modern", format!("http://{}/mcp", handle.local_addr())),
        ],
        HubSettings::default(),
        namer.clone(),
    );
    assert!(hub.wait_settled(Duration::from_secs(60)).await);
    let status = hub.status();
    let protocol = |name: &str| {
        status
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.protocol.clone())
            .unwrap_or_default()
    };
    assert_eq!(protocol("legacy"), "2025-11-25", "{status:?}");
    assert_eq!(protocol("modern"), "2026-07-28", "{status:?}");
    let echo = hub
        .call("legacy", "echo", json!({"message": "old"}))
        .await
        .unwrap();
    assert_eq!(echo.text, "Echo: old");
    let greeting = hub.call("modern", "ask_name", json!({})).await.unwrap();
    assert_eq!(greeting.text, "Hello, Ada Lovelace!");
    // Two rounds: the first question once, then the second (the first
    // answer travels sealed in the server's requestState, not asked again).
    assert_eq!(namer.0.load(Ordering::SeqCst), 2);
    let answer = hub
        .call("modern", "agent", json!({"prompt": "hi"}))
        .await
        .unwrap();
    assert_eq!(answer.text, "echo: hi (1 messages)");
    hub.shutdown().await;
    handle.shutdown().await;
}
