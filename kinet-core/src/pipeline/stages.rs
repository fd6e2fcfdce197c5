//! The stages of the pipeline, in the order a call meets them.

use std::any::Any;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use super::Pipeline;
use super::order::{Half, StageName, Step};
use crate::command::CheckedCommand;
use crate::confirm::{ConfirmDecision, ConfirmRequest, Verdict};
use crate::ctx::EngineCtx as _;
use crate::ctx::ToolCtx;
use crate::data::error::AgentError;
use crate::data::output::{ToolError, ToolErrorKind, ToolOutput};
use crate::data::spec::Scheduling;
use crate::data::truncate::TruncationPolicy;
use crate::event::{AgentEvent, RunStop};
use crate::hook::{BeforeTool, Hook};
use crate::layer::{Invocation, Next};
use crate::message::{ContentPart, Message, ToolCall};
use crate::tooldef::PreparedCall;
use crate::toolset::{Entry, Layers, ToolSnapshot};

type ToolResult = Result<ToolOutput, ToolError>;

/// A parsed call: its tool, layers, arguments and what it says about
/// approval and scheduling.
pub(crate) struct Prepared {
    entry: Entry,
    toolset_layers: Layers,
    arguments: Arc<str>,
    call: Box<dyn PreparedCall>,
    pub(crate) mutating: bool,
    pub(crate) scheduling: Scheduling,
    /// The call's command line, planned at approval: what the rules
    /// checked and the tool runs.
    pub(crate) command: Option<Arc<CheckedCommand>>,
}

/// Whether a call goes on to the next stage.
pub(crate) enum Gate {
    /// It does.
    Run,
    /// It does not; this error is its result.
    Refuse(ToolError),
    /// It does not, and the run ends.
    Stop(RunStop),
    /// It waits for a decision given later: the run stops here.
    Defer(ConfirmRequest),
}

/// What the gate stages learned about a call on its way.
#[derive(Default)]
struct Checks {
    /// The policy asks.
    asks: bool,
    /// The defence's concern: the user is asked, for this call only.
    concern: Option<String>,
    /// A decision given later (on a resume) answers the question.
    decided: bool,
}

/// What the last stages made of a result.
pub(crate) struct Finished {
    /// The full result, when asked to keep it (it went to the host's event).
    pub(crate) result: Option<ToolResult>,
    pub(crate) message: Message,
    pub(crate) truncated: bool,
    /// Set when the result is a fatal error.
    pub(crate) stop: Option<RunStop>,
    /// What the model reads of it, for the provenance ledger.
    pub(crate) seen: Option<crate::provenance::Seen>,
}

