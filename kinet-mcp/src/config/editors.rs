//! Cursor's and VS Code's MCP config files.

use std::path::{Path, PathBuf};

use super::entry::Format;
use super::{Collected, ConfigSource, Discovery};

impl Discovery {
    /// Where VS Code keeps the user's `mcp.json` (default profile).
    fn vscode_user_file(&self, home: &Path) -> PathBuf {
        let base = if cfg!(target_os = "macos") {
            home.join("Library/Application Support")
        } else if cfg!(windows) {
            self.var("APPDATA")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join("AppData/Roaming"))
        } else {
            self.var("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".config"))
        };
        base.join("Code/User/mcp.json")
    }

    /// The user-level files: VS Code's `mcp.json`, then `~/.cursor/mcp.json`.
    pub(super) fn editor_user_files(&self, home: &Path, found: &mut Collected) {
        let vscode = self.vscode_user_file(home);
        if let Some(json) = found.read_json(&vscode) {
            let source = ConfigSource::VsCode(vscode.clone());
            let format = Format::VsCode { workspace: None };
            self.servers_from(&json, "servers", &source, &vscode, format, found);
        }
        let cursor = home.join(".cursor/mcp.json");
        if let Some(json) = found.read_json(&cursor) {
            let source = ConfigSource::Cursor(cursor.clone());
            let format = Format::Cursor { workspace: None };
            self.servers_from(&json, "mcpServers", &source, &cursor, format, found);
        }
    }

    /// The project's `.vscode/mcp.json`, then `.cursor/mcp.json`. They come
    /// with the repository, so their servers are listed disabled unless the
    /// host trusts project servers (neither editor's own trust record is
    /// readable here).
    pub(super) fn editor_project_files(&self, project: &Path, found: &mut Collected) {
        let vscode = project.join(".vscode/mcp.json");
        let cursor = project.join(".cursor/mcp.json");
        let files = [
            (
                vscode.clone(),
                "servers",
                ConfigSource::VsCode(vscode),
                Format::VsCode {
                    workspace: Some(project),
                },
            ),
            (
                cursor.clone(),
                "mcpServers",
                ConfigSource::Cursor(cursor),
                Format::Cursor {
                    workspace: Some(project),
                },
            ),
        ];
        for (file, key, source, format) in files {
            if let Some(json) = found.read_json(&file) {
                self.servers_from(&json, key, &source, &file, format, found);
                if !self.trust_project {
                    found.disable_source(&source);
                }
            }
        }
    }
}
