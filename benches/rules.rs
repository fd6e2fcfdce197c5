//! Rule evaluation per shell command: a rules file of 1,000 command rules
//! (500 programs, each with an allow rule on an argument prefix and an ask
//! or forbid rule), a compound command of five parts, parsed and checked
//! per call as the approval stage does. Then the network allowlist's cost:
//! a sandboxed `true` started and awaited with the proxy (an allowlist of
//! one host) and without (no network), alternating, and a sandboxed
//! `curl` through the proxy to a loopback server.
//!
//! ```text
//! cargo bench --bench rules
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::time::{Duration, Instant};

use kinet::core::rules::{Decision, Rules};
use kinet::core::sandbox::{Launch, SandboxPolicy, support};

fn main() {
    let mut file = String::new();
    for n in 0..500 {
        file.push_str(&format!(
            "[[command]]\nprogram = \"tool{n}\"\nargs = [\"status\"]\ndecision = \"allow\"\nmatch = [\"tool{n} status -v\"]\nnot_match = [\"tool{n} push\"]\n\n"
        ));
        let strict = if n % 2 == 0 { "ask" } else { "forbid" };
        file.push_str(&format!(
            "[[command]]\nprogram = \"tool{n}\"\nargs = [\"push\"]\ndecision = \"{strict}\"\n\n"
        ));
    }
    let started = Instant::now();
    let rules = Rules::from_toml(&file).unwrap();
    let load = started.elapsed();
    assert_eq!(rules.commands.len(), 1_000);
    let line = "tool1 status -v && env X=1 tool250 status 'a b' | sh -c 'tool499 status' ; tool7 status > /dev/null || tool3 status --short";
    assert_eq!(
        rules.check_command(line).map(|v| v.decision),
        Some(Decision::Allow)
    );
    let mut samples: Vec<Duration> = (0..20_001)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(rules.check_command(std::hint::black_box(line)));
            t.elapsed()
        })
        .collect();
    samples.sort();
    let median = samples[samples.len() / 2];
    let p99 = samples[samples.len() * 99 / 100];
    println!("rules file of 1,000 command rules: loaded and every example checked in {load:.1?}");
    println!(
        "check of a 5-part compound command: median {:.1} µs, p99 {:.1} µs (target < 50 µs)",
        median.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    proxy();
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