impl Pipeline {
    /// The parse stage: looks the tool up and parses the arguments; a
    /// panicking `prepare`, `mutating` or `scheduling` becomes an error.
    pub(crate) fn parse(
        &self,
        tools: &ToolSnapshot,
        call: &ToolCall,
    ) -> Result<Prepared, ToolError> {
        let Some(entry) = tools.entry(&call.name) else {
            let available = tools.names().collect::<Vec<_>>().join(", ");
            let message = if call.name.is_empty() {
                format!("the tool call has no tool name. Available tools: {available}.")
            } else {
                format!(
                    "there is no tool named `{}`. Available tools: {available}.",
                    call.name
                )
            };
            return Err(ToolError::new(ToolErrorKind::UnknownTool, message));
        };
        let entry = entry.clone();
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            let prepared = Arc::clone(&entry.tool).prepare(&call.arguments)?;
            let mutating = prepared.mutating();
            let scheduling = prepared.scheduling();
            Ok(Prepared {
                toolset_layers: Arc::clone(tools.layers()),
                arguments: Arc::from(call.arguments.as_str()),
                call: prepared,
                mutating,
                scheduling,
                entry,
                command: None,
            })
        }))
        .unwrap_or_else(|payload| {
            Err(ToolError::new(
                ToolErrorKind::Panicked,
                format!(
                    "tool `{}` panicked while reading its arguments: {}",
                    call.name,
                    panic_message(payload)
                ),
            ))
        })
    }

    /// The gate half, one call at a time: the stages of the pipeline's
    /// list from the policy up to the layers (the call was parsed), in
    /// order. The first that does not let the call go on decides.
    pub(crate) async fn gate(
        &self,
        tools: &ToolSnapshot,
        call: &mut Cow<'_, ToolCall>,
        prepared: &mut Prepared,
        base: &ToolCtx,
        approvals: &mut BTreeSet<String>,
    ) -> Gate {
        let mut checks = Checks::default();
        for step in self.steps() {
            let gate = match step {
                Step::Builtin(StageName::Policy) => {
                    self.policy_stage(call, prepared, base, approvals, &mut checks)
                }
                Step::Builtin(StageName::Defence) => {
                    self.defence_stage(call, prepared, base, &mut checks)
                }
                Step::Builtin(StageName::Confirm) => {
                    self.confirm_stage(tools, call, prepared, base, approvals, &checks)
                        .await
                }
                Step::Builtin(StageName::BeforeTool) => {
                    let mut gate = Gate::Run;
                    for hook in self.hooks() {
                        gate = self.before_tool(hook, tools, call, prepared, base).await;
                        if !matches!(gate, Gate::Run) {
                            break;
                        }
                    }
                    gate
                }
                Step::Host {
                    hook,
                    half: Half::Gate,
                    ..
                } => self.before_tool(hook, tools, call, prepared, base).await,
                Step::Builtin(StageName::Layers) => break,
                _ => Gate::Run,
            };
            if !matches!(gate, Gate::Run) {
                return gate;
            }
        }
        Gate::Run
    }

    /// The policy stage: plans the call's command line (once), applies
    /// the approval policy and the rules. On a resume (`base`'s
    /// resumption), a decision given later for this call answers what
    /// would be asked, and a call that stopped while running goes on (it
    /// was approved before it started); the policy's denials still hold.
    fn policy_stage(
        &self,
        call: &ToolCall,
        prepared: &mut Prepared,
        base: &ToolCtx,
        approvals: &mut BTreeSet<String>,
        checks: &mut Checks,
    ) -> Gate {
        plan_command(call, prepared, base);
        let approved = approvals.contains(&call.name);
        checks.asks = match self.verdict(call, prepared, base, approved) {
            Ok(asks) => asks,
            Err(reason) => return policy_denied(reason),
        };
        let resumption = base.resumption();
        if resumption.is_some_and(|r| r.saved.contains_key(&call.id)) {
            checks.decided = true;
            return Gate::Run;
        }
        match resumption.and_then(|r| r.decisions.get(&call.id)) {
            // No decision, or one that leaves the call waiting: it is
            // asked about (again).
            None | Some(ConfirmDecision::Defer) => Gate::Run,
            Some(decision) => {
                checks.decided = true;
                match decision {
                    ConfirmDecision::Deny { reason } => {
                        Gate::Refuse(denied(&call.name, reason.clone()))
                    }
                    ConfirmDecision::AllowForSession => {
                        // A flagged call's approval covers that call only.
                        if !resumption.is_some_and(|r| r.flagged.contains(&call.id)) {
                            approvals.insert(call.name.clone());
                        }
                        Gate::Run
                    }
                    ConfirmDecision::Abort => Gate::Stop(RunStop::Aborted {
                        tool: call.name.clone(),
                    }),
                    // An edit's arguments were put in before the gate.
                    ConfirmDecision::Allow | ConfirmDecision::Edit { .. } => Gate::Run,
                    // A decision this version does not know runs nothing.
                    _ => Gate::Refuse(denied(&call.name, None)),
                }
            }
        }
    }

    /// The policy's verdict on a call: `Ok(asks)`, or why it denies it.
    fn verdict(
        &self,
        call: &ToolCall,
        prepared: &Prepared,
        base: &ToolCtx,
        approved: bool,
    ) -> Result<bool, String> {
        match self.policy().verdict_at(
            &call.name,
            &prepared.arguments,
            prepared.mutating,
            approved,
            (base.cwd(), base.roots()),
            prepared.command.as_deref(),
        ) {
            Verdict::Run => Ok(false),
            Verdict::Ask => Ok(true),
            Verdict::Deny(reason) => Err(reason),
        }
    }

    /// The defence stage: a call the defence flags is asked about even
    /// when the policy or a session approval would run it, and is refused
    /// without asking when the defence is unattended.
    fn defence_stage(
        &self,
        call: &ToolCall,
        prepared: &Prepared,
        base: &ToolCtx,
        checks: &mut Checks,
    ) -> Gate {
        if checks.decided {
            return Gate::Run;
        }
        let defence = self.defence();
        let effects = super::defence::Effects {
            mutating: prepared.mutating,
            open_world: prepared.entry.tool.annotations().open_world,
        };
        let Some(finding) = defence.check(
            &call.name,
            &prepared.arguments,
            effects,
            base.provenance(),
            &|| prepared.entry.tool.parameters(),
        ) else {
            return Gate::Run;
        };
        let refused = defence.is_unattended();
        base.emit(AgentEvent::InjectionSuspected {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            reason: finding.reason(),
            source: finding.source.clone(),
            refused,
        });
        if refused {
            return Gate::Refuse(super::Defence::refusal(&call.name, &finding));
        }
        checks.concern = Some(finding.reason());
        Gate::Run
    }

    /// The confirm stage: asks the user through `base`'s handler when the
    /// policy or the defence asks. An approval of a call the defence
    /// flagged covers that call only: the next flagged one asks again.
    async fn confirm_stage(
        &self,
        tools: &ToolSnapshot,
        call: &mut Cow<'_, ToolCall>,
        prepared: &mut Prepared,
        base: &ToolCtx,
        approvals: &mut BTreeSet<String>,
        checks: &Checks,
    ) -> Gate {
        if checks.decided || !(checks.asks || checks.concern.is_some()) {
            return Gate::Run;
        }
        let (decision, request) = match self.ask(base, call, prepared, checks.concern.clone()).await
        {
            Ok(answer) => answer,
            Err(gate) => return gate,
        };
        match decision {
            ConfirmDecision::Allow => Gate::Run,
            ConfirmDecision::AllowForSession => {
                if checks.concern.is_none() {
                    approvals.insert(call.name.clone());
                }
                Gate::Run
            }
            ConfirmDecision::Deny { reason } => Gate::Refuse(denied(&call.name, reason)),
            ConfirmDecision::Abort => Gate::Stop(RunStop::Aborted {
                tool: call.name.clone(),
            }),
            ConfirmDecision::Defer => Gate::Defer(request),
            ConfirmDecision::Edit { arguments } => {
                self.edited(tools, call, prepared, base, arguments)
            }
            // `ConfirmDecision` is non-exhaustive for users, not for us.
            #[allow(unreachable_patterns)]
            _ => Gate::Refuse(denied(&call.name, None)),
        }
    }

    /// Gives the call new arguments and reads them again as the tool's
    /// (a hook's rewrite, a user's edit); why, when they do not fit.
    fn replace_arguments(
        &self,
        tools: &ToolSnapshot,
        call: &mut Cow<'_, ToolCall>,
        prepared: &mut Prepared,
        arguments: &serde_json::Value,
    ) -> Result<(), ToolError> {
        call.to_mut().arguments = arguments.to_string();
        *prepared = self.parse(tools, call)?;
        Ok(())
    }

    /// A call the user approved with other arguments: they are read
    /// again as the tool's, its command line is planned again, and the
    /// policy's denials still hold for them (the rest of the gate runs).
    fn edited(
        &self,
        tools: &ToolSnapshot,
        call: &mut Cow<'_, ToolCall>,
        prepared: &mut Prepared,
        base: &ToolCtx,
        arguments: serde_json::Value,
    ) -> Gate {
        if let Err(error) = self.replace_arguments(tools, call, prepared, &arguments) {
            return Gate::Refuse(error);
        }
        plan_command(call, prepared, base);
        // Not as approved for the session: the mode's denial (a sub-agent's
        // `DenyAll`) holds for arguments that make the call mutating. An
        // ask is answered: the user wrote these arguments.
        match self.verdict(call, prepared, base, false) {
            Ok(_) => Gate::Run,
            Err(reason) => policy_denied(reason),
        }
    }

    /// A hook's [`before_tool_call`](crate::hook::Hook::before_tool_call)
    /// (the before-tool stage, or a host's stage in the gate half): it may
    /// let the call go on, deny it, rewrite its arguments (the call is
    /// parsed again) or end the run.
    async fn before_tool(
        &self,
        hook: &Arc<dyn Hook>,
        tools: &ToolSnapshot,
        call: &mut Cow<'_, ToolCall>,
        prepared: &mut Prepared,
        base: &ToolCtx,
    ) -> Gate {
        let decision = tokio::select! {
            biased;
            _ = base.cancellation().cancelled() => return Gate::Stop(RunStop::Cancelled),
            decision = guarded(hook.before_tool_call(call)) => decision,
        };
        match decision {
            Ok(BeforeTool::Continue) => Gate::Run,
            Ok(BeforeTool::Deny(reason)) => {
                Gate::Refuse(ToolError::new(ToolErrorKind::Denied, reason))
            }
            Ok(BeforeTool::EndRun(reason)) => Gate::Stop(RunStop::Halted { reason }),
            Ok(BeforeTool::ReplaceArguments(arguments)) => {
                // The command line is planned again for the new arguments
                // by a later policy stage, if any.
                match self.replace_arguments(tools, call, prepared, &arguments) {
                    Ok(()) => Gate::Run,
                    Err(error) => Gate::Refuse(error),
                }
            }
            Err(panic) => Gate::Refuse(ToolError::failed(format!(
                "a before-tool hook panicked, so `{}` did not run: {panic}",
                call.name
            ))),
            // `BeforeTool` is non-exhaustive for users, not for us.
            #[allow(unreachable_patterns)]
            Ok(_) => Gate::Run,
        }
    }

    /// The layers and the panic guard: holds the call's scheduling
    /// key, runs the layers (the agent's, the toolset's, the tool's, then
    /// the timeout) and the tool, and turns a panic into an error.
    pub(crate) async fn execute(&self, prepared: Prepared, ctx: ToolCtx) -> ToolResult {
        let Prepared {
            entry,
            toolset_layers,
            arguments,
            call,
            scheduling,
            command,
            ..
        } = prepared;
        let ctx = match command {
            Some(command) => ctx.with_extension_arc(command),
            None => ctx,
        };
        let lock = match &scheduling {
            Scheduling::Keyed(key) => Some(self.inner.keys.lock_for(key)),
            _ => None,
        };
        let _held = match &lock {
            Some(lock) => tokio::select! {
                biased;
                _ = ctx.cancellation().cancelled() => return Err(not_run(&RunStop::Cancelled)),
                held = lock.lock() => Some(held),
            },
            None => None,
        };
        let name = ctx.tool_name().to_owned();
        // The timeout layer only where there is a limit to enforce.
        let timeout: &[Arc<dyn crate::layer::ToolLayer>] = if self.inner.tool_timeout.is_none()
            && entry.tool.timeout().is_none()
            && ctx.deadline().is_none()
        {
            &[]
        } else {
            &self.inner.timeout
        };
        let stack = [
            &self.inner.layers[..],
            &toolset_layers[..],
            &entry.layers[..],
            timeout,
        ];
        let invocation = Invocation::new(entry.tool, arguments, call, ctx);
        guarded(Next::new(stack).run(invocation))
            .await
            .unwrap_or_else(|panic| {
                Err(ToolError::new(
                    ToolErrorKind::Panicked,
                    format!("tool `{name}` panicked: {panic}"),
                ))
            })
    }

    /// The execution half after the tool: after-tool hooks (skipped once the run is cancelled),
    /// truncation for the model, what the model reads for the provenance
    /// ledger (when the call `ran`), and the host's `ToolCallFinished`
    /// event with the full result.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn finish(
        &self,
        tools: &ToolSnapshot,
        call: &ToolCall,
        mut result: ToolResult,
        elapsed: Duration,
        base: &ToolCtx,
        keep: bool,
        ran: bool,
    ) -> Finished {
        for step in self.steps() {
            let hooks = match step {
                Step::Builtin(StageName::AfterTool) => self.hooks(),
                Step::Host {
                    hook,
                    half: Half::Execution,
                    ..
                } => std::slice::from_ref(hook),
                _ => continue,
            };
            for hook in hooks {
                if base.is_cancelled() {
                    break;
                }
                let ran = tokio::select! {
                    biased;
                    _ = base.cancellation().cancelled() => Ok(()),
                    ran = guarded(hook.after_tool_call(call, &mut result)) => ran,
                };
                if let Err(panic) = ran {
                    tracing::warn!(tool = %call.name, %panic, "an after-tool-call hook panicked");
                }
            }
        }
        let stop = match &result {
            Err(error) if error.is_fatal() => Some(RunStop::Failed(AgentError::FatalTool {
                tool: call.name.clone(),
                message: error.message().to_owned(),
            })),
            _ => None,
        };
        let policy = self.truncation_for(tools, &call.name);
        let (message, truncated) = model_message(call, &result, &policy);
        // Text kinet wrote itself (a refusal, "not run") is nobody's.
        let seen = ran
            .then(|| {
                let annotations = tools.get(&call.name).map(|tool| tool.annotations());
                self.defence().seen(
                    &call.name,
                    annotations.as_ref(),
                    &call.arguments,
                    message.text(),
                )
            })
            .flatten();
        let kept = keep.then(|| result.clone());
        base.emit(AgentEvent::ToolCallFinished {
            call_id: call.id.clone(),
            name: call.name.clone(),
            result,
            truncated_for_model: truncated,
            elapsed,
        });
        Finished {
            result: kept,
            message,
            truncated,
            stop,
            seen,
        }
    }

    fn truncation_for(&self, tools: &ToolSnapshot, name: &str) -> TruncationPolicy {
        self.inner
            .truncation_overrides
            .get(name)
            .copied()
            .or_else(|| tools.get(name).and_then(|tool| tool.truncation()))
            .unwrap_or(self.inner.truncation)
    }
}

