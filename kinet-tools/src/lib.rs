//! Tool packs for kinet agents.
//!
//! The local pack, each tool behind a cargo feature (all on by default):
//!
//! | tool | feature | read-only |
//! |---|---|---|
//! | [`ShellTool`] `shell` | `shell` | no |
//! | [`ReadFileTool`] `read_file` | `files` | yes |
//! | [`WriteFileTool`] `write_file` | `files` | no |
//! | [`EditFileTool`] `edit_file` | `files` | no |
//! | [`GrepTool`] `grep` | `search` | yes |
//! | [`GlobTool`] `glob` | `search` | yes |
//! | [`GitDiffTool`] `git_diff` | `git` | yes |
//! | [`TodoWriteTool`] `todo_write` | `todo` | yes (changes only the agent's list) |
//! | [`DispatchAgentTool`] `dispatch_agent` | `agents` | yes (the sub-agent cannot mutate) |
//! | [`TeamTools`] `spawn_team`, `team_broadcast`, `team_send`, `team_close` | `agents` | yes |
//! | [`LoadSkillTool`] `load_skill` (+ [`SkillsHook`]) | `skills` | yes |
//! | [`WebFetchTool`] `web_fetch`, [`WebSearchTool`] `web_search` | `web` | yes |
//!
//! Vendor integrations in [`integrations`] (off by default, not in
//! [`default_tools`]; each needs the vendor's credentials):
//!
//! | tool | feature | read-only |
//! |---|---|---|
//! | `video_gen` (MiniMax text-to-video) | `integrations-minimax` | no |
//! | `feishu_send_file` (Feishu / Lark) | `integrations-feishu` | no |
//! | `wecom_send_file` | `integrations-wecom` | no |
//! | `wecom_approval_list`, `wecom_approval_detail` | `integrations-wecom` | yes |
//!
//! File tools resolve paths against the context's working directory and
//! refuse paths outside its workspace roots (`..` and symlinks included).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use kinet_core::{Agent, ScriptedProvider, ScriptedTurn};
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
mod agents;
#[cfg(feature = "files")]
mod files;
#[cfg(feature = "git")]
mod git;
#[cfg(any(
    feature = "integrations-minimax",
    feature = "integrations-feishu",
    feature = "integrations-wecom"
))]
pub mod integrations;
#[cfg(feature = "search")]
mod search;
#[cfg(feature = "shell")]
mod shell;
#[cfg(feature = "skills")]
mod skills;
#[cfg(feature = "todo")]
mod todo;
#[cfg(feature = "web")]
mod web;

#[cfg(feature = "agents")]
pub use agents::{
    DispatchAgentArgs, DispatchAgentTool, MemberStatus, SpawnTeamArgs, Team, TeamBroadcastArgs,
    TeamCloseArgs, TeamMemberSpec, TeamSendArgs, TeamTools,
};
#[cfg(feature = "files")]
pub use files::{
    EditFileArgs, EditFileTool, FileTracker, ReadFileArgs, ReadFileTool, ReadLimits, WriteFileArgs,
    WriteFileTool,
};
#[cfg(feature = "git")]
pub use git::{GitDiffArgs, GitDiffTool};
#[cfg(feature = "search")]
pub use search::{GlobArgs, GlobConfig, GlobTool, GrepArgs, GrepConfig, GrepTool, OutputMode};
#[cfg(feature = "shell")]
pub use shell::{ShellArgs, ShellConfig, ShellReport, ShellTool};
#[cfg(feature = "skills")]
pub use skills::{
    LoadSkillArgs, LoadSkillTool, Skill, SkillProblem, SkillRegistry, SkillsHook, parse_skill,
};
#[cfg(feature = "todo")]
pub use todo::{TodoList, TodoWriteArgs, TodoWriteTool};
#[cfg(feature = "web")]
pub use web::{
    BingHtml, DuckDuckGoHtml, JsonApi, JsonApiKind, Page, ReaderBackend, SearchBackend,
    SearchError, SearchResult, WebFetchArgs, WebFetchConfig, WebFetchTool, WebSearchArgs,
    WebSearchTool, html_to_markdown, parse_bing, parse_duckduckgo,
};

pub use kinet_core;

/// The local pack with shared state: the file tracker behind read-before-edit
/// and the todo list the host can read.
#[derive(Debug, Clone, Default)]
pub struct LocalPack {
    /// Reads and writes seen by the file tools.
    #[cfg(feature = "files")]
    pub files: std::sync::Arc<FileTracker>,
    /// The agent's todo list.
    #[cfg(feature = "todo")]
    pub todos: TodoList,
}

impl LocalPack {
    /// A pack with fresh state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every tool of the enabled features, with default limits.
    pub fn toolset(&self) -> kinet_core::Toolset {
        #[allow(unused_mut)]
        let mut tools = kinet_core::Toolset::new();
        #[cfg(feature = "shell")]
        tools.add(ShellTool::default());
        #[cfg(feature = "files")]
        {
            tools.add(ReadFileTool::new(std::sync::Arc::clone(&self.files)));
            tools.add(WriteFileTool::new(std::sync::Arc::clone(&self.files)));
            tools.add(EditFileTool::new(std::sync::Arc::clone(&self.files)));
        }
        #[cfg(feature = "search")]
        {
            tools.add(GrepTool::default());
            tools.add(GlobTool::default());
        }
        #[cfg(feature = "git")]
        tools.add(GitDiffTool::default());
        #[cfg(feature = "todo")]
        tools.add(TodoWriteTool::new(self.todos.clone()));
        #[cfg(feature = "agents")]
        tools.add(DispatchAgentTool);
        tools
    }
}

/// `web_fetch` and `web_search` with default settings (Bing, then
/// DuckDuckGo). Not part of [`default_tools`]: network access is the host's
/// choice.
#[cfg(feature = "web")]
pub fn web_tools() -> kinet_core::Toolset {
    kinet_core::Toolset::new()
        .with(WebFetchTool::default())
        .with(WebSearchTool::default())
}

/// The standard local tools for a workspace, with fresh state. Use
/// [`LocalPack`] to keep handles on the todo list or the file tracker.
pub fn default_tools() -> kinet_core::Toolset {
    LocalPack::new().toolset()
}
