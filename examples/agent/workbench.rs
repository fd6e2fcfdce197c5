//! Everything a coding agent needs, put together for one project: the
//! local tools, the MCP servers from the user's config files, memory and
//! sessions in one SQLite file under the project, and the approval handler.

use kinet::builder::{Calls, Sessions, Workspace};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kinet::core::confirm::ApprovalPolicy;
use kinet::core::rules::Rules;
use kinet::core::sandbox::SandboxPolicy;
use kinet::core::session::{Session, SessionState, SessionStore, StoreJournal, new_id};
use kinet::mcp::oauth::{
    AuthorizationOutcome, AuthorizationPrompt, AuthorizationRequest, FileTokenStore, OAuth,
};
use kinet::mcp::{Discovery, HubSettings, McpHub, ServerState};
use kinet::memory::{
    BlockSpec, BlocksHook, MemoryBackend, MemoryConfig, MemoryPack, MemoryStore, Model2VecEmbedder,
    Scope, SqliteSessionStore,
};
use kinet::tools::LocalPack;
use kinet::tools::shell::ShellTool;
use kinet::{Agent, ConfirmHandler, Conversation, Provider};

use super::ui::{Out, Style};

/// Variables the shell's commands do not get: the model has no business
/// reading the keys it is called with. This keeps them out of the commands'
/// own environment; `main` also marks this process non-dumpable
/// (`kinet::core::sandbox::protect_process`), so no command of the same
/// user reads them from `/proc/<pid>/environ`, and with `--sandbox` the
/// commands get a `/proc` of their own besides.
const SECRETS: [&str; 4] = [
    "KINET_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "ZHIPU_API_KEY",
];

/// How to set the agent up.
pub struct Options {
    /// The project: the tools' working directory and workspace root.
    pub project: PathBuf,
    /// Where MCP config files are looked for (default: the user's home).
    pub home: Option<PathBuf>,
    /// Run shell commands in the sandbox (writes only under the project,
    /// no network).
    pub sandbox: bool,
    /// Continue this session.
    pub resume: Option<String>,
    /// How long to wait at start for MCP servers to connect.
    pub mcp_wait: Duration,
    /// Extra changes to the shell's environment.
    pub shell_env: Vec<(String, Option<String>)>,
    /// A rules file (`kinet_core::rules`): command, tool and path rules
    /// for approvals, host rules for the sandbox's network allowlist.
    pub rules: Option<PathBuf>,
    /// Sessions are kept by someone else (the ACP server keeps one per
    /// editor session): no session of the workbench's own is created or
    /// journalled.
    pub own_sessions: bool,
}

/// The assembled agent and the handles the terminal needs.
pub struct Workbench {
    pub agent: Agent,
    pub pack: LocalPack,
    pub hub: Option<McpHub>,
    pub journal: Arc<StoreJournal>,
    /// The project's session store.
    pub sessions: Arc<SqliteSessionStore>,
    pub session_id: String,
    /// The conversation to continue (empty for a new session).
    pub conversation: Conversation,
}

/// Where the agent keeps its sessions and memory: `$KINET_DATA_DIR` when
/// set (a project the agent may not write, as when another agent runs it
/// as a read-only engine), else `<project>/.kinet`.
pub fn data_path(project: &Path) -> PathBuf {
    match std::env::var_os("KINET_DATA_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => project.join(".kinet"),
    }
}

/// [`data_path`], created with a `.gitignore` that keeps it out of git.
pub fn data_dir(project: &Path) -> anyhow::Result<PathBuf> {
    let dir = data_path(project);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let ignore = dir.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(&ignore, "*\n")
            .with_context(|| format!("cannot write {}", ignore.display()))?;
    }
    Ok(dir)
}

/// The session store: `kinet.db` in [`data_path`].
pub fn session_store(project: &Path) -> anyhow::Result<Arc<SqliteSessionStore>> {
    let db = data_dir(project)?.join("kinet.db");
    Ok(Arc::new(SqliteSessionStore::open(&db).with_context(
        || format!("cannot open the session store {}", db.display()),
    )?))
}

