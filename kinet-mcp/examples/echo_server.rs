//! A kinet agent served over MCP with an offline echo model, for the
//! tests' peer clients: `echo_server` (stdio), `echo_server --http ADDR`,
//! or `echo_server --http ADDR --stateless DB` (conversations in the SQLite
//! file DB, shared by replicas).
#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]

use kinet_core::{Agent, Provider};

use kinet_core::provider::{ChatRequest, ProviderError, ProviderStream, StopReason, StreamEvent};
use kinet_mcp::McpServer;

/// Answers "echo: <last user message> (<n> messages)"; a prompt starting
/// with "write:" makes it call the mutating `save_note` tool first, and it
/// then reports the tool's result; one starting with "slow:" takes 1.5 s.
struct Echo;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SaveArgs {
    text: String,
}

/// A mutating tool: each call needs confirmation.
struct SaveNote;

#[async_trait::async_trait]
impl kinet_core::Tool for SaveNote {
    type Args = SaveArgs;
    fn name(&self) -> &str {
        "save_note"
    }
    fn description(&self) -> &str {
        "Saves a note."
    }
    async fn call(
        &self,
        args: SaveArgs,
        _: &kinet_core::ToolCtx,
    ) -> Result<kinet_core::ToolOutput, kinet_core::ToolError> {
        Ok(kinet_core::ToolOutput::text(format!(
            "saved `{}`",
            args.text
        )))
    }
}

#[async_trait::async_trait]
impl Provider for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let last = request.messages.last();
        let text = last.map(|m| m.text()).unwrap_or_default();
        if text.starts_with("slow:") {
            tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        }
        let events = match last {
            Some(kinet_core::Message::User { .. }) if text.starts_with("write:") => vec![
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: String::new(),
                    name: "save_note".into(),
                },
                StreamEvent::ToolCallArgumentsDelta {
                    index: 0,
                    delta: serde_json::json!({"text": text.trim_start_matches("write:").trim()})
                        .to_string(),
                },
                StreamEvent::Finished(StopReason::ToolUse),
            ],
            Some(kinet_core::Message::Tool { .. }) => vec![
                StreamEvent::TextDelta(format!("tool said: {text}")),
                StreamEvent::Finished(StopReason::EndTurn),
            ],
            _ => vec![
                StreamEvent::TextDelta(format!(
                    "echo: {text} ({} messages)",
                    request.messages.len()
                )),
                StreamEvent::Finished(StopReason::EndTurn),
            ],
        };
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mut builder =
        McpServer::builder(Agent::builder(Echo).tool(SaveNote).build()).name("kinet-echo");
    if let Some(i) = args.iter().position(|a| a == "--stateless") {
        let db = args
            .get(i + 1)
            .ok_or_else(|| anyhow::anyhow!("--stateless needs a database path"))?;
        let store = kinet_memory::SqliteSessionStore::open(db)?;
        builder = builder.stateless(std::sync::Arc::new(store));
    }
    let server = builder.build();
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
