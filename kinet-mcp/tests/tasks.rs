//! Served calls as tasks (MCP 2026-07-28 Tasks extension) across two
//! stateless replicas that are separate processes on one SQLite store: a
//! task's result read from the other replica after the one that ran it was
//! SIGKILLed, a task whose replica died reported failed, cancel and
//! answers given through the other replica, and the hub following a task
//! to its end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kinet_core::testing::ScriptedProvider;
use kinet_core::{Agent, Tool, ToolCtx, ToolError, ToolOutput};
use kinet_mcp::{HubSettings, McpHub, McpServer, ServerConfig};
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SlowArgs {
    ms: u64,
    n: i64,
}

/// Sleeps, then answers.
struct Slow;

#[async_trait::async_trait]
impl Tool for Slow {
    type Args = SlowArgs;
    fn name(&self) -> &str {
        "slow"
    }
    fn description(&self) -> &str {
        "Sleeps `ms`, then says `n`."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, args: SlowArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        Ok(ToolOutput::text(format!("done {}", args.n)))
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// Asks the client's user for a number.
struct Ask;

#[async_trait::async_trait]
impl Tool for Ask {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "ask"
    }
    fn description(&self) -> &str {
        "Asks for a number, within its task."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let client = ctx
            .extension::<kinet_mcp::served::ClientInput>()
            .ok_or_else(|| ToolError::failed("not over MCP"))?;
        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        // Asked within the task (a question asked before would be asked
        // in input_required rounds of the call itself).
        client.escalate_to_task().await;
        let answer = client
            .elicit("number", "Pick a number", schema)
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?;
        let n = answer.content.and_then(|c| c.get("n").cloned());
        Ok(ToolOutput::text(format!(
            "got {}",
            n.unwrap_or(Value::Null)
        )))
    }
}

/// The replica process (this binary run again with `KINET_TASK_REPLICA`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_process() {
    let Ok(config) = std::env::var("KINET_TASK_REPLICA") else {
        return;
    };
    let (port, db) = config.split_once('|').unwrap();
    let store = Arc::new(kinet_memory::SqliteSessionStore::open(db).unwrap());
    let server = McpServer::builder(Agent::builder(ScriptedProvider::new([])).build())
        .stateless(store)
        // Long enough that a replica renewing every quarter of it keeps its
        // claim on a loaded 2-core machine (800 ms lapsed under the full
        // suite); a dead replica's task is still reported failed within it.
        .claim_ttl(Duration::from_secs(3))
        .request_state_key(vec![7; 32])
        .expose_tool(Slow)
        .expose_tool(Ask)
        .run_as_task("slow")
        .run_as_task("ask")
        .build();
    let _handle = server
        .serve_http(format!("127.0.0.1:{port}").parse().unwrap(), None)
        .await
        .unwrap();
    futures::future::pending::<()>().await;
}

struct Replica {
    child: Child,
    port: u16,
}