/// Builds the agent for `options.project`, printing what it found (MCP
/// servers and their state, the memory file, the session id).
pub async fn open(
    provider: Arc<dyn Provider>,
    model: Option<String>,
    confirm: Arc<dyn ConfirmHandler>,
    options: &Options,
    out: &Out,
) -> anyhow::Result<Workbench> {
    let project = std::fs::canonicalize(&options.project)
        .with_context(|| format!("no project directory at {}", options.project.display()))?;
    let db = data_dir(&project)?.join("kinet.db");

    // Memory: blocks shown to the model, facts, recall over past sessions.
    let embedder = Model2VecEmbedder::bundled()
        .ok()
        .map(|e| Arc::new(e) as Arc<dyn kinet::memory::Embedder>);
    let memory = MemoryStore::open(
        &db,
        MemoryConfig {
            embedder,
            blocks: BlockSpec::defaults(),
        },
    )
    .await
    .with_context(|| format!("cannot open the memory in {}", db.display()))?;
    out.line(&format!(
        "memory   {} ({} records)",
        db.display(),
        memory.record_count(&Scope::EMPTY).await.unwrap_or(0)
    ));

    // Sessions: a journal written as the run goes, resumable by id.
    let sessions = session_store(&project)?;
    let mut pack = LocalPack::new();
    for name in SECRETS {
        pack.shell.env.insert(name.to_owned(), None);
    }
    for (name, value) in &options.shell_env {
        pack.shell.env.insert(name.clone(), value.clone());
    }
    let mut states: Vec<Arc<dyn SessionState>> = pack.states();
    let (session_id, conversation, resumed) = match &options.resume {
        Some(id) => {
            let session = sessions
                .load(id)
                .map_err(|e| anyhow::anyhow!(e))?
                .with_context(|| {
                    format!(
                        "no session `{id}` in {} (list them with --sessions)",
                        db.display()
                    )
                })?;
            let (conversation, _) = session.resume(&states)?;
            out.line(&format!(
                "session  {id} (resumed: {} messages)",
                conversation.messages.len()
            ));
            (id.clone(), conversation, Some(session))
        }
        None if !options.own_sessions => (new_id(), Conversation::new(), None),
        None => {
            let id = new_id();
            sessions.create(&Session::empty(id.clone()))?;
            out.line(&format!(
                "session  {id} {}",
                out.paint(Style::Dim, "(continue it later with --resume <id>)")
            ));
            (id, Conversation::new(), None)
        }
    };

    // The rules file, if any: checked now (a failing example stops here).
    let rules = match &options.rules {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the rules file {}", path.display()))?;
            let rules = Rules::from_toml(&text)
                .with_context(|| format!("the rules file {} did not load", path.display()))?;
            out.line(&format!(
                "rules    {} ({} command, {} tool, {} path, {} host rules)",
                path.display(),
                rules.commands.len(),
                rules.tools.len(),
                rules.paths.len(),
                rules.hosts.len()
            ));
            Some(rules)
        }
        None => None,
    };

    // Tools: the local pack (its shell sandboxed if asked, reaching the
    // rules' hosts) and memory.
    let mut tools = pack.toolset();
    if options.sandbox {
        let mut policy = SandboxPolicy::workspace_write();
        if let Some(rules) = &rules {
            policy = policy.with_host_rules(rules);
        }
        tools.retain(|tool| tool.name() != "shell");
        tools.add(ShellTool::new(pack.shell.clone()).sandboxed(policy));
    }
    let memory_pack = MemoryPack::new(memory.clone(), session_id.clone());
    tools.merge(memory_pack.toolset());

    // MCP servers from Claude Desktop / Claude Code / Codex config files.
    let mut discovery = Discovery::new().project(&project);
    if let Some(home) = &options.home {
        discovery = discovery.home(home);
    }
    let found = discovery.discover();
    for problem in &found.problems {
        out.line(&out.paint(
            Style::Yellow,
            &format!("mcp      ! {}: {}", problem.file.display(), problem.message),
        ));
    }
    let hub = if found.servers.is_empty() {
        out.line(&format!(
            "mcp      {}",
            out.paint(
                Style::Dim,
                "no servers configured (Claude Desktop, ~/.claude.json, .mcp.json, ~/.codex/config.toml)"
            )
        ));
        None
    } else {
        // Remote servers that want OAuth send the user to their sign-in
        // page; tokens are kept in the user's config directory (never in
        // the project, where they could be committed).
        let mut oauth = OAuth::new().prompt(Arc::new(TerminalSignIn { out: out.clone() }));
        if let Some(home) = &options.home {
            oauth = oauth.store(Arc::new(FileTokenStore::new(
                home.join(".config/kinet/mcp-oauth.json"),
            )));
        }
        let hub = McpHub::builder(found.servers.clone())
            .settings(HubSettings::default())
            .oauth(oauth)
            .start();
        out.line(&format!(
            "mcp      starting {} server(s)…",
            found.servers.len()
        ));
        hub.wait_settled(options.mcp_wait).await;
        for server in hub.status() {
            let state = match &server.state {
                ServerState::Ready => out.paint(
                    Style::Green,
                    &format!("ready, {} tools", server.tools.len()),
                ),
                ServerState::Failed { reason } => out.paint(
                    Style::Red,
                    &format!("failed: {}", reason.lines().next().unwrap_or_default()),
                ),
                ServerState::Starting => {
                    out.paint(Style::Yellow, "still starting (its tools join when ready)")
                }
                ServerState::Disabled => out.paint(Style::Dim, "disabled"),
                ServerState::Authorizing => {
                    out.paint(Style::Yellow, "waiting for you to sign in (see above)")
                }
                other => out.paint(Style::Yellow, &format!("{other:?}").to_lowercase()),
            };
            out.line(&format!(
                "mcp      {} ({}): {state}",
                server.name, server.source
            ));
        }
        // This conversation's MCP tools: what it finds through tool search
        // is saved with the session and offered again on --resume.
        let offered = hub.conversation_tools();
        let state: Arc<dyn SessionState> = Arc::new(offered.clone());
        if let Some(session) = &resumed {
            session.resume(std::slice::from_ref(&state))?;
        }
        states.push(state);
        tools.add_source(Arc::new(offered));
        Some(hub)
    };
    let journal = sessions.journal(&session_id, states);

    let mut builder = Agent::builder(provider)
        .system_prompt(system_prompt(&project))
        .tools(tools)
        .calls(
            Calls::new()
                .hook(BlocksHook::new(memory.clone()))
                .hook(memory_pack.history_hook()),
        )
        .confirm_handler(confirm)
        .workspace(Workspace::new().cwd(&project).root(&project));
    if options.own_sessions {
        builder = builder.sessions(Sessions::new().journal(journal.clone()));
    }
    if let Some(rules) = rules {
        builder = builder.policy(ApprovalPolicy::ask().with_rules(rules));
    }
    if let Some(model) = model {
        builder = builder.model(model);
    }
    Ok(Workbench {
        agent: builder.build(),
        pack,
        hub,
        journal,
        sessions,
        session_id,
        conversation,
    })
}

