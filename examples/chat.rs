//! An interactive terminal chat: streamed answers, tool calls as they
//! happen, and approval asked on the terminal through a `ConfirmHandler`.
//!
//! ```text
//! # a real model (any one of these):
//! OPENAI_API_KEY=sk-... cargo run --example chat
//! ANTHROPIC_API_KEY=sk-ant-... cargo run --example chat
//! KINET_BASE_URL=http://127.0.0.1:11434/v1 KINET_MODEL=qwen3:8b cargo run --example chat
//! # offline (an echo model, to try the terminal flow):
//! cargo run --example chat
//! ```
//!
//! Type a message and press Enter; `/quit` (or end of input) leaves; Ctrl-C
//! cancels the answer in progress.
#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kinet::core::Message;
use kinet::core::confirm::ConfirmError;
use kinet::core::confirm::ConfirmRequest;
use kinet::core::provider::from_env;
use kinet::core::provider::{ChatRequest, ProviderError, ProviderStream, StopReason, StreamEvent};
use kinet::{
    Agent, AgentEvent, ConfirmDecision, ConfirmHandler, Conversation, Provider, RunStop, Tool,
    ToolCtx, ToolError, ToolOutput, async_trait,
};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Mutex as AsyncMutex, mpsc};

/// Lines typed on the terminal, shared by the chat loop and the approval
/// prompt.
#[derive(Clone)]
struct Terminal {
    lines: Arc<AsyncMutex<mpsc::Receiver<String>>>,
}

impl Terminal {
    fn start() -> Self {
        let (sender, receiver) = mpsc::channel(16);
        tokio::spawn(async move {
            let mut lines = BufReader::new(tokio::io::stdin()).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if sender.send(line).await.is_err() {
                    break;
                }
            }
        });
        Self {
            lines: Arc::new(AsyncMutex::new(receiver)),
        }
    }

    async fn read_line(&self, prompt: &str) -> Option<String> {
        print!("{prompt}");
        let _ = std::io::stdout().flush();
        self.lines.lock().await.recv().await
    }
}

/// Approval on the terminal: y = once, a = for the session, n = deny (with
/// an optional reason), q = abort the run.
struct TerminalConfirm(Terminal);

#[async_trait]
impl ConfirmHandler for TerminalConfirm {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        println!("\n┌ `{}` wants to run:", request.tool);
        for line in request.summary.lines() {
            println!("│ {line}");
        }
        let answer = self
            .0
            .read_line("└ allow? [y]es / [a]lways / [n]o / [q]uit run: ")
            .await
            .ok_or_else(|| ConfirmError("the terminal closed".into()))?;
        Ok(match answer.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => ConfirmDecision::Approve,
            "a" | "always" => ConfirmDecision::ApproveForSession,
            "q" | "quit" => ConfirmDecision::Abort,
            _ => {
                let reason = self
                    .0
                    .read_line("  reason for the model (optional): ")
                    .await;
                ConfirmDecision::Deny {
                    reason: reason.filter(|r| !r.trim().is_empty()),
                }
            }
        })
    }
}

#[derive(Clone, Default)]
struct Notes(Arc<Mutex<Vec<String>>>);

#[derive(Deserialize, JsonSchema)]
struct SaveNote {
    /// The note to keep.
    text: String,
}

/// A mutating demo tool: asks for approval.
struct SaveNoteTool(Notes);

#[async_trait]
impl Tool for SaveNoteTool {
    type Args = SaveNote;
    fn name(&self) -> &str {
        "save_note"
    }
    fn description(&self) -> &str {
        "Saves a note for the user for the rest of this chat session."
    }
    async fn confirm_summary(&self, args: &SaveNote, _: &ToolCtx) -> Option<String> {
        Some(format!("save the note: {}", args.text))
    }
    async fn call(&self, args: SaveNote, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let mut notes = self
            .0
            .0
            .lock()
            .map_err(|_| ToolError::failed("notes poisoned"))?;
        notes.push(args.text);
        Ok(ToolOutput::text(format!("saved ({} notes)", notes.len())))
    }
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

/// A read-only demo tool: runs without asking.
struct ListNotesTool(Notes);

#[async_trait]
impl Tool for ListNotesTool {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "list_notes"
    }
    fn description(&self) -> &str {
        "Lists the notes saved in this chat session, one per line."
    }
    fn annotations(&self) -> kinet::ToolAnnotations {
        kinet::ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let notes = self
            .0
            .0
            .lock()
            .map_err(|_| ToolError::failed("notes poisoned"))?;
        Ok(ToolOutput::text(if notes.is_empty() {
            "(no notes)".to_owned()
        } else {
            notes.join("\n")
        }))
    }
}

