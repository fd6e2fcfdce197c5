//! The engine's process: started in kinet's sandbox (the workspace
//! read-only, writes only to a private directory, network only to the
//! named hosts through the sandbox's proxy), contained in a PID namespace,
//! and killed with everything it started when the call ends.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinet_core::ToolCtx;
use kinet_core::sandbox::{Launch, SandboxError, SandboxPolicy};
use tokio::io::AsyncReadExt as _;
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::AcpEngine;

/// How much of the engine's error output is kept for messages.
const STDERR_KEPT: usize = 4096;

/// A started engine.
pub(super) struct EngineProcess {
    child: Child,
    pub(super) stdin: Option<ChildStdin>,
    pub(super) stdout: Option<ChildStdout>,
    /// The end of what it wrote on its error output.
    stderr: Arc<Mutex<String>>,
    /// Its private directory (its `HOME` and `TMPDIR`), removed after it.
    private: Option<tempfile::TempDir>,
    pub(super) private_path: PathBuf,
    /// The variables set for it (also for its terminals).
    pub(super) env: BTreeMap<String, Option<String>>,
}

impl EngineProcess {
    /// Starts `engine` for a call in `ctx`'s working directory.
    pub(super) fn start(engine: &AcpEngine, ctx: &ToolCtx) -> Result<Self, String> {
        let private = tempfile::Builder::new()
            .prefix("kinet-engine-")
            .tempdir()
            .map_err(|e| format!("cannot make its private directory: {e}"))?;
        let base = private.path().to_path_buf();
        let mut env: BTreeMap<String, Option<String>> = BTreeMap::new();
        for (var, dir) in [
            ("HOME", "home"),
            ("TMPDIR", "tmp"),
            ("XDG_CONFIG_HOME", "home/.config"),
            ("XDG_CACHE_HOME", "home/.cache"),
            ("XDG_DATA_HOME", "home/.local/share"),
            ("XDG_STATE_HOME", "home/.local/state"),
        ] {
            let path = base.join(dir);
            std::fs::create_dir_all(&path)
                .map_err(|e| format!("cannot make `{}`: {e}", path.display()))?;
            env.insert(var.into(), Some(path.display().to_string()));
        }
        for (relative, contents) in &engine.files {
            write_file(&base.join("home"), relative, contents)?;
        }
        let home = format!("{}/home", base.display());
        for (var, value) in &engine.env {
            env.insert(var.clone(), Some(value.replace("{home}", &home)));
        }
        let mut command = std::process::Command::new(&engine.program);
        command
            .args(engine.args.iter().map(|arg| arg.replace("{home}", &home)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let place = ctx
            .workspace_path(".")
            .map_err(|e| format!("its working directory: {}", e.message()))?;
        let dir = place
            .open_dir()
            .map_err(|e| place.error("open", e).message().to_owned())?;
        let mut launch = Launch::new()
            .cwd(dir, place.path())
            .env(engine.env_policy());
        if engine.confined {
            // Servers of its own on its loopback (opencode runs one) stay
            // inside its network namespace.
            let policy = SandboxPolicy::read_only()
                .writable(&base)
                .loopback_servers(true)
                .allow_hosts(engine.hosts.iter().cloned());
            let roots = if ctx.roots().is_empty() {
                vec![ctx.cwd().to_path_buf()]
            } else {
                ctx.roots().to_vec()
            };
            launch = launch.sandbox(policy, roots);
        }
        launch.prepare(&mut command).map_err(|e| match e {
            SandboxError::Unavailable(why) => format!(
                "kinet cannot confine it on this machine ({why}); a host that accepts an \
                 unconfined engine says so with `AcpEngine::confined(false)`"
            ),
            e => format!("cannot start `{}`: {e}", engine.program),
        })?;
        // Set after the sandbox's own (its proxy's variables): the host's
        // word wins. A `NO_PROXY` for 127.0.0.1 keeps an engine's calls to
        // its own local server off the proxy; inside the sandbox, loopback
        // is the engine's own, so nothing leaves that way.
        for (var, value) in &env {
            if let Some(value) = value {
                command.env(var, value);
            }
        }
        let mut command = tokio::process::Command::from(command);
        command.kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start `{}`: {e}", engine.program))?;
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(err) = child.stderr.take() {
            tokio::spawn(keep_stderr(err, Arc::clone(&stderr)));
        }
        Ok(Self {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            child,
            stderr,
            private: Some(private),
            private_path: base,
            env,
        })
    }

    /// The end of its error output, for a message.
    pub(super) fn said(&self) -> String {
        self.stderr
            .lock()
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    }

    /// Kills it and everything it started, then removes its private
    /// directory.
    pub(super) async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await;
        if let Some(private) = self.private.take() {
            let _ = tokio::task::spawn_blocking(move || private.close()).await;
        }
    }
}

/// Writes a file of the engine's configuration beneath its home.
fn write_file(home: &Path, relative: &str, contents: &str) -> Result<(), String> {
    let relative = Path::new(relative);
    if relative.is_absolute()
        || relative
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(format!(
            "its file `{}` must be a plain path relative to its home",
            relative.display()
        ));
    }
    let path = home.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot make `{}`: {e}", parent.display()))?;
    }
    let contents = contents.replace("{home}", &home.display().to_string());
    std::fs::write(&path, contents).map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}

/// Keeps the end of the engine's error output (and keeps the pipe drained,
/// so the engine never stalls on it).
async fn keep_stderr(mut stderr: tokio::process::ChildStderr, kept: Arc<Mutex<String>>) {
    let mut buf = vec![0u8; 8192];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if let Ok(mut kept) = kept.lock() {
            kept.push_str(&String::from_utf8_lossy(&buf[..n]));
            if kept.len() > STDERR_KEPT {
                let mut cut = kept.len() - STDERR_KEPT;
                while !kept.is_char_boundary(cut) {
                    cut += 1;
                }
                kept.drain(..cut);
            }
        }
    }
}
