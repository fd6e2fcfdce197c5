//! Code Mode: `run_code`, a Python script in which the agent's tools are
//! functions. For work that is many small calls (read 50 files and count,
//! look up 20 prices and sum), the model writes one script instead of one
//! turn per call, and reads only what the script prints.
//!
//! The script runs in [monty](https://crates.io/crates/monty), a sandboxed
//! interpreter of a Python subset written in Rust, in this process: no
//! file, socket, environment or clock access (such calls raise
//! `PermissionError`), no imports beyond the modules monty implements. Each
//! tool call in the script goes through the agent's pipeline as if the
//! model had made it ([`ToolCtx::call_tool`]): the approval policy and the
//! host's handler, the injection defence, hooks, layers, events and spans.
//! A denied or failed call raises `RuntimeError` in the script (catch it
//! with `except Exception as e`). A tool returns its text, or the dict or
//! list its text holds when it is JSON.
//!
//! Limits ([`CodeMode`]'s builder): the interpreter's time (default 10 s,
//! not counting the tools' own time, which their timeouts bound), the
//! number of tool calls (100), the printed output (64 KiB) and memory
//! (256 MiB; enforced only when the program installs monty's allocator
//! crate, `monty-alloc`, as its global allocator).
//!
//! When it pays: many calls whose results the model need not read one by
//! one (filter, count, sum, join), and loops whose shape is known. When it
//! does not: one or two calls, or when each result decides the next step
//! in ways that need the model's judgment; and models that write poor
//! Python do better with plain calls.
//!
//! A call whose approval is deferred
//! ([`defer_questions`](kinet_core::ApprovalPolicy::defer_questions), or a
//! handler's [`Defer`](kinet_core::ConfirmDecision::Defer)) pauses the
//! script: the interpreter's state (its variables, where it stopped, what
//! it printed) is saved with the run's deferred turn, in the session, and
//! [`Agent::resume`](kinet_core::Agent::resume), in this process or
//! another, continues the script at that call with the decision (a denial
//! raises `RuntimeError` there). The state is monty's own format: resume
//! with the same monty version.
//!
//! ```
//! use kinet_core::tool::Toolset;
//! use kinet_tools::code_mode::CodeMode;
//!
//! let mut tools = kinet_tools::default_tools();
//! let code = CodeMode::new(&tools).max_tool_calls(50);
//! tools.add(code);
//! ```

mod convert;
mod describe;
mod paused;
mod script;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kinet_core::tool::{Scheduling, ToolAnnotations, ToolSpec, Toolset};
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use monty::MontyRun;
use monty_types::{ExcType, MontyException, MontyObject};
use schemars::JsonSchema;
use serde::Deserialize;

use script::{Caller, End, Start};

/// The `run_code` tool. Build it after the tools it offers are in the
/// toolset (it lists them in its description); add it to the same one.
#[derive(Debug, Clone)]
pub struct CodeMode {
    specs: Arc<[ToolSpec]>,
    description: String,
    limits: Limits,
}

/// The script.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RunCodeArgs {
    /// The Python script. Tools are functions; print what you need to see;
    /// the value of the last expression is shown too.
    pub code: String,
}

impl CodeMode {
    /// Offers the toolset's tools (its static ones: tools from sources
    /// such as MCP servers are offered when built with
    /// [`for_specs`](Self::for_specs) from a snapshot). Defaults: 10 s of
    /// interpreter time, 256 MiB, 100 tool calls, 64 KiB of output.
    pub fn new(tools: &Toolset) -> Self {
        Self::for_specs(tools.static_tools().specs().to_vec())
    }

    /// Offers these tools.
    pub fn for_specs(specs: Vec<ToolSpec>) -> Self {
        let mut code = Self {
            specs: specs
                .into_iter()
                .filter(|spec| spec.name != "run_code")
                .collect(),
            description: String::new(),
            limits: Limits {
                time: Duration::from_secs(10),
                memory: 256 << 20,
                calls: 100,
                output: 64 << 10,
            },
        };
        code.describe();
        code
    }

