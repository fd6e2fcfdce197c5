//! Claude Code's managed server policy: `allowedMcpServers` and
//! `deniedMcpServers` in `managed-settings.json` (beside the managed server
//! file) and in the user's `~/.claude/settings.json`.
//!
//! As Claude Code evaluates them:
//! - an entry names a server by exactly one of `serverName` (its configured
//!   name), `serverCommand` (a stdio server's command and arguments, matched
//!   exactly and in order) or `serverUrl` (a remote server's URL, `*`
//!   matching any run of characters, `/` included, so patterns should pin
//!   the host: `https://mcp.example.com/*`);
//! - a server any deny entry matches is blocked (the denylists of both
//!   files apply, and take precedence over any allowlist);
//! - with no allowlist anywhere nothing else is restricted; an empty one
//!   blocks everything. The user's allowlist broadens the managed one
//!   unless the managed settings say `allowManagedMcpServersOnly: true`;
//! - a stdio server must match a `serverCommand` entry when the allowlist
//!   has any, else a `serverName` entry; a remote server likewise with
//!   `serverUrl`.
//!
//! Blocked servers are removed (nothing can start them) and each is reported
//! in [`Discovered::problems`](super::Discovered::problems) with the file
//! whose list blocked it.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Collected, ServerConfig, ServerTransport};

/// One allow or deny entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Name(String),
    Command(Vec<String>),
    Url(String),
}

impl Entry {
    fn parse(value: &Value) -> Option<Self> {
        let object = value.as_object()?;
        let name = object.get("serverName").and_then(Value::as_str);
        let url = object.get("serverUrl").and_then(Value::as_str);
        let command = object
            .get("serverCommand")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect::<Option<Vec<String>>>()
            });
        match (name, command, url) {
            (Some(name), None, None) => Some(Self::Name(name.to_owned())),
            (None, Some(Some(command)), None) if !command.is_empty() => {
                Some(Self::Command(command))
            }
            (None, None, Some(url)) => Some(Self::Url(url.to_owned())),
            _ => None,
        }
    }

    fn matches(&self, server: &ServerConfig) -> bool {
        match (self, &server.transport) {
            (Self::Name(name), _) => *name == server.name,
            (Self::Command(entry), ServerTransport::Stdio { command, args, .. }) => {
                entry.len() == args.len() + 1
                    && entry[0] == *command
                    && entry[1..].iter().zip(args).all(|(a, b)| a == b)
            }
            (
                Self::Url(pattern),
                ServerTransport::Http { url, .. } | ServerTransport::Sse { url, .. },
            ) => wildcard(pattern, url),
            _ => false,
        }
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of
/// characters (including none) and everything else matches itself.
fn wildcard(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = match parts.split_first() {
        Some(split) => split,
        None => return text.is_empty(),
    };
    let Some(mut tail) = text.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return tail.is_empty();
    };
    for part in middle {
        match tail.find(part) {
            Some(at) => tail = &tail[at + part.len()..],
            None => return false,
        }
    }
    tail.len() >= last.len() && tail.ends_with(last)
}

/// The lists of one settings file.
#[derive(Debug, Default)]
struct Lists {
    file: PathBuf,
    allowed: Option<Vec<Entry>>,
    denied: Vec<Entry>,
    managed_only: bool,
}

impl Lists {
    fn read(file: &Path, found: &mut Collected) -> Option<Self> {
        let json = found.read_json(file)?;
        let mut skipped = 0;
        let mut entries = |key: &str| -> Option<Vec<Entry>> {
            let list = json.get(key)?.as_array()?;
            let parsed: Vec<Entry> = list.iter().filter_map(Entry::parse).collect();
            skipped += list.len() - parsed.len();
            Some(parsed)
        };
        let allowed = entries("allowedMcpServers");
        let denied = entries("deniedMcpServers").unwrap_or_default();
        if skipped > 0 {
            found.problem(
                file,
                format!(
                    "{skipped} server policy entries skipped: each needs exactly one of \
                     serverName, serverCommand (a non-empty list of strings) or serverUrl"
                ),
            );
        }
        Some(Self {
            file: file.to_path_buf(),
            allowed,
            denied,
            managed_only: json
                .get("allowManagedMcpServersOnly")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }
}

/// Removes the servers the managed and user settings block, reporting each.
pub(super) fn apply(managed: &Path, user: Option<&Path>, found: &mut Collected) {
    let managed = Lists::read(managed, found);
    let user = user.and_then(|file| Lists::read(file, found));
    if managed.is_none() && user.is_none() {
        return;
    }
    let managed_only = managed.as_ref().is_some_and(|m| m.managed_only);
    // The allowlist: the managed one, broadened by the user's unless the
    // managed settings forbid it; `None` when neither file has one.
    let mut allowed: Option<(Vec<Entry>, Vec<PathBuf>)> = None;
    for (lists, counts) in [(&managed, true), (&user, !managed_only)] {
        if let Some(lists) = lists
            && counts
            && let Some(entries) = &lists.allowed
        {
            let (all, files) = allowed.get_or_insert_with(Default::default);
            all.extend(entries.iter().cloned());
            files.push(lists.file.clone());
        }
    }
    let mut blocked = Vec::new();
    for server in found.servers.values() {
        let denied_by = [&managed, &user]
            .into_iter()
            .flatten()
            .find(|lists| lists.denied.iter().any(|e| e.matches(server)));
        if let Some(lists) = denied_by {
            blocked.push((
                server.name.clone(),
                lists.file.clone(),
                "deniedMcpServers lists it".to_owned(),
            ));
            continue;
        }
        let Some((entries, files)) = &allowed else {
            continue;
        };
        let stdio = matches!(server.transport, ServerTransport::Stdio { .. });
        let strict = entries.iter().any(|e| {
            matches!(
                (e, stdio),
                (Entry::Command(_), true) | (Entry::Url(_), false)
            )
        });
        let allowed = entries.iter().any(|e| match e {
            Entry::Name(_) if strict => false,
            _ => e.matches(server),
        });
        if !allowed {
            let how = match (strict, stdio) {
                (true, true) => "its command and arguments match no serverCommand entry",
                (true, false) => "its URL matches no serverUrl entry",
                (false, _) => "its name matches no serverName entry",
            };
            blocked.push((
                server.name.clone(),
                files.first().cloned().unwrap_or_default(),
                format!("allowedMcpServers does not allow it: {how}"),
            ));
        }
    }
    for (name, file, why) in blocked {
        found.servers.remove(&name);
        found.problem(
            &file,
            format!("server `{name}` is blocked by the managed MCP policy: {why}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::wildcard;

    #[test]
    fn wildcards_match_runs_of_characters() {
        assert!(wildcard(
            "https://*.example.com/*",
            "https://mcp.example.com/v1"
        ));
        assert!(wildcard(
            "https://mcp.example.com/mcp",
            "https://mcp.example.com/mcp"
        ));
        assert!(!wildcard(
            "https://mcp.example.com/mcp",
            "https://mcp.example.com/mcp2"
        ));
        assert!(!wildcard(
            "https://*.example.com/*",
            "https://example.org/x"
        ));
        // As in Claude Code, `*` also matches `/`: pin the host in patterns.
        assert!(wildcard(
            "https://*.example.com/*",
            "https://evil.com/.example.com/"
        ));
        assert!(wildcard("*", ""));
        assert!(wildcard("a*b*c", "abc"));
        assert!(!wildcard("a*bc*c", "abc"));
    }
}
