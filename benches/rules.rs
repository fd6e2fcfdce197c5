//! Rule evaluation per shell command: a rules file of 1,000 command rules
//! (500 programs, each with an allow rule on an argument prefix and an ask
//! or forbid rule), a compound command of five parts, parsed and checked
//! per call as the approval stage does.
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
}
