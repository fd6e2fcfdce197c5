//! Installed Claude Code plugins.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Collected, ConfigSource, Discovery};

impl Discovery {
    /// Installed Claude Code plugins: `~/.claude/plugins/installed_plugins.json`
    /// lists them with their install paths; each may declare servers in
    /// `.mcp.json` at its root or in `.claude-plugin/plugin.json`
    /// (`mcpServers`, inline or as a path). Plugins disabled in
    /// `~/.claude/settings.json` (`enabledPlugins`) are skipped.
    pub(super) fn plugins(&self, home: &Path, found: &mut Collected) {
        let list = home.join(".claude/plugins/installed_plugins.json");
        let Some(json) = found.read_json(&list) else {
            return;
        };
        let settings = found.read_json(&home.join(".claude/settings.json"));
        let disabled = |plugin: &str| {
            settings
                .as_ref()
                .and_then(|s| s.get("enabledPlugins"))
                .and_then(|e| e.get(plugin))
                .and_then(Value::as_bool)
                == Some(false)
        };
        let Some(plugins) = json.get("plugins").and_then(Value::as_object) else {
            found.problem(&list, "`plugins` is missing or not an object".into());
            return;
        };
        for (plugin, installs) in plugins {
            if disabled(plugin) {
                continue;
            }
            let install = match installs {
                Value::Array(items) => items.last(),
                other => Some(other),
            };
            let Some(root) = install
                .and_then(|i| i.get("installPath"))
                .and_then(Value::as_str)
                .map(PathBuf::from)
            else {
                found.problem(&list, format!("plugin `{plugin}` has no installPath"));
                continue;
            };
            let mcp_json = root.join(".mcp.json");
            if let Some(json) = found.read_json(&mcp_json) {
                let source = ConfigSource::ClaudePlugin {
                    plugin: plugin.clone(),
                    file: mcp_json.clone(),
                };
                if json.get("mcpServers").is_some() {
                    self.servers_from_json(
                        &json,
                        "mcpServers",
                        &source,
                        &mcp_json,
                        Some(&root),
                        found,
                    );
                } else {
                    let wrapped = serde_json::json!({ "mcpServers": json });
                    self.servers_from_json(
                        &wrapped,
                        "mcpServers",
                        &source,
                        &mcp_json,
                        Some(&root),
                        found,
                    );
                }
            }
            let manifest = root.join(".claude-plugin/plugin.json");
            if let Some(json) = found.read_json(&manifest) {
                match json.get("mcpServers") {
                    Some(Value::String(path)) => {
                        let syntax = super::expand::Syntax::Claude {
                            plugin_root: Some(&root),
                        };
                        let mut missing = std::collections::BTreeSet::new();
                        let file = root.join(self.expand(path, syntax, &mut missing));
                        if let Some(servers) = found.read_json(&file) {
                            let source = ConfigSource::ClaudePlugin {
                                plugin: plugin.clone(),
                                file: file.clone(),
                            };
                            let servers = if servers.get("mcpServers").is_some() {
                                servers
                            } else {
                                serde_json::json!({ "mcpServers": servers })
                            };
                            self.servers_from_json(
                                &servers,
                                "mcpServers",
                                &source,
                                &file,
                                Some(&root),
                                found,
                            );
                        }
                    }
                    Some(_) => {
                        let source = ConfigSource::ClaudePlugin {
                            plugin: plugin.clone(),
                            file: manifest.clone(),
                        };
                        self.servers_from_json(
                            &json,
                            "mcpServers",
                            &source,
                            &manifest,
                            Some(&root),
                            found,
                        );
                    }
                    None => {}
                }
            }
        }
    }
}
