//! Codex's `config.toml` (`[mcp_servers.NAME]`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Collected, ConfigSource, Discovery, ServerConfig, ServerTransport};

impl Discovery {
    pub(super) fn codex(&self, file: &Path, found: &mut Collected) {
        let Some(text) = found.read(file) else { return };
        let parsed: toml::Table = match text.parse() {
            Ok(parsed) => parsed,
            Err(error) => {
                found.problem(file, format!("invalid TOML: {error}"));
                return;
            }
        };
        let Some(servers) = parsed.get("mcp_servers") else {
            return;
        };
        let Some(servers) = servers.as_table() else {
            found.problem(file, "`mcp_servers` is not a table".into());
            return;
        };
        for (name, entry) in servers {
            match self.codex_entry(entry) {
                Ok(mut server) => {
                    server.name = name.clone();
                    server.source = ConfigSource::Codex(file.to_path_buf());
                    found.insert(server);
                }
                Err(message) => found.problem(file, format!("server `{name}`: {message}")),
            }
        }
    }

    fn codex_entry(&self, entry: &toml::Value) -> Result<ServerConfig, String> {
        let table = entry.as_table().ok_or("not a table")?;
        let string = |key: &str| -> Result<Option<String>, String> {
            match table.get(key) {
                None => Ok(None),
                Some(toml::Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(format!("`{key}` must be a string, found {other}")),
            }
        };
        let strings = |key: &str| -> Result<Option<Vec<String>>, String> {
            match table.get(key) {
                None => Ok(None),
                Some(toml::Value::Array(items)) => items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| format!("`{key}` must hold strings"))
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some),
                Some(other) => Err(format!("`{key}` must be an array, found {other}")),
            }
        };
        let string_map = |key: &str| -> Result<BTreeMap<String, String>, String> {
            match table.get(key) {
                None => Ok(BTreeMap::new()),
                Some(toml::Value::Table(t)) => t
                    .iter()
                    .map(|(k, v)| {
                        v.as_str()
                            .map(|v| (k.clone(), v.to_owned()))
                            .ok_or_else(|| format!("`{key}.{k}` must be a string"))
                    })
                    .collect(),
                Some(other) => Err(format!("`{key}` must be a table, found {other}")),
            }
        };
        let seconds = |key: &str| -> Result<Option<Duration>, String> {
            match table.get(key) {
                None => Ok(None),
                Some(toml::Value::Integer(n)) if *n >= 0 => {
                    Ok(Some(Duration::from_secs(n.unsigned_abs())))
                }
                Some(toml::Value::Float(f)) if f.is_finite() && *f >= 0.0 => {
                    Ok(Some(Duration::from_secs_f64(*f)))
                }
                Some(other) => Err(format!(
                    "`{key}` must be a number of seconds, found {other}"
                )),
            }
        };
        let transport = match (string("url")?, string("command")?) {
            (Some(url), _) => {
                let mut headers = string_map("http_headers")?;
                for (header, var) in string_map("env_http_headers")? {
                    if let Some(value) = self.var(&var) {
                        headers.insert(header, value);
                    }
                }
                let bearer_token =
                    match string("bearer_token_env_var")? {
                        Some(var) => Some(self.var(&var).ok_or_else(|| {
                            format!("the bearer token variable `{var}` is not set")
                        })?),
                        None => None,
                    };
                ServerTransport::Http {
                    url,
                    headers,
                    bearer_token,
                }
            }
            (None, Some(command)) => ServerTransport::Stdio {
                command,
                args: strings("args")?.unwrap_or_default(),
                env: string_map("env")?,
                cwd: string("cwd")?.map(PathBuf::from),
            },
            (None, None) => return Err("neither `command` nor `url` is set".into()),
        };
        let mut server = ServerConfig::new(String::new(), transport);
        server.enabled = match table.get("enabled") {
            None => true,
            Some(toml::Value::Boolean(b)) => *b,
            Some(other) => return Err(format!("`enabled` must be true or false, found {other}")),
        };
        server.startup_timeout = seconds("startup_timeout_sec")?;
        server.tool_timeout = seconds("tool_timeout_sec")?;
        server.enabled_tools = strings("enabled_tools")?;
        server.disabled_tools = strings("disabled_tools")?.unwrap_or_default();
        Ok(server)
    }
}
