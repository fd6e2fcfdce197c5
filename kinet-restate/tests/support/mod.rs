//! Restate servers and kinet service processes for the durable-run tests.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use kinet_core::message::Message;
use kinet_core::provider::{ChatRequest, ProviderError, ProviderStream, StopReason, StreamEvent};
use kinet_core::{Provider, Tool, ToolCtx, ToolError, ToolOutput};
use serde::Deserialize;

/// The Restate server binary, or `None` (with a loud message) when it is
/// missing and not required.
pub fn restate_server() -> Option<PathBuf> {
    let path = std::env::var_os("KINET_RESTATE_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(
                "/var/tmp/kinet-restate/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server",
            )
        });
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("KINET_REQUIRE_RESTATE").is_none(),
        "the Restate server is required here (KINET_REQUIRE_RESTATE) but {} is missing",
        path.display()
    );
    eprintln!(
        "\n!!! SKIPPED: durable-run tests: no Restate server at {} (.ci/setup installs npm \
         @restatedev/restate-server; or set KINET_RESTATE_SERVER). !!!\n",
        path.display()
    );
    None
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One Restate server node.
pub struct Node {
    binary: PathBuf,
    base: PathBuf,
    name: String,
    env: Vec<(String, String)>,
    pub ingress: String,
    pub admin: String,
    child: Option<Child>,
}

impl Node {
    /// A node of a single-node server, or of the cluster whose nodes'
    /// internal ports are `cluster` (this one's at `index`).
    pub fn new(binary: &Path, base: &Path, index: usize, cluster: &[u16]) -> Self {
        let (ingress, admin) = (free_port(), free_port());
        let port = cluster.get(index).copied().unwrap_or_else(free_port);
        let name = format!("n{}", index + 1);
        let mut env = vec![
            ("RESTATE_DISABLE_TELEMETRY".into(), "true".into()),
            ("RESTATE_LOG_FILTER".into(), "warn".into()),
            (
                "RESTATE_INGRESS__BIND_ADDRESS".into(),
                format!("127.0.0.1:{ingress}"),
            ),
            (
                "RESTATE_ADMIN__BIND_ADDRESS".into(),
                format!("127.0.0.1:{admin}"),
            ),
            ("RESTATE_BIND_ADDRESS".into(), format!("127.0.0.1:{port}")),
            (
                "RESTATE_ADVERTISED_ADDRESS".into(),
                format!("http://127.0.0.1:{port}"),
            ),
            ("RESTATE_NODE_NAME".into(), name.clone()),
            ("RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE".into(), "256MB".into()),
            ("RESTATE_DEFAULT_NUM_PARTITIONS".into(), "4".into()),
        ];
        if !cluster.is_empty() {
            let peers: Vec<String> = cluster
                .iter()
                .map(|p| format!("\"http://127.0.0.1:{p}\""))
                .collect();
            env.extend([
                ("RESTATE_CLUSTER_NAME".into(), "kinet-test".into()),
                ("RESTATE_AUTO_PROVISION".into(), (index == 0).to_string()),
                ("RESTATE_DEFAULT_REPLICATION".into(), "2".into()),
                (
                    "RESTATE_METADATA_CLIENT__ADDRESSES".into(),
                    format!("[{}]", peers.join(",")),
                ),
            ]);
        }
        Self {
            binary: binary.to_owned(),
            base: base.to_owned(),
            name,
            env,
            ingress: format!("http://127.0.0.1:{ingress}"),
            admin: format!("http://127.0.0.1:{admin}"),
            child: None,
        }
    }

