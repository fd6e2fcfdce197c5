//! `shell`: runs a command line, contained so that every process it starts
//! ends with the call, and optionally sandboxed.

use std::collections::{BTreeMap, VecDeque};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kinet_core::sandbox::launcher::LaunchSpec;
use kinet_core::sandbox::{Containment, EnvPolicy, Launch, SandboxPolicy};
use kinet_core::tool::Terminals;

mod terminal;
use kinet_core::tool::ToolErrorKind;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `shell`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ShellArgs {
    /// The command line. Runs with `sh -c` (on Windows `cmd.exe /c`).
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

/// Runs a command line: `sh -c` with stdin closed, stdout and stderr merged
/// in arrival order, output streamed to the host as progress events and
/// capped in memory (head and tail kept), the exit code appended.
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
/// [`Terminals`] (an ACP editor that offers `terminal`, for an agent
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
- Runs with `sh -c` in the working directory unless cwd is given; stdin is closed, so \
interactive programs fail: pass flags such as `-y` or `--no-pager`.
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

    async fn confirm_summary(&self, args: &ShellArgs, ctx: &ToolCtx) -> Option<String> {
        let dir = ctx.workspace_path_or_cwd(args.cwd.as_deref()).ok()?;
        let note = match self.sandbox_for(args) {
            Err(why) => format!("\n(not sandboxed: {why})"),
            Ok(_) => String::new(),
        };
        Some(format!(
            "$ {}\n(in {}){note}",
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
        let roots: Vec<std::path::PathBuf> = if ctx.roots().is_empty() {
            vec![ctx.cwd().to_path_buf()]
        } else {
            ctx.roots().iter().map(|r| ctx.cwd().join(r)).collect()
        };
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
        let run = match ctx.extension::<Terminals>() {
            // Inside an editor that offers terminals (to an agent confined
            // to a workspace): the command runs in one, started by the
            // launcher under the same confinement.
            Some(terminals) if !ctx.roots().is_empty() => {
                let spec = LaunchSpec {
                    program: SHELL.0.into(),
                    args: vec![SHELL.1.into(), args.command.clone()],
                    cwd: place.path().to_path_buf(),
                    roots,
                    contain: self.config.contain,
                    env: self.config.inherit_env.clone(),
                    set_env: self.config.env.clone(),
                    sandbox,
                };
                let command = terminal::Command {
                    line: &args.command,
                    spec,
                    timeout,
                    output_limit: self.config.max_output_bytes,
                };
                terminal::run(&terminals, command, ctx).await?
            }
            _ => {
                let mut launch = Launch::new()
                    .cwd(dir, place.path())
                    .contain(self.config.contain)
                    .env(self.config.inherit_env.clone());
                if let Some(policy) = sandbox {
                    launch = launch.sandbox(policy, roots);
                }
                run_command(&args.command, launch, timeout, &self.config, ctx).await?
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

/// Output kept in memory: the first `limit / 2` bytes and the last
/// `limit / 2`, with a count of what was dropped in between.
struct CappedOutput {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    half: usize,
    dropped: u64,
}

impl CappedOutput {
    fn new(limit: usize) -> Self {
        let half = (limit / 2).max(1);
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            half,
            dropped: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < self.half {
            let take = bytes.len().min(self.half - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= self.half {
            self.dropped += (self.tail.len() + bytes.len() - self.half) as u64;
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.half..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.half);
        self.dropped += overflow as u64;
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    fn into_text(self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!(
                "\n[... {} bytes of output omitted ...]\n",
                self.dropped
            ));
        }
        let (a, b) = self.tail.as_slices();
        let mut tail = Vec::with_capacity(a.len() + b.len());
        tail.extend_from_slice(a);
        tail.extend_from_slice(b);
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

/// Splits off complete UTF-8 text from `pending`, keeping an incomplete
/// character at the end for the next chunk.
fn take_text(pending: &mut Vec<u8>) -> String {
    let valid = match std::str::from_utf8(pending) {
        Ok(_) => pending.len(),
        Err(error) if error.error_len().is_none() => error.valid_up_to(),
        Err(_) => pending.len(),
    };
    let rest = pending.split_off(valid);
    let text = String::from_utf8_lossy(pending).into_owned();
    *pending = rest;
    text
}

/// How a command ended: its output, the report, the signal that ended it.
struct Finished {
    output: String,
    report: ShellReport,
    signal: Option<String>,
}

/// The shell and its flag that runs a command line.
#[cfg(unix)]
const SHELL: (&str, &str) = ("sh", "-c");
#[cfg(windows)]
const SHELL: (&str, &str) = ("cmd.exe", "/c");

#[cfg(unix)]
fn command_for(line: &str) -> std::process::Command {
    let mut command = std::process::Command::new(SHELL.0);
    command.arg(SHELL.1).arg(line);
    command
}

#[cfg(windows)]
fn command_for(line: &str) -> std::process::Command {
    use std::os::windows::process::CommandExt;
    const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;
    let mut command = std::process::Command::new(SHELL.0);
    command.arg(SHELL.1).arg(line);
    command.creation_flags(CREATE_NEW_PROCESS_GROUP);
    command
}

/// Kills the process group when dropped: covers every way out of
/// `run_command`, including the future being dropped mid-command.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

/// Kills the process group led by `pid` (the whole tree on Windows). With
/// a PID namespace this ends the supervisor and PID 1, and with it every
/// process in the namespace.
fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid else { return };
    #[cfg(unix)]
    {
        use nix::sys::signal::{Signal, killpg};
        use nix::unistd::Pid;
        if let Ok(raw) = i32::try_from(pid) {
            let _ = killpg(Pid::from_raw(raw), Signal::SIGKILL);
        }
    }
    #[cfg(windows)]
    {
        let _ = std::process::Command::new("taskkill")
            .args(["/F", "/T", "/PID", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The read end of the command's output pipe, read without a thread of
/// its own on Unix (nothing is left blocked when the call ends).
struct OutputPipe {
    #[cfg(unix)]
    pipe: tokio::net::unix::pipe::Receiver,
    #[cfg(unix)]
    buf: Vec<u8>,
    #[cfg(windows)]
    chunks: tokio::sync::mpsc::Receiver<Vec<u8>>,
}

impl OutputPipe {
    fn new(reader: std::io::PipeReader) -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            let fd = std::os::fd::OwnedFd::from(reader);
            Ok(Self {
                pipe: tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?,
                buf: vec![0u8; 64 * 1024],
            })
        }
        #[cfg(windows)]
        {
            use std::io::Read;
            let mut reader = reader;
            let (sender, chunks) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = reader.read(&mut buf) {
                    if n == 0 || sender.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            });
            Ok(Self { chunks })
        }
    }

    /// The next chunk, or `None` at the end (or on a read error).
    async fn next(&mut self) -> Option<Vec<u8>> {
        #[cfg(unix)]
        {
            use tokio::io::AsyncReadExt;
            match self.pipe.read(&mut self.buf).await {
                Ok(0) | Err(_) => None,
                Ok(n) => Some(self.buf[..n].to_vec()),
            }
        }
        #[cfg(windows)]
        {
            self.chunks.recv().await
        }
    }
}

async fn run_command(
    line: &str,
    launch: Launch,
    timeout: Duration,
    config: &ShellConfig,
    ctx: &ToolCtx,
) -> Result<Finished, ToolError> {
    let started = Instant::now();
    let spawn_error = |e: std::io::Error| ToolError::failed(format!("cannot start `{line}`: {e}"));
    // One pipe for both streams keeps their order.
    let (reader, writer) = std::io::pipe().map_err(spawn_error)?;
    let writer_err = writer.try_clone().map_err(spawn_error)?;
    let mut command = command_for(line);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer_err));
    for (name, value) in &config.env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let sandboxed = launch.is_sandboxed();
    let containment = launch
        .prepare(&mut command)
        .map_err(|e| ToolError::failed(format!("cannot start `{line}`: {e}")))?;
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    let mut child = command.spawn().map_err(spawn_error)?;
    // Close our copies of the write end, or the reader never sees EOF.
    drop(command);
    let pid = child.id();
    // If this future is dropped (the run aborted), still stop the group.
    let mut group = GroupGuard(pid);
    let mut pipe = OutputPipe::new(reader).map_err(spawn_error)?;

    let mut output = CappedOutput::new(config.max_output_bytes);
    let mut pending = Vec::new();
    // Progress events stop after this many bytes, so a slow host is not
    // flooded by a command like `yes`; the final output is capped apart.
    let mut progress_budget = config.max_output_bytes;
    let mut on_chunk = |chunk: &[u8], output: &mut CappedOutput| {
        output.push(chunk);
        if progress_budget == 0 {
            return;
        }
        let take = chunk.len().min(progress_budget);
        progress_budget -= take;
        pending.extend_from_slice(&chunk[..take]);
        let mut text = take_text(&mut pending);
        if progress_budget == 0 {
            text.push_str("\n[... further output is not streamed; it is in the result ...]\n");
        }
        if !text.is_empty() {
            ctx.progress(text);
        }
    };
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut timed_out = false;
    let mut cancelled = false;
    let mut status = None;
    let mut eof = false;
    loop {
        tokio::select! {
            chunk = pipe.next(), if !eof => match chunk {
                Some(chunk) => on_chunk(&chunk, &mut output),
                // The command closed its output but may still be running
                // (`exec >log 2>&1; make`): keep waiting for it.
                None => eof = true,
            },
            exited = child.wait(), if status.is_none() => {
                status = Some(exited.map_err(|e| ToolError::failed(format!("waiting for `{line}` failed: {e}")))?);
                // Keep reading what is already in the pipe (and, without a
                // PID namespace, what background children write) for a
                // moment, then stop.
                let drain = tokio::time::sleep(config.drain_after_exit);
                tokio::pin!(drain);
                while !eof {
                    tokio::select! {
                        chunk = pipe.next() => match chunk {
                            Some(chunk) => on_chunk(&chunk, &mut output),
                            None => eof = true,
                        },
                        _ = &mut drain => break,
                    }
                }
                break;
            }
            _ = &mut deadline => {
                timed_out = true;
                break;
            }
            _ = ctx.cancellation().cancelled() => {
                cancelled = true;
                break;
            }
        }
    }
    // Stop everything left: the command itself on timeout or cancellation,
    // background children otherwise.
    kill_group(pid);
    group.0 = None;
    let status = match status {
        Some(status) => Some(status),
        None => tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .ok()
            .and_then(Result::ok),
    };
    // What the killed processes had written before they died; the pipe is
    // dropped after a short wait either way.
    let tail = tokio::time::sleep(Duration::from_millis(50));
    tokio::pin!(tail);
    while !eof {
        tokio::select! {
            chunk = pipe.next() => match chunk {
                Some(chunk) => on_chunk(&chunk, &mut output),
                None => eof = true,
            },
            _ = &mut tail => break,
        }
    }
    drop(pipe);
    let (exit_code, signal) = match status {
        Some(status) => (status.code(), signal_of(&status).map(|s| s.to_string())),
        None => (None, None),
    };
    Ok(Finished {
        output: output.into_text(),
        report: ShellReport {
            command: line.to_owned(),
            exit_code: if timed_out || cancelled {
                None
            } else {
                exit_code
            },
            timed_out,
            sandboxed,
            containment,
            cancelled,
            elapsed: started.elapsed(),
        },
        signal,
    })
}

#[cfg(unix)]
fn signal_of(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn signal_of(_status: &std::process::ExitStatus) -> Option<i32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_output_keeps_head_and_tail() {
        let mut out = CappedOutput::new(10);
        for chunk in [&b"abc"[..], b"defgh", b"ijklmnop", b"qrstuvwxyz"] {
            out.push(chunk);
        }
        assert_eq!(
            out.into_text(),
            "abcde\n[... 16 bytes of output omitted ...]\nvwxyz"
        );
        let mut small = CappedOutput::new(100);
        small.push(b"hello");
        assert_eq!(small.into_text(), "hello");
    }

    #[test]
    fn split_utf8_is_carried_to_the_next_chunk() {
        let bytes = "ü€".as_bytes();
        let mut pending = bytes[..3].to_vec();
        assert_eq!(take_text(&mut pending), "ü");
        pending.extend_from_slice(&bytes[3..]);
        assert_eq!(take_text(&mut pending), "€");
        assert!(pending.is_empty());
    }
}
