//! Recipe: durable runs on Restate. The agent is a Restate virtual object
//! keyed by conversation: each model call and tool call is a journaled
//! step, a crashed process's run is retried and goes on from its last
//! finished step, and an approval waits durably until a host answers.
//! `cargo run --example recipe_restate --features tools,restate`, then:
//! ```text
//! restate-server &     # npm @restatedev/restate-server; ingress :8080, admin :9070
//! curl localhost:9070/deployments -H 'content-type: application/json' \
//!      -d '{"uri": "http://127.0.0.1:9080"}'
//! curl localhost:8080/KinetAgent/alice/prompt -H 'content-type: application/json' \
//!      -d '{"text": "Create notes.txt saying hi"}'          # waits for approval
//! curl -X POST localhost:8080/KinetAgent/alice/pending      # the awakeable's id
//! curl localhost:8080/restate/awakeables/<id>/resolve -H 'content-type: application/json' \
//!      -d '{"<call id>": {"decision": "allow"}}'
//! ```
#![allow(clippy::print_stdout, missing_docs)]

use kinet::builder::Workspace;
use kinet::restate::AgentObject;
use kinet::{Agent, ApprovalPolicy};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // A model from the environment (KINET_BASE_URL=http://127.0.0.1:8081/v1
    // for a local llama-server, or KINET_PROVIDER and a key).
    let chosen = kinet::core::provider::from_env()?
        .ok_or_else(|| anyhow::anyhow!("set KINET_BASE_URL (or KINET_PROVIDER) for the model"))?;
    let workspace = std::env::current_dir()?;
    let model_name = chosen.model.clone();
    // Called once per run with the journaled model: the agent as you
    // would build it anywhere else. Every approval question waits for
    // the host (an awakeable), whatever the handler.
    let object = AgentObject::new(chosen.provider, move |model| {
        Agent::builder(model)
            .model(model_name.clone())
            .tools(kinet::tools::default_tools())
            .workspace(Workspace::new().root(&workspace).cwd(&workspace))
            .policy(ApprovalPolicy::ask())
    });
    // Events of the runs this process serves (replayed steps send theirs
    // again after a crash).
    let mut events = object.events();
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            println!("[{}] {:?}", event.conversation, event.event);
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:9080").await?;
    println!("serving KinetAgent on http://127.0.0.1:9080 (register it with Restate)");
    object.serve_on(listener, tokio::signal::ctrl_c()).await;
    Ok(())
}
