//! The module graph as ARCHITECTURE.md section 3 draws it: no module imports another that
//! imports it back, directly or round a circle, and the pure leaves import no effectful module.
//!
//! Read from the source: every `crate::<module>` path (and each name of a `crate::{a, b}`
//! group) in non-test, non-comment code of `src/<module>.rs` or `src/<module>/**.rs` is an
//! edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module → the top-level modules its code names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "main" || top == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests may reach anywhere.
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let edges = graph.entry(top.clone()).or_default();
        for line in code.lines() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            for (i, _) in line.match_indices("crate::") {
                let rest = &line[i + 7..];
                // `crate::x::...`, or a group `crate::{x, y::Z}` (on one line).
                let names: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group
                        .split('}')
                        .next()
                        .unwrap_or_default()
                        .split(',')
                        .collect(),
                    None => vec![rest],
                };
                for name in names {
                    let name: String = name
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    if !name.is_empty() && name != top && name != "self" {
                        edges.insert(name);
                    }
                }
            }
        }
    }
    graph
}

fn reaches(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_string()];
    while let Some(m) = stack.pop() {
        for next in graph.get(&m).into_iter().flatten() {
            if next == to {
                return true;
            }
            if seen.insert(next.clone()) {
                stack.push(next.clone());
            }
        }
    }
    false
}

#[test]
fn the_module_graph_has_no_cycles_and_the_pure_leaves_stay_pure() {
    let graph = graph();
    assert!(graph.contains_key("reconcile") && graph.contains_key("render"));
    let mut cycles = Vec::new();
    for (module, edges) in &graph {
        for next in edges {
            if reaches(&graph, next, module) {
                cycles.push(format!("{module} -> {next} -> ... -> {module}"));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}");
    // The pure leaves: no I/O, so no path to a module that does I/O.
    for leaf in [
        "object", "yaml", "manifest", "diff", "health", "ignore", "replicas",
    ] {
        for effect in [
            "source",
            "store",
            "sync",
            "reconcile",
            "server",
            "cli",
            "report",
        ] {
            assert!(
                !reaches(&graph, leaf, effect),
                "{leaf} reaches {effect}: {:?}",
                graph[leaf]
            );
        }
    }
}
