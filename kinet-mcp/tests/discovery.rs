//! Discovery from fixture config files of every supported format.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use kinet_mcp::{ConfigSource, Discovery, ServerConfig, ServerTransport};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn env() -> BTreeMap<String, String> {
    [
        ("GH_TOKEN", "ghp_123"),
        ("API_BEARER", "tok-456"),
        ("HOME_LIKE", "/home/u"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn server<'a>(found: &'a kinet_mcp::Discovered, name: &str) -> &'a ServerConfig {
    found
        .servers
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no server {name}: {:?}", found.servers))
}

#[test]
fn every_source_is_read_and_later_sources_win() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let h = home.path();
    let desktop = if cfg!(target_os = "macos") {
        h.join("Library/Application Support/Claude/claude_desktop_config.json")
    } else {
        h.join(".config/Claude/claude_desktop_config.json")
    };
    write(
        &desktop,
        r#"{"mcpServers": {
            "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"]},
            "shared": {"command": "from-desktop"}
        }}"#,
    );
    write(
        &h.join(".codex/config.toml"),
        r#"
[mcp_servers.docs]
command = "docs-server"
args = ["--stdio"]
env = { LOG = "debug" }
cwd = "/srv/docs"
startup_timeout_sec = 20
tool_timeout_sec = 45.5
enabled_tools = ["search", "fetch"]
disabled_tools = ["fetch"]

[mcp_servers.remote]
url = "https://mcp.example.invalid/mcp"
bearer_token_env_var = "API_BEARER"
http_headers = { "X-Team" = "kinet" }

[mcp_servers.off]
command = "never"
enabled = false

[mcp_servers.shared]
command = "from-codex"
"#,
    );
    let project_key = project.path().display().to_string();
    write(
        &h.join(".claude.json"),
        &format!(
            r#"{{
                "numStartups": 12,
                "mcpServers": {{
                    "github": {{"type": "stdio", "command": "gh-mcp", "env": {{"TOKEN": "${{GH_TOKEN}}"}}}},
                    "shared": {{"command": "from-claude-user"}}
                }},
                "projects": {{
                    "{project_key}": {{"enabledMcpjsonServers": ["shared"], "mcpServers": {{"local-db": {{"type": "http", "url": "http://127.0.0.1:7777/mcp", "headers": {{"Authorization": "Bearer ${{MISSING:-none}}"}}}}}}}},
                    "/some/other/project": {{"mcpServers": {{"elsewhere": {{"command": "x"}}}}}}
                }}
            }}"#
        ),
    );
    let plugin_root = h.join(".claude/plugins/cache/acme/db-tools/1.0.0");
    write(
        &h.join(".claude/plugins/installed_plugins.json"),
        &format!(
            r#"{{"version": 2, "plugins": {{
                "db-tools@acme": [{{"scope": "user", "installPath": "{}", "version": "1.0.0"}}],
                "muted@acme": [{{"scope": "user", "installPath": "/nonexistent"}}]
            }}}}"#,
            plugin_root.display()
        ),
    );
    write(
        &h.join(".claude/settings.json"),
        r#"{"enabledPlugins": {"muted@acme": false}}"#,
    );
    write(
        &plugin_root.join(".mcp.json"),
        r#"{"database-tools": {"command": "${CLAUDE_PLUGIN_ROOT}/servers/db", "args": ["--config", "${CLAUDE_PLUGIN_ROOT}/config.json"]}}"#,
    );
    write(
        &plugin_root.join(".claude-plugin/plugin.json"),
        r#"{"name": "db-tools", "mcpServers": {"plugin-api": {"command": "${CLAUDE_PLUGIN_ROOT}/api", "args": ["--port", "8080"]}}}"#,
    );
    write(
        &project.path().join(".mcp.json"),
        r#"{"mcpServers": {"shared": {"command": "from-project", "args": ["${HOME_LIKE}/x"]}}}"#,
    );

    let found = Discovery::new()
        .home(h)
        .project(project.path())
        .env(env())
        .server(ServerConfig::stdio("from-code", "my-server", vec![]))
        .discover();
    assert!(found.problems.is_empty(), "{:?}", found.problems);
    let names: Vec<&str> = found.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "docs",
            "everything",
            "from-code",
            "github",
            "local-db",
            "off",
            "plugin_db-tools_database-tools",
            "plugin_db-tools_plugin-api",
            "remote",
            "shared"
        ]
    );

    assert!(matches!(
        server(&found, "everything").source,
        ConfigSource::ClaudeDesktop(_)
    ));
    let docs = server(&found, "docs");
    assert_eq!(
        docs.transport,
        ServerTransport::Stdio {
            command: "docs-server".into(),
            args: vec!["--stdio".into()],
            env: [("LOG".to_owned(), "debug".to_owned())].into(),
            cwd: Some("/srv/docs".into()),
        }
    );
    assert_eq!(docs.startup_timeout, Some(Duration::from_secs(20)));
    assert_eq!(docs.tool_timeout, Some(Duration::from_secs_f64(45.5)));
    assert!(docs.exposes("search") && !docs.exposes("fetch") && !docs.exposes("other"));
    assert_eq!(
        server(&found, "remote").transport,
        ServerTransport::Http {
            url: "https://mcp.example.invalid/mcp".into(),
            headers: [("X-Team".to_owned(), "kinet".to_owned())].into(),
            bearer_token: Some("tok-456".into()),
        }
    );
    assert!(!server(&found, "off").enabled);
    match &server(&found, "github").transport {
        ServerTransport::Stdio { env, .. } => assert_eq!(env["TOKEN"], "ghp_123"),
        other => panic!("{other:?}"),
    }
    let local = server(&found, "local-db");
    assert!(
        matches!(&local.source, ConfigSource::ClaudeCodeLocal { project: p, .. } if p == project.path())
    );
    match &local.transport {
        ServerTransport::Http { headers, .. } => {
            assert_eq!(headers["Authorization"], "Bearer none")
        }
        other => panic!("{other:?}"),
    }
    match &server(&found, "plugin_db-tools_database-tools").transport {
        ServerTransport::Stdio { command, args, .. } => {
            assert_eq!(command, &format!("{}/servers/db", plugin_root.display()));
            assert_eq!(args[1], format!("{}/config.json", plugin_root.display()));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(&server(&found, "plugin_db-tools_plugin-api").source, ConfigSource::ClaudePlugin { plugin, .. } if plugin == "db-tools@acme")
    );
    let shared = server(&found, "shared");
    assert!(matches!(shared.source, ConfigSource::ProjectMcpJson(_)));
    assert!(shared.enabled, "approved in ~/.claude.json");
    match &shared.transport {
        ServerTransport::Stdio { command, args, .. } => {
            assert_eq!(command, "from-project");
            assert_eq!(args, &["/home/u/x"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        server(&found, "from-code").source,
        ConfigSource::Code
    ));
    assert!(!names.contains(&"elsewhere"));
}

#[test]
fn malformed_sources_are_reported_and_the_rest_still_load() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let h = home.path();
    write(&h.join(".claude.json"), "{ this is not json");
    write(
        &h.join(".codex/config.toml"),
        "[mcp_servers.a]\ncommand = 3\n\n[mcp_servers.b]\ncommand = \"ok\"\n",
    );
    write(
        &project.path().join(".mcp.json"),
        r#"{"mcpServers": {"no-command": {"args": []}, "bad-args": {"command": "x", "args": "oops"}, "legacy": {"type": "sse", "url": "http://x/sse"}, "fine": {"command": "fine"}}}"#,
    );
    let found = Discovery::new()
        .home(h)
        .project(project.path())
        .env(BTreeMap::new())
        .discover();
    let names: Vec<&str> = found.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["b", "fine", "legacy"]);
    let messages: Vec<String> = found
        .problems
        .iter()
        .map(|p| {
            format!(
                "{}: {}",
                p.file.file_name().unwrap().to_string_lossy(),
                p.message
            )
        })
        .collect();
    assert_eq!(messages.len(), 4, "{messages:#?}");
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with(".claude.json: invalid JSON"))
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("config.toml: server `a`: `command` must be a string"))
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("server `no-command`: neither `command` nor `url`"))
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("server `bad-args`: `args` must be an array"))
    );

    // An empty home: nothing, no problems.
    let empty = tempfile::tempdir().unwrap();
    let found = Discovery::new()
        .home(empty.path())
        .project(empty.path())
        .discover();
    assert!(found.servers.is_empty() && found.problems.is_empty());
}

