//! Discovering the MCP servers a user has configured for Claude Code (its
//! scopes, plugins and managed file), Claude Desktop, Codex, Cursor and VS
//! Code.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

mod claude;
mod codex;
mod editors;
mod entry;
mod expand;
mod plugins;
mod policy;

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerTransport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
        /// The working directory (default: the host's).
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP.
    Http {
        /// The endpoint URL.
        url: String,
        /// Extra request headers.
        headers: BTreeMap<String, String>,
        /// Sent as `Authorization: Bearer`.
        bearer_token: Option<String>,
    },
    /// The legacy HTTP+SSE transport (protocol 2024-11-05): an event stream
    /// from `url` names the endpoint messages are POSTed to.
    Sse {
        /// The event-stream URL (often ending in `/sse`).
        url: String,
        /// Extra request headers, on the stream and on every POST.
        headers: BTreeMap<String, String>,
    },
}

/// Where a server's configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigSource {
    /// Claude Desktop's `claude_desktop_config.json`.
    ClaudeDesktop(PathBuf),
    /// Claude Code's `~/.claude.json`, top-level `mcpServers` (user scope).
    ClaudeCodeUser(PathBuf),
    /// Claude Code's `~/.claude.json`, `projects.<path>.mcpServers` (local scope).
    ClaudeCodeLocal {
        /// The file.
        file: PathBuf,
        /// The project path the entry belongs to.
        project: PathBuf,
    },
    /// A project's `.mcp.json`.
    ProjectMcpJson(PathBuf),
    /// An installed Claude Code plugin.
    ClaudePlugin {
        /// The plugin's name (`name@marketplace`).
        plugin: String,
        /// The file the servers were read from.
        file: PathBuf,
    },
    /// Codex's `config.toml`.
    Codex(PathBuf),
    /// Claude Code's managed (enterprise) `managed-mcp.json`.
    ClaudeManaged(PathBuf),
    /// Cursor's `~/.cursor/mcp.json` or a project's `.cursor/mcp.json`.
    Cursor(PathBuf),
    /// VS Code's user `mcp.json` or a project's `.vscode/mcp.json`.
    VsCode(PathBuf),
    /// Added by the host in code.
    Code,
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ClaudeDesktop(p) => write!(f, "Claude Desktop ({})", p.display()),
            Self::ClaudeCodeUser(p) => write!(f, "Claude Code user config ({})", p.display()),
            Self::ClaudeCodeLocal { file, project } => write!(
                f,
                "Claude Code local config for {} ({})",
                project.display(),
                file.display()
            ),
            Self::ProjectMcpJson(p) => write!(f, "project .mcp.json ({})", p.display()),
            Self::ClaudePlugin { plugin, file } => {
                write!(f, "Claude Code plugin {plugin} ({})", file.display())
            }
            Self::Codex(p) => write!(f, "Codex config ({})", p.display()),
            Self::ClaudeManaged(p) => write!(f, "Claude Code managed config ({})", p.display()),
            Self::Cursor(p) => write!(f, "Cursor config ({})", p.display()),
            Self::VsCode(p) => write!(f, "VS Code config ({})", p.display()),
            Self::Code => f.write_str("host code"),
        }
    }
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The server's name (the `<server>` in `mcp__<server>__<tool>`).
    pub name: String,
    /// How to reach it.
    pub transport: ServerTransport,
    /// Where the configuration came from.
    pub source: ConfigSource,
    /// Disabled servers are listed but not started.
    pub enabled: bool,
    /// How long `initialize` + `tools/list` may take. `None`: the hub's default.
    pub startup_timeout: Option<Duration>,
    /// How long one `tools/call` may go without an answer or a progress
    /// notification. `None`: the hub's default.
    pub tool_timeout: Option<Duration>,
    /// When set, only these tools are exposed.
    pub enabled_tools: Option<Vec<String>>,
    /// These tools are never exposed.
    pub disabled_tools: Vec<String>,
    /// Claude Code's `headersHelper` (remote servers): a shell command run
    /// before each connection whose standard output is a JSON object of
    /// header names to values, sent over [`ServerTransport`]'s own headers
    /// (a helper's header replaces a configured one of the same name). It
    /// runs with `CLAUDE_CODE_MCP_SERVER_NAME` and
    /// `CLAUDE_CODE_MCP_SERVER_URL` set, for at most 10 s, and only for
    /// servers that start (a project's servers only once approved).
    pub headers_helper: Option<String>,
    /// Claude Code's `oauth` entry (remote servers): a pre-registered
    /// client, a fixed callback port, the metadata URL, the scopes. Used
    /// when the hub has [`OAuth`](crate::oauth::OAuth).
    pub oauth: Option<crate::oauth::OAuthClientConfig>,
    /// Connect with the `initialize` handshake of 2025-11-25 and earlier
    /// only, without first probing for 2026-07-28 with `server/discover`
    /// (for a server that mishandles the probe). Default: `false` (probe,
    /// then fall back).
    pub initialize_only: bool,
}