    /// Starts the node (without waiting for it).
    pub fn spawn(&mut self) {
        let log = std::fs::File::create(self.base.join(format!("{}.log", self.name))).unwrap();
        let child = Command::new(&self.binary)
            .args(["--no-logo", "--listen-mode", "tcp", "--base-dir"])
            .arg(&self.base)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// Waits until the node's admin and ingress answer.
    pub async fn ready(&self) {
        wait_ok(&format!("{}/health", self.admin)).await;
        wait_ok(&format!("{}/restate/health", self.ingress)).await;
    }

    /// The last `bytes` of the node's log.
    pub fn log_tail(&self, bytes: usize) -> String {
        let log = std::fs::read_to_string(self.base.join(format!("{}.log", self.name)))
            .unwrap_or_default();
        let mut start = log.len().saturating_sub(bytes);
        while !log.is_char_boundary(start) {
            start += 1;
        }
        log[start..].to_owned()
    }

    /// Kills the node at once (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the node (SIGTERM) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn wait_ok(url: &str) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(response) = client.get(url).send().await
            && response.status().is_success()
        {
            return;
        }
        assert!(Instant::now() < deadline, "{url} did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Registers the service at `uri` with the node's admin API.
pub async fn register(admin: &str, uri: &str) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let response = client
            .post(format!("{admin}/deployments"))
            .json(&serde_json::json!({ "uri": uri, "force": true }))
            .send()
            .await;
        match response {
            Ok(r) if r.status().is_success() => break,
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                assert!(
                    Instant::now() < deadline,
                    "registering {uri}: {status} {body}"
                );
            }
            Err(e) => assert!(Instant::now() < deadline, "registering {uri}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a service process serves: the calls per prompt, and each call's
/// pause.
#[derive(Clone, Copy)]
pub struct Stage {
    pub calls: usize,
    pub pause_ms: u64,
}

/// A kinet service process: this test binary running `service_stage`.
pub struct Service {
    pub port: u16,
    dir: PathBuf,
    stage: Stage,
    child: Option<Child>,
}

impl Service {
    /// Starts the service on `port`, its tools writing under `dir`.
    pub fn start(port: u16, dir: &Path, stage: Stage) -> Self {
        let mut service = Self {
            port,
            dir: dir.to_owned(),
            stage,
            child: None,
        };
        service.spawn();
        service
    }

    pub fn uri(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// (Re)starts the process.
    pub fn spawn(&mut self) {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "service_stage", "--ignored", "--nocapture"])
            .env("KINET_RESTATE_STAGE_PORT", self.port.to_string())
            .env("KINET_RESTATE_STAGE_DIR", &self.dir)
            .env("KINET_RESTATE_STAGE_CALLS", self.stage.calls.to_string())
            .env(
                "KINET_RESTATE_STAGE_PAUSE_MS",
                self.stage.pause_ms.to_string(),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        self.child = Some(child);
        // Up when its port takes connections.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "the service did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILLs the process.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A model that needs no script position, so a process that replays a
/// run gets the same answers: after a user message it calls `effect` (or
/// `guarded`, which needs approval, when the message says "ask") once per
/// number below `calls` (ids `t<turn>c0`, `t<turn>c1`, ...), one call per
/// turn, then answers with how many results it saw.
pub struct Counting {
    pub calls: usize,
}

#[async_trait]
impl Provider for Counting {
    fn name(&self) -> &str {
        "counting"
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let since_user = request
            .messages
            .iter()
            .rev()
            .take_while(|m| !matches!(m, Message::User { .. }))
            .filter(|m| matches!(m, Message::Tool { .. }))
            .count();
        let turn = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::User { .. }))
            .count();
        let asks = request
            .messages
            .iter()
            .rev()
            .find(|m| matches!(m, Message::User { .. }))
            .is_some_and(|m| m.text().contains("ask"));
        let events = if since_user < self.calls {
            vec![
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: format!("t{turn}c{since_user}"),
                    name: if asks { "guarded" } else { "effect" }.into(),
                },
                StreamEvent::ToolCallArgumentsDelta {
                    index: 0,
                    delta: serde_json::json!({ "n": since_user }).to_string(),
                },
                StreamEvent::Finished(StopReason::ToolUse),
            ]
        } else {
            vec![
                StreamEvent::TextDelta(format!("saw {since_user} results")),
                StreamEvent::Finished(StopReason::EndTurn),
            ]
        };
        Ok(futures::stream::iter(events.into_iter().map(Ok)).boxed())
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct EffectArgs {
    /// The effect's number.
    pub n: u64,
}

/// A tool with an effect outside kinet that honours the idempotency key:
/// every attempt is written to `attempts.log`; the effect, once per key,
/// to `effects.log`; then it takes `pause` (so a kill can land after the
/// effect and before its result is recorded). Named `guarded` (and in
/// need of approval) when `mutating`, else `effect`.
pub struct Effect {
    pub dir: PathBuf,
    pub pause: Duration,
    pub mutating: bool,
}

fn append(path: &Path, line: &str) {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// The lines of a log (empty when it does not exist).
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[async_trait]
impl Tool for Effect {
    type Args = EffectArgs;
    fn name(&self) -> &str {
        if self.mutating { "guarded" } else { "effect" }
    }
    fn description(&self) -> &str {
        "Has an effect."
    }
    fn mutating(&self, _: &EffectArgs) -> bool {
        self.mutating
    }
    async fn call(&self, args: EffectArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let key = ctx
            .idempotency_key()
            .ok_or_else(|| ToolError::failed("no idempotency key"))?;
        let start = Instant::now();
        append(&self.dir.join("attempts.log"), &key);
        if !lines(&self.dir.join("effects.log")).contains(&key) {
            append(&self.dir.join("effects.log"), &key);
        }
        tokio::time::sleep(self.pause).await;
        append(
            &self.dir.join("spans.log"),
            &format!(
                "{key} {} {}",
                since_epoch(start),
                since_epoch(Instant::now())
            ),
        );
        Ok(ToolOutput::text(format!("effect {} done", args.n)))
    }
}

/// Microseconds since the Unix epoch of an instant (for logs shared by
/// processes).
fn since_epoch(at: Instant) -> u128 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now - Instant::now().duration_since(at)).as_micros()
}
