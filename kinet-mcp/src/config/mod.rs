//! Discovering the MCP servers a user has configured for Claude Desktop,
//! Claude Code (user, project-local, `.mcp.json`, plugins) and Codex.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

mod codex;
mod plugins;

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// Where a server's configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// How long one `tools/call` may take. `None`: the hub's default.
    pub tool_timeout: Option<Duration>,
    /// When set, only these tools are exposed.
    pub enabled_tools: Option<Vec<String>>,
    /// These tools are never exposed.
    pub disabled_tools: Vec<String>,
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
        }
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
/// server of the same name): Claude Desktop, Codex, Claude Code user scope,
/// Claude Code plugins, Claude Code local scope (this project), the
/// project's `.mcp.json`, servers added in code.
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

    /// Starts a project's `.mcp.json` servers even when the user has not
    /// approved them. Default: off — like Claude Code, a project server runs
    /// only when approved (`enableAllProjectMcpServers`,
    /// `enabledMcpjsonServers` in `~/.claude.json` for the project or in the
    /// project's `.claude/settings*.json`); unapproved or
    /// `disabledMcpjsonServers` ones are listed disabled.
    pub fn trust_project_servers(mut self, trust: bool) -> Self {
        self.trust_project = trust;
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

    fn home_dir(&self) -> Option<PathBuf> {
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
            .or_else(|| std::env::current_dir().ok());
        if let Some(home) = self.home_dir() {
            let desktop = self.claude_desktop_path(&home);
            if let Some(json) = found.read_json(&desktop) {
                self.servers_from_json(
                    &json,
                    "mcpServers",
                    &ConfigSource::ClaudeDesktop(desktop.clone()),
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
            let claude = home.join(".claude.json");
            let claude_json = found.read_json(&claude);
            if let Some(json) = &claude_json {
                self.servers_from_json(
                    json,
                    "mcpServers",
                    &ConfigSource::ClaudeCodeUser(claude.clone()),
                    &claude,
                    None,
                    &mut found,
                );
            }
            self.plugins(&home, &mut found);
            if let (Some(json), Some(project)) = (&claude_json, &project)
                && let Some(projects) = json.get("projects").and_then(Value::as_object)
            {
                let key = project.display().to_string();
                if let Some(entry) = projects.get(&key) {
                    let source = ConfigSource::ClaudeCodeLocal {
                        file: claude.clone(),
                        project: project.clone(),
                    };
                    self.servers_from_json(entry, "mcpServers", &source, &claude, None, &mut found);
                }
            }
        }
        if let Some(project) = &project {
            let file = project.join(".mcp.json");
            if let Some(json) = found.read_json(&file) {
                self.servers_from_json(
                    &json,
                    "mcpServers",
                    &ConfigSource::ProjectMcpJson(file.clone()),
                    &file,
                    None,
                    &mut found,
                );
                let approval = self.project_approval(project, &mut found);
                for server in found.servers.values_mut() {
                    if matches!(server.source, ConfigSource::ProjectMcpJson(_)) {
                        server.enabled &= approval.allows(&server.name, self.trust_project);
                    }
                }
            }
        }
        for server in &self.extra {
            found.insert(server.clone());
        }
        Discovered {
            servers: found.servers.into_values().collect(),
            problems: found.problems,
        }
    }

    /// What the user approved of the project's `.mcp.json` servers.
    fn project_approval(&self, project: &Path, found: &mut Collected) -> Approval {
        let mut approval = Approval::default();
        let mut sources: Vec<Value> = Vec::new();
        if let Some(home) = self.home_dir()
            && let Some(json) = found.read_json(&home.join(".claude.json"))
            && let Some(entry) = json
                .get("projects")
                .and_then(|p| p.get(project.display().to_string()))
        {
            sources.push(entry.clone());
        }
        for name in ["settings.json", "settings.local.json"] {
            if let Some(json) = found.read_json(&project.join(".claude").join(name)) {
                sources.push(json);
            }
        }
        for source in sources {
            if source
                .get("enableAllProjectMcpServers")
                .and_then(Value::as_bool)
                == Some(true)
            {
                approval.all = true;
            }
            let names = |key: &str| -> Vec<String> {
                source
                    .get(key)
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            approval.enabled.extend(names("enabledMcpjsonServers"));
            approval.disabled.extend(names("disabledMcpjsonServers"));
        }
        approval
    }

    /// Reads `{key: {name: entry}}` (or, with `key` absent, `{name: entry}`
    /// when `bare` is allowed).
    pub(super) fn servers_from_json(
        &self,
        json: &Value,
        key: &str,
        source: &ConfigSource,
        file: &Path,
        plugin_root: Option<&Path>,
        found: &mut Collected,
    ) {
        let Some(servers) = json.get(key) else { return };
        let Some(servers) = servers.as_object() else {
            found.problem(file, format!("`{key}` is not an object"));
            return;
        };
        for (name, entry) in servers {
            match self.json_entry(name, entry, plugin_root) {
                Ok(transport) => {
                    let mut server = ServerConfig::new(name.clone(), transport);
                    server.source = source.clone();
                    server.enabled = entry.get("disabled").and_then(Value::as_bool) != Some(true);
                    found.insert(server);
                }
                Err(message) => found.problem(file, format!("server `{name}`: {message}")),
            }
        }
    }

    /// One server entry in the Claude formats.
    fn json_entry(
        &self,
        name: &str,
        entry: &Value,
        plugin_root: Option<&Path>,
    ) -> Result<ServerTransport, String> {
        let _ = name;
        let text = |v: &Value| -> Result<String, String> {
            v.as_str()
                .map(|s| self.expand(s, plugin_root))
                .ok_or_else(|| format!("expected a string, found {v}"))
        };
        let map = |key: &str| -> Result<BTreeMap<String, String>, String> {
            match entry.get(key) {
                None | Some(Value::Null) => Ok(BTreeMap::new()),
                Some(Value::Object(object)) => object
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), text(v)?)))
                    .collect(),
                Some(other) => Err(format!("`{key}` must be an object, found {other}")),
            }
        };
        let kind = entry.get("type").and_then(Value::as_str).unwrap_or("");
        if let Some(url) = entry.get("url") {
            if kind == "sse" {
                return Err(
                    "the legacy SSE transport is not supported; use streamable HTTP".into(),
                );
            }
            return Ok(ServerTransport::Http {
                url: text(url)?,
                headers: map("headers")?,
                bearer_token: None,
            });
        }
        let command = entry
            .get("command")
            .ok_or_else(|| "neither `command` nor `url` is set".to_owned())
            .and_then(|c| text(c).map_err(|e| format!("`command`: {e}")))?;
        let args = match entry.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.iter().map(text).collect::<Result<_, _>>()?,
            Some(other) => return Err(format!("`args` must be an array, found {other}")),
        };
        Ok(ServerTransport::Stdio {
            command,
            args,
            env: map("env")?,
            cwd: entry
                .get("cwd")
                .and_then(Value::as_str)
                .map(|c| PathBuf::from(self.expand(c, plugin_root))),
        })
    }

    /// `${VAR}`, `${VAR:-default}` and, inside plugins, `${CLAUDE_PLUGIN_ROOT}`.
    pub(super) fn expand(&self, text: &str, plugin_root: Option<&Path>) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                out.push_str(&rest[start..]);
                return out;
            };
            let inner = &after[..end];
            let (name, default) = match inner.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (inner, None),
            };
            let value = if name == "CLAUDE_PLUGIN_ROOT" {
                plugin_root.map(|p| p.display().to_string())
            } else {
                self.var(name)
            };
            out.push_str(
                &value
                    .or_else(|| default.map(str::to_owned))
                    .unwrap_or_default(),
            );
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }
}

/// The user's approval of project servers.
#[derive(Default)]
struct Approval {
    all: bool,
    enabled: Vec<String>,
    disabled: Vec<String>,
}

impl Approval {
    fn allows(&self, name: &str, trust: bool) -> bool {
        !self.disabled.iter().any(|n| n == name)
            && (trust || self.all || self.enabled.iter().any(|n| n == name))
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
