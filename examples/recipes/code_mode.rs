//! Recipe: Code Mode. The model writes one Python script that calls the
//! tools (here: list 30 files, read each, count the TODO lines) instead of
//! one model turn per call, and reads only what the script prints. Each
//! call in the script still goes through the approval policy, hooks and
//! events. Worth it for many similar calls whose results the model need
//! not read one by one; not for one or two calls, or when each result
//! needs the model's judgment before the next.
//! `cargo run --example recipe_code_mode --features code-mode`
#![allow(clippy::print_stdout, missing_docs)]

use kinet::builder::Workspace;
use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
use kinet::tools::code_mode::CodeMode;
use kinet::{Agent, AgentEvent, Message};

const SCRIPT: &str = r#"
todos = 0
files = [f for f in glob(pattern="notes/*.txt").splitlines() if f.endswith(".txt")]
for f in files:
    todos += sum(1 for line in read_file(path=f).splitlines() if "TODO" in line)
print(len(files), "files,", todos, "TODO lines")
"#;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("notes"))?;
    for i in 0..30 {
        let text = format!("note {i}\nTODO: call {i}\nTODO: file\ndone\n");
        std::fs::write(dir.path().join(format!("notes/{i}.txt")), text)?;
    }
    // Build `run_code` from the tools it offers, then add it beside them.
    let mut tools = kinet::tools::default_tools();
    let code = CodeMode::new(&tools).max_tool_calls(100);
    tools.add(code);

    // The model (scripted here) writes the script, then answers.
    let model = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("s", "run_code", serde_json::json!({ "code": SCRIPT })),
        ScriptedTurn::text("There are 60 TODO lines in 30 notes."),
    ]);
    let agent = Agent::builder(model)
        .tools(tools)
        .workspace(Workspace::new().root(dir.path()).cwd(dir.path()))
        .build();
    let mut run = agent.run("How many TODO lines are in notes/?");
    let mut calls = 0;
    while let Some(event) = futures::StreamExt::next(&mut run).await {
        calls += usize::from(matches!(event, AgentEvent::ToolCallStarted { .. }));
    }
    let outcome = run.finish().await;
    for message in &outcome.conversation.messages {
        if let Message::Tool { .. } = message {
            println!("the script printed: {}", message.text().trim_end());
        }
    }
    println!("{calls} tool calls (the script and its own), 2 model turns");
    println!("{}", outcome.final_text().unwrap_or_default());
    Ok(())
}