#[test]
fn project_servers_need_the_users_approval() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    write(
        &project.path().join(".mcp.json"),
        r#"{"mcpServers": {"one": {"command": "a"}, "two": {"command": "b"}, "three": {"command": "c"}}}"#,
    );
    let enabled = |found: &kinet_mcp::Discovered| -> Vec<String> {
        found
            .servers
            .iter()
            .filter(|s| s.enabled)
            .map(|s| s.name.clone())
            .collect()
    };
    let discovery = Discovery::new()
        .home(home.path())
        .project(project.path())
        .env(BTreeMap::new());
    let found = discovery.clone().discover();
    assert_eq!(found.servers.len(), 3);
    assert!(enabled(&found).is_empty(), "nothing runs unapproved");
    write(
        &project.path().join(".claude/settings.local.json"),
        r#"{"enabledMcpjsonServers": ["one", "two"], "disabledMcpjsonServers": ["two"]}"#,
    );
    assert!(
        enabled(&discovery.clone().discover()).is_empty(),
        "a project the user never trusted cannot approve its own servers"
    );
    write(
        &home.path().join(".claude.json"),
        &format!(
            r#"{{"projects": {{"{}": {{"hasTrustDialogAccepted": true}}}}}}"#,
            project.path().display()
        ),
    );
    assert_eq!(enabled(&discovery.clone().discover()), ["one"]);
    write(
        &project.path().join(".claude/settings.json"),
        r#"{"enableAllProjectMcpServers": true}"#,
    );
    assert_eq!(enabled(&discovery.clone().discover()), ["one", "three"]);
    assert_eq!(
        enabled(&discovery.trust_project_servers(true).discover()),
        ["one", "three"],
        "an explicit disable still wins"
    );
}

