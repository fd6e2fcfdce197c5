//! The file tools inside an editor (`kinet_core::editor::Editor`): reads
//! and edits take the editor's text, writes go to the editor, and every
//! path is checked on disk, beneath the workspace root, before the editor
//! is asked anything.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kinet_core::builder::Workspace;
use kinet_core::tool::engine::EngineCtx as _;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::result_text;
use kinet_core::editor::{Editor, EditorFiles};
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::tool::engine::Extensions;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use kinet_tools::default_tools;
use kinet_tools::files::{EditFileTool, FileTracker, ReadFileTool, WriteFileTool};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// An editor: buffers by path (a file without one reads as the disk does),
/// every path asked noted, writes kept in the buffers.
#[derive(Default)]
struct FakeEditor {
    buffers: Mutex<HashMap<PathBuf, String>>,
    asked: Mutex<Vec<PathBuf>>,
    writes: Mutex<Vec<(PathBuf, String)>>,
    takes_writes: bool,
    gives_text: bool,
}

impl FakeEditor {
    fn new(takes_writes: bool) -> Arc<Self> {
        Arc::new(Self {
            takes_writes,
            gives_text: true,
            ..Self::default()
        })
    }

    /// An editor that offers writes but not reads.
    fn write_only() -> Arc<Self> {
        Arc::new(Self {
            takes_writes: true,
            ..Self::default()
        })
    }

    /// The person types into a buffer (unsaved).
    fn type_into(&self, path: &Path, text: &str) {
        self.buffers
            .lock()
            .unwrap()
            .insert(path.to_owned(), text.to_owned());
    }

    fn writes(&self) -> Vec<(PathBuf, String)> {
        self.writes.lock().unwrap().clone()
    }

    fn asked(&self) -> Vec<PathBuf> {
        self.asked.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl EditorFiles for FakeEditor {
    fn reads(&self) -> bool {
        self.gives_text
    }

    async fn read_text(&self, path: &Path) -> Result<String, String> {
        self.asked.lock().unwrap().push(path.to_owned());
        if let Some(text) = self.buffers.lock().unwrap().get(path) {
            return Ok(text.clone());
        }
        std::fs::read_to_string(path).map_err(|e| e.to_string())
    }

    fn writes(&self) -> bool {
        self.takes_writes
    }

    async fn write_text(&self, path: &Path, text: &str) -> Result<(), String> {
        self.asked.lock().unwrap().push(path.to_owned());
        self.writes
            .lock()
            .unwrap()
            .push((path.to_owned(), text.to_owned()));
        self.type_into(path, text);
        Ok(())
    }
}

/// A workspace, its context with the editor, and the file tools sharing a
/// tracker.
struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ctx: ToolCtx,
    read: ReadFileTool,
    edit: EditFileTool,
    write: WriteFileTool,
}

fn setup(editor: &Arc<FakeEditor>) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let mut extensions = Extensions::new();
    extensions.insert(Editor(editor.clone()));
    let ctx = ToolCtx::new(&root)
        .with_roots(vec![root.clone()])
        .with_extensions(extensions);
    let tracker = FileTracker::new();
    Setup {
        _dir: dir,
        root,
        ctx,
        read: ReadFileTool::new(tracker.clone()),
        edit: EditFileTool::new(tracker.clone()),
        write: WriteFileTool::new(tracker),
    }
}

async fn call<T: Tool>(
    tool: &T,
    ctx: &ToolCtx,
    args: serde_json::Value,
) -> Result<ToolOutput, ToolError> {
    tool.call(serde_json::from_value(args).unwrap(), ctx).await
}

/// `edit_file` of `path` in the workspace: `old` to `new`.
async fn edit(s: &Setup, path: &str, old: &str, new: &str) -> Result<ToolOutput, ToolError> {
    let args = json!({"path": path, "old_string": old, "new_string": new});
    call(&s.edit, &s.ctx, args).await
}

