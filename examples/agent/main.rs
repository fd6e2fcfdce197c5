//! A terminal coding agent: kinet's local tools, the MCP servers from your
//! Claude / Codex config files, memory and resumable sessions in one SQLite
//! file under the project, approvals that show diffs, streamed answers, the
//! todo list drawn as it changes, and Ctrl-C to cancel a turn.
//!
//! ```text
//! # no API key: a demonstration on a temporary copy of a small project
//! cargo run --example agent --features tools,mcp,memory
//!
//! # a real model (any one of these), working in the current directory
//! OPENAI_API_KEY=sk-... cargo run --example agent --features tools,mcp,memory
//! ANTHROPIC_API_KEY=sk-ant-... cargo run --example agent --features tools,mcp,memory
//! KINET_BASE_URL=http://127.0.0.1:11434/v1 KINET_MODEL=qwen3:8b cargo run --example agent --features tools,mcp,memory
//! ```
//!
//! Options (after `--`): `--project DIR` (default: the current directory),
//! `--resume ID` (continue a session), `--sessions` (list them),
//! `--sandbox` (shell commands may write only under the project and have
//! no network), `--rules FILE` (approval rules as data, and with
//! `--sandbox` the hosts its commands may reach: see `kinet_core::rules`),
//! `--demo` (the demonstration even with a model configured),
//! `--keep` (keep the demonstration's project), `-p PROMPT` (one task,
//! then exit), `--acp` (serve the agent to an editor over the Agent
//! Client Protocol on stdin/stdout: Zed, JetBrains IDEs, Neovim; see the
//! README). `KINET_DATA_DIR` moves the sessions and memory out of
//! `<project>/.kinet` (for a project it may not write, as when another
//! kinet agent runs it as a read-only `dispatch_agent` engine).
//!
//! In a session: type a task and press Enter; `/todo` shows the todo list,
//! `/session` the session id, `/quit` (or end of input) leaves. Ctrl-C
//! cancels the turn in progress; at the prompt it leaves.
#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]

pub mod confirm;
pub mod demo;
pub mod ui;
pub mod workbench;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kinet::core::provider::from_env;
use kinet::core::session::SessionStore;

use confirm::TerminalConfirm;
use ui::{Out, Style, Terminal, View, drive};
use workbench::Options;

#[derive(Default)]
struct Args {
    project: Option<PathBuf>,
    resume: Option<String>,
    prompt: Option<String>,
    sessions: bool,
    sandbox: bool,
    rules: Option<PathBuf>,
    demo: bool,
    keep: bool,
    acp: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--project" => args.project = Some(value("--project")?.into()),
            "--resume" => args.resume = Some(value("--resume")?),
            "-p" | "--prompt" => args.prompt = Some(value("-p")?),
            "--sessions" => args.sessions = true,
            "--sandbox" => args.sandbox = true,
            "--rules" => args.rules = Some(value("--rules")?.into()),
            "--demo" => args.demo = true,
            "--keep" => args.keep = true,
            "--acp" => args.acp = true,
            "-h" | "--help" => {
                println!(
                    "usage: agent [--project DIR] [--resume ID | --sessions] [--sandbox] [--rules FILE] [-p PROMPT] [--demo [--keep]] [--acp]"
                );
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument `{other}` (try --help)"),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Started by an editor's terminal (under --acp) to run one of the
    // model's commands: confines it as the shell tool would, and exits.
    let launcher = kinet::core::sandbox::launcher::launcher();
    // The model's commands run as this user: keep this process's
    // environment (API keys) and memory out of their reach.
    kinet::core::sandbox::protect_process()?;
    let args = parse_args()?;
    let out = Out::stdout();
    let project = match &args.project {
        Some(dir) => dir.clone(),
        None => std::env::current_dir()?,
    };
    anyhow::ensure!(
        project.is_dir(),
        "no project directory at {}",
        project.display()
    );
    if args.sessions {
        let store = workbench::session_store(&project)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64); // the store keeps milliseconds
        for info in store.list().map_err(|e| anyhow::anyhow!(e))? {
            let ago = (now - info.updated_at / 1000).max(0);
            let ago = match ago {
                0..60 => format!("{ago} s"),
                60..3600 => format!("{} min", ago / 60),
                3600..86400 => format!("{} h", ago / 3600),
                _ => format!("{} days", ago / 86400),
            };
            println!(
                "{}  {:>4} messages  updated {ago} ago",
                info.id, info.messages
            );
        }
        return Ok(());
    }
    if args.acp {
        return serve_acp(&args, project, launcher).await;
    }
    let chosen = if args.demo { None } else { from_env()? };
    let Some(chosen) = chosen else {
        return demo::run(&out, args.keep).await;
    };