/// The longest a tool may take to build its confirmation summary; after
/// it the user sees the arguments instead.
const SUMMARY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl Pipeline {
    /// Asks the host's handler about a call: its decision and the request
    /// it was shown. The question stops here instead (`Err`) when the
    /// policy defers every question, or the run was cancelled meanwhile.
    async fn ask(
        &self,
        base: &ToolCtx,
        call: &ToolCall,
        prepared: &Prepared,
        concern: Option<String>,
    ) -> Result<(ConfirmDecision, ConfirmRequest), Gate> {
        let mut ctx = base.for_call(&call.id, &call.name);
        if let Some(command) = &prepared.command {
            ctx = ctx.with_extension_arc(Arc::clone(command));
        }
        let request = request(&ctx, call, &*prepared.call, concern).await;
        if self.policy().defers() {
            return Err(Gate::Defer(request));
        }
        let decision = guarded(ctx.confirm(request.clone()))
            .await
            .unwrap_or_else(|panic| ConfirmDecision::Deny {
                reason: Some(format!("the confirmation handler panicked: {panic}")),
            });
        if base.is_cancelled() {
            return Err(Gate::Stop(RunStop::Cancelled));
        }
        Ok((decision, request))
    }
}

/// Plans the call's command line, once, where the tool has one.
fn plan_command(call: &ToolCall, prepared: &mut Prepared, base: &ToolCtx) {
    if prepared.command.is_none()
        && let Some(line) = prepared.call.command_line(base)
    {
        prepared.command = Some(Arc::new(CheckedCommand {
            call_id: call.id.clone(),
            planned: crate::command::plan(&line.line, &line.context),
            line: line.line,
            context: line.context,
        }));
    }
}