/// `read_file` of `path` in the workspace.
async fn read(s: &Setup, path: &str) -> Result<ToolOutput, ToolError> {
    call(&s.read, &s.ctx, json!({ "path": path })).await
}

fn message(result: Result<ToolOutput, ToolError>) -> String {
    match result {
        Ok(output) => panic!("expected an error, got {:?}", output.text),
        Err(error) => error.message().to_owned(),
    }
}

#[tokio::test]
async fn edits_take_the_editors_text_and_go_to_the_editor() {
    let editor = FakeEditor::new(true);
    let s = setup(&editor);
    let notes = s.root.join("notes.txt");
    std::fs::write(&notes, "saved text\n").unwrap();
    editor.type_into(&notes, "unsaved text\n");

    let shown = read(&s, "notes.txt").await;
    assert_eq!(shown.unwrap().text, "     1\tunsaved text\n");
    // The model edits what it read: the buffer, not the disk.
    let edited = edit(&s, "notes.txt", "unsaved", "edited").await;
    assert!(edited.unwrap().text.contains("edited text"));
    assert_eq!(editor.writes(), [(notes.clone(), "edited text\n".into())]);
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "saved text\n");

    // Its own write does not make the file stale: a second edit goes on.
    let again = edit(&s, "notes.txt", "edited", "twice edited").await;
    assert!(again.is_ok(), "{again:?}");

    // The person types into the buffer: the next edit must read again,
    // even though the disk did not change.
    editor.type_into(&notes, "typed by the person\n");
    let stale = edit(&s, "notes.txt", "person", "model").await;
    let stale = message(stale);
    assert!(stale.contains("changed in the editor"), "{stale}");
    assert_eq!(editor.writes().len(), 2);
    read(&s, "notes.txt").await.unwrap();
    edit(&s, "notes.txt", "person", "model").await.unwrap();
    assert_eq!(
        editor.writes().last().unwrap().1,
        "typed by the model\n".to_owned()
    );
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "saved text\n");
}

#[tokio::test]
async fn the_confirmation_diff_is_against_the_editors_text() {
    let editor = FakeEditor::new(true);
    let s = setup(&editor);
    let notes = s.root.join("notes.txt");
    std::fs::write(&notes, "alpha\n").unwrap();
    editor.type_into(&notes, "beta\n");
    let args = serde_json::from_value(
        json!({"path": "notes.txt", "old_string": "beta", "new_string": "gamma"}),
    )
    .unwrap();
    let summary = s.edit.confirm_summary(&args, &s.ctx).await.unwrap();
    assert!(
        summary.contains("-beta") && summary.contains("+gamma"),
        "{summary}"
    );
    let args = serde_json::from_value(json!({"path": "notes.txt", "content": "delta\n"})).unwrap();
    let summary = s.write.confirm_summary(&args, &s.ctx).await.unwrap();
    assert!(
        summary.contains("-beta") && summary.contains("+delta"),
        "{summary}"
    );
}

