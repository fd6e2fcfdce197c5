//! One server entry of a JSON config file, in the Claude, Cursor or VS Code
//! dialect.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::expand::{Syntax, parse_env_file};
use super::{Collected, ConfigSource, Discovery, ServerConfig, ServerTransport};

/// Whose file an entry comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Format<'a> {
    /// Claude Code, Claude Desktop, Claude Code plugins.
    Claude { plugin_root: Option<&'a Path> },
    /// Cursor (`~/.cursor/mcp.json`, `.cursor/mcp.json`).
    Cursor { workspace: Option<&'a Path> },
    /// VS Code (`.vscode/mcp.json`, the user's `mcp.json`; key `servers`).
    VsCode { workspace: Option<&'a Path> },
}

impl Format<'_> {
    fn syntax<'b>(&'b self, home: Option<&'b Path>) -> Syntax<'b> {
        match *self {
            Format::Claude { plugin_root } => Syntax::Claude { plugin_root },
            Format::Cursor { workspace } | Format::VsCode { workspace } => {
                Syntax::Editor { workspace, home }
            }
        }
    }
}

/// Reads an env file: a regular file of at most 1 MiB (not a FIFO, a
/// device or something huge).
fn read_env_file(path: &Path) -> Result<String, String> {
    const MAX: u64 = 1024 * 1024;
    let problem = |what: String| format!("cannot read its envFile {}: {what}", path.display());
    let metadata = std::fs::metadata(path).map_err(|e| problem(e.to_string()))?;
    if !metadata.is_file() {
        return Err(problem("not a regular file".into()));
    }
    if metadata.len() > MAX {
        return Err(problem(format!("larger than {MAX} bytes")));
    }
    let file = std::fs::File::open(path).map_err(|e| problem(e.to_string()))?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX), &mut text)
        .map_err(|e| problem(e.to_string()))?;
    Ok(text)
}

impl Discovery {
    /// Reads `{key: {name: entry}}` from `json`; each server gets `source`,
    /// each unusable entry or missing variable becomes a problem of `file`.
    pub(super) fn servers_from(
        &self,
        json: &Value,
        key: &str,
        source: &ConfigSource,
        file: &Path,
        format: Format<'_>,
        found: &mut Collected,
    ) {
        let Some(servers) = json.get(key) else { return };
        let Some(servers) = servers.as_object() else {
            found.problem(file, format!("`{key}` is not an object"));
            return;
        };
        for (name, entry) in servers {
            let mut missing = BTreeSet::new();
            let mut notes = Vec::new();
            match self.entry(entry, format, file, &mut missing, &mut notes) {
                Ok(transport) => {
                    // Claude Code namespaces plugin servers (`plugin:<plugin>:<server>`,
                    // tools `mcp__plugin_<plugin>_<server>__<tool>`), so a plugin
                    // server never takes or loses the name of the user's own.
                    let full_name = match source {
                        ConfigSource::ClaudePlugin { plugin, .. } => {
                            let plugin = plugin.split('@').next().unwrap_or(plugin);
                            format!("plugin_{plugin}_{name}")
                        }
                        _ => name.clone(),
                    };
                    let mut server = ServerConfig::new(full_name, transport);
                    server.source = source.clone();
                    server.enabled = entry.get("disabled").and_then(Value::as_bool) != Some(true);
                    if let Some(helper) = entry.get("headersHelper") {
                        match (helper.as_str(), &server.transport) {
                            (
                                Some(command),
                                ServerTransport::Http { .. } | ServerTransport::Sse { .. },
                            ) => {
                                server.headers_helper = Some(command.to_owned());
                            }
                            (Some(_), _) => notes.push(
                                "`headersHelper` applies to remote servers only; ignored".into(),
                            ),
                            (None, _) => notes.push(
                                "`headersHelper` must be a string (a shell command); ignored"
                                    .into(),
                            ),
                        }
                    }
                    if let Some(oauth) = entry.get("oauth") {
                        if matches!(server.transport, ServerTransport::Stdio { .. }) {
                            notes.push("`oauth` applies to remote servers only; ignored".into());
                        } else {
                            server.oauth = Some(oauth_entry(oauth, &mut notes));
                        }
                    }
                    found.insert(server);
                }
                Err(message) => found.problem(file, format!("server `{name}`: {message}")),
            }
            for note in notes {
                found.problem(file, format!("server `{name}`: {note}"));
            }
            if !missing.is_empty() {
                let names: Vec<String> = missing.into_iter().collect();
                found.problem(
                    file,
                    format!(
                        "server `{name}`: missing environment variables: {}; the text is used as written, so set them and start again",
                        names.join(", ")
                    ),
                );
            }
        }
    }

    /// Claude's reader, kept for the plugin code.
    pub(super) fn servers_from_json(
        &self,
        json: &Value,
        key: &str,
        source: &ConfigSource,
        file: &Path,
        plugin_root: Option<&Path>,
        found: &mut Collected,
    ) {
        self.servers_from(
            json,
            key,
            source,
            file,
            Format::Claude { plugin_root },
            found,
        );
    }

