//! The terminal: lines the user types, and what the agent does, drawn as it
//! happens (streamed text, tool calls and their output, the todo list,
//! diffs, slow tools).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kinet::core::AgentRun;
use kinet::tools::todo::{TodoStatus, TodoUpdated};
use kinet::{AgentEvent, RunOutcome, RunStop};
use tokio::sync::{Mutex as AsyncMutex, mpsc};

/// A tool silent for this long gets a "still running" line.
const QUIET: Duration = Duration::from_secs(10);

/// Where everything is drawn: the terminal, or a buffer (tests).
#[derive(Clone)]
pub struct Out {
    sink: Arc<Mutex<Box<dyn Write + Send>>>,
    color: bool,
}

/// Colours, used only on a terminal (and never with `NO_COLOR`).
#[derive(Clone, Copy)]
pub enum Style {
    Dim,
    Bold,
    Green,
    Red,
    Yellow,
    Cyan,
}

impl Out {
    /// Standard output, coloured when it is a terminal.
    pub fn stdout() -> Self {
        let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Self {
            sink: Arc::new(Mutex::new(Box::new(std::io::stdout()))),
            color,
        }
    }

    /// Standard error, without colour (when standard output carries a
    /// protocol, as with `--acp`).
    pub fn stderr() -> Self {
        Self {
            sink: Arc::new(Mutex::new(Box::new(std::io::stderr()))),
            color: false,
        }
    }

    /// A buffer, without colour, and a handle to read it.
    #[allow(dead_code)] // used by the demo's test
    pub fn buffer() -> (Self, Arc<Mutex<Vec<u8>>>) {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let out = Self {
            sink: Arc::new(Mutex::new(Box::new(Shared(Arc::clone(&buffer))))),
            color: false,
        };
        (out, buffer)
    }

    /// Writes `text` as it is and flushes.
    pub fn write(&self, text: &str) {
        if let Ok(mut sink) = self.sink.lock() {
            let _ = sink.write_all(text.as_bytes());
            let _ = sink.flush();
        }
    }

    /// Writes `text` and a line break.
    pub fn line(&self, text: &str) {
        self.write(&format!("{text}\n"));
    }

    /// `text` in `style` (plain when not on a terminal).
    pub fn paint(&self, style: Style, text: &str) -> String {
        if !self.color {
            return text.to_owned();
        }
        let code = match style {
            Style::Dim => "2",
            Style::Bold => "1",
            Style::Green => "32",
            Style::Red => "31",
            Style::Yellow => "33",
            Style::Cyan => "36",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }

    /// A unified diff (or any text), `+`/`-`/`@@` lines coloured, each line
    /// prefixed with `margin`.
    pub fn diff(&self, margin: &str, text: &str) {
        for line in text.lines() {
            let style = if line.starts_with("+++") || line.starts_with("---") {
                Style::Bold
            } else if line.starts_with('+') {
                Style::Green
            } else if line.starts_with('-') {
                Style::Red
            } else if line.starts_with("@@") {
                Style::Cyan
            } else {
                Style::Dim
            };
            self.line(&format!("{margin}{}", self.paint(style, line)));
        }
    }
}

struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut buffer) = self.0.lock() {
            buffer.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Lines typed on the terminal, shared by the prompt and the approval
/// questions.
#[derive(Clone)]
pub struct Terminal {
    lines: Arc<AsyncMutex<mpsc::Receiver<String>>>,
}

impl Terminal {
    /// Starts reading standard input, on a thread of its own: a blocking
    /// read there never holds up the end of the program.
    pub fn start() -> Self {
        let (sender, receiver) = mpsc::channel(16);
        std::thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if sender.blocking_send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            lines: Arc::new(AsyncMutex::new(receiver)),
        }
    }

    /// Drops lines typed ahead (during a turn), so they are not taken as
    /// the answer to a question asked now; returns how many.
    pub async fn discard_typed_ahead(&self) -> usize {
        let mut lines = self.lines.lock().await;
        let mut dropped = 0;
        while lines.try_recv().is_ok() {
            dropped += 1;
        }
        dropped
    }

    /// Shows `prompt` and waits for a line; `None` at end of input.
    pub async fn read_line(&self, out: &Out, prompt: &str) -> Option<String> {
        out.write(prompt);
        self.lines.lock().await.recv().await
    }
}