#[tokio::test]
async fn writes_are_checked_on_disk_before_the_editor_is_asked() {
    let editor = FakeEditor::new(true);
    let s = setup(&editor);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), s.root.join("out.txt")).unwrap();
    std::fs::write(s.root.join("real.txt"), "real\n").unwrap();
    std::os::unix::fs::symlink("real.txt", s.root.join("alias.txt")).unwrap();
    std::fs::create_dir(s.root.join(".git")).unwrap();
    let fifo = s.root.join("pipe");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );

    // A new file in a new directory: the directory is made on disk, the
    // text goes to the editor, the file is the editor's to create.
    call(
        &s.write,
        &s.ctx,
        json!({"path": "src/new.rs", "content": "fn main() {}\n"}),
    )
    .await
    .unwrap();
    assert!(s.root.join("src").is_dir());
    assert!(!s.root.join("src/new.rs").exists());
    assert_eq!(
        editor.writes(),
        [(s.root.join("src/new.rs"), "fn main() {}\n".into())]
    );

    // Refused before the editor hears of them: a link out of the root, a
    // path outside it, a protected directory, a FIFO, an unread file.
    let refused = [
        json!({"path": "out.txt", "content": "x"}),
        json!({"path": outside.path().join("secret.txt"), "content": "x"}),
        json!({"path": ".git/config", "content": "x"}),
        json!({"path": "pipe", "content": "x"}),
        json!({"path": "real.txt", "content": "x"}),
    ];
    for args in refused {
        let result = call(&s.write, &s.ctx, args.clone()).await;
        assert!(result.is_err(), "{args}: {result:?}");
    }
    assert_eq!(editor.writes().len(), 1);
    assert_eq!(editor.asked().len(), 1, "{:?}", editor.asked());
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "secret\n"
    );

    // A link inside the root: the editor gets the file it points to.
    read(&s, "alias.txt").await.unwrap();
    edit(&s, "alias.txt", "real", "through the link")
        .await
        .unwrap();
    let (path, text) = editor.writes().last().unwrap().clone();
    assert_eq!(path, s.root.join("real.txt"));
    assert_eq!(text, "through the link\n");
}

#[tokio::test]
async fn a_cancelled_call_asks_the_editor_nothing() {
    let editor = FakeEditor::new(true);
    let s = setup(&editor);
    std::fs::write(s.root.join("a.txt"), "a\n").unwrap();
    read(&s, "a.txt").await.unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let ctx = s.ctx.clone().with_cancellation(cancel);
    let result = call(&s.write, &ctx, json!({"path": "a.txt", "content": "b\n"})).await;
    assert!(message(result).contains("cancelled"));
    let result = call(
        &s.edit,
        &ctx,
        json!({"path": "a.txt", "old_string": "a", "new_string": "b"}),
    )
    .await;
    assert!(message(result).contains("cancelled"));
    assert!(editor.writes().is_empty());
}

#[tokio::test]
async fn an_editor_that_only_reads_gives_the_base_and_the_disk_takes_the_edit() {
    let editor = FakeEditor::new(false);
    let s = setup(&editor);
    let notes = s.root.join("notes.txt");
    std::fs::write(&notes, "saved\n").unwrap();
    editor.type_into(&notes, "unsaved\n");
    read(&s, "notes.txt").await.unwrap();
    edit(&s, "notes.txt", "unsaved", "edited").await.unwrap();
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "edited\n");
    assert!(editor.writes().is_empty());
    // The editor reloads the file from disk; the next edit goes on.
    editor.type_into(&notes, "edited\n");
    edit(&s, "notes.txt", "edited", "again").await.unwrap();
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "again\n");
}

#[tokio::test]
async fn the_editors_reads_survive_a_restart_of_the_tracker() {
    use kinet_core::session::SessionState;
    let editor = FakeEditor::new(true);
    let s = setup(&editor);
    let notes = s.root.join("notes.txt");
    std::fs::write(&notes, "saved\n").unwrap();
    editor.type_into(&notes, "unsaved\n");
    let tracker = FileTracker::new();
    ReadFileTool::new(tracker.clone())
        .call(
            serde_json::from_value(json!({"path": "notes.txt"})).unwrap(),
            &s.ctx,
        )
        .await
        .unwrap();
    // A new process: the tracker comes back from the session.
    let restored = FileTracker::new();
    restored.restore(&tracker.save()).unwrap();
    let edit = EditFileTool::new(restored.clone());
    call(
        &edit,
        &s.ctx,
        json!({"path": "notes.txt", "old_string": "unsaved", "new_string": "kept"}),
    )
    .await
    .unwrap();
    editor.type_into(&notes, "changed meanwhile\n");
    let fresh = FileTracker::new();
    fresh.restore(&restored.save()).unwrap();
    let result = call(
        &EditFileTool::new(fresh),
        &s.ctx,
        json!({"path": "notes.txt", "old_string": "meanwhile", "new_string": "x"}),
    )
    .await;
    assert!(message(result).contains("changed in the editor"));
}

