//! Recipe: serve an agent over MCP, so Claude Desktop, Codex or another
//! kinet host can hand it tasks. Build it (`cargo build --example
//! recipe_serve_mcp --features mcp`), then add the binary to a client's
//! config as a stdio server: `{"command": "/path/to/kinet/target/debug/examples/recipe_serve_mcp"}`
#![allow(missing_docs)]

use kinet::mcp::McpServer;
use kinet::{Agent, ApprovalPolicy};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let chosen = kinet::core::provider::from_env()?.ok_or_else(|| {
        anyhow::anyhow!("set OPENAI_API_KEY, ANTHROPIC_API_KEY or KINET_BASE_URL")
    })?;
    let agent = Agent::builder(chosen.provider)
        .model(chosen.model)
        .system_prompt("You answer questions about the code in this directory.")
        .tools(kinet::tools::default_tools())
        // No one is there to approve over MCP: mutating calls are refused.
        .policy(ApprovalPolicy::deny_all())
        .build();
    // Clients get an `agent` tool (a task in, the answer and a conversation
    // id out) and `reply` to continue; `.tool(...)` also serves tools directly.
    let server = McpServer::builder(agent).name("code-helper").build();
    match std::env::var("KINET_MCP_HTTP") {
        // Streamable HTTP at http://ADDR/mcp, with a bearer token when set.
        Ok(addr) => {
            let handle = server
                .serve_http(addr.parse()?, std::env::var("KINET_MCP_TOKEN").ok())
                .await?;
            tokio::signal::ctrl_c().await?;
            handle.shutdown().await;
        }
        Err(_) => server.serve_stdio().await?,
    }
    Ok(())
}