fn enabled_names(found: &kinet_mcp::Discovered) -> Vec<String> {
    found
        .servers
        .iter()
        .filter(|s| s.enabled)
        .map(|s| s.name.clone())
        .collect()
}

fn command_of(server: &ServerConfig) -> String {
    match &server.transport {
        ServerTransport::Stdio { command, .. } => command.clone(),
        other => panic!("{other:?}"),
    }
}

/// What `claude mcp list` showed for the same files: local > project >
/// user, unset variables kept and named, `disabledMcpServers`,
/// `enabledMcpjsonServers` in the user's settings, a trailing slash, a
/// parent directory's `.mcp.json`, and SSE servers.
#[test]
fn discovery_resolves_like_claude_code() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let root = tempfile::tempdir().unwrap();
    // A repository with the project in a subdirectory; `.mcp.json` at the
    // repository root and another in the project.
    let repo = root.path().join("repo");
    let project = repo.join("packages/app");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    write(
        &repo.join(".mcp.json"),
        r#"{"mcpServers": {
            "same": {"command": "from-project"},
            "parent-only": {"command": "parent"},
            "near": {"command": "far-copy"},
            "legacy": {"type": "sse", "url": "https://legacy.example.invalid/sse", "headers": {"X-Key": "${LEGACY_KEY:-anon}"}},
            "untyped-url": {"url": "https://x.example.invalid/mcp"}
        }}"#,
    );
    write(
        &project.join(".mcp.json"),
        r#"{"mcpServers": {"near": {"command": "near-copy"}}}"#,
    );
    // The local scope is keyed by the repository root, written with a
    // trailing slash.
    write(
        &h.join(".claude.json"),
        &format!(
            r#"{{
                "mcpServers": {{
                    "same": {{"command": "from-user"}},
                    "user-only": {{"command": "u", "env": {{"AUTH": "Bearer ${{API_TOKEN}}"}}}},
                    "toggled-off": {{"command": "t"}}
                }},
                "projects": {{"{}/": {{
                    "mcpServers": {{"same": {{"command": "from-local"}}}},
                    "disabledMcpServers": ["toggled-off"]
                }}}}
            }}"#,
            repo.display()
        ),
    );
    write(
        &h.join(".claude/settings.json"),
        r#"{"enabledMcpjsonServers": ["parent-only", "near", "legacy"]}"#,
    );
    let found = Discovery::new()
        .home(h)
        .project(&project)
        .env(BTreeMap::new())
        .discover();

    let same = server(&found, "same");
    assert_eq!(command_of(same), "from-local", "local > project > user");
    assert!(matches!(&same.source, ConfigSource::ClaudeCodeLocal { project: p, .. } if p == &repo));
    // Without the local entry, project beats user.
    let found_no_local = Discovery::new()
        .home(h)
        .project(root.path().join("elsewhere"))
        .env(BTreeMap::new())
        .server(ServerConfig::stdio("unrelated", "x", vec![]))
        .discover();
    assert_eq!(command_of(server(&found_no_local, "same")), "from-user");

    match &server(&found, "user-only").transport {
        ServerTransport::Stdio { env, .. } => assert_eq!(env["AUTH"], "Bearer ${API_TOKEN}"),
        other => panic!("{other:?}"),
    }
    assert!(
        found.problems.iter().any(|p| p
            .message
            .contains("server `user-only`: missing environment variables: API_TOKEN")),
        "{:?}",
        found.problems
    );
    assert!(!server(&found, "toggled-off").enabled, "disabledMcpServers");
    assert_eq!(command_of(server(&found, "parent-only")), "parent");
    assert_eq!(
        command_of(server(&found, "near")),
        "near-copy",
        "the nearest .mcp.json wins"
    );
    assert!(
        matches!(&server(&found, "near").source, ConfigSource::ProjectMcpJson(f) if f == &project.join(".mcp.json"))
    );
    assert_eq!(
        server(&found, "legacy").transport,
        ServerTransport::Sse {
            url: "https://legacy.example.invalid/sse".into(),
            headers: [("X-Key".to_owned(), "anon".to_owned())].into(),
        }
    );
    assert!(
        found.problems.iter().any(|p| p
            .message
            .contains("server `untyped-url`: has a `url` but no `type`")),
        "{:?}",
        found.problems
    );
    assert_eq!(
        enabled_names(&found),
        ["legacy", "near", "parent-only", "same", "user-only"],
        "approved in ~/.claude/settings.json"
    );
}