/// Draws a run's events.
pub struct View {
    out: Out,
    /// In the middle of streamed answer (or reasoning) text.
    writing: bool,
    /// Tool output shown so far ends a line.
    at_line_start: bool,
    /// Running calls: name, started, last output.
    running: HashMap<String, (String, Instant, Instant)>,
    /// Calls whose output was streamed as progress.
    streamed: HashMap<String, usize>,
    /// When the current run started.
    started: Instant,
}

impl View {
    pub fn new(out: Out) -> Self {
        Self {
            out,
            writing: false,
            at_line_start: true,
            running: HashMap::new(),
            streamed: HashMap::new(),
            started: Instant::now(),
        }
    }

    fn end_text(&mut self) {
        if self.writing {
            self.out.line("");
            self.writing = false;
        }
        if !self.at_line_start {
            self.out.line("");
            self.at_line_start = true;
        }
    }

    /// Draws one event.
    pub fn event(&mut self, event: &AgentEvent) {
        let out = self.out.clone();
        match event {
            AgentEvent::TextDelta { text } => {
                if !self.writing {
                    self.end_text();
                    out.write(&out.paint(Style::Bold, "● "));
                    self.writing = true;
                }
                out.write(text);
            }
            AgentEvent::ReasoningDelta { text } => {
                if !self.writing {
                    self.end_text();
                    self.writing = true;
                }
                out.write(&out.paint(Style::Dim, text));
            }
            AgentEvent::AssistantMessage { .. } => self.end_text(),
            AgentEvent::ToolCallStarted {
                call_id,
                name,
                arguments,
            } => {
                self.end_text();
                let now = Instant::now();
                self.running
                    .insert(call_id.clone(), (name.clone(), now, now));
                if name == "todo_write" {
                    return; // the checklist it produces says it all
                }
                out.line(&format!(
                    "{} {} {}",
                    out.paint(Style::Cyan, "⚙"),
                    out.paint(Style::Bold, name),
                    out.paint(Style::Dim, &brief(name, arguments))
                ));
            }
            AgentEvent::ToolProgress { call_id, text, .. } => {
                if let Some(entry) = self.running.get_mut(call_id) {
                    entry.2 = Instant::now();
                }
                *self.streamed.entry(call_id.clone()).or_default() += text.len();
                for piece in text.split_inclusive('\n') {
                    if self.at_line_start {
                        out.write(&out.paint(Style::Dim, "  │ "));
                    }
                    let line = piece.trim_end_matches('\n');
                    out.write(&out.paint(Style::Dim, line));
                    self.at_line_start = piece.ends_with('\n');
                    if self.at_line_start {
                        out.write("\n");
                    }
                }
            }
            AgentEvent::ToolCallFinished {
                call_id,
                name,
                result,
                elapsed,
                ..
            } => {
                self.end_text();
                self.running.remove(call_id);
                let streamed = self.streamed.remove(call_id).is_some();
                let took = out.paint(Style::Dim, &format!("({})", seconds(*elapsed)));
                match result {
                    Ok(_) if name == "todo_write" => {}
                    Ok(output) => {
                        let lines = output.text.lines().count();
                        out.line(&format!(
                            "  {} {name} {took} {}",
                            out.paint(Style::Green, "✓"),
                            out.paint(Style::Dim, &format!("{lines} lines"))
                        ));
                        if name == "git_diff" {
                            out.diff("  │ ", &output.text);
                        } else if !streamed && matches!(name.as_str(), "grep" | "glob" | "shell") {
                            for line in output.text.lines().take(8) {
                                out.line(&out.paint(Style::Dim, &format!("  │ {line}")));
                            }
                            if lines > 8 {
                                out.line(&out.paint(Style::Dim, "  │ …"));
                            }
                        }
                    }
                    Err(error) => out.line(&format!(
                        "  {} {name} {took}: {}",
                        out.paint(Style::Red, "✗"),
                        out.paint(Style::Red, &error.to_string())
                    )),
                }
            }
            AgentEvent::Pack(pack) => {
                if let Some(todo) = pack.downcast_ref::<TodoUpdated>() {
                    self.end_text();
                    self.todo(todo);
                }
            }
            AgentEvent::HistoryRepaired { repairs } => {
                self.end_text();
                out.line(&out.paint(
                    Style::Dim,
                    &format!(
                        "  (history repaired before the next request: {} fix(es))",
                        repairs.len()
                    ),
                ));
            }
            AgentEvent::ContextCompacted {
                before_tokens,
                after_tokens,
                ..
            } => {
                self.end_text();
                out.line(&out.paint(
                    Style::Dim,
                    &format!("  (context compacted: ~{before_tokens} → ~{after_tokens} tokens)"),
                ));
            }
            AgentEvent::Warning { message } => {
                self.end_text();
                out.line(&out.paint(Style::Yellow, &format!("  ! {message}")));
            }
            AgentEvent::SubAgent { agent_id, event } => {
                if let AgentEvent::ToolCallStarted {
                    name, arguments, ..
                } = &**event
                {
                    self.end_text();
                    out.line(&out.paint(
                        Style::Dim,
                        &format!("  ↳ [{agent_id}] {name} {}", brief(name, arguments)),
                    ));
                }
            }
            AgentEvent::Done { stop, usage } => {
                self.end_text();
                let mut summary = format!("done in {}", seconds(self.started.elapsed()));
                if usage.input_tokens + usage.output_tokens > 0 {
                    summary += &format!(
                        ", {} tokens in ({} from cache), {} out",
                        usage.input_tokens, usage.cache_read_tokens, usage.output_tokens
                    );
                }
                match stop {
                    RunStop::Completed => {
                        out.line(&out.paint(Style::Dim, &format!("  ({summary})")))
                    }
                    RunStop::Failed(error) => {
                        out.line(&out.paint(Style::Red, &format!("  error: {error}")))
                    }
                    other => out.line(&out.paint(Style::Yellow, &format!("  ({other})"))),
                }
            }
            _ => {}
        }
    }

