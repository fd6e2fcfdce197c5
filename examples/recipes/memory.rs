//! Recipe: long-term memory in SQLite. Memory blocks are shown to the model
//! every turn, the history is recorded for `recall_memory`, and the memory
//! tools let the model save what matters.
//! `cargo run --example recipe_memory --features memory`
#![allow(clippy::print_stdout, missing_docs)]

use kinet::builder::Calls;
use std::sync::Arc;

use kinet::Agent;
use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
use kinet::memory::{
    BlockSpec, BlocksHook, MemoryBackend, MemoryConfig, MemoryPack, MemoryStore, Model2VecEmbedder,
    Scope,
};
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?; // use a lasting path in a real host
    let store = MemoryStore::open(
        dir.path().join("memory.db"),
        MemoryConfig {
            // Offline embeddings bundled with kinet-memory; `None` = keywords only.
            embedder: Some(Arc::new(Model2VecEmbedder::bundled()?)),
            blocks: BlockSpec::defaults(), // user_profile, project_context, active_goals
        },
    )
    .await?;
    let session = "session-1"; // facts and history are kept per session id
    let model = ScriptedProvider::new([
        ScriptedTurn::new().tool_call(
            "c1",
            "memory_append",
            json!({"label": "user_profile", "text": "Prefers answers in French."}),
        ),
        ScriptedTurn::text("Noté : je répondrai en français."),
    ]);
    let memory = MemoryPack::new(store.clone(), session);
    let agent = Agent::builder(model)
        .tools(memory.toolset())
        .calls(Calls::new().hook(BlocksHook::new(store.clone()))) // blocks at the top of the latest user message
        .calls(Calls::new().hook(memory.history_hook())) // messages and results, for recall (minus the turn in progress)
        .policy(kinet::ApprovalPolicy::never()) // memory writes need no approval here
        .build();
    let outcome = agent
        .run_to_completion("Please answer in French from now on.")
        .await;
    println!("{}", outcome.final_text().unwrap_or_default());
    // A later process (another agent, another day) sees the block:
    for block in store.blocks(&Scope::EMPTY).await? {
        println!("[{}] {}", block.label, block.value);
    }
    Ok(())
}
