//! A kinet agent served over MCP with an offline echo model, for the
//! tests' peer clients: `echo_server` (stdio) or `echo_server --http ADDR`.
#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]

use kinet_core::{
    Agent, ChatRequest, Provider, ProviderError, ProviderStream, StopReason, StreamEvent,
};
use kinet_mcp::McpServer;

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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let server = McpServer::builder(Agent::builder(Echo).build())
        .name("kinet-echo")
        .build();
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--http") {
        Some(i) => {
            let addr = args
                .get(i + 1)
                .map_or("127.0.0.1:0", String::as_str)
                .parse()?;
            let handle = server
                .serve_http(addr, std::env::var("KINET_MCP_TOKEN").ok())
                .await?;
            println!("http://{}/mcp", handle.local_addr());
            tokio::signal::ctrl_c().await?;
            handle.shutdown().await;
        }
        None => server.serve_stdio().await?,
    }
    Ok(())
}
