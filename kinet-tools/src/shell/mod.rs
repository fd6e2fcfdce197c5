//! `shell`: runs a command line, contained so that every process it starts
//! ends with the call, and optionally sandboxed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kinet_core::command::{CheckedCommand, CommandLine, Context, Planned, named_shell};
use kinet_core::sandbox::launcher::LaunchSpec;
use kinet_core::sandbox::{Containment, EnvPolicy, SandboxPolicy};

mod local;
mod terminal;

use kinet_core::tool::ToolErrorKind;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use local::{Local, run_command};
use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `shell`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ShellArgs {
    /// The command line: programs joined by `|`, `&&`, `||`, `;` and redirections. Anything else (`$VAR`, `$(...)`, `cd`, loops) runs with bash once the user approves it.
    pub command: String,
    /// Time limit in milliseconds (default 120000, at most 600000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Directory to run in (default: the working directory).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Run outside the sandbox (writes anywhere, network on). Only for a
    /// command the sandbox stopped that the task really needs; the user is
    /// asked first. Ignored when there is no sandbox.
    #[serde(default)]
    pub unsandboxed: bool,
}

/// Limits of the shell tool. Every field documents its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellConfig {
    /// The time limit when the call gives none. Default 120 s.
    pub default_timeout: Duration,
    /// The largest time limit a call may ask for. Default 600 s.
    pub max_timeout: Duration,
    /// Output kept in memory: the first half and the last half of this many
    /// bytes; the middle is dropped with a note. Default 1 MiB.
    pub max_output_bytes: usize,
    /// After the command exits, how long to keep reading output its
    /// background children still write before they are stopped. Default
    /// 250 ms.
    pub drain_after_exit: Duration,
    /// Runs each command in its own PID namespace where the system allows
    /// it, so every process it starts ends with the call. `false`: a
    /// process group only, which `setsid` daemons can leave. Default `true`.
    pub contain: bool,
    /// Variables set (`Some(value)`) or removed (`None`) for every command,
    /// after `inherit_env` chose what it inherits. Default: none.
    pub env: BTreeMap<String, Option<String>>,
    /// Which of the host's variables commands inherit (before `env`
    /// applies). Default [`EnvPolicy::core`]: `PATH`, `HOME`, the locale,
    /// toolchain homes and no secrets; widen it with
    /// [`EnvPolicy::allow`], or [`EnvPolicy::inherit_all`].
    pub inherit_env: EnvPolicy,
}

impl Default for ShellConfig {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            max_output_bytes: 1024 * 1024,
            drain_after_exit: Duration::from_millis(250),
            contain: true,
            env: BTreeMap::new(),
            inherit_env: EnvPolicy::core(),
        }
    }
}

/// How a command ended, for the host's callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellReport {
    /// The command line.
    pub command: String,
    /// The exit code, when it exited normally.
    pub exit_code: Option<i32>,
    /// It ran out of time and was killed.
    pub timed_out: bool,
    /// It ran in the sandbox.
    pub sandboxed: bool,
    /// How its processes were held together.
    pub containment: Containment,
    /// The run was cancelled and it was killed.
    pub cancelled: bool,
    /// How long it ran.
    pub elapsed: Duration,
}

type AfterCommand = Arc<dyn Fn(&ShellReport) + Send + Sync>;

