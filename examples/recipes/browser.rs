//! Recipe: browser tools on a dedicated headless Chrome (a fresh profile,
//! never the user's). Needs Chromium or Chrome installed.
//! `cargo run --example recipe_browser --features computer`
#![allow(clippy::print_stdout, missing_docs)]

use kinet::Agent;
use kinet::computer::browser::{BrowserConfig, BrowserSession, BrowserTools};
use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Chrome starts on the first browser call and stops at shutdown.
    let session = BrowserSession::new(BrowserConfig::default());
    let page =
        "data:text/html,<h1>Orders</h1><button onclick=\"this.textContent='Sent'\">Send</button>";
    // Scripted for the recipe; a real model reads the snapshot and picks refs.
    let model = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("c1", "browser_navigate", json!({"url": page})),
        ScriptedTurn::new().tool_call("c2", "browser_snapshot", json!({})),
        ScriptedTurn::text("The page has an Orders heading and a Send button."),
    ]);
    let agent = Agent::builder(model)
        // Navigating and clicking ask approval; snapshots and screenshots do not.
        .tools(BrowserTools::new(session.clone()).toolset())
        .policy(kinet::ApprovalPolicy::never())
        .build();
    let mut run = agent.run("What is on the page?");
    while let Some(event) = futures::StreamExt::next(&mut run).await {
        if let kinet::AgentEvent::ToolCallFinished { name, result, .. } = event {
            match result {
                Ok(output) => println!("{name}:\n{}", output.text),
                Err(error) => println!("{name} failed: {error}"),
            }
        }
    }
    println!("{}", run.finish().await.final_text().unwrap_or_default());
    session.shutdown().await;
    Ok(())
}
