//! `outputSchema` and `structuredContent` both ways: kinet's server turns
//! a served tool's result that breaks its declared schema into an error,
//! and the hub reports a server's result that breaks the schema its tool
//! declared as an error instead of passing it to the model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use kinet_core::testing::ScriptedProvider;
use kinet_core::{Agent, Tool, ToolCtx, ToolError, ToolOutput};
use kinet_mcp::{HubSettings, McpHub, McpServer, ServerConfig, ServerState};
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct CountArgs {
    /// What to put under `n`.
    n: Value,
}

/// Returns `{"n": <its argument>}`, declaring `n` an integer.
struct Count;

#[async_trait::async_trait]
impl Tool for Count {
    type Args = CountArgs;
    fn name(&self) -> &str {
        "count"
    }
    fn description(&self) -> &str {
        "Counts."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"]
        }))
    }
    async fn call(&self, args: CountArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!("n = {}", args.n)).with_structured(json!({"n": args.n})))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_tool_keeps_to_its_declared_output_schema() {
    let server = McpServer::builder(Agent::builder(ScriptedProvider::new([])).build())
        .expose_tool(Count)
        .build();
    let handle = server
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let hub = McpHub::start(
        vec![ServerConfig::http(
            "kinet",
            format!("http://{}/mcp", handle.local_addr()),
        )],
        HubSettings::default(),
    );
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let good = hub.call("kinet", "count", json!({"n": 3})).await.unwrap();
    assert_eq!(good.structured, Some(json!({"n": 3})));
    let bad = hub
        .call("kinet", "count", json!({"n": "three"}))
        .await
        .unwrap_err();
    assert!(bad.message().contains("outputSchema"), "{bad}");
    assert!(bad.message().contains("/n"), "{bad}");
    hub.shutdown().await;
    handle.shutdown().await;
}

/// A 2025-11-25 server over plain JSON HTTP that declares an output schema
/// for `lookup` and returns whatever structured content it is told to.
async fn careless_server() -> std::net::SocketAddr {
    let app = axum::Router::new().fallback(|request: axum::extract::Request| async move {
        let body = axum::body::to_bytes(request.into_body(), 1 << 20)
            .await
            .unwrap();
        let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let id = message.get("id").cloned();
        let result = match message["method"].as_str().unwrap_or_default() {
            "initialize" => json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "careless", "version": "1"}
            }),
            "tools/list" => json!({"tools": [{
                "name": "lookup",
                "description": "Looks up a price.",
                "inputSchema": {"type": "object", "properties": {"give": {}}},
                "outputSchema": {
                    "type": "object",
                    "properties": {"price": {"type": "number"}},
                    "required": ["price"]
                }
            }]}),
            "tools/call" => {
                let give = message["params"]["arguments"]["give"].clone();
                let mut result = json!({"content": [{"type": "text", "text": "done"}]});
                if !give.is_null() {
                    result["structuredContent"] = give;
                }
                result
            }
            // Notifications are accepted; anything else is unknown (this
            // server predates server/discover).
            _ if id.is_none() => {
                return axum::http::Response::builder()
                    .status(202)
                    .body(axum::body::Body::empty())
                    .unwrap();
            }
            _ => {
                let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}});
                return axum::http::Response::builder()
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from(error.to_string()))
                    .unwrap();
            }
        };
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
        axum::http::Response::builder()
            .header("content-type", "application/json")
            .body(axum::body::Body::from(answer.to_string()))
            .unwrap()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_refuses_results_that_break_their_declared_schema() {
    let addr = careless_server().await;
    let hub = McpHub::start(
        vec![ServerConfig::http("careless", format!("http://{addr}/mcp"))],
        HubSettings::default(),
    );
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let status = hub.status();
    assert_eq!(status[0].state, ServerState::Ready, "{status:?}");
    assert_eq!(status[0].protocol.as_deref(), Some("2025-11-25"));
    let fine = hub
        .call("careless", "lookup", json!({"give": {"price": 4.5}}))
        .await
        .unwrap();
    assert_eq!(fine.structured, Some(json!({"price": 4.5})));
    for (give, says) in [
        (json!({"price": "cheap"}), "/price"),
        (json!({"cost": 1}), "price"),
        (Value::Null, "no structuredContent"),
    ] {
        let error = hub
            .call("careless", "lookup", json!({"give": give}))
            .await
            .unwrap_err();
        assert!(error.message().contains(says), "{give}: {error}");
        assert!(error.message().contains("careless"), "{error}");
    }
    hub.shutdown().await;
}
