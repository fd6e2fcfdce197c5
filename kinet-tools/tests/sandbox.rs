//! The shell sandbox, enforced by this machine's kernel: Landlock for
//! writes, a network namespace (and Landlock TCP rules) for the network,
//! and its approval mode.
#![cfg(target_os = "linux")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

mod common;

use kinet_core::tool::engine::EngineCtx as _;
use std::path::PathBuf;
use std::process::Command;

use kinet_core::sandbox::{SandboxPolicy, support};
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use kinet_tools::shell::{ShellArgs, ShellTool};
use serde_json::json;

/// Whether this kernel can enforce the sandbox; says so loudly when not.
fn supported(policy: &SandboxPolicy) -> bool {
    match support().sandbox_unavailable(policy) {
        None => true,
        Some(why) => {
            kinet_core::testing::skipped(&format!("the sandbox cannot be enforced here: {why}"));
            false
        }
    }
}

struct Dirs {
    _guards: (tempfile::TempDir, tempfile::TempDir),
    root: PathBuf,
    other: PathBuf,
}

fn dirs() -> Dirs {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    Dirs {
        root: std::fs::canonicalize(a.path()).unwrap(),
        other: std::fs::canonicalize(b.path()).unwrap(),
        _guards: (a, b),
    }
}

async fn run(tool: &ShellTool, ctx: &ToolCtx, command: &str) -> Result<ToolOutput, ToolError> {
    tool.call(
        serde_json::from_value(json!({"command": command})).unwrap(),
        ctx,
    )
    .await
}

fn text(result: Result<ToolOutput, ToolError>) -> String {
    match result {
        Ok(output) => output.text,
        Err(error) => error.to_string(),
    }
}

#[tokio::test]
async fn writes_stay_in_the_roots_and_temp() {
    let policy = SandboxPolicy::workspace_write();
    if !supported(&policy) {
        return;
    }
    let d = dirs();
    let ctx = ToolCtx::new(&d.root).with_roots(vec![d.root.clone()]);
    let tool = ShellTool::default().sandboxed(policy);
    let out = text(
        run(
            &tool,
            &ctx,
            "mkdir -p sub && echo in > sub/a.txt && cat sub/a.txt",
        )
        .await,
    );
    assert!(out.contains("in\n[exit code: 0]"), "{out}");
    let temp = d.other.join("temp.txt");
    let out = text(
        run(
            &tool,
            &ctx,
            &format!("echo t > {} && echo ok", temp.display()),
        )
        .await,
    );
    assert!(out.contains("ok"), "writing in temp: {out}");
    assert!(temp.exists());

    // Without temp, the other directory is outside every writable root.
    let strict = ShellTool::default().sandboxed(SandboxPolicy::workspace_write().temp_dirs(false));
    let target = d.other.join("escape.txt");
    let out = text(run(&strict, &ctx, &format!("echo x > {}", target.display())).await);
    assert!(out.contains("Permission denied"), "{out}");
    assert!(!target.exists(), "the kernel let a write out of the roots");
    // Removing and renaming outside are refused too; reading is not.
    std::fs::write(d.other.join("keep.txt"), "kept\n").unwrap();
    let out = text(
        run(
            &strict,
            &ctx,
            &format!("rm -f {0}/keep.txt; cat {0}/keep.txt", d.other.display()),
        )
        .await,
    );
    assert!(out.contains("kept"), "{out}");
    // No device nodes, even where writes are allowed, and even as root.
    let out = text(run(&tool, &ctx, "mknod disk b 8 0 && echo MADE || echo REFUSED").await);
    assert!(out.contains("REFUSED"), "{out}");
    assert!(!d.root.join("disk").exists());
    let out = text(run(&strict, &ctx, "echo to-null > /dev/null && echo fine").await);
    assert!(out.contains("fine"), "{out}");
}

