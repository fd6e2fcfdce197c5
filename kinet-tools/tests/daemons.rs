//! Daemons a shell command starts end with the call and leave no host
//! thread behind. Alone in its own test binary: it counts the process's
//! threads, which tests running beside it would change.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use kinet_core::{Tool, ToolCtx};
use kinet_tools::shell::ShellTool;
use serde_json::json;

fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Live processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            if stat.contains(") Z ") {
                return None;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(marker).then_some(cmdline)
        })
        .collect()
}

#[test]
fn setsid_daemons_end_with_the_call_and_leave_no_thread() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let ctx = ToolCtx::new(&root).with_roots(vec![root.clone()]);
        let shell = ShellTool::default();
        let commands = [
            "setsid sleep 1000.301 > /dev/null 2>&1 &",
            "setsid sleep 1000.302 &",
            "(setsid sh -c 'sleep 1000.303' &)",
            "setsid -f sleep 1000.304",
            "nohup sleep 1000.305 > /dev/null 2>&1 &",
        ];
        // Round 0 warms up whatever the runtime keeps (its blocking pool);
        // the 15 calls after it must add no thread. Before the fix each
        // call left one blocked on the daemon's end of the output pipe.
        let mut baseline = 0;
        for round in 0..4 {
            for command in commands {
                let started = Instant::now();
                let out = shell
                    .call(
                        serde_json::from_value(json!({"command": command})).unwrap(),
                        &ctx,
                    )
                    .await
                    .unwrap();
                assert!(
                    out.text.contains("[exit code: 0]"),
                    "{command}: {}",
                    out.text
                );
                assert!(
                    started.elapsed() < Duration::from_secs(3),
                    "{command} held the call"
                );
            }
            let left = processes_with("1000.30");
            assert!(
                left.is_empty(),
                "round {round}: daemons outlived their calls: {left:?}"
            );
            if round == 0 {
                baseline = threads();
            }
        }
        let after = threads();
        assert!(
            after <= baseline + 1,
            "host threads went from {baseline} to {after} over 15 calls"
        );
    });
}
