//! The client the suite drives (`--command`): kinet's hub connected to the
//! URL the suite appends, doing what `MCP_CONFORMANCE_SCENARIO` asks. It
//! uses only the hub's public API, as a host would: OAuth with a headless
//! "browser" (the suite's authorization endpoint redirects at once), the
//! host's elicitation form answering with each field's default, and direct
//! tool calls.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kinet_mcp::elicit::{Elicitation, ElicitationAnswer, ElicitationRequest};
use kinet_mcp::oauth::{
    AuthorizationOutcome, AuthorizationPrompt, AuthorizationRequest, MemoryTokenStore, OAuth,
    OAuthClientConfig,
};
use kinet_mcp::{HubSettings, McpHub, ServerConfig, ServerState};
use serde_json::{Map, Value, json};

/// The client id document the suite's CIMD scenarios expect.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

pub(crate) fn main() -> ExitCode {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let Some(url) = std::env::args().skip(1).rfind(|a| a.starts_with("http")) else {
        eprintln!("no server URL among the arguments");
        return ExitCode::FAILURE;
    };
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    match runtime.block_on(run(&scenario, &url, &context)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{scenario}: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the authorization page without following its redirect and hands
/// the hub the redirect (what a user pasting the URL does).
struct Headless;

#[async_trait]
impl AuthorizationPrompt for Headless {
    async fn authorize(&self, request: AuthorizationRequest) -> AuthorizationOutcome {
        let Ok(client) = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
        else {
            return AuthorizationOutcome::Declined;
        };
        let Ok(page) = client.get(&request.url).send().await else {
            return AuthorizationOutcome::Declined;
        };
        match page.headers().get("location").and_then(|l| l.to_str().ok()) {
            Some(back) => AuthorizationOutcome::Redirected(back.to_owned()),
            None => AuthorizationOutcome::Declined,
        }
    }
}

/// A form that accepts every question with each field's default (and the
/// suite's stock answers otherwise).
struct Defaults;

#[async_trait]
impl Elicitation for Defaults {
    async fn elicit(&self, request: ElicitationRequest) -> ElicitationAnswer {
        let mut fields = Map::new();
        if let Some(properties) = request.schema["properties"].as_object() {
            for (name, property) in properties {
                let value = match (&property["default"], property["type"].as_str()) {
                    (Value::Null, Some("boolean")) => json!(true),
                    (Value::Null, Some("number" | "integer")) => json!(1),
                    (Value::Null, _) => json!("conformance"),
                    (default, _) => default.clone(),
                };
                fields.insert(name.clone(), value);
            }
        }
        ElicitationAnswer::Accept(fields)
    }
}

async fn run(scenario: &str, url: &str, context: &Value) -> Result<(), String> {
    let mut config = ServerConfig::http("s", url);
    if let (Some(id), Some(secret)) = (
        context["client_id"].as_str(),
        context["client_secret"].as_str(),
    ) {
        config = config.oauth(OAuthClientConfig::with_client_id(id).client_secret(secret));
    }
    let settings = HubSettings {
        startup_timeout: Duration::from_secs(10),
        ..HubSettings::default()
    };
    let oauth = OAuth::new()
        .prompt(Arc::new(Headless))
        .store(Arc::new(MemoryTokenStore::default()))
        .client_metadata_url(CLIENT_METADATA_URL)
        .authorization_timeout(Duration::from_secs(10));
    let hub = McpHub::builder(vec![config])
        .settings(settings)
        .elicitation(Arc::new(Defaults))
        .oauth(oauth)
        .start();
    let outcome = drive(&hub, scenario, context).await;
    hub.shutdown().await;
    outcome
}

/// The hub's tools on the server (their names on the server).
fn tools(hub: &McpHub) -> Vec<String> {
    hub.status()
        .into_iter()
        .flat_map(|status| status.tools)
        .filter_map(|name| name.strip_prefix("mcp__s__").map(str::to_owned))
        .collect()
}

/// Waits until the server is ready (after any authorization).
async fn ready(hub: &McpHub) -> Result<(), String> {
    let started = std::time::Instant::now();
    loop {
        hub.wait_settled(Duration::from_secs(25)).await;
        let state = hub.status().first().map(|s| s.state.clone());
        match state {
            Some(ServerState::Ready) => return Ok(()),
            Some(ServerState::Failed { reason }) => return Err(reason),
            other if started.elapsed() > Duration::from_secs(25) => {
                return Err(format!("the server is not ready: {other:?}"));
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Calls `tool`, once more after a re-authorization the server asked for
/// (a step-up of scope).
async fn call(hub: &McpHub, tool: &str, arguments: Value) -> Result<String, String> {
    let mut last = String::new();
    for _ in 0..3 {
        match hub.call("s", tool, arguments.clone()).await {
            Ok(output) => return Ok(output.text),
            Err(error) => {
                last = error.to_string();
                tokio::time::sleep(Duration::from_millis(300)).await;
                let _ = ready(hub).await;
            }
        }
    }
    Err(format!("{tool}: {last}"))
}

async fn drive(hub: &McpHub, scenario: &str, context: &Value) -> Result<(), String> {
    ready(hub).await?;
    match scenario {
        "tools_call" => {
            call(hub, "add_numbers", json!({"a": 2, "b": 3})).await?;
        }
        "elicitation-sep1034-client-defaults" => {
            call(hub, "test_client_elicitation_defaults", json!({})).await?;
        }
        "sse-retry" => {
            call(hub, "test_reconnection", json!({})).await?;
        }
        "http-custom-headers" => {
            for tool in context["toolCalls"].as_array().into_iter().flatten() {
                let name = tool["name"].as_str().unwrap_or_default();
                call(hub, name, tool["arguments"].clone()).await?;
            }
        }
        "http-invalid-tool-headers" => {
            call(hub, "valid_tool", json!({"region": "us-west1"})).await?;
        }
        "sep-2322-client-request-state" => {
            // A call in rounds and an unrelated one beside it.
            let (rounds, unrelated) = futures::join!(
                call(hub, "test_mrtr_echo_state", json!({})),
                call(hub, "test_mrtr_unrelated", json!({})),
            );
            rounds?;
            unrelated?;
            call(hub, "test_mrtr_no_state", json!({})).await?;
            call(hub, "test_mrtr_no_result_type", json!({})).await?;
        }
        "json-schema-2020-12-preservation" => {
            call(hub, "json_schema_echo", json!({"schema": {}})).await?;
        }
        _ => {
            // Connecting (and any authorization) is the scenario; call
            // each tool the server offers, as a host's agent would.
            for tool in tools(hub) {
                let _ = call(hub, &tool, json!({})).await;
            }
        }
    }
    Ok(())
}
