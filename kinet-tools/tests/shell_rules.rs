//! Shell rules that hold against a shell: each class of line that once got
//! past a rules file allowing only `ls`, `cat`, `echo`, `git status` and
//! `git diff`, run through a whole agent run (scripted model, the shell
//! tool unsandboxed, an asking policy with the rules file, a handler that
//! denies and records what it is asked). What ran decides: every attack
//! would leave a file behind if anything but the allowed program ran.
#![cfg(target_os = "linux")]
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kinet_core::builder::Workspace;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kinet_core::confirm::{ConfirmDecision, ConfirmError, ConfirmHandler, ConfirmRequest};
use kinet_core::rules::Rules;
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::{Agent, ApprovalPolicy};
use kinet_tools::shell::{ShellConfig, ShellTool};
use serde_json::json;

const RULES: &str = r#"
[[command]]
program = "ls"
decision = "allow"
[[command]]
program = "cat"
decision = "allow"
[[command]]
program = "echo"
decision = "allow"
[[command]]
program = "git"
args = ["status"]
decision = "allow"
[[command]]
program = "git"
args = ["diff"]
decision = "allow"
"#;

/// Records every request; approves when told to.
#[derive(Clone, Default)]
struct Recorder {
    asked: Arc<Mutex<Vec<String>>>,
    approve: bool,
}

#[async_trait::async_trait]
impl ConfirmHandler for Recorder {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        self.asked.lock().unwrap().push(request.summary.clone());
        Ok(if self.approve {
            ConfirmDecision::Allow
        } else {
            ConfirmDecision::Deny {
                reason: Some("not approved".into()),
            }
        })
    }
}

/// A git repository with a modified tracked file, planted programs that
/// leave `pwned-<name>` when they run (`./ls`, `bin/ls`, `evil.sh`), and a
/// file named like an option.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(&root)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &root)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["config", "user.email", "t@example.invalid"]);
    git(&["config", "user.name", "t"]);
    std::fs::write(root.join("README.md"), "hello\n").unwrap();
    git(&["add", "README.md"]);
    git(&["commit", "-qm", "one"]);
    std::fs::write(root.join("README.md"), "hello again\n").unwrap();
    std::fs::create_dir(root.join("bin")).unwrap();
    for (path, tag) in [("ls", "dot-ls"), ("bin/ls", "bin-ls"), ("evil.sh", "evil")] {
        let script = root.join(path);
        std::fs::write(
            &script,
            format!("#!/bin/sh\ntouch '{}/pwned-{tag}'\n", root.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(root.join("--output=pwned-glob"), "").unwrap();
    (dir, root)
}

struct Ran {
    asked: Vec<String>,
    result: String,
}

/// One agent run whose model calls `shell` with `line` once.
async fn run(root: &Path, line: &str, shell: ShellTool, approve: bool) -> Ran {
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("c", "shell", json!({ "command": line })),
        ScriptedTurn::text("done"),
    ]);
    let recorder = Recorder {
        approve,
        ..Recorder::default()
    };
    let agent = Agent::builder(provider)
        .tool(shell)
        .workspace(Workspace::new().cwd(root).root(root))
        .policy(ApprovalPolicy::ask().with_rules(Rules::from_toml(RULES).unwrap()))
        .confirm_handler(recorder.clone())
        .build();
    let outcome = agent.run("go").finish().await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let (result, _) = common::result_text(&outcome, "c");
    let asked = recorder.asked.lock().unwrap().clone();
    Ran { asked, result }
}

fn pwned(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("pwned") && name != "--output=pwned-glob")
        .collect()
}

/// Runs each line; each must be asked about (and, denied, run nothing).
async fn all_asked(lines: &[&str], shell: impl Fn(&Path) -> ShellTool) {
    if !common::have_git() {
        return;
    }
    for line in lines {
        let (_dir, root) = workspace();
        let ran = run(&root, line, shell(&root), false).await;
        assert_eq!(
            ran.asked.len(),
            1,
            "`{line}` was not asked about: {}",
            ran.result
        );
        assert!(
            ran.result.contains("not approved"),
            "{line}: {}",
            ran.result
        );
        assert_eq!(pwned(&root), Vec::<String>::new(), "`{line}` ran something");
        for leftover in ["cat", "out", "copy"] {
            assert!(!root.join(leftover).exists(), "`{line}` wrote `{leftover}`");
        }
    }
}

fn plain(_: &Path) -> ShellTool {
    ShellTool::default()
}

