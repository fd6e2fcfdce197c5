//! The load-and-kill harness, shared by the test (`tests/load.rs`, reduced)
//! and the benchmark (`benches/serve.rs`, full): stateless MCP replicas as
//! separate processes (this binary run again in replica mode) behind a
//! round-robin proxy, sessions and memory in one store, OAuth principals,
//! a model that recalls before answering; clients that retry with the same
//! request id; one replica killed with SIGKILL mid-run and restarted; and
//! the checks: every completed turn in its journal exactly once, no
//! conversation interleaved, no principal reading another's words.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

use kinet_core::builder::Calls;
#[path = "pg_proxy.rs"]
mod pg_proxy;
pub use pg_proxy::RoundTrips;
use pg_proxy::counting_proxy;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kinet_core::provider::{ChatRequest, ProviderError, ProviderStream, StopReason, StreamEvent};
use kinet_core::session::SessionStore;
use kinet_core::{Agent, Message, Provider};
use kinet_mcp::McpServer;
use kinet_mcp::oauth::ResourceServer;
use kinet_memory::{HashEmbedder, MemoryConfig, MemoryPack, Scope, SharedMemory};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Where sessions and memory live.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Store {
    /// A SQLite file (sessions and memory in one).
    Sqlite(String),
    /// A PostgreSQL URL.
    Postgres(String),
}

impl Store {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Sqlite(_) => "SQLite",
            Self::Postgres(_) => "PostgreSQL",
        }
    }

    pub fn sessions(&self) -> Arc<dyn SessionStore> {
        match self {
            Self::Sqlite(path) => Arc::new(kinet_memory::SqliteSessionStore::open(path).unwrap()),
            Self::Postgres(url) => {
                Arc::new(kinet_memory::postgres::PostgresSessionStore::connect(url).unwrap())
            }
        }
    }

    pub async fn memory(&self) -> SharedMemory {
        let config = MemoryConfig {
            embedder: Some(Arc::new(HashEmbedder::new(64))),
            blocks: Vec::new(),
        };
        match self {
            Self::Sqlite(path) => kinet_memory::MemoryStore::open(path, config)
                .await
                .unwrap()
                .into(),
            Self::Postgres(url) => kinet_memory::postgres::PostgresMemory::connect(url, config)
                .await
                .unwrap()
                .into(),
        }
    }
}

/// What a replica process is told (as JSON in `KINET_LOAD_REPLICA`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplicaConfig {
    pub addr: String,
    pub store: Store,
    pub resource: String,
    pub issuer: String,
    pub jwks: String,
}

/// The model: asks `recall_memory` with the user's words, then answers
/// with what came back (so a leak would be in the answer).
struct Recaller;

#[async_trait::async_trait]
impl Provider for Recaller {
    fn name(&self) -> &str {
        "recaller"
    }
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let asked = request
            .messages
            .iter()
            .rev()
            .find(|m| matches!(m, Message::User { .. }))
            .map(Message::text)
            .unwrap_or_default();
        let events = match request.messages.last() {
            Some(Message::Tool { .. }) => {
                let recalled = request
                    .messages
                    .last()
                    .map(Message::text)
                    .unwrap_or_default();
                vec![
                    StreamEvent::TextDelta(format!("answer to [{asked}] recalled: {recalled}")),
                    StreamEvent::Finished(StopReason::EndTurn),
                ]
            }
            _ => vec![
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: "recall".into(),
                    name: "recall_memory".into(),
                },
                StreamEvent::ToolCallArgumentsDelta {
                    index: 0,
                    delta: json!({"query": asked, "k": 10}).to_string(),
                },
                StreamEvent::Finished(StopReason::ToolUse),
            ],
        };
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }
}

