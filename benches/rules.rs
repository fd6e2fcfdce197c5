//! Rule evaluation per shell command: a rules file of 1,000 command rules
//! (500 programs, each with an allow rule on an argument prefix and an ask
//! or deny rule), a command line of five parts planned where it runs
//! (parsed, globs expanded, every program resolved through the real
//! `PATH`, the dangerous-argument catalogue consulted) and checked, per
//! call, as the approval stage does. Then a rules-allowed `ls` through
//! kinet's executor beside `sh -c ls`, both contained as the shell tool
//! starts them. Then the network allowlist's cost: a sandboxed `true`
//! started and awaited with the proxy (an allowlist of one host) and
//! without (no network), alternating, and a sandboxed `curl` through the
//! proxy to a loopback server.
//!
//! ```text
//! cargo bench --bench rules
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::time::{Duration, Instant};

use kinet::core::command::{Context, Planned, plan};
use kinet::core::rules::{Decision, Rules};
use kinet::core::sandbox::{Launch, SandboxPolicy, support};

fn main() {
    let mut file = String::new();
    // 498 made-up programs, and ls and git among the 500.
    for n in 0..500 {
        let program = match n {
            7 => "ls".to_owned(),
            250 => "git".to_owned(),
            _ => format!("tool{n}"),
        };
        let (allowed, strict) = if program == "ls" {
            ("-la", "-R")
        } else {
            ("status", "push")
        };
        file.push_str(&format!(
            "[[command]]\nprogram = \"{program}\"\nargs = [\"{allowed}\"]\ndecision = \"allow\"\nmatch = [\"{program} {allowed} -v\"]\nnot_match = [\"{program} {strict}\"]\n\n"
        ));
        let decision = if n % 2 == 0 { "ask" } else { "deny" };
        file.push_str(&format!(
            "[[command]]\nprogram = \"{program}\"\nargs = [\"{strict}\"]\ndecision = \"{decision}\"\n\n"
        ));
    }
    for program in ["cat", "grep", "wc"] {
        file.push_str(&format!(
            "[[command]]\nprogram = \"{program}\"\ndecision = \"allow\"\n\n"
        ));
    }
    file.push_str("[[variable]]\nname = \"X\"\ndecision = \"allow\"\n");
    let started = Instant::now();
    let rules = Rules::from_toml(&file).unwrap();
    let load = started.elapsed();
    assert_eq!(rules.commands.len(), 1_003);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "x").unwrap();
    let context = Context::new(dir.path()).env(vec![
        (
            "PATH".into(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        ),
        ("HOME".into(), dir.path().display().to_string()),
    ]);
    let line = "ls -la *.md && env X=1 git status 'a b' | sh -c 'cat README.md' ; grep -n x README.md > /dev/null || wc -l README.md";
    let check = |line: &str| {
        let planned = plan(line, &context);
        rules.check_plan(&planned, context.workspace_roots())
    };
    assert_eq!(
        check(line).map(|v| v.decision),
        Some(Decision::Allow),
        "{:?}",
        check(line)
    );
    let mut samples: Vec<Duration> = (0..20_001)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(check(std::hint::black_box(line)));
            t.elapsed()
        })
        .collect();
    samples.sort();
    let median = samples[samples.len() / 2];
    let p99 = samples[samples.len() * 99 / 100];
    println!("rules file of 1,003 command rules: loaded and every example checked in {load:.1?}");
    println!(
        "plan (parse, glob, resolve through PATH) + check (rules, variables, catalogue) of a 5-part line: median {:.1} µs, p99 {:.1} µs (target < 50 µs)",
        median.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    executor();
    proxy();
}

