//! Tool packs for kinet agents: the local tools of a coding agent (shell,
//! files, grep, glob, git, a todo list, sub-agents, skills) and the web
//! tools. Each module is behind the cargo feature of its name, on by
//! default except Code Mode and the vendor integrations.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use kinet_core::Agent;
//! use kinet_core::builder::Workspace;
//! use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
//!
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
//! // A scripted model for the example: it reads the file, then answers.
//! let provider = ScriptedProvider::new([
//!     ScriptedTurn::new().tool_call("c1", "read_file", serde_json::json!({"path": "notes.txt"})),
//!     ScriptedTurn::text("It says hello."),
//! ]);
//! let agent = Agent::builder(provider)
//!     .tools(kinet_tools::default_tools())
//!     // Paths resolve against the cwd and open only beneath the roots.
//!     .workspace(Workspace::new().cwd(dir.path()).root(dir.path()))
//!     .build();
//! let outcome = agent.run_to_completion("What is in notes.txt?").await;
//! assert!(outcome.conversation.messages[2].text().contains("     1\thello"));
//! assert_eq!(outcome.final_text().as_deref(), Some("It says hello."));
//! # }
//! ```
//!
//! # Where to go next
//!
//! - [`default_tools`]: the local tools with fresh state. [`LocalPack`]
//!   keeps handles on the file tracker and the todo list, and gives them
//!   to a session ([`LocalPack::states`]).
//! - [`shell`]: `shell`. Every process a command starts ends with the call;
//!   commands see only the host variables
//!   [`ShellConfig::inherit_env`](shell::ShellConfig::inherit_env) allows;
//!   [`ShellTool::sandboxed`](shell::ShellTool::sandboxed) runs them in a
//!   sandbox without asking.
//! - [`files`]: `read_file`, `write_file`, `edit_file`; an edit refuses a
//!   file that changed on disk since the agent read it.
//! - [`search`]: `grep` and `glob` (ripgrep's engine), walking directories
//!   by handle, never through a symlink.
//! - [`git`]: `git_diff`, read-only; runs nothing the repository names.
//! - [`mod@todo`]: `todo_write`, the agent's checklist.
//! - [`agents`]: `dispatch_agent` (a sub-agent that cannot change
//!   anything) and [`agents::TeamPack`] (`spawn_team`, `team_send`, ...).
//! - [`skills`]: `load_skill`, and [`skills::SkillsHook`] to list the
//!   skills in the system prompt.
//! - [`WebPack`] ([`web`]): `web_fetch` and `web_search`; not in
//!   [`default_tools`], as network access is the host's choice.
//! - Off by default: `code_mode` (feature `code-mode`: `run_code`, a
//!   sandboxed Python script that calls the tools as functions, each call
//!   through the agent's pipeline) and `integrations` (features
//!   `integrations-minimax`, `integrations-feishu`, `integrations-wecom`:
//!   vendor tools that need the vendor's credentials).
//!
//! Tools that change something (`shell`, `write_file`, `edit_file`, the
//! vendor tools that send or generate) ask for approval and run alone; the
//! others never ask and run beside other calls, except the team tools
//! (alone) and `todo_write` (one at a time). Once the agent has workspace
//! roots ([`Workspace::root`](kinet_core::builder::Workspace::root)), file
//! paths open only beneath them, with the kernel's help
//! ([`kinet_core::tool::workspace::WorkspacePath`]).

#[cfg(feature = "agents")]
pub mod agents;
#[cfg(feature = "code-mode")]
pub mod code_mode;
#[cfg(feature = "files")]
pub mod files;
#[cfg(feature = "git")]
pub mod git;
#[cfg(any(
    feature = "integrations-minimax",
    feature = "integrations-feishu",
    feature = "integrations-wecom"
))]
pub mod integrations;
#[cfg(feature = "search")]
pub mod search;
#[cfg(feature = "shell")]
pub mod shell;
#[cfg(feature = "skills")]
pub mod skills;
#[cfg(feature = "todo")]
pub mod todo;
#[cfg(feature = "web")]
pub mod web;

pub use kinet_core;

/// The local pack with shared state: the file tracker behind read-before-edit
/// and the todo list the host can read.
#[derive(Debug, Clone, Default)]
pub struct LocalPack {
    /// Reads and writes seen by the file tools.
    #[cfg(feature = "files")]
    pub files: std::sync::Arc<files::FileTracker>,
    /// The agent's todo list.
    #[cfg(feature = "todo")]
    pub todos: todo::TodoList,
    /// Settings of `shell` (time limits, output cap, containment, the
    /// environment its commands see). Default: [`shell::ShellConfig::default`].
    #[cfg(feature = "shell")]
    pub shell: shell::ShellConfig,
}

impl LocalPack {
    /// A pack with fresh state.
    pub fn new() -> Self {
        Self::default()
    }

    /// The pack's state to keep in a
    /// [`Session`](kinet_core::session::Session): the file tracker and the
    /// todo list.
    #[allow(clippy::vec_init_then_push)]
    pub fn states(&self) -> Vec<std::sync::Arc<dyn kinet_core::session::SessionState>> {
        #[allow(unused_mut)]
        let mut states: Vec<std::sync::Arc<dyn kinet_core::session::SessionState>> = Vec::new();
        #[cfg(feature = "files")]
        states.push(self.files.clone());
        #[cfg(feature = "todo")]
        states.push(std::sync::Arc::new(self.todos.clone()));
        states
    }

    /// Every tool of the enabled features, with default limits.
    pub fn toolset(&self) -> kinet_core::Toolset {
        #[allow(unused_mut)]
        let mut tools = kinet_core::Toolset::new();
        #[cfg(feature = "shell")]
        tools.add(shell::ShellTool::new(self.shell.clone()));
        #[cfg(feature = "files")]
        {
            tools.add(files::ReadFileTool::new(std::sync::Arc::clone(&self.files)));
            tools.add(files::WriteFileTool::new(std::sync::Arc::clone(
                &self.files,
            )));
            tools.add(files::EditFileTool::new(std::sync::Arc::clone(&self.files)));
        }
        #[cfg(feature = "search")]
        {
            tools.add(search::GrepTool::default());
            tools.add(search::GlobTool::default());
        }
        #[cfg(feature = "git")]
        tools.add(git::GitDiffTool::default());
        #[cfg(feature = "todo")]
        tools.add(todo::TodoWriteTool::new(self.todos.clone()));
        #[cfg(feature = "agents")]
        tools.add(agents::DispatchAgentTool);
        tools
    }
}

/// The web pack: `web_fetch` and `web_search` (Bing, then DuckDuckGo, by
/// default). Not part of [`default_tools`]: network access is the host's
/// choice.
#[cfg(feature = "web")]
#[derive(Debug, Clone, Default)]
pub struct WebPack {
    /// Settings of `web_fetch`.
    pub fetch: web::WebFetchConfig,
}

#[cfg(feature = "web")]
impl WebPack {
    /// The pack with default settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// `web_fetch` and `web_search`.
    pub fn toolset(&self) -> kinet_core::Toolset {
        kinet_core::Toolset::new()
            .with(web::WebFetchTool::new(self.fetch.clone()))
            .with(web::WebSearchTool::default())
    }
}

/// The standard local tools for a workspace, with fresh state. Use
/// [`LocalPack`] to keep handles on the todo list or the file tracker.
pub fn default_tools() -> kinet_core::Toolset {
    LocalPack::new().toolset()
}
