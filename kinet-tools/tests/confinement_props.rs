//! Property test: random trees of directories, files and symlinks (chains,
//! loops, links out of the root, links through `/proc/self/root`), random
//! path strings, and symlinks swapped while the tools run. No tool may
//! read, list, change or run in anything outside the workspace root.
//!
//! 10,000 cases by default, each running read_file, grep, glob, shell (its
//! `cwd`), edit_file and write_file; `KINET_CONFINEMENT_CASES` overrides.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use kinet_tools::files::{EditFileTool, FileTracker, ReadFileTool, WriteFileTool};
use kinet_tools::search::{GlobTool, GrepTool};
use kinet_tools::shell::ShellTool;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::json;

const SECRET: &str = "OUTSIDE-SECRET-7f3a";
const OUTSIDE_NAME: &str = "zz-outside-name-7f3a.txt";

/// Where a symlink points.
#[derive(Debug, Clone)]
enum Target {
    /// A relative path of names, `.` and `..`.
    Relative(Vec<&'static str>),
    /// `../<outside dir>[/secret.txt]` with some `a/..` noise.
    Sibling { noise: usize, file: bool },
    /// The outside directory or its secret, absolutely.
    Absolute { file: bool },
    /// The outside directory through `/proc/self/root` or `/proc/self/cwd`.
    Proc { cwd: bool },
    /// Another entry of the tree, absolutely (chains and loops).
    Inside(Vec<&'static str>),
}

#[derive(Debug, Clone)]
enum Node {
    Dir,
    File,
    Link(Target),
}

#[derive(Debug, Clone)]
struct Case {
    entries: Vec<(Vec<&'static str>, Node)>,
    path: Vec<&'static str>,
    path_kind: u8,
    swap: bool,
}

const NAMES: &[&str] = &["a", "b", "c", "d", "secret.txt"];

fn names(max: usize) -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(prop::sample::select(NAMES), 1..=max)
}

fn steps(max: usize) -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(
        prop::sample::select(&["a", "b", "c", "d", "secret.txt", "..", "..", "."][..]),
        0..=max,
    )
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        3 => steps(6).prop_map(Target::Relative),
        2 => (0usize..3, any::<bool>()).prop_map(|(noise, file)| Target::Sibling { noise, file }),
        1 => any::<bool>().prop_map(|file| Target::Absolute { file }),
        1 => any::<bool>().prop_map(|cwd| Target::Proc { cwd }),
        3 => names(3).prop_map(Target::Inside),
    ]
}

fn node() -> impl Strategy<Value = Node> {
    prop_oneof![
        2 => Just(Node::Dir),
        1 => Just(Node::File),
        4 => target().prop_map(Node::Link),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((names(3), node()), 1..10),
        steps(5),
        0u8..6,
        prop::bool::weighted(0.2),
    )
        .prop_map(|(entries, path, path_kind, swap)| Case {
            entries,
            path,
            path_kind,
            swap,
        })
}

struct World {
    _guards: (tempfile::TempDir, tempfile::TempDir),
    root: PathBuf,
    outside: PathBuf,
}

impl World {
    fn new() -> Self {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(a.path()).unwrap();
        let outside = std::fs::canonicalize(b.path()).unwrap();
        std::fs::write(outside.join("secret.txt"), format!("{SECRET}\n")).unwrap();
        std::fs::write(outside.join(OUTSIDE_NAME), format!("{SECRET}\n")).unwrap();
        std::fs::create_dir(outside.join("a")).unwrap();
        std::fs::write(outside.join("a/secret.txt"), format!("{SECRET}\n")).unwrap();
        Self {
            root,
            outside,
            _guards: (a, b),
        }
    }

    fn link_text(&self, target: &Target) -> PathBuf {
        let outside_name = self.outside.file_name().unwrap();
        match target {
            Target::Relative(steps) => steps.iter().collect::<PathBuf>(),
            Target::Sibling { noise, file } => {
                let mut path = PathBuf::new();
                for _ in 0..*noise {
                    path.push("a");
                    path.push("..");
                }
                path.push("..");
                path.push(outside_name);
                if *file {
                    path.push("secret.txt");
                }
                path
            }
            Target::Absolute { file } => {
                if *file {
                    self.outside.join("secret.txt")
                } else {
                    self.outside.clone()
                }
            }
            Target::Proc { cwd } => {
                if *cwd {
                    // The test process's cwd is the crate directory; climb
                    // to / and down to the outside directory.
                    let depth = std::env::current_dir().unwrap().components().count();
                    let mut path = PathBuf::from("/proc/self/cwd");
                    for _ in 0..depth {
                        path.push("..");
                    }
                    path.join(self.outside.strip_prefix("/").unwrap())
                } else {
                    Path::new("/proc/self/root").join(self.outside.strip_prefix("/").unwrap())
                }
            }
            Target::Inside(names) => self.root.join(names.iter().collect::<PathBuf>()),
        }
    }

    fn build(&self, case: &Case) {
        for (names, node) in &case.entries {
            let path = self.root.join(names.iter().collect::<PathBuf>());
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let _ = match node {
                Node::Dir => std::fs::create_dir(&path),
                Node::File => std::fs::write(&path, "inside\n"),
                Node::Link(target) => std::os::unix::fs::symlink(self.link_text(target), &path),
            };
        }
    }

