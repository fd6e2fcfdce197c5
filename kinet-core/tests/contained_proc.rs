//! A contained command (not sandboxed) sees a `/proc` of its own PID
//! namespace and an environment without the host's secrets: it cannot read
//! the agent's `/proc/<pid>/environ`, see the agent's processes or signal
//! them, with and without `protect_process`, as root and as an ordinary
//! user.
//!
//! The test runs itself again as the "agent" (as root when the test runs
//! as root, and as `nobody`), protected and not; the agent holds a secret
//! in its environment and starts a contained probe that looks for it.
#![cfg(target_os = "linux")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::process::Command;

use kinet_core::sandbox::{Containment, EnvPolicy, Launch};

const SECRET: &str = "kinet-contained-secret-93d7";

const PROBE: &str = r#"
agent=$1
if cat /proc/$agent/environ 2>/dev/null | tr '\0' '\n' | grep -q "$2"; then echo "ENVIRON READ"; else echo "ENVIRON DENIED"; fi
if [ -e /proc/$agent ]; then echo "AGENT VISIBLE"; else echo "AGENT HIDDEN"; fi
if kill -0 $agent 2>/dev/null; then echo "SIGNAL REACHED"; else echo "SIGNAL MISSED"; fi
echo "PIDS $(ls /proc | grep -E '^[0-9]+$' | tr '\n' ' ')"
if env | grep -q "$2"; then echo "ENV LEAKED"; else echo "ENV CLEAN"; fi
"#;

/// In the agent process: protect (or not), then run the probe contained.
fn act_as_agent(protect: bool) {
    if protect {
        assert!(kinet_core::sandbox::protect_process().unwrap());
    }
    let mut command = Command::new("/bin/sh");
    command
        .args(["-c", PROBE, "probe"])
        .arg(std::process::id().to_string())
        .arg(SECRET);
    let kind = Launch::new()
        .env(EnvPolicy::core())
        .prepare(&mut command)
        .unwrap();
    let output = command.output().unwrap();
    println!("KIND {kind:?}");
    print!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
}

fn run_agent(protect: bool, as_nobody: bool) -> String {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "a_contained_command_sees_nothing_of_the_agent",
            "--nocapture",
        ])
        .env("KINET_CONTAINED_AGENT", if protect { "on" } else { "off" })
        .env("KINET_TEST_API_KEY", SECRET);
    if as_nobody {
        use std::os::unix::process::CommandExt;
        command.uid(65534).gid(65534);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "the agent failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn a_contained_command_sees_nothing_of_the_agent() {
    if let Ok(mode) = std::env::var("KINET_CONTAINED_AGENT") {
        act_as_agent(mode == "on");
        return;
    }
    if !kinet_core::sandbox::support().namespaces {
        eprintln!(
            "SKIPPED: this system refuses PID and mount namespaces, so commands are contained by process group only"
        );
        return;
    }
    let users: &[bool] = if kinet_core::sandbox::running_as_root() {
        &[false, true]
    } else {
        eprintln!("NOTE: not root, so only the ordinary-user half runs");
        &[false]
    };
    for &as_nobody in users {
        for protect in [false, true] {
            let seen = run_agent(protect, as_nobody);
            let who = if as_nobody || !kinet_core::sandbox::running_as_root() {
                "an ordinary user"
            } else {
                "root"
            };
            let case = format!("as {who}, protect_process {protect}:\n{seen}");
            assert!(
                seen.contains(&format!("KIND {:?}", Containment::PidNamespace)),
                "{case}"
            );
            for expected in [
                "ENVIRON DENIED",
                "AGENT HIDDEN",
                "SIGNAL MISSED",
                "ENV CLEAN",
            ] {
                assert!(seen.contains(expected), "{case}");
            }
            // Only the namespace's own processes: the shell (PID 1) and
            // the few it starts for the listing.
            let pids: Vec<u32> = seen
                .lines()
                .find_map(|l| l.strip_prefix("PIDS "))
                .unwrap()
                .split_whitespace()
                .map(|p| p.parse().unwrap())
                .collect();
            assert!(pids.contains(&1) && pids.iter().all(|&p| p < 10), "{case}");
        }
    }
}
