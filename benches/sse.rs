//! SSE parsing throughput: a 5 MB recorded stream parsed in memory (target
//! ≥ 200 MB/s), for the bare SSE framing and for each provider's full decode
//! into stream events.
//!
//! ```text
//! cargo bench --bench sse
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kinet::core::provider::kit::SseParser;
use kinet::core::provider::{WireFormat, decode_recorded};

const TARGET: usize = 5 * 1024 * 1024;
/// Bytes per network read fed to the parser.
const READ: usize = 16 * 1024;

/// Repeats the middle (delta) events of a recorded fixture until the stream
/// is 5 MB, keeping its first and last events.
fn recorded(fixture: &str, deltas_from: usize, deltas_to: usize) -> Vec<u8> {
    let path = format!(
        "{}/kinet-core/tests/fixtures/{fixture}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    let events: Vec<&str> = text.split_inclusive("\n\n").collect();
    let (head, rest) = events.split_at(deltas_from);
    let (middle, tail) = rest.split_at(deltas_to - deltas_from);
    let mut out = head.concat();
    let middle = middle.concat();
    while out.len() + tail.concat().len() < TARGET {
        out.push_str(&middle);
    }
    out.push_str(&tail.concat());
    out.into_bytes()
}

fn count_sse_events(bytes: &[u8]) -> usize {
    let mut parser = SseParser::new();
    let mut events = 0;
    for chunk in bytes.chunks(READ) {
        parser.feed(chunk, &mut |_| events += 1);
    }
    parser.finish(&mut |_| events += 1);
    events
}

fn best_of(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..runs {
        let start = Instant::now();
        f();
        best = best.min(start.elapsed().as_secs_f64());
    }
    best
}

fn benches(c: &mut Criterion) {
    let streams = [
        (
            "openai_chat",
            WireFormat::OpenAiChat,
            recorded("openai/text.sse", 1, 4),
        ),
        (
            "anthropic",
            WireFormat::Anthropic,
            recorded("anthropic/text.sse", 3, 5),
        ),
        (
            "openai_responses",
            WireFormat::OpenAiResponses,
            recorded("responses/text.sse", 4, 6),
        ),
    ];
    for (label, format, bytes) in &streams {
        let events = count_sse_events(bytes);
        let decoded = decode_recorded(*format, bytes, READ);
        assert!(
            decoded.iter().all(Result::is_ok),
            "{label}: the stream decodes cleanly"
        );
        let mb = bytes.len() as f64 / 1e6;
        let framing = best_of(20, || {
            black_box(count_sse_events(black_box(bytes)));
        });
        let full = best_of(20, || {
            black_box(decode_recorded(*format, black_box(bytes), READ).len());
        });
        println!(
            "summary sse {label}: {:.1} MB, {events} events; SSE framing {:.0} MB/s ({:.0} ns/event); full decode to stream events {:.0} MB/s ({:.0} ns/event)",
            mb,
            mb / framing,
            framing * 1e9 / events as f64,
            mb / full,
            full * 1e9 / events as f64,
        );
    }

    let mut group = c.benchmark_group("sse_5MB");
    group.sample_size(20);
    for (label, format, bytes) in &streams {
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(format!("{label}/framing"), |b| {
            b.iter(|| count_sse_events(black_box(bytes)))
        });
        group.bench_function(format!("{label}/decode"), |b| {
            b.iter(|| decode_recorded(*format, black_box(bytes), READ).len())
        });
    }
    group.finish();
}

criterion_group!(sse, benches);
criterion_main!(sse);
