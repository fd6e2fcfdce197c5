//! The local pack on real files, processes and git repositories in temp dirs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kinet_core::builder::{Calls, Workspace as AgentWorkspace};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::tool::{DynTool, ToolErrorKind};
use kinet_core::{
    Agent, AgentEvent, ApprovalPolicy, Tool, ToolCtx, ToolError, ToolOutput, Toolset,
};
use kinet_tools::*;
use kinet_tools::{files::*, git::*, search::*, shell::*, todo::*};
use serde_json::json;
use std::ops::Not;

/// A workspace in a temp dir, and a context confined to it.
struct Workspace {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ctx: ToolCtx,
}

fn workspace() -> Workspace {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let ctx = ToolCtx::new(&root).with_roots(vec![root.clone()]);
    Workspace {
        _dir: dir,
        root,
        ctx,
    }
}

async fn call<T: Tool>(
    tool: &T,
    ctx: &ToolCtx,
    args: serde_json::Value,
) -> Result<ToolOutput, ToolError> {
    let args = serde_json::from_value(args).unwrap();
    tool.call(args, ctx).await
}

fn text(result: Result<ToolOutput, ToolError>) -> String {
    match result {
        Ok(output) => output.text,
        Err(error) => panic!("unexpected error: {error}"),
    }
}

fn error(result: Result<ToolOutput, ToolError>) -> ToolError {
    match result {
        Ok(output) => panic!("expected an error, got {:?}", output.text),
        Err(error) => error,
    }
}

// ------------------------------------------------------------------ shell

#[tokio::test]
async fn shell_merges_streams_in_order_and_reports_the_exit_code() {
    let ws = workspace();
    let out = text(
        call(
            &ShellTool::default(),
            &ws.ctx,
            json!({"command": "echo one; echo two >&2; echo three; exit 3"}),
        )
        .await,
    );
    assert_eq!(out, "one\ntwo\nthree\n[exit code: 3]");
    let out = text(call(&ShellTool::default(), &ws.ctx, json!({"command": "pwd"})).await);
    assert_eq!(out, format!("{}\n[exit code: 0]", ws.root.display()));
}

/// Live processes (zombies count as gone) whose command line contains
/// `marker`: pids inside a command's PID namespace mean nothing out here.
#[tokio::test]
async fn shell_env_sets_and_removes_variables_for_every_command() {
    let ws = workspace();
    let tool = ShellTool::new(ShellConfig {
        env: [
            ("KINET_TEST_SET".to_owned(), Some("set value".to_owned())),
            ("HOME".to_owned(), None),
        ]
        .into_iter()
        .collect(),
        ..ShellConfig::default()
    });
    let out = text(
        call(
            &tool,
            &ws.ctx,
            json!({"command": "echo \"[$KINET_TEST_SET] [${HOME-unset}]\""}),
        )
        .await,
    );
    assert!(out.contains("[set value] [unset]"), "{out}");
}

fn processes_with(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (cmdline.contains(marker) && alive(pid)).then_some(pid)
        })
        .collect()
}

/// Waits up to 2 s for the processes with `marker` to be gone.
async fn gone(marker: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !processes_with(marker).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    processes_with(marker).is_empty()
}

