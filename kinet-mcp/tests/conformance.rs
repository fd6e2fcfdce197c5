//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! pinned in `tests/peers`), run as it is against kinet: every server
//! scenario against an `McpServer` (streamable HTTP, stateful and
//! stateless) and every client scenario against the hub, for the
//! 2025-11-25 and 2026-07-28 revisions and for the extensions (Tasks).
//!
//! A scenario kinet fails is fixed or written, with its reason, on the
//! waiver lists in `tests/conformance/waivers/` (the suite's own
//! `--expected-failures` files: a waived scenario that starts passing fails
//! the run too, so the lists stay true). stdio is not covered: the suite
//! drives servers over HTTP only.
//!
//! This file is also the client the suite drives: run with
//! `MCP_CONFORMANCE_SCENARIO` set, it connects the hub to the URL the suite
//! gives and does what the scenario asks.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    clippy::print_stdout
)]

#[path = "conformance/client.rs"]
mod client;
mod common;
#[path = "conformance/fixture.rs"]
mod fixture;
#[path = "conformance/task_fixture.rs"]
mod task_fixture;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use kinet_core::Agent;
use kinet_core::testing::ScriptedProvider;
use kinet_mcp::McpServer;

fn main() -> ExitCode {
    if std::env::var_os("MCP_CONFORMANCE_SCENARIO").is_some() {
        return client::main();
    }
    // `cargo test <filter>`: run only when the filter names this suite.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("conformance: test");
        return ExitCode::SUCCESS;
    }
    if let Some(filter) = args.iter().find(|a| !a.starts_with('-'))
        && !"conformance".contains(filter.as_str())
    {
        return ExitCode::SUCCESS;
    }
    let Some((node, suite)) = suite() else {
        return ExitCode::SUCCESS;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if runtime.block_on(run_all(&node, &suite)) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Node ≥ 22 and the suite's entry point; `None` after a loud message
/// (a failure when `KINET_REQUIRE_CONFORMANCE` is set, as in `.ci/run`).
fn suite() -> Option<(String, PathBuf)> {
    let suite =
        common::peers().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let node = [std::env::var("KINET_NODE22").ok(), Some("node".to_owned())]
        .into_iter()
        .flatten()
        .find(|node| {
            std::process::Command::new(node)
                .args([
                    "-e",
                    "process.exit(+process.versions.node.split('.')[0] >= 22 ? 0 : 1)",
                ])
                .output()
                .is_ok_and(|o| o.status.success())
        });
    let missing = match (&node, suite.exists()) {
        (None, _) => {
            "Node 22 or newer is not installed (.ci/setup puts one in /var/tmp/kinet-node and sets KINET_NODE22)"
        }
        (_, false) => {
            "the conformance suite is not installed (npm ci in kinet-mcp/tests/peers; .ci/setup does)"
        }
        _ => return node.map(|node| (node, suite)),
    };
    assert!(
        std::env::var_os("KINET_REQUIRE_CONFORMANCE").is_none(),
        "{missing}"
    );
    kinet_core::testing::skipped(missing);
    None
}

/// Where the waiver lists are.
fn waivers(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/conformance/waivers/{name}.yaml"))
}

/// How many entries a waiver list has.
fn waived(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.trim_start().starts_with("- "))
        .count()
}

fn served(store: Option<Arc<dyn kinet_core::session::SessionStore>>) -> McpServer {
    let agent = Agent::builder(ScriptedProvider::new([])).build();
    let mut builder = McpServer::builder(agent).name("kinet-conformance");
    for tool in fixture::tools().into_iter().chain(task_fixture::tools()) {
        builder = builder.expose_dyn(tool);
    }
    builder = task_fixture::configure(builder);
    if let Some(store) = store {
        builder = builder.stateless(store);
    }
    builder.build()
}