/// The offline model: echoes the last user message, and saves it as a note
/// when it starts with "note:", to show the approval flow.
struct EchoModel;

#[async_trait]
impl Provider for EchoModel {
    fn name(&self) -> &str {
        "echo"
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let last = request.messages.last().cloned();
        let events: Vec<StreamEvent> = match last {
            Some(Message::User { .. }) => {
                let text = last.map(|m| m.text()).unwrap_or_default();
                match text.strip_prefix("note:") {
                    Some(note) => vec![
                        StreamEvent::ToolCallStart {
                            index: 0,
                            id: String::new(),
                            name: "save_note".into(),
                        },
                        StreamEvent::ToolCallArgumentsDelta {
                            index: 0,
                            delta: serde_json::json!({"text": note.trim()}).to_string(),
                        },
                        StreamEvent::Finished(StopReason::ToolUse),
                    ],
                    None => vec![
                        StreamEvent::TextDelta(format!(
                            "(offline echo; set OPENAI_API_KEY, ANTHROPIC_API_KEY or KINET_BASE_URL for a real model) You said: {text}"
                        )),
                        StreamEvent::Finished(StopReason::EndTurn),
                    ],
                }
            }
            Some(tool_result) => vec![
                StreamEvent::TextDelta(format!("The tool said: {}", tool_result.text())),
                StreamEvent::Finished(StopReason::EndTurn),
            ],
            None => vec![StreamEvent::Finished(StopReason::EndTurn)],
        };
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let terminal = Terminal::start();
    let notes = Notes::default();
    let builder = match from_env()? {
        Some(chosen) => {
            println!("kinet chat: {}", chosen.label);
            Agent::builder_arc(chosen.provider).model(chosen.model)
        }
        None => {
            println!("kinet chat: offline echo model (try `note: buy milk`)");
            Agent::builder(EchoModel)
        }
    };
    let agent = builder
        .system_prompt(
            "You are a helpful assistant in a terminal chat. You can save and list notes.",
        )
        .tool(SaveNoteTool(notes.clone()))
        .tool(ListNotesTool(notes))
        .confirm_handler(TerminalConfirm(terminal.clone()))
        .build();
    println!("type a message; /quit to leave, Ctrl-C to stop an answer\n");

    let mut conversation = Conversation::new();
    while let Some(line) = terminal.read_line("you> ").await {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/quit" {
            break;
        }
        conversation.push_user(line);
        let mut run = agent.run(conversation.clone());
        let mut writing = false;
        loop {
            let event = tokio::select! {
                event = run.next() => event,
                _ = tokio::signal::ctrl_c() => {
                    run.cancel();
                    continue;
                }
            };
            let Some(event) = event else { break };
            match event {
                AgentEvent::TextDelta { text } => {
                    if !writing {
                        print!("ai> ");
                        writing = true;
                    }
                    print!("{text}");
                    let _ = std::io::stdout().flush();
                }
                AgentEvent::AssistantMessage { .. } if writing => {
                    println!();
                    writing = false;
                }
                AgentEvent::ToolCallStarted {
                    name, arguments, ..
                } => println!("  ⚙ {name} {arguments}"),
                AgentEvent::ToolCallFinished { name, result, .. } => match result {
                    Ok(output) => {
                        let first = output.text.lines().next().unwrap_or_default();
                        println!("  ✓ {name}: {first}");
                    }
                    Err(error) => println!("  ✗ {name}: {error}"),
                },
                AgentEvent::Done { stop, .. } => match stop {
                    RunStop::Completed => {}
                    RunStop::Cancelled => println!("\n(cancelled)"),
                    RunStop::Failed(error) => eprintln!("\nerror: {error}"),
                    other => println!("\n({other:?})"),
                },
                _ => {}
            }
        }
        let outcome = run.finish().await;
        if writing {
            println!();
        }
        conversation = outcome.conversation;
    }
    Ok(())
}
