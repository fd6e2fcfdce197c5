//! Tool packs for kinet agents.
//!
//! Each pack is a struct with `.toolset()`: [`LocalPack`] (the local
//! tools, sharing the file tracker and the todo list), [`WebPack`],
//! [`agents::TeamPack`]; [`default_tools`] is `LocalPack::new().toolset()`.
//! The tools live in modules named after their feature (all on by default):
//!
//! | tool | feature | asks approval | runs beside other calls |
//! |---|---|---|---|
//! | [`shell::ShellTool`] `shell` | `shell` | yes | no (alone) |
//! | [`files::ReadFileTool`] `read_file` | `files` | no | yes |
//! | [`files::WriteFileTool`] `write_file`, [`files::EditFileTool`] `edit_file` | `files` | yes | no (alone) |
//! | [`search::GrepTool`] `grep`, [`search::GlobTool`] `glob` | `search` | no | yes |
//! | [`git::GitDiffTool`] `git_diff` | `git` | no | yes |
//! | [`todo::TodoWriteTool`] `todo_write` | `todo` | no (the agent's own list) | one at a time (key `todo`) |
//! | [`agents::DispatchAgentTool`] `dispatch_agent` | `agents` | no (the sub-agent cannot mutate) | yes |
//! | [`agents::TeamPack`] `spawn_team`, `team_broadcast`, `team_send`, `team_close` | `agents` | no | no (alone) |
//! | [`skills::LoadSkillTool`] `load_skill` (+ [`skills::SkillsHook`]) | `skills` | no | yes |
//! | [`web::WebFetchTool`] `web_fetch`, [`web::WebSearchTool`] `web_search` | `web` | no | yes |
//!
//! Code Mode in `code_mode` (feature `code-mode`, off by default, not in
//! [`default_tools`]): `run_code`, a sandboxed Python script in which the
//! toolset's tools are functions, each call through the agent's pipeline
//! (so approval is asked per call inside the script; `run_code` itself
//! asks nothing and runs alone).
//!
//! Vendor integrations in [`integrations`] (off by default, not in
//! [`default_tools`]; each needs the vendor's credentials):
//!
//! | tool | feature | asks approval |
//! |---|---|---|
//! | `video_gen` (MiniMax text-to-video) | `integrations-minimax` | yes |
//! | `feishu_send_file` (Feishu / Lark) | `integrations-feishu` | yes |
//! | `wecom_send_file` | `integrations-wecom` | yes |
//! | `wecom_approval_list`, `wecom_approval_detail` | `integrations-wecom` | no |
//!
//! File tools resolve paths against the context's working directory and
//! open them beneath its workspace roots through the kernel
//! ([`kinet_core::tool::workspace::WorkspacePath`]): `..`, symlink chains of any
//! length, symlinks swapped in during a call and `/proc` magic links cannot
//! lead outside; grep and glob walk by directory handles (each directory
//! listed from its own descriptor, each entry opened by name from its
//! parent's, never through a symlink: [`kinet_core::tool::workspace::WorkspaceDir`]),
//! and the shell enters its `cwd` by a directory opened that way. Shell
//! commands get a `/proc` of their own and only the host variables
//! [`shell::ShellConfig::inherit_env`] allows. `git_diff`
//! runs nothing the repository names. The shell contains every process it
//! starts and can be sandboxed ([`shell::ShellTool::sandboxed`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use kinet_core::Agent;
//! use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
//!
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
//! let provider = ScriptedProvider::new([
//!     ScriptedTurn::new().tool_call("c1", "read_file", serde_json::json!({"path": "notes.txt"})),
//!     ScriptedTurn::text("It says hello."),
//! ]);
//! let agent = Agent::builder(provider)
//!     .toolset(kinet_tools::default_tools())
//!     .cwd(dir.path())
//!     .workspace_root(dir.path())
//!     .build();
//! let outcome = agent.run_to_completion("What is in notes.txt?").await;
//! assert!(outcome.conversation.messages[2].text().contains("     1\thello"));
//! # }
//! ```

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