    let terminal = Terminal::start();
    out.line(&format!(
        "{} {}",
        out.paint(Style::Bold, "kinet agent:"),
        chosen.label
    ));
    out.line(&format!("project  {}", project.display()));
    let options = options(&args, project);
    let confirm = Arc::new(TerminalConfirm {
        terminal: terminal.clone(),
        out: out.clone(),
    });
    let bench =
        workbench::open(chosen.provider, Some(chosen.model), confirm, &options, &out).await?;
    let mut conversation = bench.conversation.clone();
    let mut view = View::new(out.clone());
    let mut pending = args.prompt.clone();
    let one_shot = pending.is_some();
    out.line(&out.paint(
        Style::Dim,
        "type a task; /todo, /session, /quit; Ctrl-C cancels a turn\n",
    ));
    loop {
        let line = match pending.take() {
            Some(prompt) => prompt,
            None if one_shot => break,
            None => {
                let prompt = out.paint(Style::Bold, "› ");
                let read = tokio::select! {
                    line = terminal.read_line(&out, &prompt) => line,
                    _ = tokio::signal::ctrl_c() => None,
                };
                match read {
                    Some(line) => line,
                    None => break,
                }
            }
        };
        match line.trim() {
            "" => continue,
            "/quit" | "/exit" => break,
            "/session" => {
                out.line(&format!("session {}", bench.session_id));
                continue;
            }
            "/todo" => {
                for item in bench.pack.todos.items() {
                    out.line(&format!("  {:?}: {}", item.status, item.content));
                }
                continue;
            }
            task => conversation.push_user(task),
        }
        let outcome = drive(bench.agent.run(conversation.clone()), &mut view, true).await;
        conversation = outcome.conversation;
        for error in bench.journal.take_errors() {
            view.note(&format!(
                "  ! the session journal could not be written: {error}"
            ));
        }
    }
    if let Some(hub) = &bench.hub {
        hub.shutdown().await;
    }
    out.line(&format!(
        "\nsession {} saved in {}; continue with --resume {}",
        bench.session_id,
        project_db(&options.project),
        bench.session_id
    ));
    // Everything is saved; end now rather than wait for the terminal's
    // reader thread.
    std::process::exit(0)
}

/// How to set the agent up, from the command line. With `--acp` the ACP
/// server keeps the sessions (one per editor session).
fn options(args: &Args, project: PathBuf) -> Options {
    Options {
        project,
        home: None,
        sandbox: args.sandbox,
        rules: args.rules.clone(),
        resume: if args.acp { None } else { args.resume.clone() },
        mcp_wait: Duration::from_secs(15),
        shell_env: Vec::new(),
        own_sessions: !args.acp,
    }
}

/// `--acp`: the same agent, served to an editor on stdin/stdout. Its
/// sessions are kept in the project's store (the editor can load them);
/// approvals are asked in the editor; what would go to the terminal goes
/// to standard error.
async fn serve_acp(
    args: &Args,
    project: PathBuf,
    launcher: Option<kinet::core::sandbox::launcher::Launcher>,
) -> anyhow::Result<()> {
    let chosen = from_env()?.context(
        "--acp needs a model: set OPENAI_API_KEY, ANTHROPIC_API_KEY or KINET_BASE_URL (and KINET_MODEL)",
    )?;
    let out = Out::stderr();
    let options = options(args, project);
    // Replaced by the editor's approvals in each session.
    let confirm = Arc::new(kinet::core::confirm::DenyingHandler);
    let bench =
        workbench::open(chosen.provider, Some(chosen.model), confirm, &options, &out).await?;
    let agent = bench.agent.clone();
    let mut server = kinet_acp::AcpServer::new(move |cwd| {
        agent
            .to_builder()
            .workspace(kinet::builder::Workspace::new().cwd(cwd))
            .build()
    })
    .store(bench.sessions.clone());
    // Commands run in the editor's terminals, started by this program.
    if let Some(launcher) = launcher {
        server = server.terminals(launcher);
    }
    server.serve_stdio().await?;
    if let Some(hub) = &bench.hub {
        hub.shutdown().await;
    }
    Ok(())
}

fn project_db(project: &std::path::Path) -> String {
    workbench::data_path(project)
        .join("kinet.db")
        .display()
        .to_string()
}
