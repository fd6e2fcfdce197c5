//! The local tool pack against its peers, in one run:
//!
//! - `grep` (in process) vs the `rg` binary on a large tree (the cargo
//!   registry sources) for a literal and a regex, and on a small tree;
//! - `glob` vs `rg --files -g` on the large tree;
//! - `edit_file` on a 10 MB file;
//! - `shell {"command":"true"}` per call: a process group only, contained
//!   in a PID namespace, and sandboxed (Landlock + network namespace), vs
//!   spawning `sh -c true` directly.
//!
//! The tools run with the tree as their workspace root, so every open goes
//! through the kernel's beneath-the-root confinement.
//!
//! Ratios are kinet's median wall time over rg's (below 1.0: kinet faster).
//!
//! ```text
//! cargo bench --bench local_tools            # tree: ~/.cargo/registry/src
//! KINET_BENCH_TREE=/some/dir cargo bench --bench local_tools
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kinet::core::sandbox::SandboxPolicy;
use kinet::core::{Tool, ToolCtx};
use kinet::tools::files::{EditFileTool, FileTracker, ReadFileTool};
use kinet::tools::search::{GlobTool, GrepConfig, GrepTool};
use kinet::tools::shell::{ShellConfig, ShellTool};
use serde_json::json;

const RUNS: usize = 15;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn large_tree() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("KINET_BENCH_TREE") {
        return Some(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")?;
    let src = Path::new(&home).join(".cargo/registry/src");
    std::fs::read_dir(src)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
}

fn rg(args: &[&str], dir: &Path) -> usize {
    let output = Command::new("rg")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("rg (Debian package ripgrep) is installed");
    output.stdout.iter().filter(|&&b| b == b'\n').count()
}

struct Compare {
    label: String,
    kinet: Duration,
    peer: Duration,
}

/// Alternates kinet and the peer, RUNS times each, after one warm-up of each.
fn compare(
    label: &str,
    rt: &tokio::runtime::Runtime,
    mut kinet: impl FnMut(&tokio::runtime::Runtime) -> usize,
    mut peer: impl FnMut() -> usize,
) -> Compare {
    let ours = kinet(rt);
    let theirs = peer();
    println!("  {label}: kinet {ours} lines, peer {theirs} lines");
    let mut k = Vec::new();
    let mut p = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        kinet(rt);
        k.push(start.elapsed());
        let start = Instant::now();
        peer();
        p.push(start.elapsed());
    }
    Compare {
        label: label.to_owned(),
        kinet: median(k),
        peer: median(p),
    }
}

