//! Coding agents as `dispatch_agent` engines over ACP, against real peers:
//! kinet itself in another process (this binary, re-run with `--serve=`),
//! the TypeScript SDK's example agent, a hostile engine, and (see
//! `npm_engines`) agents from npm.
//!
//! This binary is also the kinet agent an engine test starts: no libtest
//! output on its stdout.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    clippy::print_stdout
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kinet_acp::{AcpEngine, AcpServer, EngineTable};
use kinet_core::builder::{Limits, SubAgents, Workspace};
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::{Agent, AgentEvent, ApprovalPolicy, RunOutcome, RunStop};

#[path = "../../kinet-core/tests/support/llama.rs"]
#[allow(dead_code)]
mod llama;

/// What the scripted kinet engine answers.
const SCRIPTED_ANSWER: &str = "The answer, from the engine, is 42.";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A workspace with one file, `keep.txt`.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keep.txt"), "original\n").unwrap();
    dir
}

/// A parent agent whose model dispatches one task to engine `name`, then
/// answers "done".
fn parent(
    dir: &Path,
    name: &str,
    engine: impl Into<kinet_core::builder::Engine>,
    timeout: Option<Duration>,
) -> Agent {
    let model = ScriptedProvider::new([
        ScriptedTurn::new().tool_call(
            "d1",
            "dispatch_agent",
            serde_json::json!({"prompt": "Look at keep.txt and report.", "engine": name}),
        ),
        ScriptedTurn::text("done"),
    ]);
    let mut limits = Limits::new();
    if let Some(timeout) = timeout {
        limits = limits.tool_timeout(timeout);
    }
    Agent::builder(model)
        .tool(kinet_tools::agents::DispatchAgentTool)
        .workspace(Workspace::new().cwd(dir).root(dir))
        .policy(ApprovalPolicy::never())
        .limits(limits)
        .sub_agents(SubAgents::new().engine(name, engine))
        .build()
}

/// What the scripted kinet engine's model does: reads `keep.txt`, then
/// answers [`SCRIPTED_ANSWER`].
fn scripted_engine_model() -> ScriptedProvider {
    ScriptedProvider::new([
        ScriptedTurn::new().tool_call("r1", "read_file", serde_json::json!({"path": "keep.txt"})),
        ScriptedTurn::text(SCRIPTED_ANSWER),
    ])
}

/// Runs `agent` (a [`parent`]) to its end; its run completed and the
/// dispatch answered: its events and the answer.
fn answered(agent: &Agent) -> (Vec<AgentEvent>, String) {
    let (events, outcome) = runtime().block_on(run(agent));
    assert!(
        matches!(outcome.stop, RunStop::Completed),
        "{:?}",
        outcome.stop
    );
    let text = dispatch_result(&events).expect("the engine's answer");
    (events, text)
}

/// Runs `agent` to its end, with its events.
async fn run(agent: &Agent) -> (Vec<AgentEvent>, RunOutcome) {
    let mut run = agent.run(vec![kinet_core::Message::user("go")]);
    let mut events = Vec::new();
    while let Some(event) = run.next().await {
        events.push(event);
    }
    (events, run.finish().await)
}

/// The dispatch call's result.
fn dispatch_result(events: &[AgentEvent]) -> Result<String, String> {
    events
        .iter()
        .find_map(|event| match event {
            AgentEvent::ToolCallFinished { name, result, .. } if name == "dispatch_agent" => {
                Some(match result {
                    Ok(output) => Ok(output.text.clone()),
                    Err(error) => Err(error.message().to_owned()),
                })
            }
            _ => None,
        })
        .expect("the dispatch call finished")
}

/// The sub-agent's events.
fn sub_events(events: &[AgentEvent]) -> Vec<&AgentEvent> {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::SubAgent { event, .. } => Some(event.as_ref()),
            _ => None,
        })
        .collect()
}

fn python() -> PathBuf {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("python3"))
}

fn hostile(mode: &str, marker: &str) -> AcpEngine {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile_engine.py");
    AcpEngine::command(
        python().display().to_string(),
        [script.display().to_string(), mode.into(), marker.into()],
    )
    .start_timeout(Duration::from_secs(20))
}

