//! `grep` with `multiline` holds a file in memory whole, so files over a
//! cap are skipped with a note: a 600 MB file costs neither the memory nor
//! the time. Alone in its binary, so the peak RSS is this test's own.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use kinet_core::{Tool, ToolCtx};
use kinet_tools::search::GrepTool;
use serde_json::json;

/// Peak resident memory of this process, in KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn multiline_grep_on_600_mb_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    // Text at both ends, a hole in between (sparse: fast to make).
    let big = root.join("big.log");
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = std::fs::File::create(&big).unwrap();
        file.write_all(b"start\nneedle one\n").unwrap();
        file.seek(SeekFrom::Start(600 << 20)).unwrap();
        file.write_all(b"needle two\nend\n").unwrap();
    }
    std::fs::write(root.join("small.txt"), "needle\nthree\n").unwrap();
    let ctx = ToolCtx::new(&root).with_roots(vec![root.clone()]);
    // Start from the current peak (reset where the kernel allows it).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = peak_rss_kib();
    let started = Instant::now();
    let args = serde_json::from_value(json!({
        "pattern": "needle\\s+\\w+",
        "multiline": true,
        "output_mode": "content"
    }))
    .unwrap();
    let out = GrepTool::default().call(args, &ctx).await.unwrap().text;
    let grew_mib = (peak_rss_kib().saturating_sub(before)) / 1024;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(out.contains("small.txt"), "{out}");
    assert!(
        out.contains("1 file(s) over 16 MiB were not searched"),
        "{out}"
    );
    assert!(grew_mib < 64, "peak RSS grew by {grew_mib} MiB");
}
