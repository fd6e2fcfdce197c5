//! No module of kinet-core imports a module that imports it back, and the
//! plain-data modules import nothing else of the crate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module -> the top-level modules its files name as `crate::x`.
fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let module_of = |path: &Path| {
        let first = path
            .strip_prefix(&src)
            .unwrap()
            .components()
            .next()
            .unwrap();
        first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned()
    };
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = module_of(file);
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let targets = graph.entry(module.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for (at, _) in code.match_indices("crate::") {
                let rest = &code[at + "crate::".len()..];
                let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
                    group
                        .split([',', '}'])
                        .map(|n| n.trim().split("::").next().unwrap_or_default())
                        .collect()
                } else {
                    vec![
                        rest.split(|c: char| !c.is_alphanumeric() && c != '_')
                            .next()
                            .unwrap(),
                    ]
                };
                for name in names {
                    if name != module && modules.contains(name) {
                        targets.insert(name.to_owned());
                    }
                }
            }
        }
    }
    graph
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = edges();
    // Depth-first search for a back edge.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if let Some(at) = path.iter().position(|n| n == node) {
            panic!("import circle: {} -> {node}", path[at..].join(" -> "));
        }
        if done.contains(node) {
            return;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, path, done);
        }
        path.pop();
        done.insert(node.to_owned());
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, &graph, &mut Vec::new(), &mut done);
    }
    assert!(graph.len() > 10, "the source was not found: {graph:?}");
}

/// The plain-data modules: `data`, the public modules that are data
/// themselves, and a call's question and answer (`decision`).
const PLAIN_DATA: [&str; 6] = [
    "data",
    "message",
    "decision",
    "deferred",
    "provenance",
    "event",
];

#[test]
fn plain_data_imports_nothing_else_of_the_crate() {
    let graph = edges();
    for module in PLAIN_DATA {
        let outside: Vec<&String> = graph[module]
            .iter()
            .filter(|target| !PLAIN_DATA.contains(&target.as_str()))
            .collect();
        assert!(outside.is_empty(), "{module} imports {outside:?}");
    }
    // Messages and the ledger are the leaves.
    assert_eq!(graph["message"], BTreeSet::new());
    assert_eq!(graph["provenance"], BTreeSet::new());
    // The runtime sits on top of it.
    assert!(graph["pipeline"].contains("data"));
    assert!(graph["pipeline"].contains("message"));
}