/// Whether a process whose command line holds `marker` is alive.
fn alive_with(marker: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .map(|line| {
                line.split(|b| *b == 0)
                    .any(|word| word == marker.as_bytes())
            })
            .unwrap_or(false)
    })
}

fn hostile_engine_fails_at_everything() {
    let dir = workspace();
    let forbidden = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    forbidden.set_nonblocking(true).unwrap();
    let port = forbidden.local_addr().unwrap().port();
    let engine = hostile("attack", "unused")
        .env("KINET_TEST_FORBIDDEN_PORT", port.to_string())
        // A proxy exists, but this port is not on its allowlist.
        .allow_hosts(["127.0.0.1:1"]);
    let agent = parent(dir.path(), "hostile", engine, None);
    let (events, text) = answered(&agent);
    eprintln!("{text}");
    for expected in [
        "direct write: failed",
        "direct delete: failed",
        "direct connect: failed",
        "proxied request: failed",
        "home write: SUCCEEDED",
        "the engine is read-only",
        "\"optionId\": \"no\"",
        "\"content\": \"original\\n\"",
        "Permission denied",
        "kinet refused the engine",
    ] {
        assert!(
            text.contains(expected),
            "`{expected}` missing from:\n{text}"
        );
    }
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in:\n{text}"))
            .to_owned()
    };
    assert!(line("outside read:").contains("\"error\""), "{text}");
    assert!(line("fs write:").contains("\"error\""), "{text}");
    // The terminal's `rm` ran in the read-only sandbox, or was refused.
    assert!(!text.contains("\"exitCode\": 0"), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
        "original\n"
    );
    assert!(!dir.path().join("pwned.txt").exists());
    assert!(
        forbidden.accept().is_err(),
        "nothing reached the forbidden port"
    );
    let subs = sub_events(&events);
    assert!(
        subs.iter().any(
            |e| matches!(e, AgentEvent::Warning { message } if message.contains("engine `hostile`"))
        ),
        "the refusals are events of the parent's run"
    );
}

fn malformed_and_out_of_order_messages_end_the_call() {
    for (mode, expected) in [
        ("garbage", "not JSON"),
        ("stray", "a session kinet did not open"),
    ] {
        let dir = workspace();
        let agent = parent(dir.path(), "hostile", hostile(mode, "unused"), None);
        let (events, outcome) = runtime().block_on(run(&agent));
        let error = dispatch_result(&events).expect_err("the call fails");
        assert!(error.contains("engine `hostile`"), "{error}");
        assert!(error.contains(expected), "{mode}: {error}");
        // The parent's run goes on.
        assert!(
            matches!(outcome.stop, RunStop::Completed),
            "{:?}",
            outcome.stop
        );
        assert_eq!(outcome.final_text().as_deref(), Some("done"));
    }
}

fn updates_around_the_session_answer_count() {
    // Updates of the new session that come before or right with the
    // answer to `session/new` are the session's, not strays.
    for _ in 0..5 {
        let dir = workspace();
        let agent = parent(dir.path(), "hostile", hostile("early", "unused"), None);
        let (_, text) = answered(&agent);
        assert_eq!(text, "early,right after,answer");
    }
}

