//! An agent with SQLite memory. Run it twice: the first run stores what the
//! user says (a memory block, a fact, history); the second, a new process,
//! recalls it.
//!
//! ```text
//! cargo run --example memory --features memory     # first run: remembers
//! cargo run --example memory --features memory     # second run: recalls
//! KINET_MEMORY_DB=/tmp/other.db cargo run --example memory --features memory
//! ```
//!
//! Offline by default (a scripted model); with `OPENAI_API_KEY`,
//! `ANTHROPIC_API_KEY` or `KINET_BASE_URL` set, a real model drives it.
#![allow(clippy::print_stdout, missing_docs)]

use kinet::builder::Calls;
use std::sync::Arc;

use futures::StreamExt;
use kinet::core::provider::from_env;
use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
use kinet::memory::{
    BlockSpec, BlocksHook, MemoryBackend, MemoryConfig, MemoryPack, MemoryStore, Model2VecEmbedder,
    Scope,
};
use kinet::{Agent, AgentEvent};
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::var_os("KINET_MEMORY_DB")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("kinet-memory-example.db"));
    let store = MemoryStore::open(
        &path,
        MemoryConfig {
            embedder: Some(Arc::new(Model2VecEmbedder::bundled()?)),
            blocks: BlockSpec::defaults(),
        },
    )
    .await?;
    let first_run = store.record_count(&Scope::EMPTY).await? == 0;
    println!(
        "memory file: {} ({})",
        path.display(),
        if first_run { "new" } else { "existing" }
    );

    let (question, script) = if first_run {
        (
            "Hi! I'm Ada. I maintain the billing service, and we deploy it to Kubernetes every Tuesday.",
            vec![
                ScriptedTurn::new()
                    .tool_call("c1", "memory_append", json!({"label": "user_profile", "text": "Name: Ada. Maintains the billing service."}))
                    .tool_call("c2", "kg_add", json!({"subject": "billing service", "predicate": "deployed_to", "object": "Kubernetes", "source": "Ada"})),
                ScriptedTurn::text("Nice to meet you, Ada. I'll remember that."),
            ],
        )
    } else {
        (
            "When do we ship the payments service?",
            vec![
                ScriptedTurn::new().tool_call(
                    "c1",
                    "recall_memory",
                    json!({"query": "when do we ship the payments service"}),
                ),
                ScriptedTurn::text(
                    "From what you told me before: the billing service goes to Kubernetes every Tuesday.",
                ),
            ],
        )
    };
    let builder = match from_env()? {
        Some(chosen) => Agent::builder(chosen.provider).model(chosen.model),
        None => Agent::builder(ScriptedProvider::new(script)),
    };
    let memory = MemoryPack::new(store.clone(), if first_run { "run-1" } else { "run-2" });
    let agent = builder
        .system_prompt("You are an assistant with long-term memory. Save what matters about the user; recall before answering about the past.")
        .tools(memory.toolset())
        .calls(Calls::new().hook(BlocksHook::new(store.clone())))
        // Records the conversation for recall_memory, which then leaves out
        // the turn in progress (its own question).
        .calls(Calls::new().hook(memory.history_hook()))
        .build();

    println!("\nuser: {question}");
    let mut run = agent.run(question);
    while let Some(event) = run.next().await {
        match event {
            AgentEvent::ToolCallStarted {
                name, arguments, ..
            } => println!("  → {name} {arguments}"),
            AgentEvent::ToolCallFinished { name, result, .. } => match result {
                Ok(output) => println!("  ✓ {name}:\n{}", indent(&output.text)),
                Err(error) => println!("  ✗ {name}: {error}"),
            },
            AgentEvent::AssistantMessage { message } if !message.text().is_empty() => {
                println!("assistant: {}", message.text());
            }
            _ => {}
        }
    }
    run.finish().await;
    if first_run {
        println!("\nRun it again: the next run, a new process, recalls this.");
    }
    Ok(())
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("      {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
