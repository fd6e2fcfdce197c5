//! Claude Code's scopes: the project entry of `~/.claude.json` (local
//! scope), `.mcp.json` files from the project up (project scope) with the
//! user's approvals, and the managed file that replaces everything.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::{Collected, ConfigSource, Discovery};

/// `path` made absolute (against the current directory) with `.`, `..`
/// (lexically) and trailing separators removed, as Claude Code writes its
/// project keys. Symlinks are not resolved, as there.
pub(super) fn normalize(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The repository root Claude Code keys a project by: the nearest
/// directory holding `.git`; for a linked worktree, the main repository's.
fn git_root(project: &Path) -> Option<PathBuf> {
    let dir = project.ancestors().find(|d| d.join(".git").exists())?;
    let dot_git = dir.join(".git");
    if dot_git.is_file()
        && let Ok(text) = std::fs::read_to_string(&dot_git)
        && let Some(gitdir) = text.trim().strip_prefix("gitdir:")
    {
        let gitdir = Path::new(gitdir.trim());
        // `<main>/.git/worktrees/<name>` belongs to `<main>`, but only when
        // that worktree record points back at this `.git` file, as git
        // checks: an unpacked archive cannot claim a trusted repository.
        let points_back = std::fs::read_to_string(gitdir.join("gitdir"))
            .is_ok_and(|back| normalize(Path::new(back.trim())) == normalize(&dot_git));
        if points_back
            && let Some(worktrees) = gitdir.parent()
            && worktrees.file_name().is_some_and(|n| n == "worktrees")
            && let Some(main_git) = worktrees.parent()
            && let Some(main) = main_git.parent()
        {
            return Some(normalize(main));
        }
    }
    Some(dir.to_path_buf())
}

/// The project's entry in `~/.claude.json`: under the repository root when
/// the project is inside one (Claude Code's key), else under the project
/// directory itself; keys compare after normalisation (a trailing slash
/// does not matter).
pub(super) fn project_entry<'j>(
    claude_json: &'j Value,
    project: &Path,
) -> Option<(&'j Value, PathBuf)> {
    let projects = claude_json.get("projects")?.as_object()?;
    let mut candidates = Vec::new();
    if let Some(root) = git_root(project) {
        candidates.push(root);
    }
    candidates.push(project.to_path_buf());
    candidates.into_iter().find_map(|candidate| {
        projects
            .iter()
            .find(|(key, _)| normalize(Path::new(key)) == candidate)
            .map(|(_, entry)| (entry, candidate))
    })
}

/// Names in a JSON array of strings.
fn names(json: &Value, key: &str) -> Vec<String> {
    json.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// What the user approved of the project's `.mcp.json` servers.
#[derive(Default)]
pub(super) struct Approval {
    all: Option<bool>,
    enabled: Vec<String>,
    disabled: Vec<String>,
}

impl Approval {
    /// Rejected in any list: off. Otherwise on when approved by name, by
    /// `enableAllProjectMcpServers`, or when the host trusts the project.
    pub(super) fn allows(&self, name: &str, trust: bool) -> bool {
        !self.disabled.iter().any(|n| n == name)
            && (trust || self.all == Some(true) || self.enabled.iter().any(|n| n == name))
    }

    /// Adds one settings source; sources come from lowest to highest
    /// precedence, so a later explicit `enableAllProjectMcpServers` wins.
    fn add(&mut self, json: &Value) {
        if let Some(all) = json
            .get("enableAllProjectMcpServers")
            .and_then(Value::as_bool)
        {
            self.all = Some(all);
        }
        self.enabled.extend(names(json, "enabledMcpjsonServers"));
        self.disabled.extend(names(json, "disabledMcpjsonServers"));
    }
}

impl Discovery {
    /// Where Claude Code's managed (enterprise) server list lives on this OS.
    pub(super) fn managed_file(&self) -> PathBuf {
        if let Some(path) = &self.managed {
            return path.clone();
        }
        if cfg!(target_os = "macos") {
            PathBuf::from("/Library/Application Support/ClaudeCode/managed-mcp.json")
        } else if cfg!(windows) {
            PathBuf::from(r"C:\Program Files\ClaudeCode\managed-mcp.json")
        } else {
            PathBuf::from("/etc/claude-code/managed-mcp.json")
        }
    }

    /// The `.mcp.json` files from the farthest ancestor of the project down
    /// to the project (the filesystem root itself is not searched), so the
    /// nearest file wins a name, as in Claude Code.
    pub(super) fn project_mcp_json(&self, project: &Path, found: &mut Collected) {
        let dirs: Vec<&Path> = project
            .ancestors()
            .filter(|d| d.parent().is_some())
            .collect();
        let mut any = false;
        for dir in dirs.into_iter().rev() {
            let file = dir.join(".mcp.json");
            if let Some(json) = found.read_json(&file) {
                let source = ConfigSource::ProjectMcpJson(file.clone());
                self.servers_from_json(&json, "mcpServers", &source, &file, None, found);
                any = true;
            }
        }
        if any {
            let approval = self.project_approval(project, found);
            found.retain_enabled(|server| {
                !matches!(server.source, ConfigSource::ProjectMcpJson(_))
                    || approval.allows(&server.name, self.trust_project)
            });
        }
    }

    /// The approvals in effect, from lowest to highest precedence: the
    /// project entry of `~/.claude.json` (older Claude Code versions kept
    /// them there), `~/.claude/settings.json`, and, only for a project the
    /// user trusted in Claude Code (`hasTrustDialogAccepted`) or the host
    /// trusts, the project's `.claude/settings.json` and
    /// `.claude/settings.local.json`. A repository cannot approve its own
    /// servers.
    fn project_approval(&self, project: &Path, found: &mut Collected) -> Approval {
        let mut approval = Approval::default();
        let mut trusted = self.trust_project;
        if let Some(home) = self.home_dir()
            && let Some(json) = found.read_json(&home.join(".claude.json"))
            && let Some((entry, _)) = project_entry(&json, project)
        {
            approval.add(entry);
            trusted |= entry.get("hasTrustDialogAccepted").and_then(Value::as_bool) == Some(true);
        }
        if let Some(home) = self.home_dir()
            && let Some(json) = found.read_json(&home.join(".claude/settings.json"))
        {
            approval.add(&json);
        }
        if trusted {
            for name in ["settings.json", "settings.local.json"] {
                if let Some(json) = found.read_json(&project.join(".claude").join(name)) {
                    approval.add(&json);
                }
            }
        }
        approval
    }

    /// The local scope: the project entry's servers, and its
    /// `disabledMcpServers` (the `/mcp` toggle), which turns off servers of
    /// every other scope but `.mcp.json` (those have their own lists).
    pub(super) fn local_scope(&self, claude: &Path, project: &Path, found: &mut Collected) {
        let Some(json) = found.read_json(claude) else {
            return;
        };
        let Some((entry, key)) = project_entry(&json, project) else {
            return;
        };
        let source = ConfigSource::ClaudeCodeLocal {
            file: claude.to_path_buf(),
            project: key,
        };
        self.servers_from_json(entry, "mcpServers", &source, claude, None, found);
        let off = names(entry, "disabledMcpServers");
        if !off.is_empty() {
            found.retain_enabled(|server| {
                matches!(server.source, ConfigSource::ProjectMcpJson(_))
                    || !off.iter().any(|n| n == &server.name)
            });
        }
    }
}