#[tokio::test]
async fn the_network_is_off_unless_allowed() {
    let policy = SandboxPolicy::workspace_write();
    if !supported(&policy) {
        return;
    }
    let d = dirs();
    let ctx = ToolCtx::new(&d.root).with_roots(vec![d.root.clone()]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe =
        format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo CONNECTED || echo REFUSED");
    let sandboxed = text(
        run(
            &ShellTool::default().sandboxed(policy.clone()),
            &ctx,
            &probe,
        )
        .await,
    );
    assert!(
        sandboxed.contains("REFUSED") && !sandboxed.contains("CONNECTED"),
        "{sandboxed}"
    );
    let allowed = ShellTool::default().sandboxed(policy.allow_network(true));
    let out = text(run(&allowed, &ctx, &probe).await);
    assert!(out.contains("CONNECTED"), "network allowed: {out}");
    let plain = text(run(&ShellTool::default(), &ctx, &probe).await);
    assert!(plain.contains("CONNECTED"), "no sandbox: {plain}");
}

#[tokio::test]
async fn git_and_cargo_work_inside() {
    if !common::have_git() {
        return;
    }
    let policy = SandboxPolicy::workspace_write();
    if !supported(&policy) {
        return;
    }
    let d = dirs();
    assert!(
        Command::new("git")
            .args(["init", "-q"])
            .current_dir(&d.root)
            .status()
            .unwrap()
            .success()
    );
    std::fs::write(d.root.join("a.txt"), "a\n").unwrap();
    let ctx = ToolCtx::new(&d.root).with_roots(vec![d.root.clone()]);
    let tool = ShellTool::default().sandboxed(policy);
    let out = text(run(&tool, &ctx, "git status --short").await);
    assert!(
        out.contains("?? a.txt") && out.ends_with("[exit code: 0]"),
        "{out}"
    );
    // `.git` is read-only inside: nothing written there (a hook, a config
    // with an fsmonitor) can run later outside the sandbox.
    let out = text(
        run(
            &tool,
            &ctx,
            "echo 'touch /tmp/pwned' > .git/hooks/pre-commit; git add a.txt",
        )
        .await,
    );
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(!d.root.join(".git/hooks/pre-commit").exists());
    let out = text(run(&tool, &ctx, "git status --short").await);
    assert!(out.contains("?? a.txt"), "{out}");
    let out = text(run(&tool, &ctx, "cargo --version").await);
    assert!(
        out.starts_with("cargo ") && out.ends_with("[exit code: 0]"),
        "{out}"
    );
}

#[tokio::test]
async fn sockets_that_lead_out_are_hidden() {
    let d = dirs();
    let socket = d.other.join("agent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let policy = SandboxPolicy::workspace_write().hidden(&socket);
    if !supported(&policy) {
        return;
    }
    let ctx = ToolCtx::new(&d.root).with_roots(vec![d.root.clone()]);
    let probe = format!("test -S {} && echo SOCKET || echo HIDDEN", socket.display());
    let out = text(run(&ShellTool::default().sandboxed(policy), &ctx, &probe).await);
    assert!(out.contains("HIDDEN"), "{out}");
    let out = text(run(&ShellTool::default(), &ctx, &probe).await);
    assert!(out.contains("SOCKET"), "{out}");
}

/// The host's processes are out of sight: a sandboxed (or contained) command cannot read
/// the agent's environment (where API keys live) through /proc, sees only
/// its own PID namespace, and /proc still works for itself.
#[tokio::test]
async fn the_agents_environment_is_out_of_reach() {
    let d = dirs();
    let policy = SandboxPolicy::workspace_write();
    if !supported(&policy) {
        return;
    }
    let ctx = ToolCtx::new(&d.root).with_roots(vec![d.root.clone()]);
    let host = std::process::id();
    let probe = format!(
        "if cat /proc/{host}/environ >/dev/null 2>&1; then echo READABLE; else echo UNREADABLE; fi; \
         ls /proc | grep -c '^[0-9]' ; cat /proc/self/status | grep -c '^Pid:'"
    );
    let out = text(run(&ShellTool::default().sandboxed(policy), &ctx, &probe).await);
    assert!(out.contains("UNREADABLE"), "{out}");
    let numbers: Vec<u32> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert!(
        numbers.first().is_some_and(|n| *n < 10),
        "only the sandbox's processes: {out}"
    );
    assert_eq!(numbers.get(1), Some(&1), "/proc/self works: {out}");
    // Contained but unsandboxed, the same: a /proc of its own.
    if kinet_core::sandbox::support().namespaces {
        let out = text(run(&ShellTool::default(), &ctx, &probe).await);
        assert!(out.contains("UNREADABLE"), "{out}");
        let numbers: Vec<u32> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
        assert!(numbers.first().is_some_and(|n| *n < 10), "{out}");
    }
}

#[test]
fn sandboxed_commands_run_without_asking_and_unsandboxed_ones_ask() {
    let plain = ShellTool::default();
    let args = |v: serde_json::Value| -> ShellArgs { serde_json::from_value(v).unwrap() };
    assert!(plain.mutating(&args(json!({"command": "ls"}))));
    let policy = SandboxPolicy::workspace_write();
    let tool = ShellTool::default().sandboxed(policy.clone());
    let enforced = support().sandbox_unavailable(&policy).is_none();
    // Where the kernel cannot enforce it, every command asks again.
    assert_eq!(tool.mutating(&args(json!({"command": "ls"}))), !enforced);
    assert!(tool.mutating(&args(json!({"command": "ls", "unsandboxed": true}))));
}

/// `.git` and `.kinet` stay read-only inside the workspace: for sandboxed
/// commands (a read-only bind mount) and for write_file and edit_file
/// (refused before anything is written, through a symlink too), while an
/// ordinary file in the same root is written; a host can lift it.
#[tokio::test]
async fn protected_directories_stay_read_only() {
    use kinet_tools::files::{FileTracker, WriteFileTool};
    let d = dirs();
    std::fs::create_dir_all(d.root.join(".git/hooks")).unwrap();
    std::fs::write(d.root.join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(d.root.join(".kinet")).unwrap();
    std::os::unix::fs::symlink(".git/config", d.root.join("innocent.cfg")).unwrap();
    let ctx = ToolCtx::new(&d.root).with_roots(vec![d.root.clone()]);
    let write = |path: &'static str, ctx: ToolCtx| async move {
        let tool = WriteFileTool::new(FileTracker::new()).overwrite_unread(true);
        tool.call(
            serde_json::from_value(json!({"path": path, "content": "[core]\nfsmonitor = evil\n"}))
                .unwrap(),
            &ctx,
        )
        .await
    };
    for path in [
        ".git/config",
        ".git/hooks/pre-commit",
        ".git/index.lock",
        ".kinet/kinet.db",
        "sub/.git/hooks/post-checkout",
        "innocent.cfg",
    ] {
        let err = write(path, ctx.clone()).await.unwrap_err();
        assert!(err.message().contains("read-only"), "{path}: {err}");
    }
    assert_eq!(
        std::fs::read_to_string(d.root.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!d.root.join(".git/hooks/pre-commit").exists());
    assert!(!d.root.join(".git/index.lock").exists());
    assert!(!d.root.join("sub").exists());
    write("ordinary.txt", ctx.clone()).await.unwrap();
    // The host can lift it.
    write(
        ".kinet/notes.txt",
        ctx.clone().with_protected_names(Vec::new()),
    )
    .await
    .unwrap();

    let policy = SandboxPolicy::workspace_write();
    if !supported(&policy) {
        return;
    }
    let tool = ShellTool::default().sandboxed(policy);
    for target in [
        ".git/config",
        ".git/hooks/pre-commit",
        ".git/index.lock",
        ".kinet/x",
    ] {
        let out = text(run(&tool, &ctx, &format!("echo x >> {target}")).await);
        assert!(out.contains("Read-only file system"), "{target}: {out}");
    }
    assert_eq!(
        std::fs::read_to_string(d.root.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!d.root.join(".git/index.lock").exists() && !d.root.join(".kinet/x").exists());
    let out = text(run(&tool, &ctx, "echo y > ordinary2.txt").await);
    assert!(out.ends_with("[exit code: 0]"), "{out}");
    assert!(d.root.join("ordinary2.txt").exists());
}