#[tokio::test]
async fn read_file_reads_the_editors_buffer_only_for_files_inside_the_root() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("inside.txt"), "on disk\n").unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        root.path().join("link.txt"),
    )
    .unwrap();
    let buffers = FakeEditor::new(false);
    buffers.type_into(
        &std::fs::canonicalize(root.path())
            .unwrap()
            .join("inside.txt"),
        "from the buffer\n",
    );
    let agent = kinet_core::Agent::builder(ScriptedProvider::new([
        ScriptedTurn::new()
            .tool_call("a", "read_file", json!({"path": "inside.txt"}))
            .tool_call("b", "read_file", json!({"path": "link.txt"}))
            .tool_call(
                "c",
                "read_file",
                json!({"path": outside.path().join("secret.txt")}),
            ),
        ScriptedTurn::text("done"),
    ]))
    .tools(default_tools())
    .workspace(Workspace::new().root(root.path()).cwd(root.path()))
    .extension(Editor(buffers.clone()))
    .build();
    let outcome = agent.run_to_completion("read").await;
    let result = |id: &str| result_text(&outcome, id);
    assert_eq!(result("a"), ("     1\tfrom the buffer\n".to_owned(), false));
    // A link out of the root and a path outside it are refused before the
    // editor is asked.
    assert!(result("b").1, "{:?}", result("b"));
    assert!(result("c").1, "{:?}", result("c"));
    assert!(!result("b").0.contains("secret\n") && !result("c").0.contains("secret\n"));
    let asked = buffers.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].ends_with("inside.txt"), "{asked:?}");
}

#[tokio::test]
async fn a_disk_change_the_editor_has_not_reloaded_is_not_overwritten() {
    let editor = FakeEditor::new(false);
    let s = setup(&editor);
    let notes = s.root.join("notes.txt");
    std::fs::write(&notes, "one\n").unwrap();
    read(&s, "notes.txt").await.unwrap();
    // A formatter rewrites the file; the editor still holds the old text
    // (its buffer, typed into, does not reload).
    editor.type_into(&notes, "one\n");
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&notes, "one, formatted\n").unwrap();
    let result = edit(&s, "notes.txt", "one", "two").await;
    assert!(message(result).contains("changed on disk"));
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "one, formatted\n");
}

#[tokio::test]
async fn an_editor_that_only_takes_writes_is_not_written_to() {
    let editor = FakeEditor::write_only();
    let s = setup(&editor);
    let notes = s.root.join("notes.txt");
    std::fs::write(&notes, "one\n").unwrap();
    read(&s, "notes.txt").await.unwrap();
    for (old, new) in [("one", "two"), ("two", "three")] {
        call(
            &s.edit,
            &s.ctx,
            json!({"path": "notes.txt", "old_string": old, "new_string": new}),
        )
        .await
        .unwrap();
    }
    // Both edits on disk, none lost to an unsaved editor write.
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "three\n");
    assert!(editor.writes().is_empty() && editor.asked().is_empty());
}

#[tokio::test]
async fn the_editor_is_asked_for_the_file_a_link_leads_to() {
    let editor = FakeEditor::new(true);
    let s = setup(&editor);
    std::fs::write(s.root.join("real.txt"), "saved\n").unwrap();
    std::os::unix::fs::symlink("real.txt", s.root.join("alias.txt")).unwrap();
    editor.type_into(&s.root.join("real.txt"), "unsaved\n");
    let shown = read(&s, "alias.txt").await;
    assert_eq!(shown.unwrap().text, "     1\tunsaved\n");
    edit(&s, "alias.txt", "unsaved", "edited").await.unwrap();
    // Read, base and write: one buffer, the real file's.
    assert!(
        editor.asked().iter().all(|p| p == &s.root.join("real.txt")),
        "{:?}",
        editor.asked()
    );
    assert_eq!(
        editor.writes(),
        [(s.root.join("real.txt"), "edited\n".to_owned())]
    );
}
