//! The interpreter's side of a script: it runs on a blocking thread of its
//! own, and each tool call the script makes goes through the pipeline from
//! that thread (the runtime's handle drives the call there, so a call
//! costs no hop between threads).

use std::sync::Arc;

use kinet_core::ToolCtx;
use kinet_core::deferred::Suspension;
use kinet_core::tool::ToolSpec;
use monty::{MontyRun, RunProgress};
use monty_types::{ExcType, ExtFunctionResult, MontyException, MontyObject, NameLookupResult};
use tracing::Instrument as _;

use super::{Limits, convert, describe, exception};

/// Where the interpreter starts: a new script, or one that paused.
pub(super) enum Start {
    Fresh(Box<MontyRun>, Vec<String>),
    Paused(Box<RunProgress>),
}

/// How the interpreter's thread ended.
pub(super) enum End {
    /// The script ran to its end: its value or exception.
    Done(Result<MontyObject, MontyException>),
    /// It paused at a call waiting for an approval given later: the
    /// interpreter's state, what waits, and the calls made before it.
    Paused {
        dump: Vec<u8>,
        waiting: Suspension,
        made: usize,
    },
}

/// What the script's tool calls go through: the offered tools, the call's
/// context, and the runtime that drives each call.
pub(super) struct Caller {
    pub specs: Arc<[ToolSpec]>,
    pub ctx: ToolCtx,
    pub handle: tokio::runtime::Handle,
    /// The `run_code` call's span: each call's spans are its children.
    pub span: tracing::Span,
    /// Closes when the `run_code` call is dropped (cancelled, timed out):
    /// the call in flight stops, and no later call starts.
    pub stop: tokio::sync::oneshot::Receiver<()>,
}

/// What the script's tool call comes to.
enum Answer {
    /// Its value or exception.
    Value(ExtFunctionResult),
    /// It waits for an approval given later: the script pauses there.
    Pause(Suspension),
}

impl Caller {
    /// One tool call of the script (its number `n` in the script), through
    /// the pipeline, on this thread.
    fn call(
        &mut self,
        n: usize,
        name: &str,
        args: &[MontyObject],
        kwargs: &[(MontyObject, MontyObject)],
    ) -> Answer {
        let Some(spec) = self.specs.iter().find(|s| s.name == name) else {
            return Answer::Value(ExtFunctionResult::NotFound(name.to_owned()));
        };
        let arguments = match arguments(spec, args, kwargs) {
            Ok(arguments) => arguments,
            Err(problem) => {
                return Answer::Value(ExtFunctionResult::Error(exception(
                    ExcType::TypeError,
                    problem,
                )));
            }
        };
        let cancelled = || {
            Answer::Value(ExtFunctionResult::Error(exception(
                ExcType::RuntimeError,
                "the script was cancelled",
            )))
        };
        if !matches!(
            self.stop.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty)
        ) {
            return cancelled();
        }
        let id = format!("{}.{n}", self.ctx.call_id());
        let (ctx, stop) = (&self.ctx, &mut self.stop);
        let result = self.handle.block_on(
            async {
                tokio::select! {
                    biased;
                    _ = stop => None,
                    result = ctx.call_tool(id, &spec.name, &arguments) => Some(result),
                }
            }
            .instrument(self.span.clone()),
        );
        let Some(result) = result else {
            return cancelled();
        };
        Answer::Value(match result {
            Err(error) if error.suspension().is_some() => {
                return Answer::Pause(error.suspension().cloned().unwrap_or_default());
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

/// The call's JSON arguments from the script's positional and keyword
/// arguments, or what is wrong with them.
fn arguments(
    spec: &ToolSpec,
    args: &[MontyObject],
    kwargs: &[(MontyObject, MontyObject)],
) -> Result<serde_json::Value, String> {
    let json = |value: &MontyObject| {
        convert::to_json(value).ok_or_else(|| {
            format!(
                "{}() takes JSON values (str, int, float, bool, None, list, dict with str keys)",
                spec.name
            )
        })
    };
    let positional = args.iter().map(json).collect::<Result<Vec<_>, _>>()?;
    let keywords = kwargs
        .iter()
        .map(|(key, value)| match key {
            MontyObject::String(key) => Ok((key.clone(), json(value)?)),
            _ => Err("keyword names must be strings".to_owned()),
        })
        .collect::<Result<Vec<_>, String>>()?;
    describe::arguments(spec, positional, keywords)
}

/// Runs the script on this (blocking) thread to its end or to a pause:
/// how it ended, and what it printed (after `printed`, what it had
/// printed before it paused). `made`: the tool calls it made before.
pub(super) fn interpret(
    start: Start,
    mut printed: String,
    made: usize,
    limits: Limits,
    mut caller: Caller,
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
                    match caller.call(calls, &call.function_name, &call.args, &call.kwargs) {
                        Answer::Value(answer) => call.resume(answer, print),
                        Answer::Pause(waiting) => {
                            let paused = RunProgress::FunctionCall(call);
                            let end = match monty::dump(
                                "script.py",
                                None,
                                monty::SessionRef::Running(&paused),
                            ) {
                                Ok(dump) => End::Paused {
                                    dump,
                                    waiting,
                                    made: calls - 1,
                                },
                                Err(error) => End::Done(Err(exception(
                                    ExcType::RuntimeError,
                                    format!("the script could not be paused: {error}"),
                                ))),
                            };
                            return (end, printed);
                        }
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