#[test]
fn cursor_and_vscode_files_are_read_and_project_ones_wait_for_trust() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let h = home.path();
    let p = project.path();
    write(
        &h.join(".cursor/mcp.json"),
        r#"{"mcpServers": {
            "cursor-remote": {"url": "https://c.example.invalid/sse", "headers": {"Authorization": "Bearer ${env:CURSOR_TOKEN}"}},
            "cursor-http": {"url": "https://c.example.invalid/mcp"}
        }}"#,
    );
    write(
        &h.join(".config/Code/User/mcp.json"),
        r#"{"servers": {"vs-user": {"type": "stdio", "command": "${userHome}/bin/srv"}}, "inputs": []}"#,
    );
    write(&p.join(".env.mcp"), "TOKEN=from-file\nOTHER=1\n");
    write(
        &p.join(".vscode/mcp.json"),
        r#"{"servers": {"vs-project": {"command": "node", "args": ["${workspaceFolder}/server.js"], "envFile": "${workspaceFolder}/.env.mcp", "env": {"OTHER": "2", "KEY": "${input:api-key}"}}}}"#,
    );
    write(
        &p.join(".cursor/mcp.json"),
        r#"{"mcpServers": {"cursor-project": {"command": "./run.sh"}}}"#,
    );
    let discovery = Discovery::new()
        .home(h)
        .project(p)
        .env([("CURSOR_TOKEN".to_owned(), "ct".to_owned())].into());
    let found = discovery.clone().discover();
    assert_eq!(
        server(&found, "cursor-remote").transport,
        ServerTransport::Sse {
            url: "https://c.example.invalid/sse".into(),
            headers: [("Authorization".to_owned(), "Bearer ct".to_owned())].into(),
        }
    );
    assert!(matches!(
        server(&found, "cursor-http").transport,
        ServerTransport::Http { .. }
    ));
    assert!(
        matches!(&server(&found, "cursor-http").source, ConfigSource::Cursor(f) if f.ends_with(".cursor/mcp.json"))
    );
    assert_eq!(
        command_of(server(&found, "vs-user")),
        format!("{}/bin/srv", h.display())
    );
    let vs = server(&found, "vs-project");
    match &vs.transport {
        ServerTransport::Stdio { args, env, .. } => {
            assert_eq!(args[0], format!("{}/server.js", p.display()));
            assert!(
                !env.contains_key("TOKEN"),
                "an untrusted project's envFile is not read"
            );
            assert_eq!(env["OTHER"], "2");
            assert_eq!(env["KEY"], "${input:api-key}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        found
            .problems
            .iter()
            .any(|pr| pr.message.contains("envFile") && pr.message.contains("not read"))
    );
    assert!(
        found
            .problems
            .iter()
            .any(|pr| pr.message.contains("input:api-key"))
    );
    assert!(
        !vs.enabled && !server(&found, "cursor-project").enabled,
        "repository files wait for trust"
    );
    assert!(server(&found, "vs-user").enabled && server(&found, "cursor-remote").enabled);
    let trusted = discovery.trust_project_servers(true).discover();
    assert!(server(&trusted, "vs-project").enabled && server(&trusted, "cursor-project").enabled);
    match &server(&trusted, "vs-project").transport {
        ServerTransport::Stdio { env, .. } => {
            assert_eq!(env["TOKEN"], "from-file");
            assert_eq!(env["OTHER"], "2", "env overrides envFile");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_managed_file_replaces_every_other_source() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    write(
        &home.path().join(".claude.json"),
        r#"{"mcpServers": {"user-server": {"command": "u"}}}"#,
    );
    let managed = home.path().join("managed-mcp.json");
    write(
        &managed,
        r#"{"mcpServers": {"company": {"type": "http", "url": "https://mcp.corp.invalid/mcp"}}}"#,
    );
    let found = Discovery::new()
        .home(home.path())
        .project(project.path())
        .managed_config(&managed)
        .server(ServerConfig::stdio("host", "h", vec![]))
        .discover();
    let names: Vec<&str> = found.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["company", "host"]);
    assert!(matches!(&found.servers[0].source, ConfigSource::ClaudeManaged(f) if f == &managed));
}

/// A plugin server that reaches the same endpoint as the user's own entry
/// is dropped (Claude Code matches plugins by endpoint), whatever its name.
#[test]
fn a_plugin_server_duplicating_an_own_server_is_dropped() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let h = home.path();
    let root = h.join(".claude/plugins/cache/acme/db/1.0.0");
    write(
        &h.join(".claude/plugins/installed_plugins.json"),
        &format!(
            r#"{{"version": 2, "plugins": {{"db@acme": [{{"scope": "user", "installPath": "{}"}}]}}}}"#,
            root.display()
        ),
    );
    write(
        &root.join(".mcp.json"),
        r#"{"db-from-plugin": {"command": "db-server", "args": ["--stdio"]}, "extra": {"command": "other"},
            "my-db": {"command": "the-plugins-own-db"}}"#,
    );
    write(
        &h.join(".claude.json"),
        r#"{"mcpServers": {"my-db": {"command": "db-server", "args": ["--stdio"]}}}"#,
    );
    let found = Discovery::new()
        .home(h)
        .project(project.path())
        .env(BTreeMap::new())
        .discover();
    let names: Vec<&str> = found.servers.iter().map(|s| s.name.as_str()).collect();
    // Plugin servers are namespaced as Claude Code names them, so one
    // named like the user's own server (another endpoint) is kept beside it.
    assert_eq!(names, ["my-db", "plugin_db_extra", "plugin_db_my-db"]);
}

