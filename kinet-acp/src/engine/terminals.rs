//! `terminal/*` for an engine: its commands planned and run by kinet, in
//! the read-only sandbox (writes only to the engine's private directory,
//! no network), contained, and killed when released or when the call
//! ends.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema as acp;
use kinet_core::ToolCtx;
use kinet_core::command::{Context, Planned, named_shell, plan, quote};
use kinet_core::sandbox::{EnvPolicy, Launch, SandboxPolicy};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::invalid;

type AcpResult<T> = Result<T, agent_client_protocol::Error>;

/// The most output kept per terminal when the engine sets no limit.
const DEFAULT_LIMIT: usize = 1024 * 1024;
/// The most terminals an engine may hold at once.
const MAX_OPEN: usize = 16;

/// The terminals of one engine call.
pub(super) struct Terminals {
    ctx: ToolCtx,
    /// The engine's private directory: the one place its commands may write.
    private: PathBuf,
    env: BTreeMap<String, Option<String>>,
    next: AtomicU64,
    open: Mutex<HashMap<String, Arc<Term>>>,
}

struct Term {
    output: Arc<Mutex<Captured>>,
    exit: watch::Receiver<Option<acp::TerminalExitStatus>>,
    /// Kills the command; the task then records how it ended.
    kill: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Term {
    fn drop(&mut self) {
        // The task owns the child (killed on drop): nothing outlives it.
        self.task.abort();
    }
}

/// Output kept up to a limit, dropping from the start.
struct Captured {
    bytes: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Captured {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > self.limit {
            let mut cut = self.bytes.len() - self.limit;
            // At a character boundary: never start inside a UTF-8 sequence.
            while cut < self.bytes.len() && (self.bytes[cut] & 0xC0) == 0x80 {
                cut += 1;
            }
            self.bytes.drain(..cut);
            self.truncated = true;
        }
    }
}

impl Terminals {
    pub(super) fn new(
        ctx: ToolCtx,
        private: PathBuf,
        env: BTreeMap<String, Option<String>>,
    ) -> Self {
        Self {
            ctx,
            private,
            env,
            next: AtomicU64::new(1),
            open: Mutex::default(),
        }
    }

    /// The command line a request asks for: `command` alone is a line;
    /// with `args`, each word quoted.
    fn line(request: &acp::CreateTerminalRequest) -> String {
        if request.args.is_empty() {
            return request.command.clone();
        }
        std::iter::once(&request.command)
            .chain(&request.args)
            .map(|word| quote(word))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `terminal/create`: plans the line where it runs, then starts it in
    /// the read-only sandbox. `Err` says why not (a path outside the
    /// workspace, no sandbox on this machine).
    pub(super) fn create(&self, request: &acp::CreateTerminalRequest) -> Result<String, String> {
        if self.open.lock().map(|o| o.len()).unwrap_or(MAX_OPEN) >= MAX_OPEN {
            return Err(format!("at most {MAX_OPEN} terminals may be open at once"));
        }
        let line = Self::line(request);
        let cwd = request
            .cwd
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| ".".into());
        let place = self
            .ctx
            .workspace_path(&cwd)
            .map_err(|e| e.message().to_owned())?;
        let dir = place
            .open_dir()
            .map_err(|e| place.error("open", e).message().to_owned())?;
        let mut env = self.env.clone();
        for variable in &request.env {
            env.insert(variable.name.clone(), Some(variable.value.clone()));
        }
        let inherit = EnvPolicy::core();
        let roots = self.ctx.roots().to_vec();
        let context = Context::new(place.path())
            .roots(roots.clone())
            .env(inherit.environment(&env))
            .writable(vec![self.private.clone()]);
        let policy = SandboxPolicy::read_only().writable(&self.private);
        let mut launch = Launch::new()
            .cwd(dir, place.path())
            .env(inherit)
            .sandbox(policy, roots);
        let mut command = match plan(&line, &context) {
            Planned::Plan(plan) if kinet_core::command::RUNS_PLANS => {
                let first = plan
                    .invocations()
                    .next()
                    .map(|i| i.path.clone())
                    .unwrap_or_else(|| PathBuf::from("true"));
                launch = launch.plan(plan);
                std::process::Command::new(first)
            }
            _ => {
                let mut command = std::process::Command::new(named_shell(&context));
                command.args(["-c", &line]);
                command
            }
        };
        for (name, value) in &env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        let limit = request
            .output_byte_limit
            .map_or(DEFAULT_LIMIT, |l| (l as usize).min(DEFAULT_LIMIT));
        let term =
            start(command, launch, limit).map_err(|e| format!("cannot start `{line}`: {e}"))?;
        let id = format!("term-{}", self.next.fetch_add(1, Ordering::Relaxed));
        if let Ok(mut open) = self.open.lock() {
            open.insert(id.clone(), Arc::new(term));
        }
        Ok(id)
    }