fn cancel_and_timeout_stop_the_engine_within_a_second() {
    let rt = runtime();
    // Cancelled mid-turn.
    let marker = format!("kinet-engine-cancel-{}", std::process::id());
    let dir = workspace();
    let agent = parent(dir.path(), "hostile", hostile("hang", &marker), None);
    rt.block_on(async {
        let mut run = agent.run(vec![kinet_core::Message::user("go")]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !alive_with(&marker) {
            assert!(Instant::now() < deadline, "the engine's child started");
            tokio::select! {
                event = run.next() => { event.expect("the run goes on"); }
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        let cancelled = Instant::now();
        run.cancel();
        let waiter = tokio::spawn(async move {
            while run.next().await.is_some() {}
            run.finish().await
        });
        while alive_with(&marker) {
            assert!(
                cancelled.elapsed() < Duration::from_secs(1),
                "the engine's child outlived the cancel by a second"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eprintln!("cancel: gone after {:?}", cancelled.elapsed());
        let outcome = waiter.await.unwrap();
        assert!(
            matches!(outcome.stop, RunStop::Cancelled),
            "{:?}",
            outcome.stop
        );
    });
    // Timed out.
    let marker = format!("kinet-engine-timeout-{}", std::process::id());
    let agent = parent(
        dir.path(),
        "hostile",
        hostile("hang", &marker),
        Some(Duration::from_secs(3)),
    );
    rt.block_on(async {
        let started = Instant::now();
        let (events, outcome) = run(&agent).await;
        let ended = Instant::now();
        let error = dispatch_result(&events).expect_err("the call times out");
        assert!(error.contains("did not finish within"), "{error}");
        while alive_with(&marker) {
            assert!(
                ended.elapsed() < Duration::from_secs(1),
                "the engine's child outlived the timeout by a second"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eprintln!("timeout: call ended after {:?}", ended - started);
        assert!(
            matches!(outcome.stop, RunStop::Completed),
            "{:?}",
            outcome.stop
        );
    });
}

/// This binary, serving a kinet agent over ACP.
fn kinet_engine(mode: &str) -> AcpEngine {
    let me = std::env::current_exe().unwrap();
    AcpEngine::command(me.display().to_string(), [format!("--serve={mode}")])
        .start_timeout(Duration::from_secs(20))
}

fn kinet_over_acp() {
    let dir = workspace();
    let agent = parent(dir.path(), "kinet", kinet_engine("scripted"), None);
    let (events, text) = answered(&agent);
    assert!(text.contains(SCRIPTED_ANSWER), "{text}");
    let subs = sub_events(&events);
    // Its own read_file call, served by the engine's own tools, is an event
    // of the parent's run.
    assert!(
        subs.iter()
            .any(|e| matches!(e, AgentEvent::ToolCallStarted { .. })),
        "{subs:?}"
    );
    assert!(
        subs.iter()
            .any(|e| matches!(e, AgentEvent::TextDelta { text } if text.contains("42"))),
        "{subs:?}"
    );
}

fn kinet_over_acp_on_llama_server() {
    if !llama::available() {
        return;
    }
    let server = llama::Server::start(llama::free_port(), 8192);
    let url = server.url();
    let host = url.trim_start_matches("http://").to_owned();
    let dir = workspace();
    let engine = kinet_engine(&format!("llama={url}")).allow_hosts([host]);
    let agent = parent(dir.path(), "kinet", engine, None);
    let (_, text) = answered(&agent);
    // The engine's network is the sandbox's proxy alone: an answer means
    // its model calls went through it to the allowed server.
    assert!(!text.trim().is_empty());
    eprintln!("the engine on llama-server answered: {text}");
    drop(server);
}

fn typescript_sdk_example_agent() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    let example = dir.join("node_modules/sdk19/dist/examples/agent.js");
    let node =
        std::env::var_os("KINET_ACP_NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from);
    if !example.is_file() {
        assert!(
            std::env::var_os("KINET_REQUIRE_ACP").is_none(),
            "the ACP TypeScript SDK is required here (KINET_REQUIRE_ACP) but not installed"
        );
        kinet_core::testing::skipped("the ACP TypeScript SDK's example agent (run .ci/setup)");
        return;
    }
    let node = which(&node);
    let engine = AcpEngine::command(node.display().to_string(), [example.display().to_string()]);
    let work = workspace();
    let agent = parent(work.path(), "example", engine, None);
    let (events, text) = answered(&agent);
    assert!(text.contains("I'll help you with that"), "{text}");
    assert!(
        text.contains("was rejected: the engine is read-only"),
        "{text}"
    );
    let subs = sub_events(&events);
    assert!(
        subs.iter().any(|e| matches!(e,
            AgentEvent::ToolCallStarted { name, .. } if name == "Reading project files")),
        "{subs:?}"
    );
    assert!(
        subs.iter()
            .any(|e| matches!(e, AgentEvent::ToolCallFinished { result: Ok(_), .. })),
        "{subs:?}"
    );
}

/// The npm agents' directory (`.ci/setup` installs them there), or a loud
/// skip.
fn npm_engines() -> Option<PathBuf> {
    let dir = std::env::var_os("KINET_ACP_ENGINES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/engines"),
        PathBuf::from,
    );
    if dir.join("node_modules/.bin/opencode").exists()
        && dir.join("node_modules/.bin/claude-code-acp").exists()
    {
        return Some(dir);
    }
    assert!(
        std::env::var_os("KINET_REQUIRE_ACP").is_none(),
        "the npm coding agents are required here (KINET_REQUIRE_ACP) but not installed"
    );
    kinet_core::testing::skipped("the npm coding agents (run .ci/setup)");
    None
}

/// What the real model answers the npm engines: the server holds every
/// answer to this grammar, so a 135M model's text is short and the same
/// each run (it still runs the whole prompt, the engine's own).
const GRAMMAR: [&str; 2] = ["--grammar", r#"root ::= "Hello from the local model.""#];

/// Dispatches to a real engine from npm and checks that its answer came
/// back as the call's result and its updates as the run's events.
fn dispatch_to(engine: AcpEngine, name: &str) {
    let work = workspace();
    let agent = parent(work.path(), name, engine, None);
    let started = Instant::now();
    let (events, outcome) = runtime().block_on(run(&agent));
    let text = dispatch_result(&events).unwrap_or_else(|e| panic!("{name}: {e}"));
    let start = events.iter().find_map(|event| match event {
        AgentEvent::SubAgent { event, .. } => match event.as_ref() {
            AgentEvent::Pack(pack) => pack
                .downcast_ref::<kinet_acp::engine::EngineStarted>()
                .map(|up| (up.agent.clone(), up.start)),
            _ => None,
        },
        _ => None,
    });
    eprintln!(
        "{name} ({start:?} to start) answered in {:?}: {text}",
        started.elapsed()
    );
    assert!(start.is_some(), "{name}: no start event");
    assert!(
        matches!(outcome.stop, RunStop::Completed),
        "{:?}",
        outcome.stop
    );
    assert!(
        text.contains("Hello from the local model."),
        "{name}: {text}"
    );
    let subs = sub_events(&events);
    assert!(
        subs.iter()
            .any(|e| matches!(e, AgentEvent::TextDelta { text } if !text.is_empty())),
        "{name}: {subs:?}"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("keep.txt")).unwrap(),
        "original\n"
    );
}

/// opencode (`opencode acp`) with an OpenAI-compatible provider at the
/// llama.cpp server.
fn opencode_on_llama_server() {
    let (Some(dir), true) = (npm_engines(), llama::available()) else {
        return;
    };
    let server = llama::Server::start_with(llama::free_port(), 16384, &[GRAMMAR[0], GRAMMAR[1]]);
    let port = server.url().rsplit(':').next().unwrap().to_owned();
    let config = serde_json::json!({
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": false,
        "share": "disabled",
        "enabled_providers": ["local"],
        "model": "local/smollm2",
        "small_model": "local/smollm2",
        // No tools: with tools in a request, the server's tool-call
        // grammar replaces the answer grammar.
        "tools": {"*": false},
        "provider": {"local": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "llama.cpp",
            "options": {"baseURL": format!("http://localhost:{port}/v1"), "apiKey": "unused"},
            "models": {"smollm2": {"name": "smollm2", "tool_call": true,
                                   "limit": {"context": 16384, "output": 256}}}
        }}
    });
    let engine = AcpEngine::command(
        dir.join("node_modules/.bin/opencode").display().to_string(),
        ["acp"],
    )
    .home_file(".config/opencode/opencode.json", config.to_string())
    // Its plugin dependency, as installed: it does not run npm at start.
    .home_file(
        ".config/opencode/package.json",
        r#"{"dependencies":{"@opencode-ai/plugin":"1.18.33"}}"#,
    )
    .home_file(
        ".config/opencode/package-lock.json",
        r#"{"lockfileVersion":3,"packages":{"":{"dependencies":{"@opencode-ai/plugin":"1.18.33"}}}}"#,
    )
    .home_file(".config/opencode/node_modules/.keep", "")
    .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
    .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
    .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
    .env("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1")
    .env("OPENCODE_DISABLE_SHARE", "1")
    // Its own server on the sandbox's loopback: not through the proxy.
    .env("NO_PROXY", "127.0.0.1")
    .allow_hosts([format!("localhost:{port}")]);
    dispatch_to(engine, "opencode");
}

/// Claude Code through Zed's ACP adapter, with its Anthropic Messages
/// calls at the llama.cpp server.
fn claude_code_on_llama_server() {
    let (Some(dir), true) = (npm_engines(), llama::available()) else {
        return;
    };
    // Its prompt (system text and tool schemas) is longer than SmolLM2's
    // trained context: the server is told the model takes more.
    let server = llama::Server::start_with(
        llama::free_port(),
        32768,
        &[
            GRAMMAR[0],
            GRAMMAR[1],
            "--override-kv",
            "llama.context_length=int:32768",
        ],
    );
    let port = server.url().rsplit(':').next().unwrap().to_owned();
    let mut engine = AcpEngine::command(
        dir.join("node_modules/.bin/claude-code-acp")
            .display()
            .to_string(),
        Vec::<String>::new(),
    )
    .env("ANTHROPIC_BASE_URL", format!("http://localhost:{port}"))
    .env("ANTHROPIC_API_KEY", "unused")
    .env("CLAUDE_CONFIG_DIR", "{home}/.claude")
    // No tools in its requests (with tools, the server's tool-call grammar
    // replaces the answer grammar): its own denied in its settings, and
    // the ones it makes of kinet's files and terminals not offered.
    .home_file(
        ".claude/settings.json",
        serde_json::json!({"permissions": {"deny": [
            "Task", "TaskOutput", "Glob", "Grep", "ExitPlanMode", "Edit", "Write",
            "NotebookEdit", "WebFetch", "TodoWrite", "WebSearch", "TaskStop", "Skill",
            "EnterPlanMode", "Read", "Bash"
        ]}})
        .to_string(),
    )
    .serve_files(false)
    .serve_terminals(false)
    .allow_hosts([format!("localhost:{port}")])
    .start_timeout(Duration::from_secs(60));
    for name in [
        "ANTHROPIC_MODEL",
        "ANTHROPIC_SMALL_FAST_MODEL",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
        "ANTHROPIC_DEFAULT_SONNET_MODEL",
        "ANTHROPIC_DEFAULT_OPUS_MODEL",
    ] {
        engine = engine.env(name, "smollm2");
    }
    for name in [
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "DISABLE_AUTOUPDATER",
        "DISABLE_TELEMETRY",
        "DISABLE_ERROR_REPORTING",
        "DISABLE_BUG_COMMAND",
        "CLAUDE_CODE_DISABLE_FAST_MODE",
        "CLAUDE_CODE_DISABLE_TERMINAL_TITLE",
    ] {
        engine = engine.env(name, "1");
    }
    dispatch_to(engine, "claude-code");
}

/// `program` as an absolute path, found on `PATH`.
fn which(program: &Path) -> PathBuf {
    if program.is_absolute() {
        return program.to_path_buf();
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| program.to_path_buf())
}

fn engine_tables() {
    let table = EngineTable::from_json(
        r#"{"engines": {"a": {"command": "x", "args": ["acp"], "allowed_hosts": ["h:1"]}}}"#,
    )
    .unwrap();
    assert_eq!(table.names().collect::<Vec<_>>(), ["a"]);
    assert_eq!(table.get("a").unwrap().program(), "x");
    let error = EngineTable::from_toml("[engines.a]\ncommand = \"x\"\nhosts = [\"h\"]\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("hosts"), "{error}");
    let error = EngineTable::from_toml("[engines.a]\ncommand = \"\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("engine `a`"), "{error}");
}

/// `--serve=MODE`: a kinet agent over ACP on stdio, its model scripted or
/// the llama.cpp server at a URL.
fn serve(mode: &str) {
    let mode = mode.to_owned();
    runtime().block_on(async move {
        let server = AcpServer::new(move |cwd| {
            let builder = match mode.strip_prefix("llama=") {
                Some(url) => {
                    let config =
                        kinet_core::provider::OpenAiConfig::new().base_url(format!("{url}/v1"));
                    Agent::builder(Arc::new(
                        kinet_core::provider::OpenAiProvider::new(config).unwrap(),
                    ) as Arc<dyn kinet_core::Provider>)
                    .params(kinet_core::provider::GenerationParams {
                        max_tokens: Some(32),
                        ..Default::default()
                    })
                }
                None => Agent::builder(scripted_engine_model()),
            };
            builder
                .tools(kinet_tools::default_tools())
                .workspace(Workspace::new().cwd(cwd).root(cwd))
                .policy(ApprovalPolicy::ask())
                .build()
        });
        server.serve_stdio().await.unwrap();
    });
}

/// `KINET_ENGINE_BENCH=N`: the dispatch round trip, in-process and over
/// ACP, with the same scripted model.
fn bench(rounds: usize) {
    let dir = workspace();
    let rt = runtime();
    let scripted = || {
        Agent::builder(scripted_engine_model())
            .tools(kinet_tools::default_tools())
            .workspace(Workspace::new().cwd(dir.path()).root(dir.path()))
            .build()
    };
    let measure = |engine: Box<dyn Fn() -> kinet_core::builder::Engine>| {
        let (mut first, mut total, mut start) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let agent = parent(dir.path(), "e", engine(), None);
            rt.block_on(async {
                let mut run = agent.run(vec![kinet_core::Message::user("go")]);
                let mut started = None;
                let mut seen_first = false;
                while let Some(event) = run.next().await {
                    match &event {
                        AgentEvent::ToolCallStarted { name, .. } if name == "dispatch_agent" => {
                            started = Some(Instant::now());
                        }
                        AgentEvent::SubAgent { event, .. } => {
                            if let AgentEvent::Pack(pack) = event.as_ref()
                                && let Some(up) =
                                    pack.downcast_ref::<kinet_acp::engine::EngineStarted>()
                            {
                                start.push(up.start);
                            } else if !seen_first {
                                seen_first = true;
                                first.push(started.unwrap().elapsed());
                            }
                        }
                        AgentEvent::ToolCallFinished { name, result, .. }
                            if name == "dispatch_agent" =>
                        {
                            assert!(result.as_ref().unwrap().text.contains("42"));
                            total.push(started.unwrap().elapsed());
                        }
                        _ => {}
                    }
                }
            });
        }
        let start = (!start.is_empty()).then(|| percentiles(start));
        (percentiles(first), percentiles(total), start)
    };
    let in_process = measure(Box::new(move || scripted().into()));
    let over_acp = measure(Box::new(|| kinet_engine("scripted").into()));
    let unconfined = measure(Box::new(|| kinet_engine("scripted").confined(false).into()));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("dispatch round trip ({rounds} rounds), p50 / p95 in ms");
    for (name, (first, total, start)) in [
        ("in-process", in_process),
        ("over ACP", over_acp),
        ("unconfined", unconfined),
    ] {
        let start = start.map_or(String::new(), |(p50, p95)| {
            format!(", engine start {:.2} / {:.2}", ms(p50), ms(p95))
        });
        println!(
            "{name:>11}: first update {:.2} / {:.2}, final text {:.2} / {:.2}{start}",
            ms(first.0),
            ms(first.1),
            ms(total.0),
            ms(total.1)
        );
    }
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(mode) = args.iter().find_map(|a| a.strip_prefix("--serve=")) {
        serve(mode);
        return;
    }
    if let Some(rounds) = std::env::var("KINET_ENGINE_BENCH")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        bench(rounds);
        return;
    }
    if let Some(why) = kinet_core::sandbox::support()
        .sandbox_unavailable(&kinet_core::sandbox::SandboxPolicy::read_only())
    {
        kinet_core::testing::skipped(&format!("engine tests need kinet's sandbox: {why}"));
        return;
    }
    let filter: Vec<&String> = args
        .iter()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for (name, test) in [
        ("engine_tables", engine_tables as fn()),
        (
            "hostile_engine_fails_at_everything",
            hostile_engine_fails_at_everything,
        ),
        (
            "malformed_and_out_of_order_messages_end_the_call",
            malformed_and_out_of_order_messages_end_the_call,
        ),
        (
            "updates_around_the_session_answer_count",
            updates_around_the_session_answer_count,
        ),
        (
            "cancel_and_timeout_stop_the_engine_within_a_second",
            cancel_and_timeout_stop_the_engine_within_a_second,
        ),
        ("kinet_over_acp", kinet_over_acp),
        (
            "kinet_over_acp_on_llama_server",
            kinet_over_acp_on_llama_server,
        ),
        ("typescript_sdk_example_agent", typescript_sdk_example_agent),
        ("opencode_on_llama_server", opencode_on_llama_server),
        ("claude_code_on_llama_server", claude_code_on_llama_server),
    ] {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        eprintln!("test {name} ...");
        test();
        eprintln!("test {name} ... ok");
    }
}