/// Runs a replica until its stdin closes: prints its URL first.
pub async fn replica_main(config: ReplicaConfig) {
    let sessions = config.store.sessions();
    let memory = config.store.memory().await;
    let server = McpServer::builder(Agent::builder(Recaller).build())
        .stateless(sessions)
        .max_concurrent_runs(64)
        .claim_ttl(Duration::from_secs(4))
        .oauth(ResourceServer::jwt(
            config.resource.clone(),
            config.issuer.clone(),
            config.jwks.clone(),
        ))
        .agent_for(move |principal| {
            let pack = MemoryPack::new(Arc::clone(&memory), principal.subject.clone())
                .scope(Scope::user(&principal.subject).with_agent("load"));
            Agent::builder(Recaller)
                .tools(pack.toolset())
                .calls(Calls::new().hook(pack.history_hook()))
                .build()
        })
        .build();
    let handle = server
        .serve_http(config.addr.parse().unwrap(), None)
        .await
        .unwrap();
    println!("http://{}/mcp", handle.local_addr());
    // Until the parent goes (or kills this process).
    let _ = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    })
    .await;
    handle.shutdown().await;
}

/// A replica process of this binary.
pub struct Replica {
    child: tokio::process::Child,
    pub url: String,
    config: ReplicaConfig,
    args: Vec<String>,
}

impl Replica {
    /// Starts this binary (`args` select the replica entry point) with
    /// `config`; waits for its URL.
    pub async fn start(config: ReplicaConfig, args: &[&str]) -> Self {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args(&args)
            .env(
                "KINET_LOAD_REPLICA",
                serde_json::to_string(&config).unwrap(),
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stdout);
        let url = loop {
            let mut line = String::new();
            let read = tokio::time::timeout(
                Duration::from_secs(60),
                tokio::io::AsyncBufReadExt::read_line(&mut lines, &mut line),
            )
            .await
            .expect("a replica did not start within 60 s")
            .unwrap();
            assert!(read > 0, "a replica exited before serving");
            if line.starts_with("http://") {
                break line.trim().to_owned();
            }
        };
        Self {
            child,
            url,
            config,
            args,
        }
    }

    /// SIGKILL, then the same replica again on the same address.
    pub async fn kill_and_restart(&mut self) {
        self.child.start_kill().unwrap();
        let _ = self.child.wait().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let mut config = self.config.clone();
        config.addr = self
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_owned();
        let again = Self::start(config, &args).await;
        *self = again;
    }
}

