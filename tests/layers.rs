//! The server's place in the layers, checked on the source: nothing below
//! it imports from it, and its own modules import one another without a
//! circle (test code aside: a test may reach across).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod common;

/// The code of a file before its `#[cfg(test)]` module.
fn production(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[test]
fn nothing_below_the_server_imports_from_it() {
    let src = common::root().join("src");
    let mut offenders = Vec::new();
    for file in rust_files(&src) {
        let rel = file.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        // Above the server: the command line and the binary.
        if rel.starts_with("server/") || ["cli.rs", "main.rs", "lib.rs"].contains(&rel.as_str()) {
            continue;
        }
        if production(&file).contains("crate::server") {
            offenders.push(rel);
        }
    }
    assert!(offenders.is_empty(), "import from server: {offenders:?}");
}

/// `use super::a::…`, `use super::{a, b::c}` and `super::a::f` paths of a
/// server module, as the sibling modules they name.
fn siblings(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("super::") {
        let rest = &code[at + "super::".len()..];
        let names: Vec<&str> = match rest.strip_prefix('{') {
            Some(group) => group[..group.find('}').unwrap_or(group.len())]
                .split(',')
                .map(str::trim)
                .collect(),
            None => vec![rest],
        };
        for name in names {
            let head: String = name
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&head) {
                found.insert(head);
            }
        }
    }
    found
}

#[test]
fn the_server_modules_import_one_another_without_a_circle() {
    let dir = common::root().join("src/server");
    let files: BTreeMap<String, PathBuf> = rust_files(&dir)
        .into_iter()
        .filter(|f| f.file_name().unwrap() != "mod.rs")
        .map(|f| (f.file_stem().unwrap().to_string_lossy().into_owned(), f))
        .collect();
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    assert!(modules.len() >= 10, "{modules:?}");
    let graph: BTreeMap<String, BTreeSet<String>> = files
        .iter()
        .map(|(name, file)| {
            let mut uses = siblings(&production(file), &modules);
            uses.remove(name);
            (name.clone(), uses)
        })
        .collect();
    // The supply is what the reload thread and the routes use, and the
    // graph is not trivially empty.
    assert!(
        graph["reload"].contains("supply") && graph["http"].contains("supply"),
        "{graph:?}"
    );
    // Depth-first: a module met again while still on the path closes a circle.
    fn visit<'a>(
        module: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if let Some(at) = path.iter().position(|m| *m == module) {
            panic!("import circle: {} -> {module}", path[at..].join(" -> "));
        }
        if !done.insert(module) {
            return;
        }
        path.push(module);
        for next in &graph[module] {
            visit(next, graph, path, done);
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        visit(module, &graph, &mut Vec::new(), &mut done);
    }
}