impl ServerConfig {
    /// A stdio server added in code.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> Self {
        Self::new(
            name,
            ServerTransport::Stdio {
                command: command.into(),
                args,
                env: BTreeMap::new(),
                cwd: None,
            },
        )
    }

    /// A streamable HTTP server added in code.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::new(
            name,
            ServerTransport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
                bearer_token: None,
            },
        )
    }

    /// A legacy HTTP+SSE server added in code (`url` is the event stream,
    /// often ending in `/sse`).
    pub fn sse(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::new(
            name,
            ServerTransport::Sse {
                url: url.into(),
                headers: BTreeMap::new(),
            },
        )
    }

    pub(super) fn new(name: impl Into<String>, transport: ServerTransport) -> Self {
        Self {
            name: name.into(),
            transport,
            source: ConfigSource::Code,
            enabled: true,
            startup_timeout: None,
            tool_timeout: None,
            enabled_tools: None,
            disabled_tools: Vec::new(),
            headers_helper: None,
            oauth: None,
            initialize_only: false,
        }
    }

    /// Speaks only the `initialize` handshake; see
    /// [`initialize_only`](Self::initialize_only).
    pub fn initialize_only(mut self) -> Self {
        self.initialize_only = true;
        self
    }

    /// Sets the server's own OAuth settings; see [`oauth`](Self::oauth).
    pub fn oauth(mut self, oauth: crate::oauth::OAuthClientConfig) -> Self {
        self.oauth = Some(oauth);
        self
    }

    /// Runs `command` (a shell command) before each connection for extra
    /// headers; see [`headers_helper`](Self::headers_helper).
    pub fn headers_helper(mut self, command: impl Into<String>) -> Self {
        self.headers_helper = Some(command.into());
        self
    }

    /// Sets an environment variable (stdio servers).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let ServerTransport::Stdio { env, .. } = &mut self.transport {
            env.insert(key.into(), value.into());
        }
        self
    }

    /// Sets the per-call timeout.
    pub fn tool_timeout(mut self, timeout: Duration) -> Self {
        self.tool_timeout = Some(timeout);
        self
    }

    /// Sets the start-up timeout.
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = Some(timeout);
        self
    }

    /// Whether the tool named `tool` (the server's own name) is exposed.
    pub fn exposes(&self, tool: &str) -> bool {
        !self.disabled_tools.iter().any(|t| t == tool)
            && self
                .enabled_tools
                .as_ref()
                .is_none_or(|only| only.iter().any(|t| t == tool))
    }
}

/// A source that could not be used (the others still are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceProblem {
    /// The file.
    pub file: PathBuf,
    /// What was wrong.
    pub message: String,
}

/// What discovery found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovered {
    /// The servers, one per name (later sources override earlier ones), in
    /// name order.
    pub servers: Vec<ServerConfig>,
    /// Files that exist but could not be read or parsed, and entries that
    /// were skipped; never fatal.
    pub problems: Vec<SourceProblem>,
}

