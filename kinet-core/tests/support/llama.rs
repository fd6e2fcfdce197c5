//! A real model server for the provider tests: llama.cpp's `llama-server`
//! with SmolLM2-135M-Instruct, as `.ci/llama-server` builds them (cached
//! under /var/tmp). Started on a free loopback port, contained by kinet's
//! own launcher, and stopped when the test process ends.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The server binary and the model, when they are built.
pub(crate) fn binaries() -> Option<(PathBuf, PathBuf)> {
    let server = std::env::var_os("KINET_LLAMA_SERVER")
        .map(PathBuf::from)
        .or_else(|| {
            let cache = Path::new("/var/tmp/kinet-llama");
            let mut builds: Vec<PathBuf> = std::fs::read_dir(cache)
                .ok()?
                .flatten()
                .map(|e| e.path().join("bin/llama-server"))
                .filter(|p| p.is_file())
                .collect();
            builds.sort();
            // The build for this CPU is the one that runs.
            builds.into_iter().find(|p| {
                Command::new(p)
                    .arg("--version")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
        })?;
    let model = std::env::var_os("KINET_LLAMA_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from("/var/tmp/kinet-llama/models/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    model.is_file().then_some((server, model))
}

/// Whether the real server is there; when it is not, says so loudly (and
/// fails instead under `KINET_REQUIRE_LLAMA=1`, as CI runs).
pub(crate) fn available() -> bool {
    if binaries().is_some() {
        return true;
    }
    let message = "llama-server or the SmolLM2 model is missing: run `.ci/llama-server` (10-16 minutes) to build them";
    if std::env::var_os("KINET_REQUIRE_LLAMA").is_some() {
        panic!("{message}");
    }
    kinet_core::testing::skipped(message);
    false
}

/// The chat template the server runs with.
pub(crate) fn template() -> PathBuf {
    // From kinet-core's tests, or from the workspace's benches; beside the
    // sources the binary was built from, else from the directory cargo runs
    // it in (a target directory shared between checkouts can hold a binary
    // built elsewhere).
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    let here = std::env::current_dir().unwrap_or_default();
    [built, here]
        .iter()
        .flat_map(|base| {
            [
                "tests/fixtures/llama/chatml-tools.jinja",
                "kinet-core/tests/fixtures/llama/chatml-tools.jinja",
                "../kinet-core/tests/fixtures/llama/chatml-tools.jinja",
            ]
            .map(|p| base.join(p))
        })
        .find(|p| p.is_file())
        .expect("the chat template fixture")
}

/// A free loopback port.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A running server.
pub(crate) struct Server {
    pub(crate) port: u16,
    child: Arc<Mutex<Option<Child>>>,
    /// The server's log lines, for tests that look at what it saw.
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Starts a server on `port` with a context of `ctx` tokens and waits
    /// until it answers `/health`.
    pub(crate) fn start(port: u16, ctx: u32) -> Server {
        Self::start_with(port, ctx, &[])
    }

    /// [`start`](Self::start) with more arguments for the server (a cap
    /// on the tokens of an answer: `-n 64`).
    pub(crate) fn start_with(port: u16, ctx: u32, extra: &[&str]) -> Server {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let (server, model) = binaries().expect("llama-server is built");
        let child: Arc<Mutex<Option<Child>>> = Arc::default();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let (ready, started) = std::sync::mpsc::channel();
        {
            let (child, log) = (Arc::clone(&child), Arc::clone(&log));
            // The supervisor dies with the thread that spawned it, so a
            // thread of its own spawns and holds the server for as long as
            // it runs (and the process's end ends it).
            std::thread::spawn(move || {
                let mut command = Command::new(&server);
                command
                    .args(["-m"])
                    .arg(&model)
                    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args(["--jinja", "--chat-template-file"])
                    .arg(template())
                    .args(["-c", &ctx.to_string(), "-np", "1", "--temp", "0", "-t", "2"])
                    .args(["--no-webui"])
                    .args(&extra)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped());
                kinet_core::sandbox::Launch::new()
                    .prepare(&mut command)
                    .expect("contained launch");
                let mut spawned = command.spawn().expect("llama-server starts");
                let stderr = spawned.stderr.take();
                *child.lock().unwrap() = Some(spawned);
                let _ = ready.send(());
                if let Some(stderr) = stderr {
                    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                        log.lock().unwrap().push(line);
                    }
                }
                // Keep this thread (the supervisor's parent) alive while
                // the server runs.
                loop {
                    let done = match child.lock().unwrap().as_mut() {
                        Some(c) => c.try_wait().ok().flatten().is_some(),
                        None => true,
                    };
                    if done {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
        }
        started.recv().expect("the server thread started");
        let server = Server { port, child, log };
        server.wait_healthy(Duration::from_secs(60));
        server
    }

    fn wait_healthy(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                use std::io::{Read, Write};
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = stream.write_all(
                    b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
                );
                let mut answer = String::new();
                let _ = stream.read_to_string(&mut answer);
                if answer.starts_with("HTTP/1.1 200") {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "llama-server on port {} did not become healthy:\n{}",
            self.port,
            self.log.lock().unwrap().join("\n")
        );
    }

    /// `http://127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server's log so far.
    pub(crate) fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Kills the server (and everything in its namespace).
    pub(crate) fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            // The child is the supervisor: when it dies, PID 1 (the server)
            // gets SIGKILL from the kernel and the namespace ends with it.
            // (Never `/bin/kill -KILL -<pid>`: procps reads that as pid -1.)
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The server most tests share (4096-token context, one slot).
pub(crate) fn shared() -> &'static Server {
    static SHARED: OnceLock<Server> = OnceLock::new();
    SHARED.get_or_init(|| Server::start(free_port(), 4096))
}