/// Median time of `ls` run by kinet's executor and by `sh -c ls`, both
/// contained (a PID namespace) as the shell tool runs them.
fn executor() {
    let dir = tempfile::tempdir().unwrap();
    let context = Context::new(dir.path()).env(vec![("PATH".into(), "/usr/bin:/bin".into())]);
    let Planned::Plan(planned) = plan("ls", &context) else {
        panic!("ls is not plannable")
    };
    let run = |kinet: bool| {
        let mut command = if kinet {
            std::process::Command::new("/bin/true")
        } else {
            let mut command = std::process::Command::new("/bin/sh");
            command.args(["-c", "ls"]);
            command
        };
        command.current_dir(dir.path()).env("PATH", "/usr/bin:/bin");
        let launch = if kinet {
            Launch::new().plan(planned.clone())
        } else {
            Launch::new()
        };
        let containment = launch.prepare(&mut command).unwrap();
        let t = Instant::now();
        let output = command.output().unwrap();
        assert!(output.status.success());
        (t.elapsed(), containment)
    };
    let (mut kinet, mut shell) = (Vec::new(), Vec::new());
    let mut containment = None;
    for _ in 0..300 {
        let (took, how) = run(true);
        kinet.push(took);
        containment = Some(how);
        shell.push(run(false).0);
    }
    let median = |samples: &mut Vec<Duration>| {
        samples.sort();
        samples[samples.len() / 2]
    };
    let (kinet, shell) = (median(&mut kinet), median(&mut shell));
    println!(
        "rules-allowed `ls` ({containment:?}): kinet's executor {:.2} ms, `sh -c ls` {:.2} ms ({:.2}x)",
        kinet.as_secs_f64() * 1e3,
        shell.as_secs_f64() * 1e3,
        kinet.as_secs_f64() / shell.as_secs_f64()
    );
}

/// Median time of a sandboxed command with and without the proxy.
fn proxy() {
    let support = support();
    if support.landlock_abi.is_none() || !support.isolation {
        println!("SKIPPED: this machine cannot sandbox; no proxy figures");
        return;
    }
    let run = |policy: &SandboxPolicy, program: &str, args: &[&str]| {
        let mut command = std::process::Command::new(program);
        command.args(args);
        Launch::new()
            .sandbox(policy.clone(), vec![std::env::temp_dir()])
            .prepare(&mut command)
            .unwrap();
        let t = Instant::now();
        let output = command.output().unwrap();
        (t.elapsed(), output)
    };
    let off = SandboxPolicy::workspace_write();
    let on = SandboxPolicy::workspace_write().allow_hosts(["localhost"]);
    let (mut plain, mut proxied) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        plain.push(run(&off, "/bin/true", &[]).0);
        proxied.push(run(&on, "/bin/true", &[]).0);
    }
    let median = |samples: &mut Vec<Duration>| {
        samples.sort();
        samples[samples.len() / 2]
    };
    let (plain, proxied) = (median(&mut plain), median(&mut proxied));
    println!(
        "sandboxed `true`: no network {:.2} ms, with the allowlist's proxy {:.2} ms ({:.2}x)",
        plain.as_secs_f64() * 1e3,
        proxied.as_secs_f64() * 1e3,
        proxied.as_secs_f64() / plain.as_secs_f64()
    );
    if !std::path::Path::new("/usr/bin/curl").exists() {
        println!("SKIPPED: no curl; no request figures");
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut stream in listener.incoming().flatten() {
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    let url = format!("http://localhost:{port}/");
    let mut through = Vec::new();
    let mut direct = Vec::new();
    let open = SandboxPolicy::workspace_write().allow_network(true);
    for _ in 0..50 {
        let (took, output) = run(&on, "/usr/bin/curl", &["-sS", &url]);
        assert_eq!(output.stdout, b"ok");
        through.push(took);
        let (took, output) = run(&open, "/usr/bin/curl", &["-sS", "--noproxy", "*", &url]);
        assert_eq!(output.stdout, b"ok");
        direct.push(took);
    }
    let (through, direct) = (median(&mut through), median(&mut direct));
    println!(
        "sandboxed curl of a loopback page: whole network {:.2} ms, through the proxy {:.2} ms ({:.2}x)",
        direct.as_secs_f64() * 1e3,
        through.as_secs_f64() * 1e3,
        through.as_secs_f64() / direct.as_secs_f64()
    );
}
