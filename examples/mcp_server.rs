//! Serves a kinet agent over MCP, so Claude Desktop, Codex or another kinet
//! can use it: over stdio (the default) or streamable HTTP.
//!
//! ```text
//! cargo run --example mcp_server --features tools,mcp                          # stdio
//! cargo run --example mcp_server --features tools,mcp -- --http 127.0.0.1:8765  # http://127.0.0.1:8765/mcp
//! KINET_MCP_TOKEN=secret cargo run --example mcp_server --features tools,mcp -- --http 0.0.0.0:8765
//! ```
//!
//! The model is a real one when the environment names one (see
//! `kinet::core::provider::from_env`); otherwise an offline model that
//! echoes the request, so the plumbing can be tried with no key.
#![allow(clippy::print_stderr, missing_docs)]

use kinet::core::provider::from_env;
use kinet::core::provider::{ChatRequest, ProviderError, ProviderStream, StopReason, StreamEvent};
use kinet::mcp::McpServer;
use kinet::{Agent, Provider, async_trait};

/// The offline model: answers with what it was asked.
struct Echo;

#[async_trait]
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
        Ok(Box::pin(futures::stream::iter([
            Ok(StreamEvent::TextDelta(format!(
                "(offline model) You asked: {last}"
            ))),
            Ok(StreamEvent::Finished(StopReason::EndTurn)),
        ])))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let builder = match from_env()? {
        Some(chosen) => Agent::builder(chosen.provider).model(chosen.model),
        None => Agent::builder(Echo),
    };
    // Read-only local tools: the served agent can look but not change.
    let agent = builder
        .system_prompt("You are a coding assistant serving other agents over MCP.")
        .tools(kinet::tools::default_tools())
        .policy(kinet::ApprovalPolicy::deny_all())
        .build();
    let server = McpServer::builder(agent).name("kinet").build();
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--http") {
        Some(i) => {
            let addr = args
                .get(i + 1)
                .map_or("127.0.0.1:8765", String::as_str)
                .parse()?;
            let handle = server
                .serve_http(addr, std::env::var("KINET_MCP_TOKEN").ok())
                .await?;
            eprintln!(
                "serving MCP at http://{}/mcp (Ctrl-C to stop)",
                handle.local_addr()
            );
            tokio::signal::ctrl_c().await?;
            handle.shutdown().await;
        }
        None => server.serve_stdio().await?,
    }
    Ok(())
}