fn grep_lines(
    rt: &tokio::runtime::Runtime,
    tool: &GrepTool,
    ctx: &ToolCtx,
    args: serde_json::Value,
) -> usize {
    let args = serde_json::from_value(args).unwrap();
    let out = rt.block_on(tool.call(args, ctx)).unwrap();
    out.text.lines().count()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let grep = GrepTool::new(GrepConfig {
        max_entries: usize::MAX,
        ..GrepConfig::default()
    });
    let mut results = Vec::new();

    match large_tree() {
        Some(tree) => {
            println!("large tree: {}", tree.display());
            let ctx = ToolCtx::new(&tree).with_roots(vec![tree.clone()]);
            for (label, pattern) in [
                ("grep literal `HashMap::new`, large tree", "HashMap::new"),
                (
                    "grep regex `impl\\s+\\w+\\s+for\\s+\\w+`, large tree",
                    r"impl\s+\w+\s+for\s+\w+",
                ),
            ] {
                results.push(compare(
                    label,
                    &rt,
                    |rt| {
                        grep_lines(
                            rt,
                            &grep,
                            &ctx,
                            json!({"pattern": pattern, "output_mode": "content"}),
                        )
                    },
                    || rg(&["--no-require-git", "-n", pattern, "."], &tree),
                ));
            }
            results.push(compare(
                "grep files_with_matches `unsafe impl Send`, large tree",
                &rt,
                |rt| grep_lines(rt, &grep, &ctx, json!({"pattern": "unsafe impl Send"})),
                || rg(&["--no-require-git", "-l", "unsafe impl Send", "."], &tree),
            ));
            let glob = GlobTool::default();
            results.push(compare(
                "glob `**/*.rs` (newest first), large tree",
                &rt,
                |rt| {
                    let args = serde_json::from_value(json!({"pattern": "**/*.rs"})).unwrap();
                    let out = rt.block_on(glob.call(args, &ctx)).unwrap();
                    out.structured.unwrap()["total"].as_u64().unwrap() as usize
                },
                || {
                    rg(
                        &["--no-require-git", "--files", "-g", "**/*.rs", "."],
                        &tree,
                    )
                },
            ));
        }
        None => {
            eprintln!("no large tree: set KINET_BENCH_TREE (skipping the large-tree comparisons)")
        }
    }

    let small = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("kinet-core/src");
    let ctx = ToolCtx::new(&small).with_roots(vec![small.clone()]);
    results.push(compare(
        "grep literal `ToolError`, small tree (kinet-core/src)",
        &rt,
        |rt| {
            grep_lines(
                rt,
                &grep,
                &ctx,
                json!({"pattern": "ToolError", "output_mode": "content"}),
            )
        },
        || rg(&["--no-require-git", "-n", "ToolError", "."], &small),
    ));

    println!("\n| comparison | kinet (median of {RUNS}) | rg | ratio |\n|---|---|---|---|");
    for r in &results {
        println!(
            "| {} | {:.1} ms | {:.1} ms | {:.2}x |",
            r.label,
            r.kinet.as_secs_f64() * 1e3,
            r.peer.as_secs_f64() * 1e3,
            r.kinet.as_secs_f64() / r.peer.as_secs_f64()
        );
    }

    shell_per_call(&rt);

    // edit_file on a 10 MB file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.rs");
    let mut content = String::new();
    let mut i = 0;
    while content.len() < 10 * 1024 * 1024 {
        content.push_str(&format!(
            "    let value_{i} = compute({i}, \"some text\");\n"
        ));
        i += 1;
    }
    std::fs::write(&path, &content).unwrap();
    let tracker = FileTracker::new();
    let read = ReadFileTool::new(Arc::clone(&tracker));
    let edit = EditFileTool::new(Arc::clone(&tracker));
    let ctx = ToolCtx::new(dir.path()).with_roots(vec![dir.path().to_path_buf()]);
    let mut samples = Vec::new();
    for n in 0..20 {
        let args =
            serde_json::from_value(json!({"path": "big.rs", "offset": 1, "limit": 1})).unwrap();
        rt.block_on(read.call(args, &ctx)).unwrap();
        let (old, new) = if n % 2 == 0 {
            ("let value_77777 =", "let renamed_77777 =")
        } else {
            ("let renamed_77777 =", "let value_77777 =")
        };
        let args =
            serde_json::from_value(json!({"path": "big.rs", "old_string": old, "new_string": new}))
                .unwrap();
        let start = Instant::now();
        rt.block_on(edit.call(args, &ctx)).unwrap();
        samples.push(start.elapsed());
    }
    println!(
        "\nedit_file on a {:.1} MB file: {:.1} ms (median of 20; target < 50 ms)",
        content.len() as f64 / 1e6,
        median(samples).as_secs_f64() * 1e3
    );
}

/// `shell {"command":"true"}` per call, three ways, against a bare spawn.
fn shell_per_call(rt: &tokio::runtime::Runtime) {
    const CALLS: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let ctx = ToolCtx::new(&root).with_roots(vec![root.clone()]);
    let plain = ShellTool::new(ShellConfig {
        contain: false,
        ..ShellConfig::default()
    });
    let contained = ShellTool::default();
    let sandboxed = ShellTool::default().sandboxed(SandboxPolicy::workspace_write());
    let per_call = |tool: &ShellTool| {
        let mut samples = Vec::new();
        for _ in 0..CALLS {
            let args = serde_json::from_value(json!({"command": "true"})).unwrap();
            let start = Instant::now();
            let out = rt.block_on(tool.call(args, &ctx)).unwrap();
            samples.push(start.elapsed());
            assert!(out.text.ends_with("[exit code: 0]"));
        }
        median(samples)
    };
    let bare = || {
        let mut samples = Vec::new();
        for _ in 0..CALLS {
            let start = Instant::now();
            let status = Command::new("sh").args(["-c", "true"]).status().unwrap();
            samples.push(start.elapsed());
            assert!(status.success());
        }
        median(samples)
    };
    // Warm up each, then measure in turn.
    for tool in [&plain, &contained, &sandboxed] {
        let args = serde_json::from_value(json!({"command": "true"})).unwrap();
        rt.block_on(tool.call(args, &ctx)).unwrap();
    }
    let peer = bare();
    let rows = [
        ("process group only", per_call(&plain)),
        ("contained (PID namespace)", per_call(&contained)),
        (
            "sandboxed (+ Landlock, network namespace)",
            per_call(&sandboxed),
        ),
    ];
    println!(
        "\n| shell `true`, median of {CALLS} | per call | vs `sh -c true` spawned directly ({:.2} ms) | vs process group only |\n|---|---|---|---|",
        peer.as_secs_f64() * 1e3
    );
    let base = rows[0].1;
    for (label, time) in rows {
        println!(
            "| {label} | {:.2} ms | {:.2}x | {:.2}x |",
            time.as_secs_f64() * 1e3,
            time.as_secs_f64() / peer.as_secs_f64(),
            time.as_secs_f64() / base.as_secs_f64()
        );
    }
}
