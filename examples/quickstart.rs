//! Quickstart: a custom tool, an approval handler, and the event stream.
//!
//! Runs offline with no API key: the model is a `ScriptedProvider` playing a
//! short conversation in which the "model" reads notes (two read-only calls
//! that run concurrently), adds a note (a mutating call that asks for
//! approval), and answers.
//!
//! With `OPENAI_API_KEY`, `ANTHROPIC_API_KEY` or `KINET_BASE_URL` set (see
//! `kinet::core::provider::from_env`), the same agent talks to a real model.
//!
//! ```text
//! cargo run --example quickstart
//! ```
#![allow(clippy::print_stdout, missing_docs)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kinet::core::confirm::ConfirmRequest;
use kinet::core::provider::{StopReason, Usage};
use kinet::core::testing::ScriptedProvider;
use kinet::core::testing::ScriptedTurn;
use kinet::{
    Agent, AgentEvent, ConfirmDecision, ConfirmHandler, RunStop, Tool, ToolCtx, ToolError,
    ToolOutput, async_trait,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// The host's state: a shared notebook.
#[derive(Clone, Default)]
struct Notebook(Arc<Mutex<Vec<String>>>);

#[derive(Deserialize, JsonSchema)]
struct SearchNotes {
    /// Words to look for (case-insensitive).
    query: String,
}

/// A read-only tool: the engine runs it without asking, concurrently with
/// neighbouring read-only calls.
struct SearchNotesTool(Notebook);

#[async_trait]
impl Tool for SearchNotesTool {
    type Args = SearchNotes;
    fn name(&self) -> &str {
        "search_notes"
    }
    fn description(&self) -> &str {
        "Searches the user's notes. Returns matching notes, one per line."
    }
    fn annotations(&self) -> kinet::ToolAnnotations {
        kinet::ToolAnnotations::read_only()
    }
    async fn call(&self, args: SearchNotes, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let query = args.query.to_lowercase();
        let notes = self
            .0
            .0
            .lock()
            .map_err(|_| ToolError::failed("notebook poisoned"))?;
        let hits: Vec<&String> = notes
            .iter()
            .filter(|n| n.to_lowercase().contains(&query))
            .collect();
        if hits.is_empty() {
            return Err(ToolError::not_found(format!(
                "no note mentions `{}`",
                args.query
            )));
        }
        Ok(ToolOutput::text(
            hits.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        ))
    }
}

#[derive(Deserialize, JsonSchema)]
struct AddNote {
    /// The note text.
    text: String,
}

/// A mutating tool: the engine asks the ConfirmHandler first.
struct AddNoteTool(Notebook);

#[async_trait]
impl Tool for AddNoteTool {
    type Args = AddNote;
    fn name(&self) -> &str {
        "add_note"
    }
    fn description(&self) -> &str {
        "Adds a note to the user's notebook."
    }
    async fn confirm_summary(&self, args: &AddNote, _ctx: &ToolCtx) -> Option<String> {
        Some(format!("add the note {:?}", args.text))
    }
    async fn call(&self, args: AddNote, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let mut notes = self
            .0
            .0
            .lock()
            .map_err(|_| ToolError::failed("notebook poisoned"))?;
        notes.push(args.text);
        Ok(ToolOutput::text(format!(
            "saved; {} notes now",
            notes.len()
        )))
    }
}

/// An approval UI: prints the request and approves it. A real host shows a
/// dialog here.
struct PrintAndApprove;

#[async_trait]
impl ConfirmHandler for PrintAndApprove {
    async fn confirm(
        &self,
        request: ConfirmRequest,
    ) -> Result<ConfirmDecision, kinet::core::confirm::ConfirmError> {
        println!("  ? approve `{}`: {} -> yes", request.tool, request.summary);
        Ok(ConfirmDecision::Allow)
    }
}

fn script() -> ScriptedProvider {
    let usage = |input, output| Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    };
    ScriptedProvider::new([
        ScriptedTurn::text("Let me check your notes first. ")
            .tool_call("call_1", "search_notes", json!({"query": "dentist"}))
            .tool_call("call_2", "search_notes", json!({"query": "passport"}))
            .with_usage(usage(412, 38)),
        ScriptedTurn::text("Your passport note is missing; I'll add it. ")
            .tool_call(
                "call_3",
                "add_note",
                json!({"text": "Renew passport before the March trip"}),
            )
            .with_usage(usage(530, 29)),
        ScriptedTurn::text(
            "Done. Your dentist appointment is on Tuesday at 9:00, and I added a \
             reminder to renew your passport before the March trip.",
        )
        .with_usage(usage(588, 31))
        .with_stop(StopReason::EndTurn),
    ])
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let notebook = Notebook::default();
    notebook
        .0
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .push("Dentist: Tuesday 9:00, Dr. Lee".into());

    // A real model when the environment names one (OPENAI_API_KEY,
    // ANTHROPIC_API_KEY, or KINET_BASE_URL for a local server; KINET_MODEL
    // picks the model); otherwise the offline scripted one.
    let builder = match kinet::core::provider::from_env()? {
        Some(chosen) => {
            println!("model: {}\n", chosen.label);
            Agent::builder(chosen.provider).model(chosen.model)
        }
        None => {
            println!(
                "model: offline script (set OPENAI_API_KEY, ANTHROPIC_API_KEY or KINET_BASE_URL for a real one)\n"
            );
            Agent::builder(script())
        }
    };
    let agent = builder
        .system_prompt("You are a helpful assistant with access to the user's notes.")
        .tool(SearchNotesTool(notebook.clone()))
        .tool(AddNoteTool(notebook.clone()))
        .confirm_handler(PrintAndApprove)
        .build();

    let question = "When is my dentist appointment? And remind me about my passport.";
    println!("user: {question}\n");
    let mut run = agent.run(question);
    let mut in_text = false;
    while let Some(event) = run.next().await {
        match event {
            AgentEvent::TurnStarted { turn } => println!("── turn {turn}"),
            AgentEvent::TextDelta { text } => {
                if !in_text {
                    print!("assistant: ");
                    in_text = true;
                }
                print!("{text}");
                std::io::stdout().flush()?;
            }
            AgentEvent::AssistantMessage { .. } if in_text => {
                println!();
                in_text = false;
            }
            AgentEvent::ToolCallStarted {
                name, arguments, ..
            } => println!("  → {name} {arguments}"),
            AgentEvent::ToolCallFinished {
                name,
                result,
                elapsed,
                ..
            } => match result {
                Ok(output) => println!("  ✓ {name} ({elapsed:.1?}): {}", output.text),
                Err(error) => println!("  ✗ {name} ({elapsed:.1?}): {error}"),
            },
            AgentEvent::Usage { usage } => println!(
                "  · tokens: {} in, {} out",
                usage.input_tokens, usage.output_tokens
            ),
            AgentEvent::Done { stop, usage } => {
                let why = match stop {
                    RunStop::Completed => "completed".to_string(),
                    other => format!("{other:?}"),
                };
                println!(
                    "── done: {why}; {} tokens in, {} out",
                    usage.input_tokens, usage.output_tokens
                );
            }
            _ => {}
        }
    }
    let outcome = run.finish().await;
    println!(
        "\nnotebook now holds {} notes; the conversation has {} messages.",
        notebook
            .0
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .len(),
        outcome.conversation.messages.len()
    );
    Ok(())
}