/// Runs a command line with stdin closed, stdout and stderr merged in
/// arrival order, output streamed to the host as progress events and
/// capped in memory (head and tail kept), the exit code appended.
///
/// **What runs is what was checked.** The line is
/// [planned](kinet_core::command) where it runs, once, when the call is
/// approved ([`Tool::command_line`]): parsed as dash and bash both read
/// it, globs expanded beneath the workspace roots, each program resolved
/// through the `PATH` the command gets. The rules file judges that plan,
/// and the same plan runs: kinet starts each program itself (`execve` of
/// its resolved path) and wires the pipes, lists and redirections; no
/// shell reads the line. A line kinet cannot plan (`$VAR`, `$(...)`,
/// `cd`, `if`, `&>`, ...) is asked about under an asking policy and runs
/// with one named shell, bash where the `PATH` finds it in a system
/// directory (else sh), which the approval text names.
///
/// **Environment.** Commands inherit what [`ShellConfig::inherit_env`]
/// allows, without the variables that choose or redirect programs
/// ([`kinet_core::sandbox::PROGRAM_VARIABLES`]: `LD_*`, `GIT_*`, `PAGER`,
/// `BASH_ENV`, ...) unless the policy names them exactly.
///
/// **Containment.** On Linux the command is PID 1 of its own PID namespace:
/// when it exits, times out or is cancelled, the kernel ends every process
/// it started, `setsid` daemons included, and no host thread is left
/// reading its output. Elsewhere (or where namespaces are refused) it gets
/// a process group, which a `setsid` daemon can leave; see
/// [`kinet_core::sandbox`].
///
/// **Approval.** Without a sandbox every command is mutating: the host is
/// asked under an asking policy. With [`sandboxed`](Self::sandboxed), a
/// command runs in the sandbox without asking, and only a call with
/// `unsandboxed: true` asks. When the kernel cannot enforce the sandbox,
/// every command asks again and the summary says why.
///
/// **In an editor's terminal.** When the call's context carries
/// [`Terminals`](kinet_core::editor::Terminals) (an ACP editor that offers `terminal`, for an agent
/// confined to a workspace), the command runs in a terminal of the
/// editor's, where the person watches it live. The editor starts this
/// program in launcher mode ([`kinet_core::sandbox::launcher`]), which
/// applies the same containment, sandbox and environment policy before it
/// runs `sh -c`; timeouts and cancellation kill the terminal's command
/// (and with it its namespace), and the output is the editor's (its last
/// `max_output_bytes`). No progress events are sent: the editor shows the
/// output itself.
#[derive(Clone)]
pub struct ShellTool {
    config: ShellConfig,
    after_command: Option<AfterCommand>,
    sandbox: Option<SandboxPolicy>,
}

impl std::fmt::Debug for ShellTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShellTool")
            .field("config", &self.config)
            .field("after_command", &self.after_command.is_some())
            .field("sandbox", &self.sandbox)
            .finish()
    }
}

impl Default for ShellTool {
    fn default() -> Self {
        Self::new(ShellConfig::default())
    }
}

impl ShellTool {
    /// A shell tool with these limits.
    pub fn new(config: ShellConfig) -> Self {
        Self {
            config,
            after_command: None,
            sandbox: None,
        }
    }

    /// Runs commands in this sandbox (default: none), without asking (see
    /// the type's docs).
    pub fn sandboxed(mut self, policy: SandboxPolicy) -> Self {
        self.sandbox = Some(policy);
        self
    }

    /// The sandbox a call runs in, or why it runs without one.
    fn sandbox_for(&self, args: &ShellArgs) -> Result<Option<&SandboxPolicy>, String> {
        match &self.sandbox {
            None => Ok(None),
            Some(_) if args.unsandboxed => Err("the call asked to run outside the sandbox".into()),
            Some(policy) => match kinet_core::sandbox::support().sandbox_unavailable(policy) {
                Some(why) => Err(why),
                None => Ok(Some(policy)),
            },
        }
    }

    /// What commands inherit: the configured policy without the
    /// variables that choose programs (unless it names them).
    fn inherit_env(&self) -> EnvPolicy {
        self.config.inherit_env.clone().without_program_variables()
    }

    /// The call's checked line: the pipeline's plan of this very call, or
    /// (for a call the pipeline did not plan) one made now.
    fn checked(&self, args: &ShellArgs, ctx: &ToolCtx) -> Option<Arc<CheckedCommand>> {
        if let Some(checked) = ctx.extension::<CheckedCommand>()
            && checked.call_id == ctx.call_id()
            && checked.line == args.command
        {
            return Some(checked);
        }
        let line = self.command_line(args, ctx)?;
        Some(Arc::new(CheckedCommand {
            call_id: ctx.call_id().to_owned(),
            planned: kinet_core::command::plan(&line.line, &line.context),
            line: line.line,
            context: line.context,
        }))
    }

    /// The program, its arguments and the plan that run the call: the
    /// checked plan itself, or the named shell for a line kinet cannot
    /// plan (on Windows, `cmd.exe /c`).
    fn how_to_run(
        &self,
        args: &ShellArgs,
        ctx: &ToolCtx,
    ) -> (String, Vec<String>, Option<kinet_core::command::Plan>) {
        match self.checked(args, ctx).as_deref() {
            Some(CheckedCommand {
                planned: Planned::Plan(plan),
                ..
            }) if kinet_core::command::RUNS_PLANS => {
                let first = plan
                    .invocations()
                    .next()
                    .map(|i| i.path.display().to_string())
                    .unwrap_or_else(|| "true".into());
                (first, Vec::new(), Some(plan.clone()))
            }
            Some(CheckedCommand { context, .. }) => (
                named_shell(context).display().to_string(),
                vec!["-c".into(), args.command.clone()],
                None,
            ),
            None => (
                SHELL.0.into(),
                vec![SHELL.1.into(), args.command.clone()],
                None,
            ),
        }
    }

