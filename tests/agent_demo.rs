//! The agent example's demonstration, run as a test: in a fresh copy of the
//! bundled project `cargo test` fails, the scripted run fixes it with real
//! tool calls (grep, read_file, edit_file, shell, git_diff, todo, memory),
//! and `cargo test` passes afterwards.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

#[path = "../examples/agent/main.rs"]
#[allow(dead_code, unreachable_pub)]
mod agent;

use std::path::Path;
use std::process::Command;

/// `cargo test` in `project`, in its own target directory.
fn cargo_test(project: &Path) -> (bool, String) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["test", "--color", "never"])
        .current_dir(project)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demonstration_fixes_the_failing_test_with_real_tool_calls() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("wordstat");
    std::fs::create_dir_all(&project).unwrap();
    // The user's MCP config: one server that cannot start, so the status
    // shown at start has something to say.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join(".claude.json"),
        r#"{"mcpServers": {"broken": {"command": "/nonexistent/kinet-test-mcp-server"}}}"#,
    )
    .unwrap();
    agent::demo::prepare(&project).unwrap();

    let (passed, before) = cargo_test(&project);
    assert!(
        !passed,
        "the bundled project's tests should fail first:\n{before}"
    );
    assert!(
        before.contains("counts_words_across_lines_and_tabs"),
        "{before}"
    );

    let (out, buffer) = agent::ui::Out::buffer();
    let outcome = agent::demo::run_in(&project, &out, Some(home.path()))
        .await
        .unwrap();
    let shown = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
    assert!(outcome.stop.is_completed(), "{:?}\n{shown}", outcome.stop);

    let (passed, after) = cargo_test(&project);
    assert!(
        passed,
        "the tests still fail after the run:\n{after}\n{shown}"
    );
    let source = std::fs::read_to_string(project.join("src/lib.rs")).unwrap();
    assert!(
        source.contains("text.split_whitespace().count()"),
        "{source}"
    );

    // What the user saw: the approval with its diff and the note that the
    // demonstration approves by itself, the shell's output as it ran, the
    // todo list, and git's diff of the change.
    for expected in [
        "edit_file wants to:",
        "-    text.split(' ').filter(|word| !word.is_empty()).count()",
        "+    text.split_whitespace().count()",
        "approved automatically: this is the demonstration",
        "shell wants to:",
        "test tests::counts_words_across_lines_and_tabs ... FAILED",
        "test result: ok. 3 passed",
        "▶ Finding the failing test",
        "☑ Review the change",
        "src/lib.rs",
        "mcp      starting 1 server(s)",
        "mcp      broken (",
        "failed: ",
    ] {
        assert!(
            shown.contains(expected),
            "missing `{expected}` in:\n{shown}"
        );
    }
    if agent::demo::have_git() {
        assert!(shown.contains("⚙ git_diff"), "{shown}");
        assert!(
            shown.contains("diff --git a/src/lib.rs b/src/lib.rs"),
            "{shown}"
        );
    } else {
        kinet::core::testing::skipped(
            "part of the demonstration test: git is not installed, so the review used read_file",
        );
    }
    // Every tool result is in the history: nothing was denied or failed.
    let results: Vec<_> = outcome
        .conversation
        .messages
        .iter()
        .filter_map(|m| match m {
            kinet::Message::Tool { .. } => Some(m.text()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 13, "{results:#?}");
    // The memory and the session journal are in the project's .kinet file,
    // which git ignores.
    assert!(project.join(".kinet/kinet.db").exists());
    assert_eq!(
        std::fs::read_to_string(project.join(".kinet/.gitignore")).unwrap(),
        "*\n"
    );
}