/// Runs every job; true when all passed.
async fn run_all(node: &str, suite: &Path) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(kinet_memory::SqliteSessionStore::open(dir.path().join("sessions.db")).unwrap());
    let stateful = served(None)
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let stateless = served(Some(store))
        .serve_http("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let url = |handle: &kinet_mcp::HttpServerHandle| {
        format!("http://localhost:{}/mcp", handle.local_addr().port())
    };
    let me = std::env::current_exe().unwrap().display().to_string();
    // A job is one or more runs of the suite, judged against one waiver
    // list.
    let mut jobs: Vec<(String, Vec<Vec<String>>)> = Vec::new();
    let scope = |version: &str| -> Vec<String> {
        ["--suite", "all", "--spec-version", version]
            .map(String::from)
            .to_vec()
    };
    for version in ["2025-11-25", "2026-07-28"] {
        for (mode, handle) in [("stateful", &stateful), ("stateless", &stateless)] {
            let mut args: Vec<String> = vec!["server".into(), "--url".into(), url(handle)];
            args.extend(scope(version));
            jobs.push((format!("server-{mode}-{version}"), vec![args]));
        }
        let mut args: Vec<String> = vec!["client".into(), "--command".into(), me.clone()];
        args.extend(scope(version));
        jobs.push((format!("client-{version}"), vec![args]));
    }
    // The extensions (Tasks, and others kinet does not offer): the suite
    // runs them one scenario at a time, at the newest revision.
    let (server_extensions, client_extensions) = extension_scenarios(node, suite).await;
    for (mode, handle) in [("stateful", &stateful), ("stateless", &stateless)] {
        let runs = server_extensions
            .iter()
            .map(|scenario| {
                ["server", "--url", &url(handle), "--scenario", scenario]
                    .map(String::from)
                    .to_vec()
            })
            .collect();
        jobs.push((format!("server-{mode}-extension"), runs));
    }
    let runs = client_extensions
        .iter()
        .map(|scenario| {
            ["client", "--command", &me, "--scenario", scenario]
                .map(String::from)
                .to_vec()
        })
        .collect();
    jobs.push(("client-extension".into(), runs));
    // KINET_CONFORMANCE_ONLY=<prefix> runs only the jobs it names.
    let only = std::env::var("KINET_CONFORMANCE_ONLY").unwrap_or_default();
    jobs.retain(|(name, _)| name.starts_with(&only));
    let mut passed = true;
    for (name, runs) in jobs {
        let list = waivers(&name);
        let mut failures = Vec::new();
        for mut args in runs {
            args.extend([
                "--expected-failures".into(),
                list.display().to_string(),
                "-o".into(),
                dir.path().join(&name).display().to_string(),
            ]);
            match run_suite(node, suite, &args).await {
                Ok(summary) => {
                    if std::env::var_os("KINET_CONFORMANCE_VERBOSE").is_some() {
                        eprintln!("{summary}");
                    }
                }
                Err(failure) => failures.push(failure),
            }
        }
        eprintln!(
            "conformance {name}: {} ({} waived in {})",
            if failures.is_empty() { "ok" } else { "FAILED" },
            waived(&list),
            list.strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .unwrap_or(&list)
                .display()
        );
        for failure in &failures {
            eprintln!("{failure}");
        }
        passed &= failures.is_empty();
    }
    stateful.shutdown().await;
    stateless.shutdown().await;
    passed
}

/// One run of the suite: its summary when it passed, what it said when it
/// did not.
async fn run_suite(node: &str, suite: &Path, args: &[String]) -> Result<String, String> {
    let run = tokio::process::Command::new(node)
        .arg(suite)
        .args(args)
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(Duration::from_secs(900), run).await {
        Ok(Ok(output)) => output,
        Ok(Err(error)) => panic!("cannot run the conformance suite: {error}"),
        Err(_) => return Err(format!("{args:?} did not finish in 15 minutes")),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The per-scenario summary and the suite's verdict on the waivers.
    let summary: Vec<&str> = stdout
        .lines()
        .skip_while(|line| !line.contains("SUMMARY"))
        .collect();
    // A single scenario's run has no summary: all of it is.
    let shown = if summary.is_empty() {
        stdout.to_string()
    } else {
        summary.join("\n")
    };
    if output.status.success() {
        Ok(shown)
    } else {
        Err(format!(
            "{}\n{shown}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// The suite's extension scenarios (marked `[extension]` by `list`): for
/// servers and for clients.
async fn extension_scenarios(node: &str, suite: &Path) -> (Vec<String>, Vec<String>) {
    let output = tokio::process::Command::new(node)
        .arg(suite)
        .arg("list")
        .output()
        .await
        .expect("the conformance suite lists its scenarios");
    let listing = String::from_utf8_lossy(&output.stdout);
    let (mut server, mut client) = (Vec::new(), Vec::new());
    let mut section = "";
    for line in listing.lines() {
        if !line.starts_with(' ') {
            section = line;
            continue;
        }
        let Some(scenario) = line
            .trim()
            .strip_prefix("- ")
            .and_then(|l| l.strip_suffix(" [extension]"))
        else {
            continue;
        };
        if section.starts_with("Server") {
            server.push(scenario.to_owned());
        } else if section.starts_with("Client") {
            client.push(scenario.to_owned());
        }
    }
    assert!(
        !server.is_empty() && !client.is_empty(),
        "the conformance suite lists no extension scenarios:\n{listing}"
    );
    (server, client)
}