/// An unpacked archive whose `.git` file claims to be a worktree of a
/// repository the user trusted cannot borrow that trust: git's own check
/// (the worktree record points back) fails, so its settings approve
/// nothing.
#[test]
fn a_fake_worktree_cannot_borrow_a_trusted_repositorys_approval() {
    let home = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let trusted = root.path().join("trusted");
    std::fs::create_dir_all(trusted.join(".git/worktrees/x")).unwrap();
    let fake = root.path().join("unpacked");
    write(
        &fake.join(".git"),
        &format!("gitdir: {}\n", trusted.join(".git/worktrees/x").display()),
    );
    write(
        &fake.join(".claude/settings.json"),
        r#"{"enableAllProjectMcpServers": true}"#,
    );
    write(
        &fake.join(".mcp.json"),
        r#"{"mcpServers": {"evil": {"command": "curl"}}}"#,
    );
    write(
        &home.path().join(".claude.json"),
        &format!(
            r#"{{"projects": {{"{}": {{"hasTrustDialogAccepted": true}}}}}}"#,
            trusted.display()
        ),
    );
    let found = Discovery::new()
        .home(home.path())
        .project(&fake)
        .env(BTreeMap::new())
        .discover();
    assert!(!server(&found, "evil").enabled, "{:?}", found.servers);
    // A real worktree record (pointing back) is honoured.
    write(
        &trusted.join(".git/worktrees/x/gitdir"),
        &format!("{}\n", fake.join(".git").display()),
    );
    let found = Discovery::new()
        .home(home.path())
        .project(&fake)
        .env(BTreeMap::new())
        .discover();
    assert!(server(&found, "evil").enabled);
}

