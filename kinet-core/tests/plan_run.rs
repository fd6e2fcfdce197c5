//! Plans run by kinet itself: the same output and status as dash.
#![cfg(target_os = "linux")]
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kinet_core::command::{Context, Planned, plan};
use kinet_core::sandbox::Launch;

fn run_plan(line: &str, dir: &std::path::Path, contain: bool) -> (String, Option<i32>) {
    let env = vec![
        ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
        ("HOME".to_owned(), dir.display().to_string()),
    ];
    let context = Context::new(dir).env(env.clone());
    let Planned::Plan(planned) = plan(line, &context) else {
        panic!("{line} is unsure")
    };
    let mut command = std::process::Command::new("/bin/true");
    command.env_clear().envs(env).current_dir(dir);
    Launch::new()
        .contain(contain)
        .plan(planned)
        .prepare(&mut command)
        .unwrap();
    let output = command.output().unwrap();
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (text, output.status.code())
}

fn run_sh(line: &str, dir: &std::path::Path) -> (String, Option<i32>) {
    let output = std::process::Command::new("/bin/dash")
        .args(["-c", line])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir)
        .current_dir(dir)
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (text, output.status.code())
}

#[test]
fn plans_run_as_dash_runs_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    // A script with no `#!` line runs with sh, as in a shell.
    let script = root.join("plain-script");
    std::fs::write(&script, "printf 'script ran: %s\\n' \"$1\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for line in [
        "printf 'a\\nb\\n' | sort -r | head -n 1",
        "true && printf yes || printf no",
        "false && printf yes || printf no",
        "false; printf 'after\\n'",
        "printf hi > out.txt; cat out.txt; printf more >> out.txt; cat < out.txt",
        "ls /nonexistent-dir 2>/dev/null || printf 'failed\\n'",
        "ls /nonexistent-dir 2>&1 | wc -l",
        "sh -c 'printf in; printf side' > group.txt; cat group.txt",
        "exec printf 'one\\n'; printf 'two\\n'",
        "env -i X=1 printenv X",
        "Y=2 printenv Y",
        "nice -n 1 printf nice",
        "false | true",
        "./plain-script arg",
        "true | false",
    ] {
        for contain in [false, true] {
            assert_eq!(
                run_plan(line, &root, contain),
                run_sh(line, &root),
                "{line} (contained: {contain})"
            );
        }
    }
}

#[test]
fn a_planned_line_in_the_sandbox_gets_the_proxy_and_the_policys_environment() {
    use kinet_core::sandbox::{EnvPolicy, PROXY_URL, SandboxPolicy, support};
    let support = support();
    if support.landlock_abi.is_none() || !support.isolation {
        kinet_core::testing::skipped("this machine cannot sandbox (Landlock and namespaces)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let context = Context::new(&root).env(vec![("PATH".into(), "/usr/bin:/bin".into())]);
    let Planned::Plan(planned) = plan("printenv HTTP_PROXY KINET_SET KINET_GONE", &context) else {
        panic!("unsure")
    };
    let mut command = std::process::Command::new("/bin/true");
    command
        .current_dir(&root)
        .env("KINET_SET", "set")
        .env_remove("KINET_GONE");
    Launch::new()
        .env(EnvPolicy::core())
        .sandbox(
            SandboxPolicy::workspace_write().allow_hosts(["localhost"]),
            vec![root.clone()],
        )
        .plan(planned)
        .prepare(&mut command)
        .unwrap();
    let output = command.output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("{PROXY_URL}\nset\n"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