    /// The todo list as a checklist.
    fn todo(&self, todo: &TodoUpdated) {
        let out = &self.out;
        out.line(&out.paint(Style::Bold, "  Todo"));
        for item in &todo.todos {
            let line = match item.status {
                TodoStatus::Completed => {
                    format!("  ☑ {}", out.paint(Style::Dim, &item.content))
                }
                TodoStatus::InProgress => format!(
                    "  ▶ {}",
                    out.paint(
                        Style::Yellow,
                        item.active_form.as_deref().unwrap_or(&item.content)
                    )
                ),
                _ => format!("  ☐ {}", item.content),
            };
            out.line(&line);
        }
    }

    /// Called every second: says which tools have been quiet for a while.
    pub fn tick(&mut self) {
        let now = Instant::now();
        let mut quiet = Vec::new();
        for (name, started, last) in self.running.values_mut() {
            if now.duration_since(*last) >= QUIET {
                *last = now;
                quiet.push(format!(
                    "  … {name} still running ({})",
                    seconds(now.duration_since(*started))
                ));
            }
        }
        for line in quiet {
            self.end_text();
            self.out.line(&self.out.paint(Style::Dim, &line));
        }
    }

    /// A line of the host's own (not the agent's).
    pub fn note(&mut self, text: &str) {
        self.end_text();
        self.out.line(&self.out.paint(Style::Yellow, text));
    }
}

/// Drives a run to its end, drawing every event; with `ctrl_c`, Ctrl-C
/// cancels the run (the tool in flight is stopped, nothing lands after).
pub async fn drive(mut run: AgentRun, view: &mut View, ctrl_c: bool) -> RunOutcome {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut cancelled = false;
    view.started = Instant::now();
    loop {
        tokio::select! {
            event = run.next() => match event {
                Some(event) => view.event(&event),
                None => break,
            },
            _ = tick.tick() => view.tick(),
            _ = tokio::signal::ctrl_c(), if ctrl_c && !cancelled => {
                cancelled = true;
                view.note("  ^C: cancelling this turn");
                run.cancel();
            }
        }
    }
    run.finish().await
}

/// A one-line description of a call's arguments.
fn brief(tool: &str, arguments: &str) -> String {
    let args: serde_json::Value = serde_json::from_str(arguments).unwrap_or_default();
    let field = |key: &str| args.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    let text = match tool {
        "shell" => field("command"),
        "read_file" | "write_file" | "edit_file" => field("path"),
        "grep" => {
            field("pattern").map(|p| format!("/{p}/ in {}", field("path").unwrap_or(".".into())))
        }
        "glob" => field("pattern"),
        "git_diff" => Some(field("file").unwrap_or_default()),
        "todo_write" => Some(String::new()),
        _ => None,
    }
    .unwrap_or_else(|| arguments.to_owned());
    let one_line = text.replace('\n', " ⏎ ");
    match one_line.char_indices().nth(100) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    }
}

fn seconds(elapsed: Duration) -> String {
    if elapsed < Duration::from_secs(1) {
        format!("{} ms", elapsed.as_millis())
    } else {
        format!("{:.1} s", elapsed.as_secs_f64())
    }
}
