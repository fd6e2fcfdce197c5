//! kinet's MCP server as an OAuth 2.1 resource server, against a real
//! authorization server (the Python SDK's auth routes, `peers/auth_server.py`,
//! issuing RS256 JWTs with the resource as audience and answering RFC 7662
//! introspection): the metadata and every refusal as the spec gives them,
//! kinet's own hub authorizing end to end, and conversations and memory
//! that belong to the principal who made them, on every replica.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/issuer.rs"]
mod issuer;

use issuer::common;
use kinet_core::builder::Calls;

use std::sync::Arc;
use std::time::Duration;

use kinet_core::testing::{Expectation, ScriptedProvider, ScriptedTurn};
use kinet_core::{Agent, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput};
use kinet_mcp::oauth::{
    AuthorizationOutcome, AuthorizationPrompt, AuthorizationRequest, MemoryTokenStore, OAuth,
    Principal,
};
use kinet_mcp::{HubSettings, McpHub, McpServer, ServerConfig};
use kinet_memory::{MemoryConfig, MemoryPack, MemoryStore, Scope, SqliteSessionStore};
use serde_json::{Value, json};

fn echo_agent() -> Agent {
    Agent::builder(ScriptedProvider::new(
        (0..20).map(|_| ScriptedTurn::text("hello")),
    ))
    .build()
}

/// Serves `server` on a port chosen before, so the resource URL is known.
async fn serve(server: McpServer, port: u16) -> kinet_mcp::HttpServerHandle {
    server
        .serve_http(format!("127.0.0.1:{port}").parse().unwrap(), None)
        .await
        .unwrap()
}

async fn initialize(url: &str, token: Option<&str>) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

