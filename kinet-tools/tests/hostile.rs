//! Regression tests for what a hostile repository or a careless model did
//! to the local tools: symlink chains out of the root, repository programs
//! run by git, line-ending and encoding traps,
//! FIFOs and huge targets, writes landing after their timeout.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kinet_core::tool::engine::EngineCtx as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kinet_core::message::ToolCall;
use kinet_core::pipeline::Pipeline;
use kinet_core::tool::ToolErrorKind;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput, Toolset};
use kinet_tools::{files::*, git::*, search::*, shell::*};
use serde_json::json;

struct Workspace {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    root: PathBuf,
    outside: PathBuf,
    ctx: ToolCtx,
}

/// A workspace and a directory outside it holding `secret.txt`.
fn workspace() -> Workspace {
    let dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let outside = std::fs::canonicalize(out.path()).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOP-SECRET-LINE\n").unwrap();
    let ctx = ToolCtx::new(&root).with_roots(vec![root.clone()]);
    Workspace {
        _dirs: (dir, out),
        root,
        outside,
        ctx,
    }
}

async fn call<T: Tool>(
    tool: &T,
    ctx: &ToolCtx,
    args: serde_json::Value,
) -> Result<ToolOutput, ToolError> {
    tool.call(serde_json::from_value(args).unwrap(), ctx).await
}

/// `d0 -> d1 -> … -> d40 -> outside`: 41 links, one more than the OS
/// follows in one lookup.
fn chain_of_41(ws: &Workspace) {
    std::os::unix::fs::symlink(&ws.outside, ws.root.join("d40")).unwrap();
    for i in (0..40).rev() {
        std::os::unix::fs::symlink(format!("d{}", i + 1), ws.root.join(format!("d{i}"))).unwrap();
    }
}

#[tokio::test]
async fn a_chain_of_41_symlinks_leads_no_tool_outside() {
    let ws = workspace();
    chain_of_41(&ws);
    let tracker = FileTracker::new();
    let read = call(
        &ReadFileTool::new(tracker.clone()),
        &ws.ctx,
        json!({"path": "d0/secret.txt"}),
    )
    .await;
    assert!(read.is_err(), "{read:?}");
    let write = call(
        &WriteFileTool::new(tracker.clone()),
        &ws.ctx,
        json!({"path": "d0/pwned.txt", "content": "x"}),
    )
    .await;
    assert!(write.is_err(), "{write:?}");
    assert!(!ws.outside.join("pwned.txt").exists());
    let edit = call(
        &EditFileTool::new(tracker.clone()),
        &ws.ctx,
        json!({"path": "d0/secret.txt", "old_string": "TOP", "new_string": "pwned"}),
    )
    .await;
    assert!(edit.is_err());
    assert_eq!(
        std::fs::read_to_string(ws.outside.join("secret.txt")).unwrap(),
        "TOP-SECRET-LINE\n"
    );
    // grep names the chain as a path and as a start directory.
    for path in [None, Some("d0"), Some("d0/secret.txt")] {
        let mut args = json!({"pattern": "TOP-SECRET"});
        if let Some(path) = path {
            args["path"] = json!(path);
        }
        let found = call(&GrepTool::default(), &ws.ctx, args).await;
        let text = match found {
            Ok(output) => output.text,
            Err(error) => error.to_string(),
        };
        assert!(!text.contains("TOP-SECRET-LINE"), "{path:?}: {text}");
    }
    let listed = call(
        &GlobTool::default(),
        &ws.ctx,
        json!({"pattern": "**/*", "path": "d0"}),
    )
    .await;
    assert!(listed.is_err() || !listed.unwrap().text.contains("secret.txt"));
    let shell = call(
        &ShellTool::default(),
        &ws.ctx,
        json!({"command": "cat secret.txt", "cwd": "d0"}),
    )
    .await;
    let err = shell.unwrap_err();
    assert!(
        err.message().contains(&ws.root.display().to_string()),
        "{err}"
    );
    assert!(!err.message().contains("TOP-SECRET"));
}