/// What the user is to see about a call (in `ctx`, the call's): the
/// tool's summary (the shell command, a diff) or the pretty-printed
/// arguments.
async fn request(
    ctx: &ToolCtx,
    call: &ToolCall,
    prepared: &dyn PreparedCall,
    concern: Option<String>,
) -> ConfirmRequest {
    let summary = tokio::select! {
        biased;
        _ = ctx.cancellation().cancelled() => None,
        summary = tokio::time::timeout(SUMMARY_TIMEOUT, guarded(prepared.confirm_summary(ctx))) => {
            summary.ok().and_then(Result::ok).flatten()
        }
    };
    let summary = summary.unwrap_or_else(|| pretty_arguments(&call.arguments));
    let mut request = ConfirmRequest::new(
        call.name.clone(),
        call.id.clone(),
        serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone())),
        summary,
    );
    request.concern = concern;
    request
}

/// What the model sees of a result. Error messages are truncated by the
/// same policy as output.
fn model_message(
    call: &ToolCall,
    result: &ToolResult,
    policy: &TruncationPolicy,
) -> (Message, bool) {
    let (content, is_error, truncated) = match result {
        Ok(output) => {
            let seen = policy.apply(&output.text);
            let truncated = matches!(seen, std::borrow::Cow::Owned(_));
            let mut content = Vec::with_capacity(1 + output.images.len());
            if !seen.is_empty() || output.images.is_empty() {
                let text = if seen.is_empty() {
                    "(no output)".to_owned()
                } else {
                    seen.into_owned()
                };
                content.push(ContentPart::Text { text });
            }
            content.extend(output.images.iter().cloned().map(ContentPart::Image));
            (content, false, truncated)
        }
        Err(error) => {
            let seen = policy.apply(error.message());
            let truncated = matches!(seen, std::borrow::Cow::Owned(_));
            (vec![ContentPart::text(seen)], true, truncated)
        }
    };
    (
        Message::Tool {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            is_error,
        },
        truncated,
    )
}