fn challenge(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Every refusal the spec names, with JWTs and with introspection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_checked_and_refused_as_the_spec_says() {
    let Some(issuer) = issuer::Issuer::start().await else {
        return;
    };
    for introspect in [false, true] {
        let port = common::free_port();
        let resource = format!("http://127.0.0.1:{port}/mcp");
        let check = if introspect {
            issuer.introspecting(&resource)
        } else {
            issuer.jwt(&resource)
        };
        let handle = serve(McpServer::builder(echo_agent()).oauth(check).build(), port).await;
        let metadata_url =
            format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp");
        let metadata: Value = reqwest::get(&metadata_url)
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(metadata["resource"], resource.as_str());
        assert_eq!(
            metadata["authorization_servers"][0],
            issuer.issuer().as_str()
        );
        let root: Value = reqwest::get(format!(
            "http://127.0.0.1:{port}/.well-known/oauth-protected-resource"
        ))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        assert_eq!(root, metadata);

        // No token: 401 naming the metadata, no error code.
        let response = initialize(&resource, None).await;
        assert_eq!(response.status(), 401);
        assert_eq!(
            challenge(&response),
            format!("Bearer resource_metadata=\"{metadata_url}\"")
        );
        let expired = issuer.mint("alice", &resource, -120, false).await;
        let elsewhere = issuer
            .mint("alice", "http://other.example/mcp", 3600, false)
            .await;
        let forged = issuer.mint("alice", &resource, 3600, true).await;
        for (token, why) in [
            (expired.as_str(), "expired"),
            (elsewhere.as_str(), "not issued for this server"),
            (
                forged.as_str(),
                if introspect {
                    "not active"
                } else {
                    "signature"
                },
            ),
            (
                "not-a-token",
                if introspect {
                    "not active"
                } else {
                    "not a JWT"
                },
            ),
        ] {
            let response = initialize(&resource, Some(token)).await;
            assert_eq!(response.status(), 401, "{why}");
            let header = challenge(&response);
            assert!(header.starts_with("Bearer resource_metadata="), "{header}");
            assert!(header.contains("error=\"invalid_token\""), "{header}");
            let body = response.text().await.unwrap();
            let expected = if introspect && why == "expired" {
                "not active"
            } else {
                why
            };
            assert!(body.contains(expected), "{introspect} {why}: {body}");
        }
        let good = issuer.mint("alice", &resource, 3600, false).await;
        let response = initialize(&resource, Some(&good)).await;
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        handle.shutdown().await;
    }
    // Scopes a server requires and a token lacks: 403.
    let port = common::free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let handle = serve(
        McpServer::builder(echo_agent())
            .oauth(issuer.jwt(&resource).require_scopes(["admin"]))
            .build(),
        port,
    )
    .await;
    let token = issuer.mint("alice", &resource, 3600, false).await;
    let response = initialize(&resource, Some(&token)).await;
    assert_eq!(response.status(), 403);
    assert!(challenge(&response).contains("error=\"insufficient_scope\", scope=\"admin\""));
    handle.shutdown().await;
    assert!(issuer.log().contains("introspect"), "{}", issuer.log());
}

/// A browser that follows the authorization page's redirect.
struct Browser;

#[async_trait::async_trait]
impl AuthorizationPrompt for Browser {
    async fn authorize(&self, request: AuthorizationRequest) -> AuthorizationOutcome {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let page = client.get(&request.url).send().await.unwrap();
        let back = page.headers()["location"].to_str().unwrap().to_owned();
        client.get(&back).send().await.unwrap();
        AuthorizationOutcome::Opened
    }
}

/// kinet's hub meets kinet's server: discovery through the resource
/// metadata, registration, PKCE, a token whose audience is the server,
/// and the agent answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_is_authorized_by_the_issuer_and_calls_the_agent() {
    let Some(issuer) = issuer::Issuer::start().await else {
        return;
    };
    let port = common::free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let handle = serve(
        McpServer::builder(echo_agent())
            .oauth(issuer.jwt(&resource))
            .build(),
        port,
    )
    .await;
    let hub = McpHub::builder(vec![ServerConfig::http("agents", resource.clone())])
        .settings(HubSettings {
            startup_timeout: Duration::from_secs(30),
            ..HubSettings::default()
        })
        .oauth(
            OAuth::new()
                .store(Arc::new(MemoryTokenStore::default()))
                .prompt(Arc::new(Browser)),
        )
        .start();
    // Authorizing (the browser step), then ready.
    let started = std::time::Instant::now();
    while hub.status()[0].state != kinet_mcp::ServerState::Ready {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{:?}; grants: {}",
            hub.status()[0].state,
            issuer.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = hub
        .call("agents", "agent", json!({"prompt": "hi"}))
        .await
        .unwrap();
    assert_eq!(answer.text, "hello");
    let log = issuer.log();
    assert!(log.contains("token user-"), "{log}");
    assert!(
        log.contains(&format!(" {resource}")),
        "the audience is the server: {log}"
    );
    hub.shutdown().await;
    handle.shutdown().await;
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// Says who asked, from the call's context.
struct WhoAmI;

#[async_trait::async_trait]
impl Tool for WhoAmI {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "whoami"
    }
    fn description(&self) -> &str {
        "Who is asking."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let principal = ctx.extension::<Principal>();
        Ok(ToolOutput::text(format!(
            "principal: {}",
            principal.map_or("nobody".to_owned(), |p| p.subject.clone())
        )))
    }
}

/// The agent one replica makes for a principal: it asks `whoami` (which
/// must say the principal), and recalls its secret from memory scoped to
/// the principal: only the principal's own secret may come back.
fn agent_for(memory: &MemoryStore, principal: &Principal, replica: usize) -> Agent {
    let me = principal.subject.clone();
    let pack = MemoryPack::new(memory.clone(), format!("{me}-{replica}"))
        .scope(Scope::user(&me).with_agent("assistant"));
    let mut turns = Vec::new();
    for _ in 0..3 {
        turns.push(ScriptedTurn::new().tool_call("w", "whoami", json!({})));
        turns.push(
            ScriptedTurn::new()
                .expect(Expectation::ToolResultContains {
                    call_id: "w".into(),
                    text: format!("principal: {me}"),
                })
                .tool_call("r", "recall_memory", json!({"query": "secret word"})),
        );
        turns.push(ScriptedTurn::text(format!("{me} answered")));
    }
    Agent::builder(ScriptedProvider::new(turns))
        .tools(pack.toolset())
        .tool(WhoAmI)
        .calls(Calls::new().hook(pack.history_hook()))
        .build()
}

async fn ask(url: &str, token: &str, arguments: Value) -> Result<(String, String), String> {
    let mut config = ServerConfig::http("agents", url.to_owned());
    if let kinet_mcp::ServerTransport::Http { bearer_token, .. } = &mut config.transport {
        *bearer_token = Some(token.to_owned());
    }
    let hub = McpHub::start(vec![config], HubSettings::default());
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let result = hub.call("agents", "agent", arguments).await;
    hub.shutdown().await;
    let output = result.map_err(|e| e.to_string())?;
    let id = output
        .structured
        .as_ref()
        .and_then(|s| s["conversation_id"].as_str())
        .unwrap_or_default()
        .to_owned();
    Ok((output.text, id))
}

/// Two stateless replicas on one conversation store and one memory file:
/// a conversation is found by its principal on either replica and by
/// nobody else; each principal's memory holds only its own words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_and_memory_belong_to_their_principal_on_every_replica() {
    let Some(issuer) = issuer::Issuer::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sessions = Arc::new(SqliteSessionStore::open(dir.path().join("sessions.db")).unwrap());
    let memory = MemoryStore::open(dir.path().join("memory.db"), MemoryConfig::default())
        .await
        .unwrap();
    let ports = [common::free_port(), common::free_port()];
    // Behind one load balancer both replicas are one resource.
    let resource = format!("http://127.0.0.1:{}/mcp", ports[0]);
    let mut handles = Vec::new();
    for (replica, port) in ports.iter().enumerate() {
        let memory = memory.clone();
        let server = McpServer::builder(echo_agent())
            .stateless(sessions.clone())
            .oauth(issuer.jwt(&resource))
            .agent_for(move |principal| agent_for(&memory, principal, replica))
            .build();
        handles.push(serve(server, *port).await);
    }
    let url = |replica: usize| format!("http://127.0.0.1:{}/mcp", ports[replica]);
    let alice = issuer.mint("alice", &resource, 3600, false).await;
    let bob = issuer.mint("bob", &resource, 3600, false).await;

    let (answer, conversation) = ask(
        &url(0),
        &alice,
        json!({"prompt": "My secret word is heron."}),
    )
    .await
    .unwrap();
    assert_eq!(answer, "alice answered");
    assert!(conversation.starts_with("conv-"), "{conversation}");
    // Bob, on the other replica, cannot continue it: there is none.
    let refused = ask(
        &url(1),
        &bob,
        json!({"prompt": "What is the secret word?", "conversation_id": conversation}),
    )
    .await
    .unwrap_err();
    assert!(refused.contains("no conversation"), "{refused}");
    // Alice can, there.
    let (answer, same) = ask(
        &url(1),
        &alice,
        json!({"prompt": "And again?", "conversation_id": conversation}),
    )
    .await
    .unwrap();
    assert_eq!(
        (answer.as_str(), same.as_str()),
        ("alice answered", conversation.as_str())
    );
    // Bob's own conversation: his memory has no trace of alice's words.
    let (answer, _) = ask(&url(1), &bob, json!({"prompt": "What is the secret word?"}))
        .await
        .unwrap();
    assert_eq!(answer, "bob answered");
    let alice_scope = Scope::user("alice").with_agent("assistant");
    let bob_scope = Scope::user("bob").with_agent("assistant");
    use kinet_memory::MemoryBackend;
    let theirs = memory
        .recall(
            &bob_scope,
            &kinet_memory::RecallQuery::new("heron secret").limit(20),
        )
        .await
        .unwrap();
    assert!(
        theirs.hits.iter().all(|h| !h.text.contains("heron")),
        "{:?}",
        theirs.hits
    );
    let hers = memory
        .recall(
            &alice_scope,
            &kinet_memory::RecallQuery::new("heron").limit(20),
        )
        .await
        .unwrap();
    assert!(
        hers.hits.iter().any(|h| h.text.contains("heron")),
        "{:?}",
        hers.hits
    );
    // The stored conversation names its owner.
    use kinet_core::session::SessionStore;
    let stored = sessions.load(&conversation).unwrap().unwrap();
    assert_eq!(
        stored.state["kinet.mcp.owner"],
        json!(format!("{} alice", issuer.issuer()))
    );
    for handle in handles {
        handle.shutdown().await;
    }
}
