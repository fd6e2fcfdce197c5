//! The demonstration run when no model is configured: a scripted model
//! fixes a failing test in a copy of a small bundled Rust project. Every
//! tool call is real (grep, read_file, edit_file, shell running
//! `cargo test`, git_diff, the todo list, memory); only the model's turns
//! are written in advance.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
use kinet::{Conversation, RunOutcome};
use serde_json::{Value, json};

use super::confirm::DemoConfirm;
use super::ui::{Out, Style, View, drive};
use super::workbench::{self, Options};

/// The bundled project, written into the copy.
const FILES: [(&str, &str); 4] = [
    ("Cargo.toml", include_str!("project/Cargo.toml")),
    (".gitignore", include_str!("project/.gitignore")),
    ("README.md", include_str!("project/README.md")),
    ("src/lib.rs", include_str!("project/src/lib.rs")),
];

/// What the user asks in the demonstration.
pub const TASK: &str = "The tests of this project fail. Find out why and fix it.";

/// Whether `git` can be run here.
pub fn have_git() -> bool {
    Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Writes the bundled project into `dir` and commits it (when git is
/// installed), so git_diff shows the agent's change.
pub fn prepare(dir: &Path) -> anyhow::Result<()> {
    for (name, text) in FILES {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if have_git() {
        for args in [
            &["init", "--quiet", "--initial-branch=main"][..],
            &["add", "."],
            &[
                "-c",
                "user.name=kinet demo",
                "-c",
                "user.email=demo@kinet.invalid",
                "-c",
                "commit.gpgsign=false",
                "commit",
                "--quiet",
                "-m",
                "wordstat: word statistics",
            ],
        ] {
            let status = Command::new("git")
                .args(args)
                .current_dir(dir)
                .output()
                .with_context(|| format!("cannot run git {args:?}"))?;
            anyhow::ensure!(
                status.status.success(),
                "git {args:?} failed: {}",
                String::from_utf8_lossy(&status.stderr)
            );
        }
    }
    Ok(())
}

fn todos(items: &[(&str, &str, &str)]) -> Value {
    let todos: Vec<Value> = items
        .iter()
        .map(|(content, status, active)| {
            json!({"content": content, "status": status, "active_form": active})
        })
        .collect();
    json!({ "todos": todos })
}

/// The plan, with `done` items completed and the next one in progress.
fn plan(done: usize) -> Value {
    let steps = [
        ("Run the tests", "Running the tests"),
        ("Find the failing test", "Finding the failing test"),
        ("Fix the bug", "Fixing the bug"),
        ("Run the tests again", "Running the tests again"),
        ("Review the change", "Reviewing the change"),
    ];
    let items: Vec<(&str, &str, &str)> = steps
        .iter()
        .enumerate()
        .map(|(i, (content, active))| {
            let status = match i.cmp(&done) {
                std::cmp::Ordering::Less => "completed",
                std::cmp::Ordering::Equal => "in_progress",
                std::cmp::Ordering::Greater => "pending",
            };
            (*content, status, *active)
        })
        .collect();
    todos(&items)
}

/// The scripted model's turns. With no git, the review step reads the file
/// instead of git_diff.
fn script(git: bool) -> Vec<ScriptedTurn> {
    let test = json!({"command": "cargo test --color never"});
    let review = if git {
        ScriptedTurn::new().tool_call("c9", "git_diff", json!({}))
    } else {
        ScriptedTurn::new().tool_call(
            "c9",
            "read_file",
            json!({"path": "src/lib.rs", "offset": 1, "limit": 8}),
        )
    };
    vec![
        ScriptedTurn::text("I'll plan the work, then run the tests to see what fails.")
            .tool_call("c1", "todo_write", plan(0))
            .tool_call("c2", "shell", test.clone()),
        ScriptedTurn::text(
            "`counts_words_across_lines_and_tabs` fails: 1 word counted where 3 were expected. \
             Let me find the test and the function it checks.",
        )
        .tool_call("c3", "todo_write", plan(1))
        .tool_call(
            "c4",
            "grep",
            json!({"pattern": "fn (word_count|counts_words_across_lines_and_tabs)", "output_mode": "content"}),
        ),
        ScriptedTurn::new().tool_call("c5", "read_file", json!({"path": "src/lib.rs"})),
        ScriptedTurn::text(
            "`word_count` splits on spaces only, so a line break or a tab joins two words. \
             `split_whitespace` splits on every kind of whitespace and skips empty pieces.",
        )
        .tool_call("c6", "todo_write", plan(2))
        .tool_call(
            "c7",
            "edit_file",
            json!({
                "path": "src/lib.rs",
                "old_string": "    text.split(' ').filter(|word| !word.is_empty()).count()",
                "new_string": "    text.split_whitespace().count()",
            }),
        ),
        ScriptedTurn::new()
            .tool_call("c8", "todo_write", plan(3))
            .tool_call("c8b", "shell", test),
        review.tool_call("c10", "todo_write", plan(4)),
        ScriptedTurn::new()
            .tool_call(
                "c11",
                "memory_append",
                json!({"label": "project_context", "text": "wordstat: a Rust library; its tests run with `cargo test`."}),
            )
            .tool_call("c12", "todo_write", plan(5)),
        ScriptedTurn::text(
            "Fixed: `word_count` now uses `split_whitespace`, so words separated by line breaks \
             and tabs are counted. All 3 tests pass, and the diff is the one line in `src/lib.rs`.",
        ),
    ]
}

/// Runs the demonstration in `project` (prepared with [`prepare`]);
/// `home` is where MCP config files are looked for (default: the user's).
pub async fn run_in(project: &Path, out: &Out, home: Option<&Path>) -> anyhow::Result<RunOutcome> {
    let provider = Arc::new(ScriptedProvider::new(script(have_git())));
    let options = Options {
        project: project.to_path_buf(),
        home: home.map(Path::to_path_buf),
        sandbox: false,
        rules: None,
        resume: None,
        mcp_wait: Duration::from_secs(10),
        // The sample project builds in its own directory, not in a target
        // directory the host's cargo may be holding.
        // A panic's backtrace, if the host asks for them, would bury the
        // failing assertion.
        shell_env: vec![
            ("CARGO_TARGET_DIR".to_owned(), None),
            ("RUST_BACKTRACE".to_owned(), None),
        ],
        own_sessions: true,
    };
    let confirm = Arc::new(DemoConfirm { out: out.clone() });
    let bench = workbench::open(provider.clone(), None, confirm, &options, out).await?;
    out.line(&format!("\n{} {TASK}", out.paint(Style::Bold, "›")));
    let mut conversation = Conversation::new();
    conversation.push_user(TASK);
    let mut view = View::new(out.clone());
    let outcome = drive(bench.agent.run(conversation), &mut view, true).await;
    if let Some(hub) = &bench.hub {
        hub.shutdown().await;
    }
    provider
        .assert_finished()
        .map_err(|e| anyhow::anyhow!("the demonstration's script went wrong: {e}"))?;
    Ok(outcome)
}

/// The whole demonstration: a temporary copy, the run, where things are.
pub async fn run(out: &Out, keep: bool) -> anyhow::Result<()> {
    out.line(&out.paint(Style::Bold, "kinet agent: demonstration"));
    out.line(&out.paint(
        Style::Dim,
        "No model is configured (set OPENAI_API_KEY, ANTHROPIC_API_KEY or KINET_BASE_URL for a real one),\n\
         so a scripted model fixes a failing test in a copy of a small bundled project.\n\
         Every tool call below is real; only the model's turns are written in advance.\n",
    ));
    let temp = tempfile::Builder::new().prefix("kinet-demo-").tempdir()?;
    let project = temp.path().join("wordstat");
    std::fs::create_dir_all(&project)?;
    prepare(&project)?;
    out.line(&format!("project  {}", project.display()));
    let outcome = run_in(&project, out, None).await?;
    anyhow::ensure!(
        outcome.stop.is_completed(),
        "the demonstration {}",
        outcome.stop
    );
    if keep {
        let dir = temp.keep();
        out.line(&format!(
            "\nThe project is kept at {}; continue its session with\n  cargo run --example agent --features tools,mcp,memory -- --project {} --resume <the session id above>",
            dir.display(),
            dir.join("wordstat").display()
        ));
    } else {
        out.line(&out.paint(
            Style::Dim,
            "\n(the temporary copy is removed; --keep keeps it)",
        ));
    }
    Ok(())
}