    /// The interpreter's time limit (tool calls not counted).
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.limits.time = limit;
        self.describe();
        self
    }

    /// The memory limit in bytes (needs `monty-alloc` as the program's
    /// global allocator to be enforced).
    pub fn memory_limit(mut self, bytes: usize) -> Self {
        self.limits.memory = bytes;
        self
    }

    /// The most tool calls one script may make.
    pub fn max_tool_calls(mut self, calls: usize) -> Self {
        self.limits.calls = calls;
        self.describe();
        self
    }

    /// The most printed output kept, in bytes.
    pub fn max_output(mut self, bytes: usize) -> Self {
        self.limits.output = bytes;
        self.describe();
        self
    }

    fn describe(&mut self) {
        let mut text = String::from(
            "Runs a Python script in which your tools are functions. Use it for work that \
             is many tool calls (loops, filters, counts, sums): only what the script prints, \
             and the value of its last expression, come back to you. The Python is a \
             sandboxed subset: no files, network, environment or clock except through the \
             functions below; no imports beyond a few standard modules.\n\
             A function returns the tool's text (or a dict or list when the text is JSON). \
             A failed or denied call raises RuntimeError: catch it with \
             `except Exception as e` to go on.\n",
        );
        text.push_str(&format!(
            "Limits: {} s of interpreter time, {} tool calls, {} KiB of output.\n\nFunctions:\n",
            self.limits.time.as_secs_f64(),
            self.limits.calls,
            self.limits.output / 1024
        ));
        for spec in self.specs.iter() {
            text.push_str(&describe::signature(spec));
        }
        self.description = text;
    }
}

fn exception(kind: ExcType, message: impl Into<String>) -> MontyException {
    MontyException::new(kind, Some(message.into()))
}

/// Appends `more` to what the script printed, on a line of its own.
fn append_line(text: &mut String, more: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(more);
}

/// A value for the model: JSON when it has a JSON form, else its repr.
fn show(value: &MontyObject) -> String {
    match convert::to_json(value) {
        Some(serde_json::Value::String(text)) => text,
        Some(json) => json.to_string(),
        None => format!("{value:?}"),
    }
}

#[async_trait]
impl Tool for CodeMode {
    type Args = RunCodeArgs;

    fn name(&self) -> &str {
        "run_code"
    }

    fn description(&self) -> &str {
        &self.description
    }

    /// Its tool calls are approved one by one in the pipeline; the script
    /// itself changes nothing.
    fn mutating(&self, _args: &RunCodeArgs) -> bool {
        false
    }

    /// Alone: the script's calls may change things.
    fn scheduling(&self, _args: &RunCodeArgs) -> Scheduling {
        Scheduling::Exclusive
    }

    /// What comes back may carry what untrusted tools returned.
    fn annotations(&self) -> ToolAnnotations {
        let mut annotations = ToolAnnotations::default();
        annotations.read_only = false;
        annotations.destructive = false;
        annotations.open_world = true;
        annotations
    }

    async fn call(&self, args: RunCodeArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let names: Vec<String> = self.specs.iter().map(|s| s.name.clone()).collect();
        // A script that stopped at a call waiting for approval goes on
        // from there; otherwise it starts.
        let (start, printed, made) = match ctx.saved_state() {
            Some(saved) => paused::load(saved, ctx.call_id())?,
            None => {
                let runner = MontyRun::new(
                    args.code,
                    "script.py",
                    names.clone(),
                    monty_types::CompileOptions::default(),
                )
                .map_err(|e| {
                    ToolError::invalid_arguments(format!("the script does not parse: {e}"))
                })?;
                (Start::Fresh(Box::new(runner), names), String::new(), 0)
            }
        };
        // The interpreter runs on a blocking thread of its own, and makes
        // its tool calls from there. When this call is dropped (cancelled,
        // timed out), `_stop` closes: the script's call in flight stops and
        // its later calls fail at once.
        let (_stop, stop) = tokio::sync::oneshot::channel::<()>();
        let caller = Caller {
            specs: Arc::clone(&self.specs),
            ctx: ctx.clone(),
            handle: tokio::runtime::Handle::current(),
            span: tracing::Span::current(),
            stop,
        };
        let limits = self.limits;
        let (end, mut text) = tokio::task::spawn_blocking(move || {
            script::interpret(start, printed, made, limits, caller)
        })
        .await
        .map_err(|e| ToolError::failed(format!("the script's interpreter failed: {e}")))?;
        match end {
            End::Paused {
                dump,
                waiting,
                made,
            } => {
                let state = paused::save(&dump, &text, made);
                Err(ToolError::deferred(waiting.save(ctx.call_id(), state)))
            }
            End::Done(Ok(value)) => {
                if !matches!(value, MontyObject::None) {
                    append_line(&mut text, &show(&value));
                }
                if text.is_empty() {
                    text = "(the script printed nothing)".into();
                }
                Ok(ToolOutput::text(text))
            }
            End::Done(Err(error)) => {
                append_line(&mut text, &error.to_string());
                Err(ToolError::failed(format!("the script failed:\n{text}")))
            }
        }
    }
}

/// The limits the interpreter's thread enforces.
#[derive(Debug, Clone, Copy)]
struct Limits {
    time: Duration,
    memory: usize,
    calls: usize,
    output: usize,
}