impl Replica {
    async fn start(db: &std::path::Path) -> Self {
        let port = common::free_port();
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "replica_process", "--nocapture"])
            .env("KINET_TASK_REPLICA", format!("{port}|{}", db.display()))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        common::wait_for_port(port, "a replica").await;
        Self { child, port }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// One 2026-07-28 request (the client declares the Tasks extension
    /// and elicitation); the JSON-RPC `result`, or the error as `Err`.
    async fn ask(&self, method: &str, mut params: Value) -> Result<Value, Value> {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {
                "elicitation": {},
                "extensions": {"io.modelcontextprotocol/tasks": {}}
            },
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
        });
        let name = params["name"]
            .as_str()
            .or(params["taskId"].as_str())
            .map(str::to_owned);
        let mut request = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}/mcp", self.port))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string(),
            );
        if let Some(name) = name {
            request = request.header("mcp-name", name);
        }
        let body: Value = request.send().await.unwrap().json().await.unwrap();
        match body.get("result") {
            Some(result) => Ok(result.clone()),
            None => Err(body["error"].clone()),
        }
    }

    async fn task(&self, id: &str) -> Value {
        self.ask("tasks/get", json!({"taskId": id})).await.unwrap()
    }

    /// Polls until the task's status is `status` (at most 20 s).
    async fn until(&self, id: &str, status: &str) -> Value {
        let started = Instant::now();
        loop {
            let task = self.task(id).await;
            if task["status"] == status {
                return task;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "{task}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn start_slow(&self, ms: u64, n: i64) -> String {
        let created = self
            .ask(
                "tools/call",
                json!({"name": "slow", "arguments": {"ms": ms, "n": n}}),
            )
            .await
            .unwrap();
        assert_eq!(created["resultType"], "task", "{created}");
        created["taskId"].as_str().unwrap().to_owned()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_live_in_the_store_and_outlive_their_replica() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    let mut a = Replica::start(&db).await;
    let b = Replica::start(&db).await;

    // Finished on A, A SIGKILLed, read on B.
    let id = a.start_slow(200, 5).await;
    a.until(&id, "completed").await;
    a.kill();
    let done = b.task(&id).await;
    assert_eq!(done["result"]["content"][0]["text"], "done 5", "{done}");
    // Unknown tasks are invalid params.
    let error = b
        .ask("tasks/get", json!({"taskId": "task-nope"}))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32602, "{error}");

    // Running on A when A dies: B reports it failed once A's claim lapses.
    let a = Replica::start(&db).await;
    let id = a.start_slow(60_000, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(a);
    let failed = b.until(&id, "failed").await;
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stopped"),
        "{failed}"
    );

    // Cancelled through B while it runs on A.
    let a = Replica::start(&db).await;
    let id = a.start_slow(60_000, 2).await;
    let ack = b.ask("tasks/cancel", json!({"taskId": id})).await.unwrap();
    assert_eq!(ack["resultType"], "complete", "{ack}");
    a.until(&id, "cancelled").await;

    // A question asked on A, answered through B.
    let created = a
        .ask("tools/call", json!({"name": "ask", "arguments": {}}))
        .await
        .unwrap();
    let id = created["taskId"].as_str().unwrap().to_owned();
    let waiting = b.until(&id, "input_required").await;
    assert_eq!(
        waiting["inputRequests"]["number"]["method"], "elicitation/create",
        "{waiting}"
    );
    b.ask(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"number": {"action": "accept", "content": {"n": 7}}}}),
    )
    .await
    .unwrap();
    let done = a.until(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "got 7", "{done}");
}

/// Answers every question with 9.
struct Nine;

#[async_trait::async_trait]
impl kinet_mcp::elicit::Elicitation for Nine {
    async fn elicit(
        &self,
        _: kinet_mcp::elicit::ElicitationRequest,
    ) -> kinet_mcp::elicit::ElicitationAnswer {
        let mut fields = serde_json::Map::new();
        fields.insert("n".into(), json!(9));
        kinet_mcp::elicit::ElicitationAnswer::Accept(fields)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_follows_a_task_to_its_end_and_cancels_it_on_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let replica = Replica::start(&dir.path().join("sessions.db")).await;
    let mut config = ServerConfig::http("tasks", format!("http://127.0.0.1:{}/mcp", replica.port));
    config.tool_timeout = Some(Duration::from_millis(1500));
    let hub = McpHub::start_with_elicitation(vec![config], HubSettings::default(), Arc::new(Nine));
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let done = hub
        .call("tasks", "slow", json!({"ms": 300, "n": 3}))
        .await
        .unwrap();
    assert_eq!(done.text, "done 3");
    let asked = hub.call("tasks", "ask", json!({})).await.unwrap();
    assert_eq!(asked.text, "got 9");
    let started = Instant::now();
    let timed_out = hub
        .call("tasks", "slow", json!({"ms": 60_000, "n": 4}))
        .await
        .unwrap_err();
    assert_eq!(
        timed_out.kind(),
        kinet_core::tool::ToolErrorKind::Timeout,
        "{timed_out}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    hub.shutdown().await;
}