/// A round-robin proxy in front of `backends`, saying which one answered
/// in `x-kinet-replica`; a backend that is down answers 502.
pub async fn proxy(backends: Vec<String>) -> String {
    let next = Arc::new(AtomicUsize::new(0));
    let client = reqwest::Client::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let (backends, client, next) = (backends.clone(), client.clone(), next.clone());
        async move {
            let i = next.fetch_add(1, Ordering::SeqCst) % backends.len();
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, 1 << 24)
                .await
                .unwrap_or_default();
            let mut forward = client.request(parts.method, &backends[i]).body(body);
            for (name, value) in &parts.headers {
                if name != "host" && name != "content-length" {
                    forward = forward.header(name, value);
                }
            }
            let mut response = axum::http::Response::builder();
            let body = match forward.send().await {
                Ok(answer) => {
                    response = response.status(answer.status());
                    for (name, value) in answer.headers() {
                        response = response.header(name, value);
                    }
                    axum::body::Body::from(answer.bytes().await.unwrap_or_default())
                }
                Err(error) => {
                    response = response.status(502);
                    axum::body::Body::from(format!("replica {i}: {error}"))
                }
            };
            response
                .header("x-kinet-replica", i.to_string())
                .body(body)
                .unwrap()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// The size of a run.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub clients: usize,
    pub principals: usize,
    pub conversations: usize,
    pub turns: usize,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Report {
    pub turns: usize,
    pub elapsed: Duration,
    /// Per completed turn, from its first attempt to its answer.
    pub latencies: Vec<Duration>,
    /// Attempts that failed and were sent again.
    pub retries: usize,
    /// Turns answered by another replica than the one whose attempt failed.
    pub resumed_elsewhere: usize,
    /// Answers holding another principal's marker.
    pub leaked_answers: usize,
    /// Each conversation's id, principal and turns completed.
    pub conversations: Vec<(String, usize, usize)>,
    pub errors: Vec<String>,
    /// On PostgreSQL: the replicas' round trips to the server while the
    /// clients ran, counted by a proxy between them: those that run
    /// statements, and those that only prepare one (once per statement and
    /// connection).
    pub round_trips: Option<RoundTrips>,
}

/// The marker of principal `p`: in every prompt it sends.
pub fn marker(p: usize) -> String {
    format!("mk{p}x")
}

fn prompt(p: usize, conversation: usize, turn: usize) -> String {
    format!(
        "turn {turn} of c{conversation} secret {}{conversation}t{turn} deploy invoice rollback",
        marker(p)
    )
}

/// Calls `tool` with `arguments` through the proxy until it answers
/// (another attempt after any failure, up to 2 minutes); the answer, the
/// structured content, and the replicas that failed before.
async fn call(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    tool: &str,
    arguments: Value,
    retries: &AtomicUsize,
    errors: &std::sync::Mutex<Vec<String>>,
) -> Result<(String, Value, Vec<String>, String), String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}});
    let started = Instant::now();
    let mut failed_at = Vec::new();
    loop {
        let attempt = client
            .post(url)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .body(body.to_string())
            .send()
            .await;
        let failure = match attempt {
            Ok(response) => {
                let replica = response
                    .headers()
                    .get("x-kinet-replica")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("?")
                    .to_owned();
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                match serde_json::from_str::<Value>(&text) {
                    Ok(answer) if status.is_success() && answer["result"]["isError"] == false => {
                        let result = &answer["result"];
                        return Ok((
                            result["content"][0]["text"]
                                .as_str()
                                .unwrap_or("")
                                .to_owned(),
                            result["structuredContent"].clone(),
                            failed_at,
                            replica,
                        ));
                    }
                    Ok(answer) if answer["result"]["isError"] == true => {
                        let why = answer["result"]["content"][0]["text"]
                            .as_str()
                            .unwrap_or("")
                            .to_owned();
                        // Not found is final: nothing a retry fixes.
                        if why.contains("no conversation") {
                            return Err(why);
                        }
                        (replica, why)
                    }
                    _ => (
                        replica,
                        format!("{status}: {}", text.chars().take(200).collect::<String>()),
                    ),
                }
            }
            Err(error) => ("?".to_owned(), error.to_string()),
        };
        retries.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut errors) = errors.lock()
            && errors.len() < 50
        {
            errors.push(failure.1.clone());
        }
        failed_at.push(failure.0);
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!("no answer within 2 minutes: {}", failure.1));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Runs `plan` through `url` with one token per principal; `completed`
/// counts finished turns as they finish (for the killer).
pub async fn drive(
    url: &str,
    tokens: &[String],
    plan: Plan,
    completed: Arc<AtomicUsize>,
) -> Report {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();
    let retries = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..plan.clients {
        let (client, url, tokens) = (client.clone(), url.to_owned(), tokens.to_vec());
        let (retries, errors, completed) = (retries.clone(), errors.clone(), completed.clone());
        tasks.push(tokio::spawn(async move {
            let mut report = Report::default();
            let p = worker % plan.principals;
            for conversation in (worker..plan.conversations).step_by(plan.clients) {
                let mut id: Option<String> = None;
                let mut done = 0;
                for turn in 1..=plan.turns {
                    let began = Instant::now();
                    let mut arguments = json!({
                        "prompt": prompt(p, conversation, turn),
                        "request_id": format!("c{conversation}-t{turn}"),
                    });
                    let tool = match &id {
                        Some(id) => {
                            arguments["conversation_id"] = json!(id);
                            "reply"
                        }
                        None => "agent",
                    };
                    match call(
                        &client, &url, &tokens[p], tool, arguments, &retries, &errors,
                    )
                    .await
                    {
                        Ok((answer, structured, failed_at, replica)) => {
                            if failed_at.iter().any(|r| *r != replica && r != "?") {
                                report.resumed_elsewhere += 1;
                            }
                            if (0..plan.principals).any(|q| q != p && answer.contains(&marker(q))) {
                                report.leaked_answers += 1;
                            }
                            if id.is_none() {
                                id = structured["conversation_id"].as_str().map(str::to_owned);
                            }
                            report.latencies.push(began.elapsed());
                            report.turns += 1;
                            done += 1;
                            completed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(error) => {
                            report.errors.push(error);
                            break;
                        }
                    }
                }
                if let Some(id) = id {
                    report.conversations.push((id, p, done));
                }
            }
            report
        }));
    }
    let mut total = Report::default();
    for task in tasks {
        let report = task.await.unwrap();
        total.turns += report.turns;
        total.latencies.extend(report.latencies);
        total.resumed_elsewhere += report.resumed_elsewhere;
        total.leaked_answers += report.leaked_answers;
        total.conversations.extend(report.conversations);
        total.errors.extend(report.errors);
    }
    total.elapsed = started.elapsed();
    total.retries = retries.load(Ordering::Relaxed);
    if let Ok(errors) = errors.lock() {
        total
            .errors
            .extend(errors.iter().take(5).map(|e| format!("(retried) {e}")));
    }
    total
}

/// What the journals hold, checked against what the clients completed.
#[derive(Debug, Default)]
pub struct JournalCheck {
    pub conversations: usize,
    pub turns: usize,
    /// Completed turns missing, or present more than once.
    pub wrong: Vec<String>,
    /// Messages of another conversation or principal found in one.
    pub interleaved: usize,
    /// Recalls (in each principal's memory scope) returning another's
    /// marker.
    pub leaked_recalls: usize,
    /// Principals whose recall found their own marker (memory was used).
    pub own_recalled: usize,
}

/// Loads every conversation the clients know and checks it turn by turn;
/// then asks each principal's memory for every marker.
pub async fn check(store: &Store, report: &Report, plan: Plan) -> JournalCheck {
    let sessions = store.sessions();
    let mut check = JournalCheck::default();
    let conversations = report.conversations.clone();
    let found = tokio::task::spawn_blocking(move || {
        conversations
            .iter()
            .map(|(id, p, done)| (sessions.load(id).unwrap(), *p, *done))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for (session, p, done) in found {
        let Some(session) = session else {
            check
                .wrong
                .push("a conversation a client was answered on is not stored".into());
            continue;
        };
        check.conversations += 1;
        let users: Vec<String> = session
            .conversation
            .messages
            .iter()
            .filter(|m| matches!(m, Message::User { .. }))
            .map(Message::text)
            .collect();
        let conversation = users
            .first()
            .and_then(|u| u.split_whitespace().nth(3))
            .unwrap_or("")
            .trim_start_matches('c')
            .parse::<usize>()
            .unwrap_or(usize::MAX);
        let expected: Vec<String> = (1..=done).map(|t| prompt(p, conversation, t)).collect();
        if users != expected {
            check.wrong.push(format!(
                "{}: {} user messages where {done} turns completed",
                session.id,
                users.len()
            ));
        }
        check.turns += users.len().min(done);
        let others = (0..plan.principals).filter(|q| *q != p).map(marker);
        let text = format!("{:?}", session.conversation.messages);
        let tag = format!(" of c{conversation} ");
        if users.iter().any(|u| !u.contains(&tag)) {
            check.interleaved += 1;
        }
        if others.clone().any(|m| text.contains(&m)) {
            check.interleaved += 1;
        }
    }
    let memory = store.memory().await;
    let all: Vec<String> = (0..plan.principals).map(marker).collect();
    for p in 0..plan.principals {
        let scope = Scope::user(format!("principal-{p}")).with_agent("load");
        let recall = memory
            .recall(
                &scope,
                &kinet_memory::RecallQuery::new(format!("deploy invoice {}", all.join(" ")))
                    .limit(100),
            )
            .await
            .unwrap();
        let seen = serde_json::to_string(&recall).unwrap();
        if (0..plan.principals).any(|q| q != p && seen.contains(&marker(q))) {
            check.leaked_recalls += 1;
        }
        if seen.contains(&marker(p)) {
            check.own_recalled += 1;
        }
    }
    check
}

/// p50 and p99 of `samples`, in ms.
pub fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    (at(0.5), at(0.99))
}

/// The issuer's side of a run: where tokens come from and one token per
/// principal (subjects `principal-<n>`, audience `resource`).
pub struct Setup {
    pub resource: String,
    pub issuer: String,
    pub jwks: String,
    pub tokens: Vec<String>,
}

impl Setup {
    /// `issuer`'s tokens for `resource`, one per principal (`principal-<p>`,
    /// valid for an hour).
    pub async fn minted(issuer: &crate::issuer::Issuer, resource: &str, principals: usize) -> Self {
        let mut tokens = Vec::with_capacity(principals);
        for p in 0..principals {
            tokens.push(
                issuer
                    .mint(&format!("principal-{p}"), resource, 3600, false)
                    .await,
            );
        }
        Self {
            resource: resource.to_owned(),
            issuer: issuer.issuer(),
            jwks: issuer.url("/jwks"),
            tokens,
        }
    }
}

/// One whole run: `replicas` processes of this binary (started with
/// `replica_args`) on `store`, behind the proxy, driven by `plan`; with
/// `kill`, the first replica is killed with SIGKILL when a third of the
/// turns are done and started again. Returns what the clients saw and
/// what the journals and memory hold.
pub async fn run(
    setup: &Setup,
    store: &Store,
    replicas: usize,
    kill: bool,
    plan: Plan,
    replica_args: &[&str],
) -> (Report, JournalCheck) {
    // Migrated once, before the replicas race to.
    drop(store.sessions());
    drop(store.memory().await);
    let config = ReplicaConfig {
        addr: "127.0.0.1:0".into(),
        store: store.clone(),
        resource: setup.resource.clone(),
        issuer: setup.issuer.clone(),
        jwks: setup.jwks.clone(),
    };
    // The replicas reach PostgreSQL through a proxy that counts round trips.
    let mut config = config;
    let counted = match &store {
        Store::Postgres(url) => {
            let (proxied, count) = counting_proxy(url).await;
            config.store = Store::Postgres(proxied);
            Some(count)
        }
        Store::Sqlite(_) => None,
    };
    let mut started = Vec::new();
    for _ in 0..replicas {
        started.push(Replica::start(config.clone(), replica_args).await);
    }
    let before = counted.as_ref().map(|c| c.now());
    let url = proxy(started.iter().map(|r| r.url.clone()).collect()).await;
    let completed = Arc::new(AtomicUsize::new(0));
    let total = plan.conversations * plan.turns;
    let killer = kill.then(|| {
        let completed = completed.clone();
        let mut first = started.remove(0);
        tokio::spawn(async move {
            while completed.load(Ordering::Relaxed) < total / 3 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            first.kill_and_restart().await;
            first
        })
    });
    let mut report = drive(&url, &setup.tokens, plan, completed).await;
    report.round_trips = counted.zip(before).map(|(count, before)| {
        let after = count.now();
        RoundTrips {
            run: after.run - before.run,
            prepared: after.prepared - before.prepared,
        }
    });
    if let Some(killer) = killer {
        drop(killer.await.unwrap());
    }
    drop(started);
    let check = check(store, &report, plan).await;
    (report, check)
}

/// Per-principal counts of conversations, for the printout.
pub fn by_principal(report: &Report) -> HashMap<usize, usize> {
    let mut counts = HashMap::new();
    for (_, p, _) in &report.conversations {
        *counts.entry(*p).or_insert(0) += 1;
    }
    counts
}