fn alive(pid: i32) -> bool {
    // Zombies count as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.contains(") Z "))
        .unwrap_or(false)
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group_including_grandchildren() {
    let ws = workspace();
    let started = Instant::now();
    let err = error(
        call(
            &ShellTool::default(),
            &ws.ctx,
            json!({
                "command": "sleep 100.101 & echo started; wait",
                "timeout_ms": 500
            }),
        )
        .await,
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(err.kind(), ToolErrorKind::Timeout);
    assert!(err.message().starts_with("started\n"), "{}", err.message());
    assert!(
        err.message().contains("[timed out after 0.5 s"),
        "{}",
        err.message()
    );
    assert!(gone("100.101").await, "the grandchild sleep survived");
}

#[tokio::test]
async fn background_children_are_stopped_when_the_command_exits() {
    let ws = workspace();
    let started = Instant::now();
    let out = text(
        call(
            &ShellTool::default(),
            &ws.ctx,
            json!({"command": "sleep 100.102 & echo done"}),
        )
        .await,
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(out, "done\n[exit code: 0]");
    assert!(gone("100.102").await);
}

#[tokio::test]
async fn fifty_megabytes_of_output_are_capped_in_memory() {
    let ws = workspace();
    let tool = ShellTool::new(ShellConfig {
        max_output_bytes: 64 * 1024,
        ..ShellConfig::default()
    });
    let started = Instant::now();
    let out = text(
        call(
            &tool,
            &ws.ctx,
            json!({"command": "yes kinet | head -c 50000000; echo; echo END"}),
        )
        .await,
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(out.len() < 64 * 1024 + 200, "{}", out.len());
    assert!(out.starts_with("kinet\nkinet\n"));
    assert!(out.contains("bytes of output omitted"));
    assert!(
        out.ends_with("END\n[exit code: 0]"),
        "{}",
        &out[out.len() - 100..]
    );
}

#[tokio::test]
async fn cancellation_kills_the_command_and_progress_is_streamed() {
    let ws = workspace();
    let provider = ScriptedProvider::new([ScriptedTurn::new().tool_call(
        "s",
        "shell",
        json!({"command": "for i in 1 2 3; do echo tick $i; done; sleep 100.103"}),
    )]);
    let reports: Arc<Mutex<Vec<ShellReport>>> = Arc::default();
    let seen = Arc::clone(&reports);
    let agent = Agent::builder(provider)
        .tool(ShellTool::default().after_command(move |r| seen.lock().unwrap().push(r.clone())))
        .policy(ApprovalPolicy::never())
        .workspace(AgentWorkspace::new().cwd(&ws.root))
        .build();
    let mut run = agent.run("go");
    let mut progress = String::new();
    while let Some(event) = run.next().await {
        if let AgentEvent::ToolProgress { text, .. } = event {
            progress.push_str(&text);
            if progress.contains("tick 3") {
                break;
            }
        }
    }
    run.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), run.finish())
        .await
        .unwrap();
    assert!(matches!(outcome.stop, kinet_core::RunStop::Cancelled));
    assert!(progress.contains("tick 1\ntick 2\ntick 3"));
    assert!(gone("100.103").await, "the command survived cancellation");
    let reports = reports.lock().unwrap();
    assert!(reports.len() == 1 && reports[0].cancelled, "{reports:?}");
}

#[tokio::test]
async fn shell_refuses_a_cwd_outside_the_workspace_and_asks_with_the_command() {
    let ws = workspace();
    let err = error(
        call(
            &ShellTool::default(),
            &ws.ctx,
            json!({"command": "ls", "cwd": "/"}),
        )
        .await,
    );
    assert_eq!(err.kind(), ToolErrorKind::PermissionDenied);
    let summary = ShellTool::default()
        .confirm_summary(
            &serde_json::from_value(json!({"command": "rm -rf build"})).unwrap(),
            &ws.ctx,
        )
        .await
        .unwrap();
    // The summary names what runs: the resolved program, or the shell.
    let head = format!("$ rm -rf build\n(in {})\nkinet runs: /", ws.root.display());
    assert!(
        summary.starts_with(&head) && summary.ends_with("/rm -rf build"),
        "{summary}"
    );
    let summary = ShellTool::default()
        .confirm_summary(
            &serde_json::from_value(json!({"command": "cd build && make"})).unwrap(),
            &ws.ctx,
        )
        .await
        .unwrap();
    assert!(
        summary.contains("\nrun by /") && summary.contains("`cd` is a shell builtin"),
        "{summary}"
    );
}

// ------------------------------------------------------------------ files

#[tokio::test]
async fn read_file_numbers_lines_and_handles_ranges_binary_dirs_images_and_bad_utf8() {
    let ws = workspace();
    let tracker = FileTracker::new();
    let read = ReadFileTool::new(Arc::clone(&tracker));
    let lines: String = (1..=3000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(ws.root.join("long.txt"), &lines).unwrap();
    let out = text(call(&read, &ws.ctx, json!({"path": "long.txt"})).await);
    assert!(out.starts_with("     1\tline 1\n     2\tline 2\n"));
    assert!(out.contains("  2000\tline 2000\n"));
    assert!(!out.contains("line 2001"));
    assert!(out.ends_with("[showing lines 1-2000; more follow: continue with offset=2001]\n"));
    let out = text(
        call(
            &read,
            &ws.ctx,
            json!({"path": "long.txt", "offset": 2999, "limit": 5}),
        )
        .await,
    );
    assert_eq!(out, "  2999\tline 2999\n  3000\tline 3000\n");
    assert!(tracker.was_read(&ws.root.join("long.txt")));

    std::fs::write(ws.root.join("wide.txt"), "x".repeat(5000)).unwrap();
    let out = text(call(&read, &ws.ctx, json!({"path": "wide.txt"})).await);
    assert!(out.contains("… [line cut: 5000 characters]"));

    std::fs::write(ws.root.join("blob.bin"), b"\x7fELF\0\0\x01\x02").unwrap();
    let err = error(call(&read, &ws.ctx, json!({"path": "blob.bin"})).await);
    assert!(
        err.message().contains("is a binary file"),
        "{}",
        err.message()
    );

    std::fs::create_dir(ws.root.join("src")).unwrap();
    let err = error(call(&read, &ws.ctx, json!({"path": "src"})).await);
    assert!(err.message().contains("is a directory"));

    std::fs::write(ws.root.join("latin1.txt"), b"caf\xe9 au lait\n").unwrap();
    let out = text(call(&read, &ws.ctx, json!({"path": "latin1.txt"})).await);
    assert!(out.contains("caf\u{fffd} au lait"));
    assert!(out.contains("not valid UTF-8"));

    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
    std::fs::write(ws.root.join("dot.png"), png).unwrap();
    let output = call(&read, &ws.ctx, json!({"path": "dot.png"}))
        .await
        .unwrap();
    assert_eq!(output.images.len(), 1);
    assert_eq!(output.images[0].to_bytes().unwrap(), png);

    let big = "y".repeat(600 * 1024);
    std::fs::write(ws.root.join("big.log"), big).unwrap();
    let err = error(call(&read, &ws.ctx, json!({"path": "big.log"})).await);
    assert!(
        err.message().contains("over the 512 KB limit"),
        "{}",
        err.message()
    );
    let err = error(call(&read, &ws.ctx, json!({"path": "missing.txt"})).await);
    assert_eq!(err.kind(), ToolErrorKind::NotFound);
    std::fs::write(ws.root.join("empty.txt"), "").unwrap();
    assert!(text(call(&read, &ws.ctx, json!({"path": "empty.txt"})).await).contains("is empty"));
}

#[cfg(unix)]
#[tokio::test]
async fn file_tools_refuse_symlink_and_dotdot_escapes() {
    let ws = workspace();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.root.join("escape")).unwrap();
    let tracker = FileTracker::new();
    let read = ReadFileTool::new(Arc::clone(&tracker));
    let write = WriteFileTool::new(Arc::clone(&tracker));
    for path in ["escape/secret.txt", "../secret.txt", "/etc/hostname"] {
        let err = error(call(&read, &ws.ctx, json!({"path": path})).await);
        assert_eq!(err.kind(), ToolErrorKind::PermissionDenied, "{path}");
        assert!(
            err.message().contains(&ws.root.display().to_string()),
            "{}",
            err.message()
        );
    }
    let err = error(
        call(
            &write,
            &ws.ctx,
            json!({"path": "escape/new.txt", "content": "x"}),
        )
        .await,
    );
    assert_eq!(err.kind(), ToolErrorKind::PermissionDenied);
    assert!(!outside.path().join("new.txt").exists());
}

#[tokio::test]
async fn edit_requires_a_fresh_read_and_a_unique_match() {
    let ws = workspace();
    let tracker = FileTracker::new();
    let read = ReadFileTool::new(Arc::clone(&tracker));
    let edit = EditFileTool::new(Arc::clone(&tracker));
    let path = ws.root.join("lib.rs");
    std::fs::write(&path, "fn a() { todo!() }\nfn b() { todo!() }\n").unwrap();

    let err = error(
        call(
            &edit,
            &ws.ctx,
            json!({"path": "lib.rs", "old_string": "fn a", "new_string": "fn z"}),
        )
        .await,
    );
    assert!(err.message().contains("read `"), "{}", err.message());

    text(call(&read, &ws.ctx, json!({"path": "lib.rs"})).await);
    let err = error(
        call(
            &edit,
            &ws.ctx,
            json!({"path": "lib.rs", "old_string": "todo!()", "new_string": "1"}),
        )
        .await,
    );
    assert_eq!(err.kind(), ToolErrorKind::NoUniqueMatch);
    assert!(
        err.message().contains("occurs 2 times"),
        "{}",
        err.message()
    );
    let err = error(
        call(
            &edit,
            &ws.ctx,
            json!({"path": "lib.rs", "old_string": "fn c", "new_string": "x"}),
        )
        .await,
    );
    assert!(err.message().contains("was not found"));

    let out = text(
        call(&edit, &ws.ctx, json!({"path": "lib.rs", "old_string": "fn a() { todo!() }", "new_string": "fn a() { 1 }"})).await,
    );
    assert!(out.contains("replaced 1 occurrence"));
    assert!(out.contains("     1\tfn a() { 1 }"));
    // Edits in a row need no re-read: the tool records its own write.
    text(call(&edit, &ws.ctx, json!({"path": "lib.rs", "old_string": "todo!()", "new_string": "2", "replace_all": true})).await);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "fn a() { 1 }\nfn b() { 2 }\n"
    );

    // Someone else changes the file: the next edit is refused.
    tokio::time::sleep(Duration::from_millis(20)).await;
    std::fs::write(&path, "fn a() { 1 }\nfn b() { 2 }\n// user edit\n").unwrap();
    let err = error(
        call(
            &edit,
            &ws.ctx,
            json!({"path": "lib.rs", "old_string": "fn b", "new_string": "fn c"}),
        )
        .await,
    );
    assert!(
        err.message()
            .contains("changed on disk since you last read it"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn edit_confirmation_carries_a_unified_diff() {
    let ws = workspace();
    let tracker = FileTracker::new();
    let edit = EditFileTool::new(Arc::clone(&tracker));
    std::fs::write(ws.root.join("a.txt"), "alpha\nbeta\ngamma\n").unwrap();
    let args = serde_json::from_value(
        json!({"path": "a.txt", "old_string": "beta", "new_string": "BETA"}),
    )
    .unwrap();
    let summary = edit.confirm_summary(&args, &ws.ctx).await.unwrap();
    let path = ws.root.join("a.txt").display().to_string();
    assert_eq!(
        summary,
        format!("--- {path}\n+++ {path}\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma\n")
    );
}

#[tokio::test]
async fn write_file_creates_parents_replaces_whole_and_guards_stale_files() {
    let ws = workspace();
    let tracker = FileTracker::new();
    let read = ReadFileTool::new(Arc::clone(&tracker));
    let write = WriteFileTool::new(Arc::clone(&tracker));
    let out = text(
        call(
            &write,
            &ws.ctx,
            json!({"path": "deep/dir/new.md", "content": "# Title\n"}),
        )
        .await,
    );
    assert!(out.starts_with("Created"));
    assert_eq!(
        std::fs::read_to_string(ws.root.join("deep/dir/new.md")).unwrap(),
        "# Title\n"
    );
    let out = text(
        call(
            &write,
            &ws.ctx,
            json!({"path": "deep/dir/new.md", "content": "# Other\n"}),
        )
        .await,
    );
    assert!(out.starts_with("Overwrote"));

    text(call(&read, &ws.ctx, json!({"path": "deep/dir/new.md"})).await);
    tokio::time::sleep(Duration::from_millis(20)).await;
    std::fs::write(
        ws.root.join("deep/dir/new.md"),
        "changed by the user, longer\n",
    )
    .unwrap();
    let err = error(
        call(
            &write,
            &ws.ctx,
            json!({"path": "deep/dir/new.md", "content": "x"}),
        )
        .await,
    );
    assert!(err.message().contains("changed on disk"));
    let err = error(call(&write, &ws.ctx, json!({"path": "deep", "content": "x"})).await);
    assert!(err.message().contains("is a directory"));
}

// ------------------------------------------------------------------ search

fn tree(root: &Path) {
    let files = [
        ("src/main.rs", "fn main() {\n    println!(\"hello\");\n}\n"),
        (
            "src/lib.rs",
            "pub fn hello() -> &'static str {\n    \"Hello\"\n}\n",
        ),
        (
            "src/util/mod.rs",
            "// helpers\npub fn shout(s: &str) -> String { s.to_uppercase() }\n",
        ),
        ("docs/guide.md", "Say hello to the guide.\n"),
        ("target/debug/build.log", "hello from the build\n"),
        ("notes.txt", "nothing here\n"),
        (".hidden/secret.txt", "hello hidden\n"),
        ("data.bin", "hello\0binary"),
    ];
    for (path, content) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
}

#[tokio::test]
async fn grep_respects_gitignore_hidden_and_binary_files() {
    let ws = workspace();
    tree(&ws.root);
    let grep = GrepTool::default();
    let out = text(call(&grep, &ws.ctx, json!({"pattern": "hello", "-i": true})).await);
    assert_eq!(out, "docs/guide.md\nsrc/lib.rs\nsrc/main.rs");
    let out = text(
        call(
            &grep,
            &ws.ctx,
            json!({"pattern": "hello", "output_mode": "content"}),
        )
        .await,
    );
    assert_eq!(
        out,
        "docs/guide.md:1: Say hello to the guide.\nsrc/lib.rs:1: pub fn hello() -> &'static str {\nsrc/main.rs:2:     println!(\"hello\");"
    );
    let out = text(
        call(
            &grep,
            &ws.ctx,
            json!({"pattern": "fn", "output_mode": "count", "type": "rust"}),
        )
        .await,
    );
    assert_eq!(out, "src/lib.rs:1\nsrc/main.rs:1\nsrc/util/mod.rs:1");
    let out = text(call(&grep, &ws.ctx, json!({"pattern": "fn \\w+\\(", "glob": "src/util/**", "output_mode": "content", "-B": 1})).await);
    assert_eq!(
        out,
        "src/util/mod.rs-1- // helpers\nsrc/util/mod.rs:2: pub fn shout(s: &str) -> String { s.to_uppercase() }"
    );
    let out = text(
        call(
            &grep,
            &ws.ctx,
            json!({"pattern": "hello", "-i": true, "head_limit": 1}),
        )
        .await,
    );
    assert!(out.starts_with("docs/guide.md\n[showing 1 of 3"), "{out}");
    let out = text(
        call(
            &grep,
            &ws.ctx,
            json!({"pattern": "\"Hello\"\\s*\\}", "multiline": true, "output_mode": "content"}),
        )
        .await,
    );
    assert_eq!(out, "src/lib.rs:2:     \"Hello\"\nsrc/lib.rs:3: }");
    let out = text(call(&grep, &ws.ctx, json!({"pattern": "zebra"})).await);
    assert_eq!(out, "No matches for `zebra`.");
    let err = error(call(&grep, &ws.ctx, json!({"pattern": "fn main("})).await);
    assert!(
        err.message().contains("invalid regular expression"),
        "{}",
        err.message()
    );
    let err = error(call(&grep, &ws.ctx, json!({"pattern": "x", "type": "klingon"})).await);
    assert!(err.message().contains("unknown file type `klingon`"));
    // A single file works too.
    let out = text(call(&grep, &ws.ctx, json!({"pattern": "println", "path": "src/main.rs", "output_mode": "content", "-n": false})).await);
    assert_eq!(out, "src/main.rs:     println!(\"hello\");");
}

#[tokio::test]
async fn glob_lists_newest_first_and_caps_the_count() {
    let ws = workspace();
    tree(&ws.root);
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(ws.root.join("src/newest.rs"), "// new\n").unwrap();
    let out = text(call(&GlobTool::default(), &ws.ctx, json!({"pattern": "**/*.rs"})).await);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "src/newest.rs");
    let mut rest = lines[1..].to_vec();
    rest.sort();
    assert_eq!(rest, ["src/lib.rs", "src/main.rs", "src/util/mod.rs"]);
    let out = text(call(&GlobTool::default(), &ws.ctx, json!({"pattern": "*.txt"})).await);
    assert_eq!(
        out, "notes.txt",
        "top level only; hidden and ignored files skipped"
    );
    for i in 0..150 {
        std::fs::write(ws.root.join(format!("docs/page{i}.md")), "x").unwrap();
    }
    let out = text(
        call(
            &GlobTool::default(),
            &ws.ctx,
            json!({"pattern": "docs/*.md"}),
        )
        .await,
    );
    assert_eq!(out.lines().count(), 101);
    assert!(
        out.ends_with("[51 more files not shown (151 in all); use a narrower pattern or path]")
    );
}

// ------------------------------------------------------------------ git

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

#[tokio::test]
async fn git_diff_shows_staged_unstaged_and_untracked_changes() {
    if !common::have_git() {
        return;
    }
    let ws = workspace();
    git(&ws.root, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.root.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(ws.root.join("b.txt"), "bee\n").unwrap();
    git(&ws.root, &["add", "."]);
    git(&ws.root, &["commit", "-q", "-m", "first"]);
    std::fs::write(ws.root.join("a.txt"), "one\nTWO\n").unwrap();
    std::fs::write(ws.root.join("b.txt"), "bee\nsting\n").unwrap();
    git(&ws.root, &["add", "b.txt"]);
    std::fs::write(ws.root.join("c.txt"), "new\n").unwrap();

    let tool = GitDiffTool::default();
    let unstaged = text(call(&tool, &ws.ctx, json!({})).await);
    assert!(unstaged.contains("diff --git a/a.txt b/a.txt"));
    assert!(unstaged.contains("-two\n+TWO\n"));
    assert!(!unstaged.contains("b.txt b/b.txt"));
    assert!(unstaged.contains("Untracked files (not in the diff): c.txt"));
    assert!(!unstaged.contains("\x1b["), "no colour codes");
    let staged = text(call(&tool, &ws.ctx, json!({"cached": true})).await);
    assert!(staged.contains("+sting"));
    assert!(!staged.contains("a.txt"));
    let since = text(call(&tool, &ws.ctx, json!({"ref": "HEAD", "file": "a.txt"})).await);
    assert!(since.contains("+TWO") && !since.contains("sting"));
    let err = error(call(&tool, &ws.ctx, json!({"ref": "no-such-branch"})).await);
    assert_eq!(err.kind(), ToolErrorKind::NotFound);
    assert!(
        err.message().contains("unknown ref `no-such-branch`"),
        "{}",
        err.message()
    );
    let err = error(call(&tool, &ws.ctx, json!({"ref": "--output=/tmp/x"})).await);
    assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);

    let plain = workspace();
    let err = error(call(&tool, &plain.ctx, json!({})).await);
    assert!(
        err.message().contains("is not inside a git repository"),
        "{}",
        err.message()
    );
}

// ------------------------------------------------------------------ todo

#[tokio::test]
async fn todo_write_validates_and_tells_the_host() {
    let pack = LocalPack::new();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call(
            "t1",
            "todo_write",
            json!({"todos": [
                {"content": "Read the code", "status": "completed"},
                {"content": "Fix the bug", "status": "in_progress", "active_form": "Fixing the bug"},
                {"content": "Run the tests", "status": "pending"}
            ]}),
        ),
        ScriptedTurn::new().tool_call(
            "t2",
            "todo_write",
            json!({"todos": [
                {"content": "A", "status": "in_progress"},
                {"content": "B", "status": "in_progress"}
            ]}),
        ),
        ScriptedTurn::text("ok"),
    ]);
    let agent = Agent::builder(provider).tools(pack.toolset()).build();
    let mut run = agent.run("plan");
    let mut updates = Vec::new();
    while let Some(event) = run.next().await {
        if let AgentEvent::Pack(event) = event
            && let Some(update) = event.downcast_ref::<TodoUpdated>()
        {
            assert_eq!(event.pack(), "todo");
            assert_eq!(event.json()["todos"][1]["status"], "in_progress");
            updates.push(update.todos.clone());
        }
    }
    let outcome = run.finish().await;
    assert_eq!(updates.len(), 1, "the invalid list is not published");
    assert_eq!(updates[0][1].status, TodoStatus::InProgress);
    assert_eq!(pack.todos.items(), updates[0]);
    let first = outcome.conversation.messages[2].text();
    assert_eq!(
        first,
        "Todo list updated: 1 completed, 1 in progress, 1 pending. Now: Fix the bug."
    );
    assert!(
        outcome.conversation.messages[4]
            .text()
            .contains("2 items are in_progress")
    );
}

// ------------------------------------------------------------------ the pack

#[test]
fn descriptions_and_schemas_are_stable() {
    let tools: Toolset = default_tools();
    let specs: Vec<_> = tools.static_tools().specs().to_vec();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "shell",
            "read_file",
            "write_file",
            "edit_file",
            "grep",
            "glob",
            "git_diff",
            "todo_write",
            "dispatch_agent"
        ]
    );
    for spec in &specs {
        insta::assert_snapshot!(format!("description_{}", spec.name), spec.description);
        insta::assert_json_snapshot!(
            format!("schema_{}", spec.name),
            kinet_core::testing::sorted_keys(spec.parameters.clone())
        );
    }
    // Read-only flags as documented.
    let read_only: Vec<bool> = specs
        .iter()
        .map(|s| {
            let tool: &Arc<dyn DynTool> = tools.static_tools().get(&s.name).unwrap();
            let args = match s.name.as_str() {
                "shell" => json!({"command": "ls"}),
                "read_file" => json!({"path": "a"}),
                "write_file" => json!({"path": "a", "content": ""}),
                "edit_file" => json!({"path": "a", "old_string": "x", "new_string": "y"}),
                "grep" => json!({"pattern": "x"}),
                "glob" => json!({"pattern": "*"}),
                "git_diff" => json!({}),
                "dispatch_agent" => json!({"prompt": "x"}),
                _ => json!({"todos": []}),
            };
            Arc::clone(tool)
                .prepare(&args.to_string())
                .unwrap()
                .mutating()
                .not()
        })
        .collect();
    assert_eq!(
        read_only,
        [false, true, false, false, true, true, true, true, true]
    );
}