/// Finds configured MCP servers. The home directory, the project directory
/// and the environment are injectable so tests use temp dirs.
///
/// Sources, from lowest to highest precedence (a later one replaces a
/// server of the same name, whole; fields are never merged):
///
/// 1. Claude Desktop; Codex (`$CODEX_HOME/config.toml`); VS Code's user
///    `mcp.json`; `~/.cursor/mcp.json`;
/// 2. the project's `.vscode/mcp.json` and `.cursor/mcp.json` (listed
///    disabled unless the host [trusts project
///    servers](Self::trust_project_servers): they come with the repository);
/// 3. Claude Code, in its own documented order local > project > user >
///    plugins: installed plugins (their servers named
///    `plugin_<plugin>_<server>`, as Claude Code's tool names have them, so
///    they never collide with the user's own), user scope (`~/.claude.json`), project
///    scope (every `.mcp.json` from the project's farthest ancestor down to
///    the project, the nearest winning; each server runs only once approved),
///    local scope (the project's entry in `~/.claude.json`, keyed by the
///    repository root as Claude Code keys it; its `disabledMcpServers` turn
///    off servers of the other scopes); a plugin server that reaches the
///    same endpoint as another source's server is dropped, as Claude Code
///    matches plugins by endpoint;
/// 4. servers added in code.
///
/// When Claude Code's managed file exists (`/etc/claude-code/managed-mcp.json`
/// on Linux), only its servers and those added in code are used, as Claude
/// Code does. Claude Code's server policy then applies to every discovered
/// server (not those added in code): `allowedMcpServers`,
/// `deniedMcpServers` and `allowManagedMcpServersOnly` of
/// `managed-settings.json` beside the managed file and of
/// `~/.claude/settings.json`, matched by name, exact command or URL pattern
/// as Claude Code matches them; blocked servers are left out and reported
/// in [`Discovered::problems`]. `${VAR}` (`${VAR:-default}`) is expanded in Claude files and
/// `${env:VAR}`, `${workspaceFolder}`, `${userHome}` in the editors'; a
/// variable that is not set is kept as written and reported in
/// [`Discovered::problems`], naming it. Each server's
/// [`source`](ServerConfig::source) says where it came from.
///
/// ```
/// use kinet_mcp::Discovery;
///
/// let home = tempfile::tempdir().unwrap();
/// std::fs::write(
///     home.path().join(".claude.json"),
///     r#"{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]}}}"#,
/// ).unwrap();
/// let found = Discovery::new().home(home.path()).discover();
/// assert_eq!(found.servers[0].name, "fs");
/// assert!(found.problems.is_empty());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    home: Option<PathBuf>,
    project: Option<PathBuf>,
    env: Option<BTreeMap<String, String>>,
    extra: Vec<ServerConfig>,
    trust_project: bool,
    managed: Option<PathBuf>,
}

impl Discovery {
    /// Discovery with the process's home directory, current directory and
    /// environment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses this home directory.
    pub fn home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }

    /// Uses this project directory (for `.mcp.json` and Claude Code's local scope).
    pub fn project(mut self, project: impl Into<PathBuf>) -> Self {
        self.project = Some(project.into());
        self
    }

    /// Uses these variables for `${VAR}` expansion instead of the process environment.
    pub fn env(mut self, env: BTreeMap<String, String>) -> Self {
        self.env = Some(env);
        self
    }

    /// Starts servers that come with the project (its `.mcp.json` files,
    /// `.vscode/mcp.json`, `.cursor/mcp.json`) even when the user has not
    /// approved them. Default: off. Like Claude Code, a `.mcp.json` server
    /// runs only when approved (`enableAllProjectMcpServers` or
    /// `enabledMcpjsonServers` in `~/.claude/settings.json`, in the project's
    /// entry of `~/.claude.json`, or, for a project trusted in Claude Code,
    /// in its `.claude/settings*.json`); unapproved ones and those in any
    /// `disabledMcpjsonServers` are listed disabled.
    pub fn trust_project_servers(mut self, trust: bool) -> Self {
        self.trust_project = trust;
        self
    }

    /// Reads Claude Code's managed server list from this file instead of
    /// the system-wide one. Default: the OS's managed path.
    pub fn managed_config(mut self, file: impl Into<PathBuf>) -> Self {
        self.managed = Some(file.into());
        self
    }

    /// Adds a server in code (highest precedence).
    pub fn server(mut self, server: ServerConfig) -> Self {
        self.extra.push(server);
        self
    }

    pub(super) fn var(&self, name: &str) -> Option<String> {
        match &self.env {
            Some(env) => env.get(name).cloned(),
            None => std::env::var(name).ok(),
        }
    }

    pub(super) fn home_dir(&self) -> Option<PathBuf> {
        self.home
            .clone()
            .or_else(|| self.var("HOME").map(PathBuf::from))
            .or_else(|| self.var("USERPROFILE").map(PathBuf::from))
    }

    /// Where Claude Desktop keeps its config on this OS.
    fn claude_desktop_path(&self, home: &Path) -> PathBuf {
        if cfg!(target_os = "macos") {
            home.join("Library/Application Support/Claude/claude_desktop_config.json")
        } else if cfg!(windows) {
            self.var("APPDATA")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join("AppData/Roaming"))
                .join("Claude/claude_desktop_config.json")
        } else {
            self.var("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".config"))
                .join("Claude/claude_desktop_config.json")
        }
    }

    /// Reads every source.
    pub fn discover(&self) -> Discovered {
        let mut found = Collected::default();
        let project = self
            .project
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .map(|p| claude::normalize(&p));
        let home = self.home_dir();
        let managed = self.managed_file();
        if let Some(json) = found.read_json(&managed) {
            let source = ConfigSource::ClaudeManaged(managed.clone());
            self.servers_from_json(&json, "mcpServers", &source, &managed, None, &mut found);
        } else {
            if let Some(home) = &home {
                let desktop = self.claude_desktop_path(home);
                if let Some(json) = found.read_json(&desktop) {
                    let source = ConfigSource::ClaudeDesktop(desktop.clone());
                    self.servers_from_json(
                        &json,
                        "mcpServers",
                        &source,
                        &desktop,
                        None,
                        &mut found,
                    );
                }
                let codex_home = self
                    .var("CODEX_HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| home.join(".codex"));
                self.codex(&codex_home.join("config.toml"), &mut found);
                self.editor_user_files(home, &mut found);
            }
            if let Some(project) = &project {
                self.editor_project_files(project, &mut found);
            }
            let claude = home.as_ref().map(|h| h.join(".claude.json"));
            if let Some(home) = &home {
                self.plugins(home, &mut found);
            }
            if let Some(claude) = &claude
                && let Some(json) = found.read_json(claude)
            {
                let source = ConfigSource::ClaudeCodeUser(claude.clone());
                self.servers_from_json(&json, "mcpServers", &source, claude, None, &mut found);
            }
            if let Some(project) = &project {
                self.project_mcp_json(project, &mut found);
                if let Some(claude) = &claude {
                    self.local_scope(claude, project, &mut found);
                }
            }
        }
        found.drop_plugin_duplicates();
        policy::apply(
            &managed.with_file_name("managed-settings.json"),
            home.as_ref()
                .map(|h| h.join(".claude/settings.json"))
                .as_deref(),
            &mut found,
        );
        for server in &self.extra {
            found.insert(server.clone());
        }
        Discovered {
            servers: found.servers.into_values().collect(),
            problems: found.problems,
        }
    }
}

