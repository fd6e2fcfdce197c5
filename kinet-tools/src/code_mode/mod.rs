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

use std::time::Duration;

use async_trait::async_trait;
use kinet_core::deferred::Suspension;
use kinet_core::tool::{Scheduling, ToolAnnotations, ToolSpec, Toolset};
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use monty::{MontyRun, RunProgress};
use monty_types::{ExcType, ExtFunctionResult, MontyException, MontyObject, NameLookupResult};
use schemars::JsonSchema;
use serde::Deserialize;

/// The `run_code` tool. Build it after the tools it offers are in the
/// toolset (it lists them in its description); add it to the same one.
#[derive(Debug, Clone)]
pub struct CodeMode {
    specs: Vec<ToolSpec>,
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
        for spec in &self.specs {
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
        let limits = self.limits;
        // The interpreter runs on a blocking thread of its own; each tool
        // call comes here over a channel and its answer goes back. When
        // this call is dropped (cancelled, timed out), the channel closes
        // and the script is stopped at its next call.
        let (requests, mut incoming) = tokio::sync::mpsc::channel::<Request>(1);
        let script =
            tokio::task::spawn_blocking(move || interpret(start, printed, made, limits, &requests));
        let mut n = made;
        let mut waiting = None;
        while let Some(request) = incoming.recv().await {
            n += 1;
            let answer = match self.run_tool(ctx, n, request.call).await {
                Ok(answer) => Answer::Value(answer),
                Err(suspension) => {
                    waiting = Some(suspension);
                    Answer::Pause
                }
            };
            let _ = request.reply.send(answer);
        }
        let (end, mut text) = script
            .await
            .map_err(|e| ToolError::failed(format!("the script's interpreter failed: {e}")))?;
        match end {
            End::Paused(dump) => {
                let suspension = waiting
                    .ok_or_else(|| ToolError::failed("the script paused with no call waiting"))?;
                let state = paused::save(&dump, &text, n - 1);
                Err(ToolError::deferred(suspension.save(ctx.call_id(), state)))
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

/// A tool call of the script: its function, arguments and keyword
/// arguments.
type ScriptCall = (String, Vec<MontyObject>, Vec<(MontyObject, MontyObject)>);

/// A tool call on its way from the interpreter's thread, with the way
/// back.
struct Request {
    call: ScriptCall,
    reply: tokio::sync::oneshot::Sender<Answer>,
}

/// What the script's tool call comes to.
enum Answer {
    /// Its value or exception.
    Value(ExtFunctionResult),
    /// It waits for an approval given later: the script pauses there.
    Pause,
}

/// Where the interpreter starts: a new script, or one that paused.
enum Start {
    Fresh(Box<MontyRun>, Vec<String>),
    Paused(Box<RunProgress>),
}

/// How the interpreter's thread ended.
enum End {
    /// The script ran to its end: its value or exception.
    Done(Result<MontyObject, MontyException>),
    /// It paused at a call: the interpreter's state.
    Paused(Vec<u8>),
}

/// Runs the script on this (blocking) thread to its end or to a pause:
/// how it ended, and what it printed (after `printed`, what it had
/// printed before it paused). `made`: the tool calls it made before.
fn interpret(
    start: Start,
    mut printed: String,
    made: usize,
    limits: Limits,
    requests: &tokio::sync::mpsc::Sender<Request>,
) -> (End, String) {
    let max = Some(limits.output);
    let mut progress = match start {
        Start::Fresh(runner, names) => {
            let inputs = names
                .into_iter()
                .map(|name| MontyObject::Function {
                    name,
                    docstring: None,
                })
                .collect();
            let tracker = monty_types::ResourceTracker::new(monty_types::ResourceLimits {
                max_duration: Some(limits.time),
                max_memory: Some(limits.memory),
                max_suspensions: limits.calls.saturating_add(16),
                ..monty_types::ResourceLimits::default()
            });
            runner.start(
                inputs,
                tracker,
                monty_types::PrintWriter::CollectString(&mut printed, max),
            )
        }
        Start::Paused(progress) => Ok(*progress),
    };
    let mut calls = made;
    loop {
        let print = monty_types::PrintWriter::CollectString(&mut printed, max);
        progress = match progress {
            Err(error) => return (End::Done(Err(error)), printed),
            Ok(RunProgress::Complete(value)) => return (End::Done(Ok(value)), printed),
            Ok(RunProgress::FunctionCall(call)) => {
                calls += 1;
                if calls > limits.calls {
                    let stop = exception(
                        ExcType::RuntimeError,
                        format!("the script made more than {} tool calls", limits.calls),
                    );
                    call.abort(stop, print)
                } else {
                    let (reply, answer) = tokio::sync::oneshot::channel();
                    let request = Request {
                        call: (
                            call.function_name.clone(),
                            call.args.clone(),
                            call.kwargs.clone(),
                        ),
                        reply,
                    };
                    let answer = match requests.blocking_send(request) {
                        Ok(()) => answer.blocking_recv().ok(),
                        Err(_) => None,
                    };
                    match answer {
                        Some(Answer::Value(answer)) => call.resume(answer, print),
                        Some(Answer::Pause) => {
                            let paused = RunProgress::FunctionCall(call);
                            return match monty::dump(
                                "script.py",
                                None,
                                monty::SessionRef::Running(&paused),
                            ) {
                                Ok(dump) => (End::Paused(dump), printed),
                                Err(error) => (
                                    End::Done(Err(exception(
                                        ExcType::RuntimeError,
                                        format!("the script could not be paused: {error}"),
                                    ))),
                                    printed,
                                ),
                            };
                        }
                        None => call.abort(
                            exception(ExcType::RuntimeError, "the script was cancelled"),
                            print,
                        ),
                    }
                }
            }
            Ok(RunProgress::OsCall(call)) => call.resume(
                ExtFunctionResult::Error(exception(
                    ExcType::PermissionError,
                    "scripts have no file, network, environment or clock access; use the tools",
                )),
                print,
            ),
            Ok(RunProgress::NameLookup(lookup)) => {
                lookup.resume(NameLookupResult::Undefined, print)
            }
            Ok(RunProgress::ResolveFutures(waiting)) => waiting.abort(
                exception(
                    ExcType::RuntimeError,
                    "tool functions are not async: call them without await",
                ),
                print,
            ),
        };
    }
}

impl CodeMode {
    /// One tool call of the script, through the pipeline: the tool's
    /// answer, or the exception the script sees; or, when the call waits
    /// for an approval given later, what waits.
    async fn run_tool(
        &self,
        ctx: &ToolCtx,
        n: usize,
        (name, args, kwargs): ScriptCall,
    ) -> Result<ExtFunctionResult, Suspension> {
        let Some(spec) = self.specs.iter().find(|s| s.name == name) else {
            return Ok(ExtFunctionResult::NotFound(name));
        };
        let json = |value: &MontyObject| {
            convert::to_json(value).ok_or_else(|| {
                format!(
                    "{}() takes JSON values (str, int, float, bool, None, list, dict with str keys)",
                    spec.name
                )
            })
        };
        let positional: Result<Vec<_>, _> = args.iter().map(json).collect();
        let keywords: Result<Vec<_>, String> = kwargs
            .iter()
            .map(|(key, value)| match key {
                MontyObject::String(key) => Ok((key.clone(), json(value)?)),
                _ => Err("keyword names must be strings".to_owned()),
            })
            .collect();
        let arguments = match (positional, keywords) {
            (Ok(p), Ok(k)) => describe::arguments(spec, p, k),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        let arguments = match arguments {
            Ok(arguments) => arguments,
            Err(problem) => {
                return Ok(ExtFunctionResult::Error(exception(
                    ExcType::TypeError,
                    problem,
                )));
            }
        };
        let id = format!("{}.{n}", ctx.call_id());
        Ok(match ctx.call_tool(id, &spec.name, &arguments).await {
            Err(error) if error.suspension().is_some() => {
                return Err(error.suspension().cloned().unwrap_or_default());
            }
            Ok(output) => {
                let value = match serde_json::from_str::<serde_json::Value>(&output.text) {
                    Ok(json @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => {
                        convert::from_json(&json)
                    }
                    _ => MontyObject::String(output.text),
                };
                ExtFunctionResult::Return(value)
            }
            Err(error) => ExtFunctionResult::Error(exception(
                ExcType::RuntimeError,
                format!("{} failed: {}", spec.name, error.message()),
            )),
        })
    }
}
