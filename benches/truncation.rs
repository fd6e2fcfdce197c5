//! Truncating a 10 MB tool output for the model (target < 5 ms).
//!
//! ```text
//! cargo bench --bench truncation
//! ```
#![allow(missing_docs, clippy::print_stdout)]

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use kinet::core::tool::TruncationPolicy;

fn ascii_output(bytes: usize) -> String {
    let line = "src/engine.rs:42: let result = batch::run(&config, &tools, &calls).await;\n";
    line.repeat(bytes / line.len() + 1)[..bytes].to_owned()
}

fn mixed_output(bytes: usize) -> String {
    // Multi-byte text: every cut must land on a char boundary.
    let line = "日志: 处理请求 ✓ — état réussi 🎉 id=12345\n";
    let mut text = line.repeat(bytes / line.len() + 1);
    let mut end = bytes.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

fn benches(c: &mut Criterion) {
    let policy = TruncationPolicy::default();
    let ascii = ascii_output(10 * 1024 * 1024);
    let mixed = mixed_output(10 * 1024 * 1024);

    for (label, text) in [("ascii", &ascii), ("multibyte", &mixed)] {
        let mut best = f64::MAX;
        for _ in 0..50 {
            let start = Instant::now();
            let out = policy.apply(black_box(text));
            black_box(out.len());
            best = best.min(start.elapsed().as_secs_f64());
        }
        println!(
            "summary truncation: 10 MiB {label}: best of 50 = {:.3} ms",
            best * 1e3
        );
    }

    let mut group = c.benchmark_group("truncate_10MiB");
    group.bench_function("ascii", |b| {
        b.iter(|| policy.apply(black_box(&ascii)).len())
    });
    group.bench_function("multibyte", |b| {
        b.iter(|| policy.apply(black_box(&mixed)).len())
    });
    group.finish();
}

criterion_group!(truncation, benches);
criterion_main!(truncation);