/// Servers by name, and problems, as sources are read.
#[derive(Default)]
pub(super) struct Collected {
    servers: BTreeMap<String, ServerConfig>,
    problems: Vec<SourceProblem>,
    /// Files already parsed (each file is read, and reported, once).
    parsed: BTreeMap<PathBuf, Option<Value>>,
}

impl Collected {
    pub(super) fn insert(&mut self, server: ServerConfig) {
        self.servers.insert(server.name.clone(), server);
    }

    /// Turns off every server for which `keep` is false.
    pub(super) fn retain_enabled(&mut self, mut keep: impl FnMut(&ServerConfig) -> bool) {
        for server in self.servers.values_mut() {
            if !keep(server) {
                server.enabled = false;
            }
        }
    }

    /// Drops plugin servers that reach the same endpoint (command and
    /// arguments, or URL) as a server of another source: as in Claude Code,
    /// plugins are matched by endpoint and the user's own entry wins.
    pub(super) fn drop_plugin_duplicates(&mut self) {
        fn endpoint(server: &ServerConfig) -> String {
            match &server.transport {
                ServerTransport::Stdio { command, args, .. } => {
                    format!("stdio {command} {}", args.join("\u{1f}"))
                }
                ServerTransport::Http { url, .. } | ServerTransport::Sse { url, .. } => {
                    format!("url {}", url.trim_end_matches('/'))
                }
            }
        }
        let own: std::collections::BTreeSet<String> = self
            .servers
            .values()
            .filter(|s| !matches!(s.source, ConfigSource::ClaudePlugin { .. }))
            .map(endpoint)
            .collect();
        self.servers.retain(|_, server| {
            !matches!(server.source, ConfigSource::ClaudePlugin { .. })
                || !own.contains(&endpoint(server))
        });
    }

    /// Turns off the servers read from `source`.
    pub(super) fn disable_source(&mut self, source: &ConfigSource) {
        self.retain_enabled(|server| &server.source != source);
    }

    pub(super) fn problem(&mut self, file: &Path, message: String) {
        self.problems.push(SourceProblem {
            file: file.to_path_buf(),
            message,
        });
    }

    /// The file's text; `None` when it does not exist (not a problem) or
    /// cannot be read (a problem).
    pub(super) fn read(&mut self, file: &Path) -> Option<String> {
        match std::fs::read_to_string(file) {
            Ok(text) => Some(text),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => {
                self.problem(file, format!("cannot read: {error}"));
                None
            }
        }
    }

    pub(super) fn read_json(&mut self, file: &Path) -> Option<Value> {
        if let Some(parsed) = self.parsed.get(file) {
            return parsed.clone();
        }
        let parsed = self
            .read(file)
            .and_then(|text| match serde_json::from_str(&text) {
                Ok(json) => Some(json),
                Err(error) => {
                    self.problem(file, format!("invalid JSON: {error}"));
                    None
                }
            });
        self.parsed.insert(file.to_path_buf(), parsed.clone());
        parsed
    }
}