// ------------------------------------------------------------ review cases

#[tokio::test]
async fn a_command_that_closes_its_output_keeps_running() {
    let ws = workspace();
    let out = text(
        call(
            &ShellTool::default(),
            &ws.ctx,
            json!({"command": "echo before; exec >build.log 2>&1; sleep 0.5; echo built; exit 0"}),
        )
        .await,
    );
    assert_eq!(out, "before\n[exit code: 0]");
    assert_eq!(
        std::fs::read_to_string(ws.root.join("build.log")).unwrap(),
        "built\n"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn special_files_and_huge_lines_are_handled_without_blocking_or_hoarding() {
    let ws = workspace();
    let read = ReadFileTool::new(FileTracker::new());
    let fifo = ws.root.join("pipe");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let err = tokio::time::timeout(
        Duration::from_secs(5),
        call(&read, &ws.ctx, json!({"path": "pipe"})),
    )
    .await
    .expect("a FIFO does not block")
    .unwrap_err();
    assert!(
        err.message().contains("not a regular file"),
        "{}",
        err.message()
    );

    // One 3 MB line, read as a range: cut, with its byte length.
    let line = "z".repeat(3 * 1024 * 1024);
    std::fs::write(ws.root.join("min.js"), format!("{line}\nsecond\n")).unwrap();
    let out = text(
        call(
            &read,
            &ws.ctx,
            json!({"path": "min.js", "offset": 1, "limit": 2}),
        )
        .await,
    );
    assert!(
        out.contains(&format!("… [line cut: {} bytes]", 3 * 1024 * 1024 + 1)),
        "{}",
        &out[out.len() - 200..]
    );
    assert!(out.contains("     2\tsecond"));
    assert!(out.len() < 10_000);
}

#[tokio::test]
async fn grep_stops_inside_a_file_at_the_entry_limit_and_glob_takes_absolute_patterns() {
    let ws = workspace();
    let many: String = (0..10_000).map(|i| format!("row {i}\n")).collect();
    std::fs::write(ws.root.join("rows.txt"), many).unwrap();
    let grep = GrepTool::new(GrepConfig {
        max_entries: 100,
        ..GrepConfig::default()
    });
    let out = text(
        call(
            &grep,
            &ws.ctx,
            json!({"pattern": "row", "output_mode": "content"}),
        )
        .await,
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("rows.txt:")).count(),
        100
    );
    assert!(out.contains("[the search stopped after 100 results"));

    std::fs::create_dir(ws.root.join("src")).unwrap();
    std::fs::write(ws.root.join("src/a.rs"), "").unwrap();
    let pattern = format!("{}/src/*.rs", ws.root.display());
    let out = text(call(&GlobTool::default(), &ws.ctx, json!({"pattern": pattern})).await);
    assert_eq!(out, "src/a.rs");
    let out = text(
        call(
            &GlobTool::default(),
            &ws.ctx,
            json!({"pattern": "./src/*.rs"}),
        )
        .await,
    );
    assert_eq!(out, "src/a.rs");
}

/// Records when each call enters and leaves the tool, holding it 50 ms so
/// that calls which may overlap do.
#[derive(Default)]
struct Spans(std::sync::Mutex<Vec<(String, std::time::Instant, std::time::Instant)>>);

#[async_trait::async_trait]
impl kinet_core::layer::ToolLayer for Spans {
    async fn call(
        &self,
        call: kinet_core::layer::Invocation,
        next: kinet_core::layer::Next<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let id = call.ctx().call_id().to_owned();
        let entered = std::time::Instant::now();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let result = next.run(call).await;
        self.0
            .lock()
            .unwrap()
            .push((id, entered, std::time::Instant::now()));
        result
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todo_writes_never_overlap_and_reads_do() {
    let ws = workspace();
    std::fs::write(ws.root.join("a.txt"), "a\n").unwrap();
    let todos = |content: &str| json!({"todos": [{"content": content, "status": "in_progress"}]});
    let mut turn = ScriptedTurn::new()
        .tool_call("t1", "todo_write", todos("first"))
        .tool_call("t2", "todo_write", todos("second"));
    for i in 0..5 {
        turn = turn.tool_call(format!("r{i}"), "read_file", json!({"path": "a.txt"}));
    }
    let provider = ScriptedProvider::new([turn, ScriptedTurn::text("ok")]);
    let spans = Arc::new(Spans::default());
    let pack = kinet_tools::LocalPack::new();
    let agent = Agent::builder(provider)
        .tools(pack.toolset())
        .workspace(AgentWorkspace::new().cwd(&ws.root).root(&ws.root))
        .calls(Calls::new().layer(spans.clone()))
        .build();
    let outcome = agent.run_to_completion("go").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let spans = spans.0.lock().unwrap().clone();
    let span = |id: &str| spans.iter().find(|s| s.0 == id).cloned().unwrap();
    let (t1, t2) = (span("t1"), span("t2"));
    assert!(t1.2 <= t2.1, "the two todo_write calls overlapped");
    // No approval was needed, and the second list won.
    assert_eq!(pack.todos.items()[0].content, "second");
    // The five reads all started before any of them ended.
    let reads: Vec<_> = (0..5).map(|i| span(&format!("r{i}"))).collect();
    let last_start = reads.iter().map(|r| r.1).max().unwrap();
    let first_end = reads.iter().map(|r| r.2).min().unwrap();
    assert!(last_start < first_end, "the reads ran one after another");
}