    /// The model's path for this case.
    fn path_text(&self, case: &Case) -> String {
        let steps: PathBuf = case.path.iter().collect();
        let text = match case.path_kind {
            0 | 1 => steps,
            2 => Path::new("..")
                .join(self.outside.file_name().unwrap())
                .join(&steps),
            3 => self.outside.join(&steps),
            4 => Path::new("/proc/self/root")
                .join(self.outside.strip_prefix("/").unwrap())
                .join(&steps),
            _ => self.root.join(&steps),
        };
        let text = text.display().to_string();
        if text.is_empty() { ".".into() } else { text }
    }

    /// Everything outside, names and contents, to compare before and after.
    fn outside_state(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut state = BTreeMap::new();
        let mut stack = vec![self.outside.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                // Not following symlinks: a link the setup made outside may
                // point back into the root, whose files may change.
                let kind = entry.file_type().unwrap();
                if kind.is_symlink() {
                    let target = std::fs::read_link(entry.path()).unwrap();
                    state.insert(
                        entry.path(),
                        format!("<link {}>", target.display()).into_bytes(),
                    );
                } else if kind.is_dir() {
                    stack.push(entry.path());
                    state.insert(entry.path(), b"<dir>".to_vec());
                } else {
                    state.insert(
                        entry.path(),
                        std::fs::read(entry.path()).unwrap_or_default(),
                    );
                }
            }
        }
        state
    }
}

/// Renames a directory and a link to the outside into each other's place
/// until stopped: a swap in the middle of a check.
struct Swapper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Swapper {
    fn start(world: &World) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (root, outside, flag) = (world.root.clone(), world.outside.clone(), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let (a, parked, link) = (root.join("a"), root.join(".parked"), root.join(".link"));
            let _ = std::fs::create_dir_all(&a);
            let _ = std::os::unix::fs::symlink(&outside, &link);
            while !flag.load(Ordering::Relaxed) {
                let _ = std::fs::rename(&a, &parked);
                let _ = std::fs::rename(&link, &a);
                std::thread::yield_now();
                let _ = std::fs::rename(&a, &link);
                let _ = std::fs::rename(&parked, &a);
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn seen(result: &Result<ToolOutput, ToolError>) -> String {
    match result {
        Ok(output) => output.text.clone(),
        Err(error) => error.message().to_owned(),
    }
}

async fn call<T: Tool>(
    tool: &T,
    ctx: &ToolCtx,
    args: serde_json::Value,
) -> Result<ToolOutput, ToolError> {
    match serde_json::from_value(args) {
        Ok(args) => tool.call(args, ctx).await,
        Err(error) => Err(ToolError::invalid_arguments(error.to_string())),
    }
}

async fn check(case: Case) -> Result<(), TestCaseError> {
    let world = World::new();
    world.build(&case);
    let path = world.path_text(&case);
    let before = world.outside_state();
    let ctx = ToolCtx::new(&world.root).with_roots(vec![world.root.clone()]);
    let swapper = case.swap.then(|| Swapper::start(&world));

    // read_file
    let tracker = FileTracker::new();
    let read = call(
        &ReadFileTool::new(tracker.clone()),
        &ctx,
        json!({"path": path}),
    )
    .await;
    prop_assert!(
        !seen(&read).contains(SECRET),
        "read_file {path}: {}",
        seen(&read)
    );

    // grep, from the path and from the root
    for args in [
        json!({"pattern": "SECRET|inside", "path": path}),
        json!({"pattern": "SECRET|inside"}),
    ] {
        let found = call(&GrepTool::default(), &ctx, args).await;
        prop_assert!(
            !seen(&found).contains(SECRET),
            "grep {path}: {}",
            seen(&found)
        );
    }

    // glob
    for args in [
        json!({"pattern": "**/*", "path": path}),
        json!({"pattern": "**/*"}),
    ] {
        let listed = call(&GlobTool::default(), &ctx, args).await;
        prop_assert!(
            !seen(&listed).contains(OUTSIDE_NAME),
            "glob {path}: {}",
            seen(&listed)
        );
    }

    // shell's cwd: the command must start inside the root (what the
    // command then does is the sandbox's business, not the cwd's)
    let shell = call(
        &ShellTool::default(),
        &ctx,
        json!({"command": "pwd -P", "cwd": path}),
    )
    .await;
    if let Ok(output) = &shell {
        let pwd = output.text.lines().next().unwrap_or_default();
        prop_assert!(
            Path::new(pwd).starts_with(&world.root),
            "shell cwd {path} ran in {pwd}"
        );
    }

    // edit_file: the tracker is primed by an unconfined read of the same
    // path, so only the confinement stands between the edit and the file.
    let free = ToolCtx::new(&world.root);
    let _ = call(
        &ReadFileTool::new(tracker.clone()),
        &free,
        json!({"path": path}),
    )
    .await;
    let _ = call(
        &EditFileTool::new(tracker.clone()),
        &ctx,
        json!({"path": path, "old_string": SECRET, "new_string": "PWNED"}),
    )
    .await;

    // write_file, allowed to overwrite unread files
    let _ = call(
        &WriteFileTool::new(tracker).overwrite_unread(true),
        &ctx,
        json!({"path": path, "content": "PWNED"}),
    )
    .await;
    let _ = call(
        &WriteFileTool::new(FileTracker::new()),
        &ctx,
        json!({"path": format!("{path}/new.txt"), "content": "PWNED"}),
    )
    .await;

    drop(swapper);
    let after = world.outside_state();
    prop_assert_eq!(before, after, "something outside changed (path {})", path);
    Ok(())
}

#[test]
fn no_tool_escapes_the_root() {
    let cases = std::env::var("KINET_CONFINEMENT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&case(), |case| runtime.block_on(check(case)));
    if let Err(error) = result {
        panic!("{error}");
    }
}
