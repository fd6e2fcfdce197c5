//! Snapshots of pages nobody here wrote: Debian's Python documentation
//! (`python3-doc`, installed by `.ci/setup`), served on loopback. Every
//! code block must come through character for character, and every
//! paragraph whole.
#![cfg(feature = "browser")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::path::{Path, PathBuf};

use kinet_computer::browser::BrowserConfig;
use serde_json::{Value, json};

mod support;
use support::{Reply, browser_with, call, text};

const DOCS: &str = "/usr/share/doc/python3/html";

/// The code blocks of a snapshot: the lines under each `- code: |`, with
/// the block's indentation taken off.
fn code_blocks(snapshot: &str) -> Vec<String> {
    let lines: Vec<&str> = snapshot.lines().collect();
    let mut blocks = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(indent) = line.strip_suffix("- code: |") else {
            continue;
        };
        if !indent.chars().all(|c| c == ' ') {
            continue;
        }
        let pad = format!("{indent}  ");
        let block: Vec<&str> = lines[at + 1..]
            .iter()
            .take_while(|l| l.starts_with(&pad))
            .map(|l| &l[pad.len()..])
            .collect();
        blocks.push(block.join("\n"));
    }
    blocks
}

fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_docs_keep_every_code_block_and_paragraph() {
    if !Path::new(DOCS).is_dir() {
        kinet_core::testing::skipped(&format!(
            "{DOCS} is missing (Debian's python3-doc; .ci/setup installs it)"
        ));
        return;
    }
    let config = BrowserConfig {
        snapshot_limit: usize::MAX,
        ..BrowserConfig::default()
    };
    let Some((tools, session)) = browser_with(config) else {
        return;
    };
    let site = support::serve(|path, _| {
        let relative = path.trim_start_matches('/');
        if relative.split('/').any(|part| part == "..") {
            return Reply::ok("").status("404 Not Found");
        }
        Reply::file(&PathBuf::from(DOCS).join(relative))
    })
    .await;
    for page in ["library/stdtypes.html", "library/functions.html"] {
        let snapshot = text(
            &tools,
            "browser_navigate",
            json!({"url": format!("{site}/{page}")}),
        )
        .await;
        let rendered = call(
            &tools,
            "browser_eval",
            json!({"expression": "Array.from(document.querySelectorAll('pre'), p => p.innerText.replace(/\\n$/, ''))"}),
        )
        .await
        .unwrap()
        .structured
        .unwrap();
        let rendered: Vec<String> = serde_json::from_value(rendered).unwrap();
        let blocks = code_blocks(&snapshot);
        let faithful = rendered.iter().filter(|code| blocks.contains(code)).count();
        assert!(
            rendered.len() > 20,
            "{page}: {} code blocks",
            rendered.len()
        );
        assert_eq!(
            faithful,
            rendered.len(),
            "{page}: {faithful} of {} code blocks kept exactly; first missing: {:?}",
            rendered.len(),
            rendered.iter().find(|code| !blocks.contains(code))
        );
        assert!(
            !snapshot.contains("more characters: browser_snapshot"),
            "{page}"
        );

        // Every paragraph whole, in the reading view.
        let reading = text(&tools, "browser_snapshot", json!({"mode": "text"})).await;
        // Table cells escape their bars.
        let reading = squash(&reading).replace("\\|", "|");
        let paragraphs: Vec<String> = serde_json::from_value::<Vec<String>>(
            call(
                &tools,
                "browser_eval",
                json!({"expression": "Array.from(document.querySelectorAll('p'), p => p.innerText)"}),
            )
            .await
            .unwrap()
            .structured
            .unwrap_or(Value::Null),
        )
        .unwrap();
        let whole = paragraphs
            .iter()
            .filter(|p| reading.contains(&squash(p)))
            .count();
        assert!(
            paragraphs.len() > 100,
            "{page}: {} paragraphs",
            paragraphs.len()
        );
        assert_eq!(
            whole,
            paragraphs.len(),
            "{page}: {whole} of {} paragraphs whole; first missing: {:?}",
            paragraphs.len(),
            paragraphs.iter().find(|p| !reading.contains(&squash(p)))
        );
        eprintln!(
            "{page}: {} code blocks and {} paragraphs kept; snapshot {} characters",
            rendered.len(),
            paragraphs.len(),
            snapshot.len()
        );
    }
    session.shutdown().await;
}
