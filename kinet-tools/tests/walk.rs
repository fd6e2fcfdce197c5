//! The directory walk of grep and glob (by handles, beneath the root):
//!
//! - it selects the same files as ripgrep's own walker (the `ignore`
//!   crate) on random trees with random `.gitignore`, `.ignore` and
//!   `.git/info/exclude` files, hidden entries and symlinks;
//! - with a second thread swapping directories and symlinks to the outside
//!   all the while, no name or content from outside the root shows in any
//!   result of grep or glob (10,000 cases by default;
//!   `KINET_WALK_SWAP_CASES` overrides).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use kinet_core::{Tool, ToolCtx, ToolOutput};
use kinet_tools::search::{GlobConfig, GlobTool, GrepTool};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::json;

const NAMES: &[&str] = &["a", "b", "c", ".h", "x.rs", "y.md", "z.txt"];
const LINES: &[&str] = &[
    "*.rs",
    "a",
    "a/",
    "/b",
    "!b",
    "!x.rs",
    "**/c",
    "*",
    "!*.md",
    ".h",
    "!.h",
    "b/*.txt",
    "# comment",
    "",
    "c/",
    "!a/",
    "/a/b",
    "z.*",
    "[xy].*",
];

#[derive(Debug, Clone)]
enum Node {
    Dir,
    File,
    /// A symlink to a sibling name (never followed by either walker).
    Link(&'static str),
    /// An ignore file (`.gitignore`, `.ignore` or `.git/info/exclude`)
    /// with these lines.
    Ignore(u8, Vec<&'static str>),
}

fn tree() -> impl Strategy<Value = Vec<(Vec<&'static str>, Node)>> {
    let node = prop_oneof![
        3 => Just(Node::Dir),
        4 => Just(Node::File),
        1 => prop::sample::select(NAMES).prop_map(Node::Link),
        3 => (0u8..3, prop::collection::vec(prop::sample::select(LINES), 1..5))
            .prop_map(|(kind, lines)| Node::Ignore(kind, lines)),
    ];
    prop::collection::vec(
        (
            prop::collection::vec(prop::sample::select(NAMES), 1..=3),
            node,
        ),
        1..25,
    )
}

fn build(root: &Path, entries: &[(Vec<&'static str>, Node)]) {
    for (names, node) in entries {
        let path = root.join(names.iter().collect::<PathBuf>());
        let _ = std::fs::create_dir_all(path.parent().unwrap());
        let _ = match node {
            Node::Dir => std::fs::create_dir(&path),
            Node::File => std::fs::write(&path, "inside\n"),
            Node::Link(target) => std::os::unix::fs::symlink(target, &path),
            Node::Ignore(kind, lines) => {
                let dir = path.parent().unwrap();
                let file = match kind {
                    0 => dir.join(".gitignore"),
                    1 => dir.join(".ignore"),
                    _ => {
                        let _ = std::fs::create_dir_all(dir.join(".git/info"));
                        dir.join(".git/info/exclude")
                    }
                };
                std::fs::write(file, lines.join("\n"))
            }
        };
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn run<T: Tool>(tool: &T, ctx: &ToolCtx, args: serde_json::Value) -> String {
    let args = serde_json::from_value(args).unwrap();
    match tool.call(args, ctx).await {
        Ok(ToolOutput { text, .. }) => text,
        Err(error) => error.message().to_owned(),
    }
}

/// The files ripgrep's walker selects below `dir`, relative to `root`.
fn ripgrep_files(root: &Path, dir: &Path) -> BTreeSet<String> {
    ignore::WalkBuilder::new(dir)
        .require_git(false)
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(|e| e.path().strip_prefix(root).unwrap().display().to_string())
        .collect()
}

#[test]
fn the_walk_selects_what_ripgrep_selects() {
    let runtime = runtime();
    let glob = GlobTool::new(GlobConfig {
        max_results: 100_000,
        ..GlobConfig::default()
    });
    let mut runner = TestRunner::new(Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    });
    let checked = runner.run(&(tree(), 0usize..4), |(entries, start)| {
        let guard = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(guard.path()).unwrap();
        build(&root, &entries);
        // From the root and from a directory below it (whose parents'
        // ignore files apply).
        let dir = match start {
            0 => root.clone(),
            n => {
                let name = NAMES[n - 1];
                let dir = root.join(name);
                if !dir.is_dir() || dir.is_symlink() {
                    return Ok(());
                }
                dir
            }
        };
        let ctx = ToolCtx::new(&root).with_roots(vec![root.clone()]);
        let text = runtime.block_on(run(
            &glob,
            &ctx,
            json!({"pattern": "**/*", "path": dir.display().to_string()}),
        ));
        let ours: BTreeSet<String> = if text.starts_with("No files match") {
            BTreeSet::new()
        } else {
            text.lines().map(str::to_owned).collect()
        };
        prop_assert_eq!(ours, ripgrep_files(&root, &dir), "tree {:?}", entries);
        Ok(())
    });
    if let Err(error) = checked {
        panic!("{error}");
    }
}

const SECRET: &str = "OUTSIDE-SECRET-51c2";
const OUTSIDE_NAME: &str = "zz-outside-51c2.txt";

/// Swaps directories of the tree with symlinks to the outside (absolute,
/// and relative through `..`) and back, until stopped.
struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Swapper {
    fn start(root: &Path, outside: &Path, dirs: Vec<PathBuf>, seed: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicUsize::new(0));
        let (root, outside) = (root.to_path_buf(), outside.to_path_buf());
        let (flag, count) = (Arc::clone(&stop), Arc::clone(&swaps));
        let thread = std::thread::spawn(move || {
            let mut turn = seed;
            while !flag.load(Ordering::Relaxed) {
                turn = turn
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let dir = &dirs[(turn >> 33) % dirs.len()];
                let at = root.join(dir);
                let parked = root.join(format!(".parked-{}", turn % 1000));
                let link = root.join(format!(".link-{}", turn % 1000));
                // Absolute, or climbing out with `..` from where it sits.
                let target = if turn & 1 == 0 {
                    outside.clone()
                } else {
                    let depth = dir.components().count();
                    let mut up = PathBuf::new();
                    for _ in 0..depth {
                        up.push("..");
                    }
                    up.join("..").join(outside.file_name().unwrap())
                };
                if std::os::unix::fs::symlink(&target, &link).is_err() {
                    continue;
                }
                if std::fs::rename(&at, &parked).is_ok() {
                    let _ = std::fs::rename(&link, &at);
                    count.fetch_add(1, Ordering::Relaxed);
                    std::thread::yield_now();
                    let _ = std::fs::rename(&at, &link);
                    let _ = std::fs::rename(&parked, &at);
                }
                let _ = std::fs::remove_file(&link);
            }
        });
        Self {
            stop,
            swaps,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.swaps.load(Ordering::Relaxed)
    }
}

#[test]
fn swapped_directories_never_show_the_outside() {
    let cases = std::env::var("KINET_WALK_SWAP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let runtime = runtime();
    let glob = GlobTool::new(GlobConfig {
        max_results: 100_000,
        ..GlobConfig::default()
    });
    let grep = GrepTool::default();
    let total_swaps = AtomicUsize::new(0);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let dirs = prop::collection::vec(
        prop::collection::vec(prop::sample::select(&NAMES[..3]), 1..=3),
        1..8,
    );
    let checked = runner.run(&(dirs, any::<usize>()), |(dirs, seed)| {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let root = std::fs::canonicalize(a.path()).unwrap();
        let outside = std::fs::canonicalize(b.path()).unwrap();
        // The outside: secret contents, a telling name, and an ignore file
        // that would un-ignore and re-ignore things if it were read.
        std::fs::create_dir_all(outside.join("a/b")).unwrap();
        for dir in ["", "a", "a/b"] {
            std::fs::write(outside.join(dir).join(OUTSIDE_NAME), SECRET).unwrap();
            std::fs::write(outside.join(dir).join("x.rs"), SECRET).unwrap();
        }
        std::fs::write(
            outside.join(".gitignore"),
            format!("!{OUTSIDE_NAME}\n*.md\n"),
        )
        .unwrap();
        let dirs: Vec<PathBuf> = dirs.iter().map(|d| d.iter().collect()).collect();
        for dir in &dirs {
            std::fs::create_dir_all(root.join(dir)).unwrap();
            std::fs::write(root.join(dir).join("x.rs"), "inside\n").unwrap();
            std::fs::write(root.join(dir).join("y.md"), "inside\n").unwrap();
        }
        let ctx = ToolCtx::new(&root).with_roots(vec![root.clone()]);
        let swapper = Swapper::start(&root, &outside, dirs.clone(), seed);
        let start = dirs[seed % dirs.len()].display().to_string();
        let mut seen = Vec::new();
        for path in [".", start.as_str()] {
            seen.push(runtime.block_on(run(&glob, &ctx, json!({"pattern": "**/*", "path": path}))));
            for mode in ["content", "files_with_matches"] {
                seen.push(runtime.block_on(run(
                    &grep,
                    &ctx,
                    json!({"pattern": "SECRET|inside", "path": path, "output_mode": mode}),
                )));
            }
        }
        total_swaps.fetch_add(swapper.finish(), Ordering::Relaxed);
        for text in &seen {
            prop_assert!(
                !text.contains(SECRET) && !text.contains(OUTSIDE_NAME),
                "the outside showed: {text}"
            );
        }
        Ok(())
    });
    if let Err(error) = checked {
        panic!("{error}");
    }
    // The swaps really happened while the tools ran.
    assert!(
        total_swaps.load(Ordering::Relaxed) >= cases as usize,
        "too few swaps"
    );
}
