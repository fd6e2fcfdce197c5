//! HTML to markdown on a 2 MB page: kinet's local converter (readability
//! extraction + conversion) against Python's html2text and markdownify on
//! the same file, in the same run.
//!
//! ```text
//! /var/tmp/kinet-pyenv/bin/pip install html2text markdownify   # or set KINET_PYTHON
//! cargo bench --bench web
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::process::Command;
use std::time::Instant;

use kinet::tools::web::html_to_markdown;

const RUNS: usize = 7;

fn main() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let docs = std::fs::read_to_string(root.join("kinet-tools/tests/fixtures/web/docs_page.html"))
        .unwrap();
    let start = docs.find("<main").unwrap();
    let end = docs.find("</main>").unwrap() + "</main>".len();
    let section = &docs[start..end];
    let mut body = String::new();
    let mut n = 0;
    while body.len() < 2 * 1024 * 1024 {
        body.push_str(&section.replace("Retries and backoff", &format!("Section {n}")));
        n += 1;
    }
    let html = format!(
        "<!DOCTYPE html><html><head><title>Big docs page</title><script>var x=1;</script></head><body><nav><a href=\"/\">Home</a></nav>{body}<footer>end</footer></body></html>"
    );
    let mut samples = Vec::new();
    let mut chars = 0;
    for _ in 0..RUNS {
        let start = Instant::now();
        let page = html_to_markdown(&html, "https://docs.example.invalid/big");
        samples.push(start.elapsed().as_secs_f64() * 1e3);
        chars = page.markdown.len();
    }
    samples.sort_by(f64::total_cmp);
    let kinet = samples[RUNS / 2];
    println!(
        "page: {:.2} MB of HTML ({n} sections) -> {:.2} MB of markdown",
        html.len() as f64 / 1e6,
        chars as f64 / 1e6
    );
    println!("kinet html_to_markdown: {kinet:.1} ms (median of {RUNS})");

    let file = std::env::temp_dir().join("kinet-web-bench.html");
    std::fs::write(&file, &html).unwrap();
    let python =
        std::env::var("KINET_PYTHON").unwrap_or_else(|_| "/var/tmp/kinet-pyenv/bin/python".into());
    let output = Command::new(&python)
        .arg(root.join("benches/web/html2text_bench.py"))
        .arg(&file)
        .arg(RUNS.to_string())
        .output();
    match output {
        Ok(out) if out.status.success() => {
            let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            for (label, key) in [
                ("html2text", "html2text_ms"),
                ("markdownify", "markdownify_ms"),
            ] {
                let ms = value[key].as_f64().unwrap();
                println!(
                    "python {label}: {ms:.1} ms; kinet/{label} = {:.2}",
                    kinet / ms
                );
            }
        }
        _ => eprintln!("python peers unavailable ({python}); install html2text and markdownify"),
    }
}