    /// One entry. Claude Code's rules: no `type` means stdio, and a `url`
    /// without a `type` is refused; Cursor picks SSE for a URL ending in
    /// `/sse` and streamable HTTP otherwise; VS Code defaults to HTTP.
    fn entry(
        &self,
        entry: &Value,
        format: Format<'_>,
        file: &Path,
        missing: &mut BTreeSet<String>,
        notes: &mut Vec<String>,
    ) -> Result<ServerTransport, String> {
        let home = self.home_dir();
        let syntax = format.syntax(home.as_deref());
        let mut text = |v: &Value| -> Result<String, String> {
            v.as_str()
                .map(|s| self.expand(s, syntax, missing))
                .ok_or_else(|| format!("expected a string, found {v}"))
        };
        let mut map = |key: &str| -> Result<BTreeMap<String, String>, String> {
            match entry.get(key) {
                None | Some(Value::Null) => Ok(BTreeMap::new()),
                Some(Value::Object(object)) => object
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), text(v)?)))
                    .collect(),
                Some(other) => Err(format!("`{key}` must be an object, found {other}")),
            }
        };
        let headers = map("headers")?;
        let env = map("env")?;
        let mut text = |v: &Value| -> Result<String, String> {
            v.as_str()
                .map(|s| self.expand(s, syntax, missing))
                .ok_or_else(|| format!("expected a string, found {v}"))
        };
        let url = entry.get("url").map(&mut text).transpose()?;
        let kind = entry.get("type").and_then(Value::as_str);
        let remote = |url: String, sse: bool| {
            if sse {
                ServerTransport::Sse { url, headers }
            } else {
                ServerTransport::Http {
                    url,
                    headers,
                    bearer_token: None,
                }
            }
        };
        match (kind, url) {
            (Some("http" | "streamable-http" | "streamableHttp"), Some(url)) => {
                return Ok(remote(url, false));
            }
            (Some("sse"), Some(url)) => return Ok(remote(url, true)),
            (Some("http" | "streamable-http" | "streamableHttp" | "sse"), None) => {
                return Err("a remote server needs a `url`".into());
            }
            (Some("ws"), _) => {
                return Err("WebSocket servers (`\"type\": \"ws\"`) are not supported; use `\"type\": \"http\"` if the server offers it".into());
            }
            (Some("stdio"), _) => {}
            (Some(other), _) => {
                return Err(format!("unknown `type` `{other}`: use stdio, http or sse"));
            }
            (None, Some(url)) => match format {
                Format::Claude { .. } if entry.get("command").is_none() => {
                    return Err("has a `url` but no `type`; add `\"type\": \"http\"` (or `\"sse\"`) to this entry".into());
                }
                Format::Claude { .. } => {}
                Format::Cursor { .. } => {
                    let sse = url.trim_end_matches('/').ends_with("/sse");
                    return Ok(remote(url, sse));
                }
                Format::VsCode { .. } => return Ok(remote(url, false)),
            },
            (None, None) => {}
        }
        let command = entry
            .get("command")
            .ok_or_else(|| "neither `command` nor `url` is set".to_owned())
            .and_then(|c| text(c).map_err(|e| format!("`command`: {e}")))?;
        let args = match entry.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.iter().map(&mut text).collect::<Result<_, _>>()?,
            Some(other) => return Err(format!("`args` must be an array, found {other}")),
        };
        let cwd = entry
            .get("cwd")
            .and_then(Value::as_str)
            .map(|c| PathBuf::from(self.expand(c, syntax, missing)));
        // Cursor and VS Code: variables from a file, under `env`.
        let mut all_env = BTreeMap::new();
        if let (Format::Cursor { workspace } | Format::VsCode { workspace }, Some(path)) =
            (format, entry.get("envFile").and_then(Value::as_str))
        {
            let path = PathBuf::from(self.expand(path, syntax, missing));
            let base = workspace
                .map(Path::to_path_buf)
                .or_else(|| file.parent().map(Path::to_path_buf))
                .unwrap_or_default();
            let path = if path.is_absolute() {
                path
            } else {
                base.join(path)
            };
            // A repository's own file may not make the host read other
            // files before anyone approved it.
            if workspace.is_some() && !self.trust_project {
                notes.push(format!(
                    "its envFile {} is not read until the host trusts the project's servers",
                    path.display()
                ));
            } else {
                all_env = parse_env_file(&read_env_file(&path)?);
            }
        }
        all_env.extend(env);
        Ok(ServerTransport::Stdio {
            command,
            args,
            env: all_env,
            cwd,
        })
    }
}

/// Claude Code's per-server `oauth` object; what is malformed is noted and
/// left out.
fn oauth_entry(value: &Value, notes: &mut Vec<String>) -> crate::oauth::OAuthClientConfig {
    let mut config = crate::oauth::OAuthClientConfig::default();
    let Some(object) = value.as_object() else {
        notes.push("`oauth` must be an object; ignored".into());
        return config;
    };
    for (key, value) in object {
        match key.as_str() {
            "clientId" => match value.as_str().filter(|s| !s.is_empty()) {
                Some(id) => config.client_id = Some(id.to_owned()),
                None => notes.push("`oauth.clientId` must be a non-empty string; ignored".into()),
            },
            "callbackPort" => match value.as_u64().and_then(|p| u16::try_from(p).ok()).filter(|p| *p > 0) {
                Some(port) => config.callback_port = Some(port),
                None => notes.push("`oauth.callbackPort` must be a port number (1-65535); ignored".into()),
            },
            "authServerMetadataUrl" => match value.as_str().filter(|s| s.starts_with("https://")) {
                Some(url) => config.auth_server_metadata_url = Some(url.to_owned()),
                None => notes.push("`oauth.authServerMetadataUrl` must be an https:// URL; ignored".into()),
            },
            "scopes" => match value.as_str().filter(|s| !s.trim().is_empty()) {
                Some(scopes) => config.scopes = Some(scopes.to_owned()),
                None => notes.push("`oauth.scopes` must be a space-separated string; ignored".into()),
            },
            "clientSecret" => notes.push(
                "`oauth.clientSecret` is not read from configuration files; the host sets it (OAuthClientConfig::client_secret)".into(),
            ),
            other => notes.push(format!("`oauth.{other}` is not a known setting; ignored")),
        }
    }
    config
}
