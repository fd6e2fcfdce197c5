//! The README's promises about commands and recipes, checked: its second
//! command is exactly what CI ends with, its first runs the agent example,
//! and every recipe is short and built as an example.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The commands of the README's first shell block, comments cut.
fn first_screen_commands() -> Vec<String> {
    let readme = read("README.md");
    let block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README has a ```sh block");
    block
        .lines()
        .map(|line| {
            line.split(" #")
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .filter(|line| !line.is_empty())
        .collect()
}

#[test]
fn the_readme_test_command_is_what_ci_ends_with() {
    let commands = first_screen_commands();
    assert_eq!(commands.len(), 2, "{commands:?}");
    assert_eq!(
        commands[0],
        "cargo run --example agent --features tools,mcp,memory"
    );
    let ci = read(".ci/run");
    let last = ci
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty() && !line.starts_with('#'))
        .unwrap();
    assert_eq!(commands[1], last);
}

#[test]
fn every_recipe_is_short_and_built_as_an_example() {
    let manifest = read("Cargo.toml");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/recipes");
    let mut recipes = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert!(lines <= 60, "{name} has {lines} lines; recipes keep to 60");
        let declared = format!("path = \"examples/recipes/{name}\"");
        assert!(
            manifest.contains(&declared),
            "{name} is not an [[example]] in Cargo.toml, so CI would not build it"
        );
        recipes += 1;
    }
    assert!(recipes >= 7, "{recipes} recipes");
}

/// Every code block of the README and of the crates' docs is compiled: none
/// is marked `ignore` (a block that needs a server is `no_run`).
#[test]
fn no_code_block_is_ignored() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("src")];
    for entry in std::fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("kinet-") && path.join("src").is_dir() {
            dirs.push(path.join("src"));
        }
    }
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs" || e == "md") {
                files.push(path);
            }
        }
    }
    let mut ignored = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let fence = line
                .trim_start()
                .trim_start_matches("//!")
                .trim_start_matches("///")
                .trim();
            if let Some(info) = fence.strip_prefix("```")
                && info.split(',').any(|word| word.trim() == "ignore")
            {
                ignored.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    assert!(files.len() > 50, "{} files", files.len());
    assert!(ignored.is_empty(), "ignored code blocks: {ignored:?}");
}