    fn get(&self, id: &acp::TerminalId) -> AcpResult<Arc<Term>> {
        self.open
            .lock()
            .ok()
            .and_then(|open| open.get(&id.to_string()).cloned())
            .ok_or_else(|| invalid(format!("no terminal `{id}` is open")))
    }

    /// `terminal/output`.
    pub(super) fn output(&self, id: &acp::TerminalId) -> AcpResult<acp::TerminalOutputResponse> {
        let term = self.get(id)?;
        let exit = term.exit.borrow().clone();
        let (text, truncated) = term
            .output
            .lock()
            .map(|o| (String::from_utf8_lossy(&o.bytes).into_owned(), o.truncated))
            .unwrap_or_default();
        Ok(acp::TerminalOutputResponse::new(text, truncated).exit_status(exit))
    }

    /// `terminal/wait_for_exit`: a future that does not hold the
    /// connection.
    pub(super) fn wait(
        &self,
        id: &acp::TerminalId,
    ) -> AcpResult<impl Future<Output = AcpResult<acp::WaitForTerminalExitResponse>> + use<>> {
        let mut exit = self.get(id)?.exit.clone();
        Ok(async move {
            let status = exit
                .wait_for(Option::is_some)
                .await
                .map_err(|_| invalid("the terminal was released"))?
                .clone()
                .unwrap_or_default();
            Ok(acp::WaitForTerminalExitResponse::new(status))
        })
    }

    /// `terminal/kill`: ends the command, keeps its output.
    pub(super) fn kill(&self, id: &acp::TerminalId) -> AcpResult<()> {
        self.get(id)?.kill.cancel();
        Ok(())
    }

    /// `terminal/release`: ends the command and forgets the terminal.
    pub(super) fn release(&self, id: &acp::TerminalId) -> AcpResult<()> {
        let term = self
            .open
            .lock()
            .ok()
            .and_then(|mut open| open.remove(&id.to_string()));
        match term {
            Some(term) => {
                term.task.abort();
                Ok(())
            }
            None => Err(invalid(format!("no terminal `{id}` is open"))),
        }
    }
}

/// Starts `command` with its output in one pipe, watched by a task that
/// owns the child.
fn start(
    mut command: std::process::Command,
    launch: Launch,
    limit: usize,
) -> std::io::Result<Term> {
    let (reader, writer) = std::io::pipe()?;
    command
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(writer.try_clone()?))
        .stdout(std::process::Stdio::from(writer));
    launch
        .prepare(&mut command)
        .map_err(std::io::Error::other)?;
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    let mut child = command.spawn()?;
    drop(command);
    let mut pipe =
        tokio::net::unix::pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(reader))?;
    let output = Arc::new(Mutex::new(Captured {
        bytes: Vec::new(),
        limit,
        truncated: false,
    }));
    let (done, exit) = watch::channel(None);
    let kill = CancellationToken::new();
    let (kept, killed) = (Arc::clone(&output), kill.clone());
    let task = tokio::spawn(async move {
        use tokio::io::AsyncReadExt as _;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            tokio::select! {
                read = pipe.read(&mut buf) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if let Ok(mut kept) = kept.lock() {
                            kept.push(&buf[..n]);
                        }
                    }
                },
                () = killed.cancelled() => break,
            }
        }
        let status = tokio::select! {
            status = child.wait() => status.ok(),
            () = killed.cancelled() => {
                let _ = child.start_kill();
                child.wait().await.ok()
            }
        };
        let _ = done.send(Some(exit_status(status)));
    });
    Ok(Term {
        output,
        exit,
        kill,
        task,
    })
}

fn exit_status(status: Option<std::process::ExitStatus>) -> acp::TerminalExitStatus {
    use std::os::unix::process::ExitStatusExt as _;
    let Some(status) = status else {
        return acp::TerminalExitStatus::new();
    };
    acp::TerminalExitStatus::new()
        .exit_code(status.code().map(|c| c as u32))
        .signal(status.signal().map(|s| s.to_string()))
}
