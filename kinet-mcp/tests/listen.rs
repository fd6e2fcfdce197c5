//! The hub on a server of the 2026-07-28 revision, whose notifications come
//! only on a `subscriptions/listen` stream (no GET stream, no session): a
//! changed tool list and a subscribed resource's updates reach the host,
//! and a subscription the server does not accept is refused. The server is
//! rmcp's, as a Rust server author would write one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kinet_mcp::resources::ServerChange;
use kinet_mcp::{HubSettings, McpHub, ServerConfig, ServerState};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig as Info, SubscriptionFilter, Tool,
};
use rmcp::service::{RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};

/// A server whose tools the test changes, telling its listeners.
#[derive(Clone, Default)]
struct Changing {
    tools: Arc<Mutex<Vec<&'static str>>>,
    listeners: Arc<Mutex<Vec<SubscriptionSink>>>,
}

impl Changing {
    fn sinks(&self) -> Vec<SubscriptionSink> {
        self.listeners.lock().unwrap().clone()
    }
}

impl ServerHandler for Changing {
    fn get_info(&self) -> Info {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .build();
        capabilities.resources.as_mut().unwrap().list_changed = Some(true);
        Info::new(capabilities)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.tools.lock().unwrap().clone();
        Ok(ListToolsResult::with_all_items(
            tools
                .into_iter()
                .map(|name| {
                    Tool::new(
                        name,
                        "A tool",
                        Arc::new(
                            serde_json::json!({"type": "object"})
                                .as_object()
                                .unwrap()
                                .clone(),
                        ),
                    )
                })
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(
            CallToolResult::success(vec![ContentBlock::text(format!("{} ran", request.name))])
                .into(),
        )
    }

    /// Everything asked for, but no resource under `mem://secret/`.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        if let Some(uris) = &mut accepted.resource_subscriptions {
            uris.retain(|uri| !uri.starts_with("mem://secret/"));
        }
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.listeners.lock().unwrap().push(context.sink().clone());
        context.cancelled().await;
        Ok(())
    }
}

async fn until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what} within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_server_s_notifications_reach_the_host_through_listen() {
    let server = Changing::default();
    server.tools.lock().unwrap().push("first");
    let service = StreamableHttpService::new(
        {
            let server = server.clone();
            move || Ok(server.clone())
        },
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, axum::Router::new().nest_service("/mcp", service))
            .await
            .unwrap();
    });

    let hub = McpHub::start(
        vec![ServerConfig::http("changing", format!("http://{addr}/mcp"))],
        HubSettings::default(),
    );
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let status = hub.status().remove(0);
    assert_eq!(status.state, ServerState::Ready, "{status:?}");
    assert_eq!(status.protocol.as_deref(), Some("2026-07-28"), "{status:?}");
    assert_eq!(status.tools, ["mcp__changing__first"]);

    // The hub listens for the tool list; a change reaches its tools.
    let sink = until("a listen stream", || server.sinks().pop()).await;
    assert_eq!(sink.accepted().tools_list_changed, Some(true));
    server.tools.lock().unwrap().push("second");
    sink.notify_tool_list_changed().await.unwrap();
    until("the new tool", || {
        (hub.status()[0].tools.len() == 2).then_some(())
    })
    .await;

    // A subscription: the hub listens again with the resource; its updates
    // reach the host.
    let mut changes = hub.changes();
    hub.subscribe_resource("changing", "mem://notes")
        .await
        .unwrap();
    let sink = until("a stream with the resource", || {
        server.sinks().into_iter().find(|sink| {
            sink.accepted()
                .resource_subscriptions
                .as_ref()
                .is_some_and(|uris| uris.iter().any(|uri| uri == "mem://notes"))
        })
    })
    .await;
    sink.notify_resource_updated("mem://notes").await.unwrap();
    sink.notify_resource_list_changed().await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let change = tokio::time::timeout(Duration::from_secs(10), changes.recv())
            .await
            .expect("the changes within 10 s")
            .unwrap();
        seen.push(change);
    }
    assert!(
        seen.iter().any(
            |c| matches!(c, ServerChange::ResourceUpdated { server, uri }
            if server == "changing" && uri == "mem://notes")
        ),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(
            |c| matches!(c, ServerChange::ResourcesChanged { server } if server == "changing")
        ),
        "{seen:?}"
    );

    // A resource the server will not report on is refused, by name.
    let refused = hub
        .subscribe_resource("changing", "mem://secret/keys")
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("changing"), "{refused}");
    // The earlier subscription holds.
    let sink = until("a stream after the refusal", || server.sinks().pop()).await;
    let accepted = sink
        .accepted()
        .resource_subscriptions
        .clone()
        .unwrap_or_default();
    assert_eq!(accepted, ["mem://notes"]);
    hub.shutdown().await;
}