#[tokio::test]
async fn git_diff_runs_no_program_the_repository_names() {
    if !common::have_git() {
        return;
    }
    let ws = workspace();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(&ws.root)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["config", "user.email", "a@example.invalid"]);
    git(&["config", "user.name", "a"]);
    std::fs::write(
        ws.root.join(".gitattributes"),
        "*.txt filter=evil diff=evil\n",
    )
    .unwrap();
    std::fs::write(ws.root.join("a.txt"), "one\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init"]);
    let marker = ws.outside.join("ran");
    let touch = format!("touch {}", marker.display());
    git(&[
        "config",
        "filter.evil.clean",
        &format!("{touch}-clean; cat"),
    ]);
    git(&["config", "filter.evil.process", &format!("{touch}-process")]);
    git(&["config", "filter.evil.required", "true"]);
    git(&[
        "config",
        "diff.evil.textconv",
        &format!("{touch}-textconv; cat"),
    ]);
    git(&["config", "diff.evil.command", &format!("{touch}-command")]);
    git(&[
        "config",
        "core.fsmonitor",
        &format!("{touch}-fsmonitor; true"),
    ]);
    git(&["config", "core.pager", &format!("{touch}-pager; cat")]);
    // A driver name with `=` in it, which `-c` overrides cannot reach.
    git(&[
        "config",
        "filter.x=y.clean",
        &format!("{touch}-equals; cat"),
    ]);
    git(&["config", "filter.x=y.required", "true"]);
    std::fs::write(ws.root.join("b.md"), "two\n").unwrap();
    std::fs::write(ws.root.join("a.txt"), "two\n").unwrap();
    std::fs::write(ws.root.join("new.txt"), "untracked\n").unwrap();
    let out = call(&GitDiffTool::default(), &ws.ctx, json!({}))
        .await
        .unwrap()
        .text;
    assert!(out.contains("-one\n+two"), "{out}");
    assert!(out.contains("b.md"), "{out}");
    assert!(out.contains("new.txt"), "{out}");
    let ran: Vec<_> = std::fs::read_dir(&ws.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("ran"))
        .collect();
    assert!(ran.is_empty(), "git ran the repository's programs: {ran:?}");
}

