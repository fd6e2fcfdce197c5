//! Recipe: approval from a GUI. kinet's `ChannelConfirmHandler` sends each
//! request to the UI over a channel and waits for the user's answer; the
//! run waits with it (up to the policy's timeout). A request dropped
//! unanswered denies the call.
//! `cargo run --example recipe_confirm_channel --features tools`
#![allow(clippy::print_stdout, missing_docs)]

use kinet::builder::Workspace;
use kinet::core::confirm::ChannelConfirmHandler;
use kinet::testing::{ScriptedProvider, ScriptedTurn};
use kinet::{Agent, ConfirmDecision};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (handler, mut requests) = ChannelConfirmHandler::new(8);
    // Stands in for the UI thread: show a dialog, send back the choice.
    let ui = tokio::spawn(async move {
        while let Some(pending) = requests.recv().await {
            if pending.is_closed() {
                continue; // the run stopped waiting: nothing to show
            }
            let request = &pending.request;
            println!("[dialog] {} wants to:\n{}", request.tool, request.summary);
            pending.respond(ConfirmDecision::Allow); // or Deny { reason }, Edit { arguments }, Abort
        }
    });
    let dir = tempfile::tempdir()?;
    let model = ScriptedProvider::new([
        ScriptedTurn::new().tool_call(
            "c1",
            "write_file",
            serde_json::json!({"path": "hello.txt", "content": "hello\n"}),
        ),
        ScriptedTurn::text("Created hello.txt."),
    ]);
    let agent = Agent::builder(model)
        .tools(kinet::tools::default_tools())
        .workspace(Workspace::new().cwd(dir.path()).root(dir.path()))
        .confirm_handler(handler)
        .build();
    let outcome = agent.run_to_completion("Create hello.txt").await;
    println!("{}", outcome.final_text().unwrap_or_default());
    drop(agent);
    ui.await?;
    Ok(())
}