fn system_prompt(project: &Path) -> String {
    format!(
        "You are a coding agent working in the project at {}. \
         Work in small verified steps: find the relevant code with grep and glob, read it with \
         read_file before editing, change it with edit_file (or write_file for new files), and \
         run the project's tests with shell. For a task of several steps, keep a todo list with \
         todo_write and update it as you go. Check your change with git_diff before you finish. \
         Save what you learn about the project or the user that will matter in later sessions \
         with memory_append, and use recall_memory when the user refers to earlier work. \
         Answer briefly: say what you changed and how you checked it.",
        project.display()
    )
}

/// The browser step of MCP servers that want OAuth: the sign-in page's
/// address on the terminal, and the desktop's opener tried.
struct TerminalSignIn {
    out: Out,
}

#[kinet::async_trait]
impl AuthorizationPrompt for TerminalSignIn {
    async fn authorize(&self, request: AuthorizationRequest) -> AuthorizationOutcome {
        self.out.line(&format!(
            "mcp      {} wants you to sign in; open {}",
            request.server, request.url
        ));
        let opener = if cfg!(target_os = "macos") {
            "open"
        } else {
            "xdg-open"
        };
        if let Ok(mut child) = tokio::process::Command::new(opener)
            .arg(&request.url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
        {
            // Openers hand the page to the browser and exit.
            let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        }
        AuthorizationOutcome::Opened
    }
}
