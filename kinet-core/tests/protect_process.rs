//! `sandbox::protect_process`: another process of the same user (a command
//! run without the sandbox) can read the agent's `/proc/<pid>/environ`
//! until the agent protects itself, and cannot after.
//!
//! The test runs itself again as the "agent" (as `nobody` when the test
//! runs as root, since root may read any process), once unprotected and
//! once protected; each time the agent starts a probe of its own user that
//! tries to read the agent's environment.
#![cfg(target_os = "linux")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::process::Command;

const SECRET: &str = "kinet-test-secret-4f1c";

/// In the agent process: protect (or not), then let a probe try; and
/// check that contained and sandboxed commands still start (their user
/// namespace is set up by a fork of this protected process).
fn act_as_agent(protect: bool) {
    if protect {
        assert!(kinet_core::sandbox::protect_process().unwrap());
    }
    let probe = Command::new("cat")
        .arg(format!("/proc/{}/environ", std::process::id()))
        .output()
        .unwrap();
    let read = String::from_utf8_lossy(&probe.stdout).contains(SECRET);
    println!("PROBE {}", if read { "READ" } else { "DENIED" });
    let support = kinet_core::sandbox::support();
    let policy = kinet_core::sandbox::SandboxPolicy::workspace_write();
    let launches = [
        ("CONTAINED", kinet_core::sandbox::Launch::new()),
        (
            "SANDBOXED",
            kinet_core::sandbox::Launch::new().sandbox(policy.clone(), vec![std::env::temp_dir()]),
        ),
    ];
    for (label, launch) in launches {
        if label == "SANDBOXED" && support.sandbox_unavailable(&policy).is_some() {
            println!("{label} unavailable");
            continue;
        }
        let mut command = Command::new("sh");
        command.args(["-c", "echo started"]);
        let ran = launch
            .prepare(&mut command)
            .map_err(|e| e.to_string())
            .and_then(|kind| {
                command
                    .output()
                    .map(|out| (kind, out))
                    .map_err(|e| e.to_string())
            });
        match ran {
            Ok((kind, out)) if String::from_utf8_lossy(&out.stdout).contains("started") => {
                println!("{label} ok {kind:?}");
            }
            other => println!("{label} failed: {other:?}"),
        }
    }
}

/// What the agent printed after `prefix`.
fn reported(stdout: &str, prefix: &str) -> Option<String> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(prefix).map(str::to_owned))
}

/// What the agent reported: the probe, and how commands started.
struct Report {
    probe: String,
    contained: String,
    sandboxed: String,
}

fn run_agent(protect: bool) -> Report {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "a_protected_agents_environment_is_closed_to_its_own_user",
            "--nocapture",
        ])
        .env("KINET_PROTECT_AGENT", if protect { "on" } else { "off" })
        .env("KINET_TEST_API_KEY", SECRET);
    if kinet_core::sandbox::running_as_root() {
        use std::os::unix::process::CommandExt;
        command.uid(65534).gid(65534);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let field = |prefix: &str| {
        reported(&stdout, prefix).unwrap_or_else(|| {
            panic!(
                "the agent did not report {prefix}: {stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
    };
    Report {
        probe: field("PROBE "),
        contained: field("CONTAINED "),
        sandboxed: field("SANDBOXED "),
    }
}

#[test]
fn a_protected_agents_environment_is_closed_to_its_own_user() {
    if let Ok(mode) = std::env::var("KINET_PROTECT_AGENT") {
        act_as_agent(mode == "on");
        return;
    }
    let open = run_agent(false);
    let protected = run_agent(true);
    assert_eq!(
        open.probe, "READ",
        "the probe must be able to read an unprotected agent"
    );
    assert_eq!(protected.probe, "DENIED");
    // Protection costs nothing else: commands start, contained and
    // sandboxed exactly as without it (same containment kind).
    assert!(open.contained.starts_with("ok"), "{}", open.contained);
    assert_eq!(protected.contained, open.contained);
    assert_eq!(protected.sandboxed, open.sandboxed);
}