#[tokio::test]
async fn another_grammar_runs_no_line() {
    // dash reads `&` of bash's `&>` as "in the background" and runs the
    // rest as a second command; bash's `|&` likewise.
    all_asked(
        &[
            "ls &>/dev/null touch pwned-amp",
            "ls &> out",
            "ls |& cat",
            "echo {a,b}",
            "ls & touch pwned-bg",
        ],
        plain,
    )
    .await;
}

#[tokio::test]
async fn wrappers_are_read_by_their_grammar() {
    all_asked(
        &[
            "env --sp='touch pwned-sp' ls",
            "env -S'touch pwned-S' ls",
            "env --split-string='touch pwned-split' ls",
            "env -iS'touch pwned-iS' ls",
            "exec -a ls touch pwned-exec",
            "time -o cat echo hi",
            "env -C bin ls",
            "nice -n 5 touch pwned-nice",
            "timeout -s KILL 5 touch pwned-timeout",
            "xargs --process-slot-var=GIT_DIR git status",
        ],
        plain,
    )
    .await;
}

#[tokio::test]
async fn leading_assignments_need_a_rule() {
    all_asked(
        &[
            "PATH=.:/usr/bin:/bin ls",
            "BASH_ENV=./evil.sh bash -c ls",
            "GIT_EXTERNAL_DIFF=./evil.sh git diff",
            "env GIT_EXTERNAL_DIFF=./evil.sh git diff",
            "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=diff.external GIT_CONFIG_VALUE_0=./evil.sh git diff",
            "HOME=. git status",
        ],
        plain,
    )
    .await;
}

#[tokio::test]
async fn programs_are_known_by_where_they_are_found() {
    all_asked(&["./ls", "bin/ls", "ls -la"], |root| {
        // The workspace's bin first on PATH, as node_modules/.bin often is.
        let mut config = ShellConfig::default();
        config.env.insert(
            "PATH".into(),
            Some(format!("{}/bin:/usr/bin:/bin", root.display())),
        );
        ShellTool::new(config)
    })
    .await;
    all_asked(&["./ls", "bin/ls"], plain).await;
}

#[tokio::test]
async fn allowed_programs_that_write_or_connect_ask() {
    if !common::have_git() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    all_asked(
        &[
            "git diff --output=pwned-out",
            "git diff --out=pwned-abbrev",
            // A glob that expands to a file named like an option.
            "git diff *",
            "git -c diff.external=./evil.sh diff",
            "git --exec-path=. status",
            &format!("bash -c 'cat < /dev/tcp/127.0.0.1/{port}'"),
            &format!("cat < /dev/tcp/127.0.0.1/{port}"),
            "cat README.md > copy",
            "echo hi >> out",
        ],
        plain,
    )
    .await;
    assert!(listener.accept().is_err(), "something connected");
}

#[tokio::test]
async fn allowed_lines_run_as_planned_without_asking() {
    if !common::have_git() {
        return;
    }
    let (_dir, root) = workspace();
    for (line, wanted) in [
        ("ls *.md", "README.md"),
        ("git status --short", " M README.md"),
        ("git diff --stat", "README.md | 2"),
        ("echo 'a  b' | cat", "a  b"),
        ("cat README.md && echo ok 2>/dev/null", "hello again\nok"),
        ("nice -n 1 cat < README.md", "hello again"),
        ("sh -c 'ls bin; echo done'", "ls\ndone"),
    ] {
        let ran = run(&root, line, plain(&root), false).await;
        assert!(ran.asked.is_empty(), "`{line}` was asked: {:?}", ran.asked);
        assert!(ran.result.contains(wanted), "`{line}`: {}", ran.result);
        assert!(
            ran.result.contains("[exit code: 0]"),
            "`{line}`: {}",
            ran.result
        );
    }
    assert_eq!(pwned(&root), Vec::<String>::new());
}

#[tokio::test]
async fn a_line_that_needs_a_shell_runs_under_the_shell_it_names_once_approved() {
    if !common::have_git() {
        return;
    }
    let (_dir, root) = workspace();
    let ran = run(&root, "echo \"[$0]\"; cd bin && ls", plain(&root), true).await;
    assert_eq!(ran.asked.len(), 1);
    let summary = &ran.asked[0];
    let shell = summary
        .split("\nrun by ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("the approval names no shell: {summary}"));
    assert!(
        shell.ends_with("/bash") || shell.ends_with("/sh"),
        "{summary}"
    );
    // `$0` is the shell that ran the line: the one the approval named.
    assert!(ran.result.contains(&format!("[{shell}]")), "{}", ran.result);
    assert!(ran.result.contains("ls\n"), "{}", ran.result);
    // A planned line's approval shows what kinet runs.
    let ran = run(&root, "git diff --output=x", plain(&root), false).await;
    assert!(ran.asked[0].contains("kinet runs: /"), "{}", ran.asked[0]);
}