/// The result of a call that did not run because the run is stopping.
pub(crate) fn not_run(stop: &RunStop) -> ToolError {
    match stop {
        RunStop::Aborted { tool } => ToolError::new(
            ToolErrorKind::Denied,
            format!("not run: the user aborted the run at a `{tool}` call"),
        ),
        RunStop::Halted { reason } => ToolError::new(
            ToolErrorKind::Denied,
            format!("not run: a hook ended the run ({reason})"),
        ),
        RunStop::Failed(error) => ToolError::new(
            ToolErrorKind::Cancelled,
            format!("not run: the run failed ({error})"),
        ),
        RunStop::BudgetReached { spent, limit } => ToolError::new(
            ToolErrorKind::Cancelled,
            format!("not run: the run reached its cost budget (spent {spent:.4} of {limit:.4})"),
        ),
        _ => ToolError::new(ToolErrorKind::Cancelled, "cancelled: the run was stopped"),
    }
}

/// A call the approval policy denies.
fn policy_denied(reason: String) -> Gate {
    Gate::Refuse(ToolError::new(
        ToolErrorKind::Denied,
        format!("{reason}. Do not retry this call; choose another approach."),
    ))
}

fn denied(tool: &str, reason: Option<String>) -> ToolError {
    let reason = reason
        .filter(|r| !r.trim().is_empty())
        .map(|r| format!(" Reason: {r}."))
        .unwrap_or_default();
    ToolError::new(
        ToolErrorKind::Denied,
        format!(
            "This `{tool}` call was denied; it did not run.{reason} Do not retry it unchanged."
        ),
    )
}

fn pretty_arguments(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| arguments.to_owned())
}

/// Runs host-supplied async code, turning a panic into an error message so
/// that the run can still end cleanly with a paired history.
pub(crate) async fn guarded<F: Future>(future: F) -> Result<F::Output, String> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .map_err(panic_message)
}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}