    /// Calls `callback` after every command (e.g. to give focus back to the
    /// host's window).
    pub fn after_command(
        mut self,
        callback: impl Fn(&ShellReport) + Send + Sync + 'static,
    ) -> Self {
        self.after_command = Some(Arc::new(callback));
        self
    }
}

const DESCRIPTION: &str = "\
Runs a shell command and returns its output (stdout and stderr together, in order) \
followed by the exit code.
- Runs in the working directory unless cwd is given (use cwd instead of `cd`); stdin is \
closed, so interactive programs fail: pass flags such as `-y` or `--no-pager`.
- Programs joined by |, &&, ||, ; and redirections run directly; lines that need a shell \
(variables, $(...), cd, loops) run with bash once the user approves them.
- Default time limit 120 s (timeout_ms, at most 600000). On timeout the command and all \
its child processes are killed.
- Every process the command starts (background `cmd &`, daemons) is stopped when it ends.
- Long output is shortened in the middle; prefer flags that limit output, or redirect to \
a file and read parts of it.
- Prefer read_file, grep, glob and edit_file over cat, grep, find and sed.";

#[async_trait]
impl Tool for ShellTool {
    type Args = ShellArgs;

    fn name(&self) -> &str {
        "shell"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn mutating(&self, args: &ShellArgs) -> bool {
        !matches!(self.sandbox_for(args), Ok(Some(_)))
    }

    fn command_line(&self, args: &ShellArgs, ctx: &ToolCtx) -> Option<CommandLine> {
        #[cfg(unix)]
        {
            let place = ctx.workspace_path_or_cwd(args.cwd.as_deref()).ok()?;
            let roots = roots_of(ctx);
            let writable = match self.sandbox_for(args) {
                Ok(Some(policy)) => policy.writable_dirs(&roots),
                _ => Vec::new(),
            };
            let context = Context::new(place.path())
                .roots(roots)
                .env(self.inherit_env().environment(&self.config.env))
                .writable(writable);
            Some(CommandLine {
                line: args.command.clone(),
                context,
            })
        }
        #[cfg(not(unix))]
        {
            let _ = (args, ctx);
            None
        }
    }

    async fn confirm_summary(&self, args: &ShellArgs, ctx: &ToolCtx) -> Option<String> {
        let dir = ctx.workspace_path_or_cwd(args.cwd.as_deref()).ok()?;
        let note = match self.sandbox_for(args) {
            Err(why) => format!("\n(not sandboxed: {why})"),
            Ok(_) => String::new(),
        };
        let how = match self.checked(args, ctx).as_deref() {
            Some(checked) => match &checked.planned {
                Planned::Plan(plan) if kinet_core::command::RUNS_PLANS => {
                    format!("\nkinet runs: {}", plan.display())
                }
                Planned::Plan(_) => format!("\nrun by {}", named_shell(&checked.context).display()),
                Planned::Unsure(why) => format!(
                    "\nrun by {} (kinet cannot run it itself: {why})",
                    named_shell(&checked.context).display()
                ),
                _ => String::new(),
            },
            None => String::new(),
        };
        Some(format!(
            "$ {}\n(in {}){how}{note}",
            args.command,
            dir.path().display()
        ))
    }

    /// The pipeline's deadline sits just past the longest command the
    /// tool allows, so the tool's own timeout (with the output so far)
    /// normally comes first.
    fn timeout(&self) -> Option<Duration> {
        Some(self.config.max_timeout + Duration::from_secs(2))
    }

    async fn call(&self, args: ShellArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        if args.command.trim().is_empty() {
            return Err(ToolError::invalid_arguments("the command is empty"));
        }
        let place = ctx.workspace_path_or_cwd(args.cwd.as_deref())?;
        // Opened now (one quick system call, so inline) and entered with
        // fchdir in the child: a symlink swapped in after this cannot move
        // the command elsewhere.
        let dir = place.open_dir().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => {
                ToolError::not_found(format!(
                    "the directory `{}` does not exist",
                    place.path().display()
                ))
            }
            _ => place.error("run a command in", e),
        })?;
        let roots = roots_of(ctx);
        let (sandbox, unsandboxed_note) = match self.sandbox_for(&args) {
            Ok(policy) => (policy.cloned(), None),
            Err(why) => (None, Some(why)),
        };
        let mut timeout = args
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(self.config.default_timeout)
            .min(self.config.max_timeout);
        // Finish before the host's own tool deadline, so the model gets this
        // tool's timeout report with the output so far.
        if let Some(deadline) = ctx.deadline() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            timeout = timeout.min(left.saturating_sub(Duration::from_millis(300)));
        }
        let (program, shell_args, plan) = self.how_to_run(&args, ctx);
        let spec = LaunchSpec {
            program,
            args: shell_args,
            cwd: place.path().to_path_buf(),
            roots,
            contain: self.config.contain,
            env: self.inherit_env(),
            set_env: self.config.env.clone(),
            sandbox,
            watch: Some(std::process::id()),
            plan,
        };
        let run = match terminal::usable(ctx, &spec) {
            // Inside an editor that offers terminals: the command runs in
            // one, started by the launcher under the same confinement.
            Some((terminals, launch_args)) => {
                let command = terminal::Command {
                    line: &args.command,
                    spec: &spec,
                    launch_args,
                    timeout,
                    output_limit: self.config.max_output_bytes,
                };
                terminal::run(&terminals, command, ctx).await?
            }
            None => {
                let command = Local {
                    line: &args.command,
                    command: spec.command(),
                    launch: spec.launch(dir),
                    timeout,
                };
                run_command(command, &self.config, ctx).await?
            }
        };
        if let Some(callback) = &self.after_command {
            callback(&run.report);
        }
        let mut text = run.output;
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        if let Some(why) = unsandboxed_note.filter(|_| self.sandbox.is_some()) {
            text.push_str(&format!("[ran without the sandbox: {why}]\n"));
        }
        let report = &run.report;
        let structured = serde_json::json!({
            "exit_code": report.exit_code,
            "timed_out": report.timed_out,
            "sandboxed": report.sandboxed,
            "elapsed_ms": u64::try_from(report.elapsed.as_millis()).unwrap_or(u64::MAX),
        });
        if report.cancelled {
            return Err(ToolError::new(
                ToolErrorKind::Cancelled,
                format!("{text}[cancelled: the command and its child processes were killed]"),
            ));
        }
        if report.timed_out {
            return Err(ToolError::new(
                ToolErrorKind::Timeout,
                format!(
                    "{text}[timed out after {:.1} s: the command and its child processes were killed]",
                    timeout.as_secs_f64()
                ),
            ));
        }
        match report.exit_code {
            Some(code) => text.push_str(&format!("[exit code: {code}]")),
            None => text.push_str(&format!(
                "[terminated by a signal{}]",
                run.signal.map(|s| format!(" ({s})")).unwrap_or_default()
            )),
        }
        Ok(ToolOutput::text(text).with_structured(structured))
    }
}

