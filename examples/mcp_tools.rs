//! Lists the MCP servers configured for Claude Desktop, Claude Code and
//! Codex on this machine, starts them, and prints their tools. Read-only:
//! no tool is called.
//!
//! ```text
//! cargo run --example mcp_tools --features mcp
//! ```
#![allow(clippy::print_stdout, missing_docs)]

use std::time::Duration;

use kinet::mcp::{Discovery, HubSettings, McpHub, ServerState};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let found = Discovery::new().discover();
    for problem in &found.problems {
        println!("! {}: {}", problem.file.display(), problem.message);
    }
    if found.servers.is_empty() {
        println!(
            "No MCP servers are configured (looked at Claude Desktop, ~/.claude.json, .mcp.json, Claude Code plugins and ~/.codex/config.toml)."
        );
        return Ok(());
    }
    let hub = McpHub::from_discovery(&found, HubSettings::default());
    hub.wait_settled(Duration::from_secs(30)).await;

    let rows: Vec<[String; 4]> = hub
        .status()
        .into_iter()
        .map(|server| {
            let state = match &server.state {
                ServerState::Ready => "ready".to_owned(),
                ServerState::Failed { reason } => {
                    format!("failed: {}", reason.lines().next().unwrap_or_default())
                }
                other => format!("{other:?}").to_lowercase(),
            };
            [
                server.name,
                server.source.to_string(),
                state,
                server.tools.len().to_string(),
            ]
        })
        .collect();
    let headers = ["server", "source", "state", "tools"];
    let widths: Vec<usize> = (0..4)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([headers[i].len()])
                .max()
                .unwrap_or(0)
                .min(60)
        })
        .collect();
    let line = |cells: [&str; 4]| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{:<w$}", c.chars().take(*w).collect::<String>(), w = *w))
            .collect::<Vec<_>>()
            .join("  ")
    };
    println!("{}", line(headers));
    for row in &rows {
        println!("{}", line([&row[0], &row[1], &row[2], &row[3]]));
    }
    for server in hub.status() {
        if !server.tools.is_empty() {
            println!("\n{}:", server.name);
            for tool in &server.tools {
                println!("  {tool}");
            }
        }
    }
    hub.shutdown().await;
    Ok(())
}