/// Claude Code's managed server policy: denylists win, allowlists match
/// stdio servers by exact command once any command entry exists (a name
/// alone is then no pass) and remote ones by URL pattern; the user's
/// allowlist broadens the managed one unless the managed settings say
/// `allowManagedMcpServersOnly`.
#[test]
fn managed_allow_and_deny_lists_block_servers_as_claude_code_does() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let h = home.path();
    write(
        &h.join(".claude.json"),
        r#"{"mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem"]},
            "fs-extra": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/"]},
            "github": {"command": "github-mcp"},
            "corp": {"type": "http", "url": "https://mcp.corp.example/v1"},
            "elsewhere": {"type": "http", "url": "https://mcp.other.example/v1"},
            "sentry": {"type": "sse", "url": "https://sentry.corp.example/sse"},
            "bad": {"command": "bad-server"}
        }}"#,
    );
    let managed_dir = h.join("etc");
    let managed = managed_dir.join("managed-mcp.json");
    let settings = managed_dir.join("managed-settings.json");
    write(
        &settings,
        r#"{
            "allowedMcpServers": [
                {"serverName": "github"},
                {"serverCommand": ["npx", "-y", "@modelcontextprotocol/server-filesystem"]},
                {"serverUrl": "https://*.corp.example/*"},
                {"serverName": "bad"}
            ],
            "deniedMcpServers": [{"serverCommand": ["bad-server"]}, {"serverName": "sentry", "serverUrl": "x"}]
        }"#,
    );
    let discover = || {
        Discovery::new()
            .home(h)
            .project(project.path())
            .managed_config(&managed)
            .server(ServerConfig::stdio("host", "anything", vec![]))
            .discover()
    };
    let found = discover();
    let names: Vec<&str> = found.servers.iter().map(|s| s.name.as_str()).collect();
    // fs: exact command; corp and sentry: URL pattern; host: added in code.
    // github: a name alone no longer passes for stdio once command entries
    // exist; fs-extra: one more argument; elsewhere: another host; bad:
    // denied by command although its name is allowed.
    assert_eq!(
        names,
        ["corp", "fs", "host", "sentry"],
        "{:?}",
        found.problems
    );
    let problems: Vec<&str> = found.problems.iter().map(|p| p.message.as_str()).collect();
    for (name, why) in [
        ("github", "match no serverCommand entry"),
        ("fs-extra", "match no serverCommand entry"),
        ("elsewhere", "its URL matches no serverUrl entry"),
        ("bad", "deniedMcpServers lists it"),
    ] {
        assert!(
            problems
                .iter()
                .any(|p| p.contains(&format!("server `{name}` is blocked")) && p.contains(why)),
            "{name}: {problems:?}"
        );
    }
    assert!(
        problems
            .iter()
            .any(|p| p.contains("1 server policy entries skipped")),
        "an entry naming two keys is reported: {problems:?}"
    );
    assert!(found.problems.iter().all(|p| p.file == settings));

    // The user's allowlist broadens the managed one...
    write(
        &h.join(".claude/settings.json"),
        r#"{"allowedMcpServers": [{"serverUrl": "https://mcp.other.example/*"}],
            "deniedMcpServers": [{"serverName": "corp"}]}"#,
    );
    let names: Vec<String> = discover().servers.into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["elsewhere", "fs", "host", "sentry"]);
    // ...unless the managed settings allow only their own list; the user's
    // denylist still applies.
    write(
        &settings,
        r#"{"allowManagedMcpServersOnly": true, "allowedMcpServers": [{"serverUrl": "https://*.corp.example/*"}]}"#,
    );
    let names: Vec<String> = discover().servers.into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["host", "sentry"]);
    // An empty allowlist blocks every discovered server.
    write(&settings, r#"{"allowedMcpServers": []}"#);
    std::fs::remove_file(h.join(".claude/settings.json")).unwrap();
    let names: Vec<String> = discover().servers.into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["host"]);
}