/// Every hook git knows, in `.git/hooks` and in a `core.hooksPath` the
/// repository sets, and a credential helper, askpass and ssh command that a
/// lazy fetch of a missing object would run: none of them runs under
/// git_diff, and the repository is not written (the index stays as it was).
#[tokio::test]
async fn git_diff_runs_no_hook_and_no_credential_helper() {
    if !common::have_git() {
        return;
    }
    let ws = workspace();
    let git = |args: &[&str]| {
        let output = Command::new("git")
            .args(args)
            .current_dir(&ws.root)
            .output()
            .unwrap();
        assert!(output.status.success(), "git {args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    git(&["init", "-q"]);
    git(&["config", "user.email", "a@example.invalid"]);
    git(&["config", "user.name", "a"]);
    std::fs::write(ws.root.join("a.txt"), "one\n").unwrap();
    std::fs::write(ws.root.join("gone.txt"), "blob that goes missing\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init"]);
    // Hooks, by every name git runs, in both places.
    const HOOKS: &[&str] = &[
        "applypatch-msg",
        "pre-applypatch",
        "post-applypatch",
        "pre-commit",
        "pre-merge-commit",
        "prepare-commit-msg",
        "commit-msg",
        "post-commit",
        "pre-rebase",
        "post-checkout",
        "post-merge",
        "pre-push",
        "pre-receive",
        "update",
        "proc-receive",
        "post-receive",
        "post-update",
        "reference-transaction",
        "push-to-checkout",
        "pre-auto-gc",
        "post-rewrite",
        "sendemail-validate",
        "fsmonitor-watchman",
        "p4-changelist",
        "p4-prepare-changelist",
        "p4-post-changelist",
        "p4-pre-submit",
        "post-index-change",
    ];
    let marker = |what: &str| ws.outside.join(format!("ran-{what}"));
    let hooks_elsewhere = ws.root.join("my-hooks");
    std::fs::create_dir_all(&hooks_elsewhere).unwrap();
    for dir in [ws.root.join(".git/hooks"), hooks_elsewhere.clone()] {
        for hook in HOOKS {
            let path = dir.join(hook);
            std::fs::write(
                &path,
                format!("#!/bin/sh\ntouch '{}'\n", marker(hook).display()),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    git(&[
        "config",
        "core.hooksPath",
        &hooks_elsewhere.display().to_string(),
    ]);
    // A promisor remote that a missing object would be fetched from, with
    // every program a fetch could start.
    // The remote: a local server that asks for a password (401), which is
    // what makes git start a credential helper; it counts connections.
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in server.incoming() {
            let Ok(mut stream) = stream else { break };
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let helper = format!("!touch '{}'; echo", marker("credential").display());
    let url = format!("http://user@127.0.0.1:{port}/repo.git");
    git(&["config", "remote.origin.url", &url]);
    git(&["config", "remote.origin.promisor", "true"]);
    git(&["config", "extensions.partialClone", "origin"]);
    git(&["config", "core.repositoryFormatVersion", "1"]);
    git(&["config", "credential.helper", &helper]);
    git(&[
        "config",
        "core.askPass",
        &format!("{}", marker("askpass").display()),
    ]);
    git(&[
        "config",
        "core.sshCommand",
        &format!("touch '{}'", marker("ssh").display()),
    ]);
    git(&[
        "config",
        "remote.origin.uploadpack",
        &format!("touch '{}'", marker("uploadpack").display()),
    ]);
    // The blob of gone.txt goes missing; the file changes, so a diff of it
    // against HEAD needs the old blob.
    let blob = git(&["rev-parse", "HEAD:gone.txt"]);
    std::fs::remove_file(
        ws.root
            .join(".git/objects")
            .join(&blob[..2])
            .join(&blob[2..]),
    )
    .unwrap();
    std::fs::write(ws.root.join("gone.txt"), "changed\n").unwrap();
    // The index is stale (a.txt touched), so git would like to refresh it.
    std::fs::write(ws.root.join("a.txt"), "two\n").unwrap();
    let index_before = std::fs::read(ws.root.join(".git/index")).unwrap();
    for args in [
        json!({}),
        json!({"ref": "HEAD"}),
        json!({"cached": true}),
        json!({"file": "gone.txt", "ref": "HEAD"}),
    ] {
        // A missing object may make git fail; it must not make it fetch.
        let _ = call(&GitDiffTool::default(), &ws.ctx, args).await;
    }
    let ran: Vec<_> = std::fs::read_dir(&ws.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("ran-"))
        .collect();
    assert!(ran.is_empty(), "git ran the repository's programs: {ran:?}");
    assert_eq!(
        std::fs::read(ws.root.join(".git/index")).unwrap(),
        index_before,
        "git_diff wrote the index"
    );
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "git_diff reached the remote"
    );
    // The same repository outside git_diff does run its programs (so the
    // setup above is live): a plain diff fetches the missing blob and asks
    // the credential helper, a plain commit runs the hooks.
    let _ = Command::new("git")
        .args(["diff", "HEAD", "--", "gone.txt"])
        .env("GIT_TERMINAL_PROMPT", "0")
        .current_dir(&ws.root)
        .output();
    assert!(
        marker("credential").exists(),
        "the credential helper was never live"
    );
    let _ = Command::new("git")
        .args(["commit", "-qam", "x"])
        .current_dir(&ws.root)
        .output();
    assert!(marker("pre-commit").exists(), "the hooks were never live");
}

/// A write or edit whose call is cancelled through the token leaves
/// nothing: no target, no changed content, no temporary file, whether
/// the cancel comes before the call or while a large write is under way.
#[tokio::test]
async fn a_cancelled_write_leaves_nothing() {
    let ws = workspace();
    let tracker = FileTracker::new();
    // Cancelled before the call.
    let ctx = ws.ctx.clone();
    ctx.cancellation().cancel();
    let result = call(
        &WriteFileTool::new(tracker.clone()),
        &ctx,
        json!({"path": "new.txt", "content": "x"}),
    )
    .await;
    assert!(result.is_err(), "{result:?}");
    assert_eq!(std::fs::read_dir(&ws.root).unwrap().count(), 0);
    // Cancelled while 48 MiB are written, at several moments: either the
    // write finished before the cancel (the whole content is there) or
    // nothing is there at all.
    let content = "0123456789abcdef".repeat(3 << 20);
    let mut cancelled = 0;
    for delay_us in [0u64, 200, 1_000, 3_000, 10_000, 30_000] {
        let ctx = ToolCtx::new(&ws.root).with_roots(vec![ws.root.clone()]);
        let cancel = ctx.cancellation().clone();
        let tool = WriteFileTool::new(FileTracker::new());
        let args = json!({"path": format!("big-{delay_us}.txt"), "content": content});
        let write = tokio::spawn(async move { call(&tool, &ctx, args).await });
        tokio::time::sleep(Duration::from_micros(delay_us)).await;
        cancel.cancel();
        let result = write.await.unwrap();
        let target = ws.root.join(format!("big-{delay_us}.txt"));
        match result {
            Ok(_) => assert_eq!(
                std::fs::metadata(&target).unwrap().len(),
                content.len() as u64
            ),
            Err(error) => {
                assert_eq!(error.kind(), ToolErrorKind::Cancelled, "{error}");
                assert!(!target.exists(), "a cancelled write landed");
                cancelled += 1;
            }
        }
        let temps: Vec<_> = std::fs::read_dir(&ws.root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(temps.is_empty(), "temporary files left: {temps:?}");
    }
    assert!(cancelled > 0, "no write was cancelled in time");
    // An edit cancelled before it runs changes nothing.
    std::fs::write(ws.root.join("keep.txt"), "old\n").unwrap();
    let _ = call(
        &ReadFileTool::new(tracker.clone()),
        &ws.ctx,
        json!({"path": "keep.txt"}),
    )
    .await;
    let ctx = ws.ctx.clone();
    ctx.cancellation().cancel();
    let edited = call(
        &EditFileTool::new(tracker),
        &ctx,
        json!({"path": "keep.txt", "old_string": "old", "new_string": "new"}),
    )
    .await;
    assert!(edited.is_err(), "{edited:?}");
    assert_eq!(
        std::fs::read_to_string(ws.root.join("keep.txt")).unwrap(),
        "old\n"
    );
}

#[tokio::test]
async fn git_diff_refuses_a_work_tree_outside_the_workspace() {
    if !common::have_git() {
        return;
    }
    // The repository's config makes the common parent of the workspace and
    // another directory its work tree, and its index lists a file there.
    let ws = workspace();
    let parent = ws.root.parent().unwrap().to_path_buf();
    assert_eq!(ws.outside.parent().unwrap(), parent);
    let git_dir = ws.root.join(".git");
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .arg(format!("--git-dir={}", git_dir.display()))
            .arg(format!("--work-tree={}", parent.display()))
            .args(args)
            .current_dir(&parent)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    let status = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&ws.root)
        .status()
        .unwrap();
    assert!(status.success());
    let secret = ws.outside.strip_prefix(&parent).unwrap().join("secret.txt");
    git(&["add", &secret.display().to_string()]);
    git(&["config", "core.worktree", &parent.display().to_string()]);
    std::fs::write(
        ws.outside.join("secret.txt"),
        "TOP-SECRET-LINE\nTOP-SECRET-TWO\n",
    )
    .unwrap();
    let result = call(&GitDiffTool::default(), &ws.ctx, json!({})).await;
    let text = match result {
        Ok(output) => output.text,
        Err(error) => error.to_string(),
    };
    assert!(!text.contains("TOP-SECRET"), "{text}");
    assert!(text.contains("outside the workspace"), "{text}");
}

#[tokio::test]
async fn git_diff_refuses_a_repository_outside_the_workspace() {
    if !common::have_git() {
        return;
    }
    // A `.git` file in the workspace naming another repository.
    let ws = workspace();
    let other = ws.outside.join("repo");
    std::fs::create_dir(&other).unwrap();
    let git = |dir: &std::path::Path, args: &[&str]| {
        assert!(
            Command::new("git")
                .args(args)
                .current_dir(dir)
                .status()
                .unwrap()
                .success()
        );
    };
    git(&other, &["init", "-q"]);
    git(&other, &["config", "user.email", "a@example.invalid"]);
    git(&other, &["config", "user.name", "a"]);
    std::fs::write(other.join("secret.txt"), "TOP-SECRET-LINE\n").unwrap();
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-qm", "secret"]);
    std::fs::write(
        ws.root.join(".git"),
        format!("gitdir: {}\n", other.join(".git").display()),
    )
    .unwrap();
    let result = call(&GitDiffTool::default(), &ws.ctx, json!({"ref": "HEAD"})).await;
    let text = match result {
        Ok(output) => output.text,
        Err(error) => error.to_string(),
    };
    assert!(!text.contains("TOP-SECRET"), "{text}");
    assert!(text.contains("outside the workspace"), "{text}");
}

/// Host threads of this process.
#[tokio::test]
async fn crlf_and_mixed_endings_edit_without_panic() {
    let ws = workspace();
    let tracker = FileTracker::new();
    let read = ReadFileTool::new(tracker.clone());
    let edit = EditFileTool::new(tracker.clone());
    std::fs::write(ws.root.join("crlf.txt"), "alpha\r\nbeta\r\n").unwrap();
    call(&read, &ws.ctx, json!({"path": "crlf.txt"}))
        .await
        .unwrap();
    let out = call(
        &edit,
        &ws.ctx,
        json!({"path": "crlf.txt", "old_string": "alpha\nbeta", "new_string": "alpha\n日本"}),
    )
    .await
    .unwrap();
    assert!(out.text.contains("日本"), "{}", out.text);
    assert_eq!(
        std::fs::read_to_string(ws.root.join("crlf.txt")).unwrap(),
        "alpha\r\n日本\r\n"
    );

    std::fs::write(ws.root.join("mixed.txt"), "one\ntwo\r\nthree\nfour\n").unwrap();
    let shown = call(&read, &ws.ctx, json!({"path": "mixed.txt"}))
        .await
        .unwrap()
        .text;
    assert!(!shown.contains('\r'));
    call(
        &edit,
        &ws.ctx,
        json!({"path": "mixed.txt", "old_string": "one\ntwo\nthree", "new_string": "1\n2\n3"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.root.join("mixed.txt")).unwrap(),
        "1\n2\r\n3\nfour\n"
    );
}

/// Runs `write_file` and `edit_file` through the default pipeline (ask,
/// with the context's denying handler) and returns each result and time.
async fn through_pipeline(
    ctx: &ToolCtx,
    path: &str,
) -> Vec<(Result<ToolOutput, ToolError>, Duration)> {
    let tracker = FileTracker::new();
    let tools = Toolset::new()
        .with(WriteFileTool::new(tracker.clone()))
        .with(EditFileTool::new(tracker));
    let pipeline = Pipeline::new();
    let mut results = Vec::new();
    for (name, args) in [
        ("write_file", json!({"path": path, "content": "x"})),
        (
            "edit_file",
            json!({"path": path, "old_string": "a", "new_string": "b"}),
        ),
    ] {
        let started = Instant::now();
        let record = pipeline
            .call(
                tools.static_tools(),
                ToolCall {
                    id: name.into(),
                    name: name.into(),
                    arguments: args.to_string(),
                },
                ctx,
            )
            .await;
        results.push((record.result, started.elapsed()));
    }
    results
}

#[tokio::test]
async fn a_fifo_and_a_2_gib_target_are_refused_at_once() {
    let ws = workspace();
    let fifo = ws.root.join("pipe");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let big = ws.root.join("big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    for path in ["pipe", "big.bin"] {
        for (result, elapsed) in through_pipeline(&ws.ctx, path).await {
            assert!(elapsed < Duration::from_secs(1), "{path}: {elapsed:?}");
            assert!(result.is_err(), "{path}: {result:?}");
        }
    }
    // Approved, the FIFO is still refused up front, and clearly.
    let tracker = FileTracker::new();
    let started = Instant::now();
    let err = call(
        &WriteFileTool::new(tracker.clone()),
        &ws.ctx,
        json!({"path": "pipe", "content": "x"}),
    )
    .await
    .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(err.message().contains("not a regular file"), "{err}");
    let err = call(
        &EditFileTool::new(tracker),
        &ws.ctx,
        json!({"path": "pipe", "old_string": "a", "new_string": "b"}),
    )
    .await
    .unwrap_err();
    assert!(err.message().contains("not a regular file"), "{err}");
}

#[tokio::test]
async fn a_timed_out_write_leaves_no_file() {
    let ws = workspace();
    let content = "x".repeat(64 << 20);
    let ctx = ws
        .ctx
        .clone()
        .with_deadline(Some(tokio::time::Instant::now() + Duration::from_millis(1)));
    let err = call(
        &WriteFileTool::new(FileTracker::new()),
        &ctx,
        json!({"path": "late.txt", "content": content}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::Cancelled, "{err}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let names: Vec<_> = std::fs::read_dir(&ws.root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[tokio::test]
async fn read_file_oddities() {
    let ws = workspace();
    let read = ReadFileTool::new(FileTracker::new());
    // A valid line of emoji cut by the line cap is not "invalid UTF-8".
    let line = format!("a{}", "😀".repeat(3000));
    std::fs::write(ws.root.join("emoji.txt"), format!("{line}\n")).unwrap();
    let out = call(&read, &ws.ctx, json!({"path": "emoji.txt"}))
        .await
        .unwrap()
        .text;
    assert!(
        !out.contains("not valid UTF-8"),
        "{}",
        &out[out.len() - 200..]
    );
    assert!(!out.contains('\u{FFFD}'));
    assert!(out.contains("line(s) longer than 2000 characters were cut"));
    // A text file named like an image is text.
    std::fs::write(ws.root.join("notes.png"), "just notes\n").unwrap();
    let out = call(&read, &ws.ctx, json!({"path": "notes.png"}))
        .await
        .unwrap();
    assert!(out.images.is_empty());
    assert!(out.text.contains("just notes"));
    // A real PNG with another name is an image.
    let png = [
        0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n', 0, 0, 0, 13,
    ];
    std::fs::write(ws.root.join("picture.dat"), png).unwrap();
    let out = call(&read, &ws.ctx, json!({"path": "picture.dat"}))
        .await
        .unwrap();
    assert_eq!(out.images.len(), 1);
    // limit 0 is refused, not read as 1.
    let err = call(&read, &ws.ctx, json!({"path": "notes.png", "limit": 0}))
        .await
        .unwrap_err();
    assert!(err.message().contains("limit is 0"), "{err}");
}

#[tokio::test]
async fn write_file_does_not_overwrite_blind() {
    let ws = workspace();
    let tracker = FileTracker::new();
    let write = WriteFileTool::new(tracker.clone());
    std::fs::write(ws.root.join("keep.txt"), "precious\n").unwrap();
    let err = call(&write, &ws.ctx, json!({"path": "keep.txt", "content": "x"}))
        .await
        .unwrap_err();
    assert!(err.message().contains("have not read it"), "{err}");
    assert_eq!(
        std::fs::read_to_string(ws.root.join("keep.txt")).unwrap(),
        "precious\n"
    );
    // After a read it may.
    call(
        &ReadFileTool::new(tracker.clone()),
        &ws.ctx,
        json!({"path": "keep.txt"}),
    )
    .await
    .unwrap();
    call(
        &write,
        &ws.ctx,
        json!({"path": "keep.txt", "content": "new\n"}),
    )
    .await
    .unwrap();
    // The host can allow blind overwrites.
    std::fs::write(ws.root.join("other.txt"), "x").unwrap();
    let allowed = WriteFileTool::new(tracker.clone()).overwrite_unread(true);
    call(
        &allowed,
        &ws.ctx,
        json!({"path": "other.txt", "content": "y"}),
    )
    .await
    .unwrap();
    // A read-only file is reported, even to a process that could write it.
    use std::os::unix::fs::PermissionsExt;
    let locked = ws.root.join("locked.txt");
    std::fs::write(&locked, "ro\n").unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o444)).unwrap();
    call(
        &ReadFileTool::new(tracker.clone()),
        &ws.ctx,
        json!({"path": "locked.txt"}),
    )
    .await
    .unwrap();
    let err = call(
        &write,
        &ws.ctx,
        json!({"path": "locked.txt", "content": "x"}),
    )
    .await
    .unwrap_err();
    assert!(err.message().contains("read-only"), "{err}");
    assert_eq!(std::fs::read_to_string(&locked).unwrap(), "ro\n");
}

#[tokio::test]
async fn a_swapped_directory_mid_walk_leaks_nothing() {
    // A directory is swapped for a symlink to the outside, and back, while
    // grep and glob walk: no outside line or name may show.
    let ws = workspace();
    let sub = ws.root.join("sub");
    std::fs::create_dir(&sub).unwrap();
    for i in 0..50 {
        std::fs::write(sub.join(format!("f{i}.txt")), "inside\n").unwrap();
    }
    std::fs::write(ws.outside.join("zz-outside-name.txt"), "TOP-SECRET-LINE\n").unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (root, outside, stop) = (ws.root.clone(), ws.outside.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let (sub, parked, link) = (root.join("sub"), root.join("parked"), root.join("link"));
            std::os::unix::fs::symlink(&outside, &link).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::rename(&sub, &parked);
                let _ = std::fs::rename(&link, &sub);
                let _ = std::fs::rename(&sub, &link);
                let _ = std::fs::rename(&parked, &sub);
            }
        })
    };
    for _ in 0..200 {
        if let Ok(out) = call(
            &GrepTool::default(),
            &ws.ctx,
            json!({"pattern": "SECRET|inside"}),
        )
        .await
        {
            assert!(!out.text.contains("TOP-SECRET"), "{}", out.text);
        }
        if let Ok(out) = call(
            &GlobTool::default(),
            &ws.ctx,
            json!({"pattern": "**/*.txt"}),
        )
        .await
        {
            assert!(!out.text.contains("zz-outside-name"), "{}", out.text);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
}
