//! Regression tests for what a hostile repository or a careless model did
//! to the local tools: symlink chains out of the root, repository programs
//! run by git, line-ending and encoding traps,
//! FIFOs and huge targets, writes landing after their timeout.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

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