/// How a command ended: its output, the report, the signal that ended it.
struct Finished {
    output: String,
    report: ShellReport,
    signal: Option<String>,
}

/// How a command's run stopped, as either way of running it sees it.
struct Ended {
    exit_code: Option<i32>,
    signal: Option<String>,
    timed_out: bool,
    cancelled: bool,
}

impl Finished {
    /// The result of `line` (its exit code only when it ended by itself).
    fn new(
        line: &str,
        output: String,
        ended: Ended,
        sandboxed: bool,
        containment: Containment,
        started: std::time::Instant,
    ) -> Self {
        let stopped = ended.timed_out || ended.cancelled;
        Self {
            output,
            report: ShellReport {
                command: line.to_owned(),
                exit_code: if stopped { None } else { ended.exit_code },
                timed_out: ended.timed_out,
                sandboxed,
                containment,
                cancelled: ended.cancelled,
                elapsed: started.elapsed(),
            },
            signal: ended.signal,
        }
    }
}

/// The workspace roots of a call (its directory when it has none).
fn roots_of(ctx: &ToolCtx) -> Vec<std::path::PathBuf> {
    if ctx.roots().is_empty() {
        vec![ctx.cwd().to_path_buf()]
    } else {
        ctx.roots().iter().map(|r| ctx.cwd().join(r)).collect()
    }
}

/// The shell and its flag that runs a command line where kinet plans none.
#[cfg(unix)]
const SHELL: (&str, &str) = ("sh", "-c");
#[cfg(windows)]
const SHELL: (&str, &str) = ("cmd.exe", "/c");
