//! Recipe: approval from a GUI. The handler sends each request to the UI
//! over a channel and waits for the user's answer; the run waits with it
//! (up to the policy's timeout). `cargo run --example recipe_confirm_channel`
#![allow(clippy::print_stdout, missing_docs)]

use kinet::builder::Workspace;
use kinet::core::confirm::ConfirmError;
use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
use kinet::{Agent, ConfirmDecision, ConfirmHandler, ConfirmRequest, async_trait};
use tokio::sync::{mpsc, oneshot};

type Ask = (ConfirmRequest, oneshot::Sender<ConfirmDecision>);

struct ChannelConfirm(mpsc::Sender<Ask>);

#[async_trait]
impl ConfirmHandler for ChannelConfirm {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        let (answer, reply) = oneshot::channel();
        let gone = |_| ConfirmError("the approval window was closed".into());
        self.0.send((request, answer)).await.map_err(|_| gone(()))?;
        reply.await.map_err(|_| gone(()))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (asks, mut inbox) = mpsc::channel::<Ask>(8);
    // Stands in for the UI thread: show a dialog, send back the choice.
    let ui = tokio::spawn(async move {
        while let Some((request, answer)) = inbox.recv().await {
            println!("[dialog] {} wants to:\n{}", request.tool, request.summary);
            let _ = answer.send(ConfirmDecision::Allow); // or Deny { reason }, Abort, ...
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
        .workspace(Workspace::new().root(dir.path()).cwd(dir.path()))
        .confirm_handler(ChannelConfirm(asks))
        .build();
    let outcome = agent.run_to_completion("Create hello.txt").await;
    println!("{}", outcome.final_text().unwrap_or_default());
    drop(agent);
    ui.await?;
    Ok(())
}
