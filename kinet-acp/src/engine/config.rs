//! Engines from a table in a file, TOML or JSON, like the MCP server
//! configurations.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use kinet_core::builder::SubAgents;
use serde::Deserialize;

use super::AcpEngine;

/// A table of named ACP engines, read from TOML or JSON.
///
/// ```toml
/// [engines.opencode]
/// command = "opencode"
/// args = ["acp"]
/// env = { OPENCODE_DISABLE_AUTOUPDATE = "1" }
/// allowed_hosts = ["127.0.0.1:8080"]
/// pass_env = ["LANG"]                 # host variables passed on
/// start_timeout_secs = 60
/// files = { ".config/opencode/opencode.json" = "{ ... }" }
/// ```
///
/// The same in JSON: `{"engines": {"opencode": {"command": "opencode",
/// "args": ["acp"], ...}}}`. Unknown keys are errors, so a misspelt
/// setting does not pass unnoticed.
///
/// ```
/// use kinet_acp::EngineTable;
/// use kinet_core::builder::SubAgents;
///
/// let table = EngineTable::from_toml(
///     r#"
///     [engines.kinet]
///     command = "agent"
///     args = ["--acp"]
///     env = { KINET_BASE_URL = "http://127.0.0.1:8080/v1" }
///     allowed_hosts = ["127.0.0.1:8080"]
///     "#,
/// )?;
/// assert_eq!(table.names().collect::<Vec<_>>(), ["kinet"]);
/// let sub_agents = table.register(SubAgents::new());
/// # let _ = sub_agents;
/// # Ok::<(), kinet_acp::EngineConfigError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct EngineTable {
    engines: BTreeMap<String, AcpEngine>,
}

/// An engine table that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineConfigError {
    /// The file could not be read.
    #[error("cannot read the engine table `{path}`: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The text is not a valid table.
    #[error("the engine table{at} is not valid: {why}")]
    Invalid {
        /// ` `path`` when read from a file, else empty.
        at: String,
        /// What is wrong, with the key.
        why: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    engines: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    pass_env: Vec<String>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    #[serde(default)]
    files: BTreeMap<String, String>,
    #[serde(default)]
    start_timeout_secs: Option<u64>,
    #[serde(default)]
    confined: Option<bool>,
}

impl Entry {
    fn engine(self) -> AcpEngine {
        let mut engine = AcpEngine::command(self.command, self.args)
            .pass_env(self.pass_env)
            .allow_hosts(self.allowed_hosts);
        for (name, value) in self.env {
            engine = engine.env(name, value);
        }
        for (path, contents) in self.files {
            engine = engine.home_file(path, contents);
        }
        if let Some(secs) = self.start_timeout_secs {
            engine = engine.start_timeout(Duration::from_secs(secs));
        }
        if let Some(confined) = self.confined {
            engine = engine.confined(confined);
        }
        engine
    }
}

impl EngineTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a table from TOML text.
    pub fn from_toml(text: &str) -> Result<Self, EngineConfigError> {
        let file: File = toml::from_str(text).map_err(|e| EngineConfigError::Invalid {
            at: String::new(),
            why: e.message().to_owned(),
        })?;
        Self::from_file(file)
    }

    /// Reads a table from JSON text.
    pub fn from_json(text: &str) -> Result<Self, EngineConfigError> {
        let file: File = serde_json::from_str(text).map_err(|e| EngineConfigError::Invalid {
            at: String::new(),
            why: e.to_string(),
        })?;
        Self::from_file(file)
    }

    /// Reads a table from a file: JSON when its name ends in `.json`,
    /// else TOML.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, EngineConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| EngineConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let parsed = if path.extension().is_some_and(|e| e == "json") {
            Self::from_json(&text)
        } else {
            Self::from_toml(&text)
        };
        parsed.map_err(|error| match error {
            EngineConfigError::Invalid { why, .. } => EngineConfigError::Invalid {
                at: format!(" `{}`", path.display()),
                why,
            },
            other => other,
        })
    }

    fn from_file(file: File) -> Result<Self, EngineConfigError> {
        let mut engines = BTreeMap::new();
        for (name, entry) in file.engines {
            if entry.command.trim().is_empty() {
                return Err(EngineConfigError::Invalid {
                    at: String::new(),
                    why: format!("engine `{name}` has an empty `command`"),
                });
            }
            engines.insert(name, entry.engine());
        }
        Ok(Self { engines })
    }

    /// Adds (or replaces) an engine.
    pub fn insert(&mut self, name: impl Into<String>, engine: AcpEngine) {
        self.engines.insert(name.into(), engine);
    }

    /// The engines' names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.engines.keys().map(String::as_str)
    }

    /// The engine named `name`.
    pub fn get(&self, name: &str) -> Option<&AcpEngine> {
        self.engines.get(name)
    }

    /// Registers every engine of the table on `sub_agents` under its name.
    pub fn register(self, sub_agents: SubAgents) -> SubAgents {
        self.engines
            .into_iter()
            .fold(sub_agents, |sub_agents, (name, engine)| {
                sub_agents.engine(name, engine)
            })
    }
}
