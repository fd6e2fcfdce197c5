//! Recipe: an approval that comes later, in another process. A service's
//! policy defers every question: the run stops with `AwaitingApproval`,
//! its session is saved; when the person answers (an hour later, on
//! another replica), the session is loaded and `Agent::resume` finishes it.
//! `cargo run --example recipe_deferred_approval`
#![allow(clippy::print_stdout, missing_docs)]

use kinet::builder::Workspace;
use kinet::core::deferred::Decisions;
use kinet::core::session::Session;
use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
use kinet::{Agent, ApprovalPolicy, RunStop};

/// The same agent on every replica (with a scripted model here).
fn agent(dir: &std::path::Path, model: ScriptedProvider) -> Agent {
    Agent::builder(model)
        .tools(kinet::tools::default_tools())
        .workspace(Workspace::new().root(dir).cwd(dir))
        .policy(ApprovalPolicy::ask().defer_questions(true))
        .build()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let saved = dir.path().join("session.json"); // a row in your database
    // Request 1: the model wants to write a file; the run stops there.
    let write = serde_json::json!({"path": "hello.txt", "content": "hello\n"});
    let first = ScriptedProvider::new([ScriptedTurn::new().tool_call("c1", "write_file", write)]);
    let outcome = agent(dir.path(), first)
        .run_to_completion("Create hello.txt")
        .await;
    let RunStop::AwaitingApproval { pending } = &outcome.stop else {
        anyhow::bail!("expected a pending approval, got: {}", outcome.stop);
    };
    for ask in pending {
        println!("[ask] {} ({}):\n{}", ask.tool, ask.call_id, ask.summary);
    }
    std::fs::write(
        &saved,
        Session::capture(&outcome.conversation, &[]).to_json(),
    )?;

    // Later, anywhere: load, answer, finish. The approved call runs once.
    let session = Session::from_json(&std::fs::read_to_string(&saved)?)?;
    let (conversation, _) = session.resume(&[])?;
    let decisions = Decisions::new().allow("c1"); // or .deny("c1", "why"), .edit(...)
    let later = ScriptedProvider::new([ScriptedTurn::text("Created hello.txt.")]);
    let done = agent(dir.path(), later)
        .resume(conversation, decisions)
        .finish()
        .await;
    println!("{} -> {}", done.stop, done.final_text().unwrap_or_default());
    println!(
        "hello.txt: {:?}",
        std::fs::read_to_string(dir.path().join("hello.txt"))?
    );
    Ok(())
}