/// `headersHelper` is read for remote servers (it runs at connection time,
/// never during discovery) and reported where it cannot apply.
#[test]
fn headers_helpers_are_read_for_remote_servers_and_never_run_by_discovery() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let marker = home.path().join("ran");
    write(
        &home.path().join(".claude.json"),
        &format!(
            r#"{{"mcpServers": {{
                "remote": {{"type": "http", "url": "https://mcp.example/mcp", "headersHelper": "touch '{}'"}},
                "local": {{"command": "x", "headersHelper": "echo {{}}"}},
                "odd": {{"type": "sse", "url": "https://mcp.example/sse", "headersHelper": 7}}
            }}}}"#,
            marker.display()
        ),
    );
    let found = Discovery::new()
        .home(home.path())
        .project(project.path())
        .managed_config(home.path().join("none.json"))
        .discover();
    let server = |name: &str| found.servers.iter().find(|s| s.name == name).unwrap();
    assert_eq!(
        server("remote").headers_helper.as_deref(),
        Some(format!("touch '{}'", marker.display()).as_str())
    );
    assert_eq!(server("local").headers_helper, None);
    assert_eq!(server("odd").headers_helper, None);
    let problems: Vec<&str> = found.problems.iter().map(|p| p.message.as_str()).collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("server `local`: `headersHelper` applies to remote servers only")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("server `odd`: `headersHelper` must be a string")),
        "{problems:?}"
    );
    assert!(!marker.exists(), "discovery ran a helper");
}

/// Claude Code's per-server `oauth` object is read for remote servers;
/// what is malformed or does not apply is reported and left out.
#[test]
fn oauth_entries_are_read_and_their_mistakes_reported() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    write(
        &home.path().join(".claude.json"),
        r#"{"mcpServers": {
            "remote": {"type": "http", "url": "https://mcp.example/mcp",
                       "oauth": {"clientId": "app-1", "callbackPort": 8765,
                                 "authServerMetadataUrl": "https://auth.example/.well-known/oauth-authorization-server",
                                 "scopes": "read write"}},
            "sloppy": {"type": "sse", "url": "https://mcp.example/sse",
                       "oauth": {"clientId": "", "callbackPort": 70000,
                                 "authServerMetadataUrl": "http://auth.example/m",
                                 "clientSecret": "s3cret", "colour": "blue"}},
            "local": {"command": "x", "oauth": {"clientId": "a"}}
        }}"#,
    );
    let found = Discovery::new()
        .home(home.path())
        .project(project.path())
        .managed_config(home.path().join("none.json"))
        .discover();
    let remote = server(&found, "remote").oauth.clone().unwrap();
    assert_eq!(remote.client_id.as_deref(), Some("app-1"));
    assert_eq!(remote.callback_port, Some(8765));
    assert_eq!(
        remote.auth_server_metadata_url.as_deref(),
        Some("https://auth.example/.well-known/oauth-authorization-server")
    );
    assert_eq!(remote.scopes.as_deref(), Some("read write"));
    let sloppy = server(&found, "sloppy").oauth.clone().unwrap();
    assert_eq!(sloppy, kinet_mcp::oauth::OAuthClientConfig::default());
    assert_eq!(server(&found, "local").oauth, None);
    let problems: Vec<&str> = found.problems.iter().map(|p| p.message.as_str()).collect();
    for expected in [
        "server `sloppy`: `oauth.clientId` must be a non-empty string",
        "server `sloppy`: `oauth.callbackPort` must be a port number",
        "server `sloppy`: `oauth.authServerMetadataUrl` must be an https:// URL",
        "server `sloppy`: `oauth.clientSecret` is not read from configuration files",
        "server `sloppy`: `oauth.colour` is not a known setting",
        "server `local`: `oauth` applies to remote servers only",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{expected}: {problems:?}"
        );
    }
    // The secret is never kept from the file.
    assert!(!format!("{:?}", found.servers).contains("s3cret"));
}
