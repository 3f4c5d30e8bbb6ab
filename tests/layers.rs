//! The layers, checked on the source, test code aside (a test may reach
//! across): no module imports from a layer above its own, no files import
//! one another in a circle, no function runs over 80 lines, no file over
//! 600 production lines; and ARCHITECTURE.md, the map, names them all.
//!
//! The floors, bottom up, as ARCHITECTURE.md draws them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod common;

const LAYERS: &[&[&str]] = &[
    &["text", "edit", "reference", "yaml", "json", "flags", "logsink"],
    &["objects", "allowlist", "published"],
    &["policy"],
    &["judge"],
    &[
        "admission",
        "report",
        "sarif",
        "output",
        "metrics",
        "inventory",
        "fleet",
    ],
    &["check", "audit", "registry", "preflight"],
    &["server"],
    &["cli"],
];

/// Modules placed on their floor before they exist (none now: `preflight`,
/// judging an operator upgrade before it is approved, was reserved beside
/// `audit` and `registry` until it was written).
const RESERVED: &[&str] = &[];

/// The longest function outside tests.
const MAX_FUNCTION_LINES: usize = 80;

fn level(module: &str) -> Option<usize> {
    LAYERS.iter().position(|floor| floor.contains(&module))
}

/// A file's code without its test modules (`#[cfg(test)] mod … { … }`):
/// each ends at the first `}` line indented as its `mod` (rustfmt's
/// layout), so code after one is still checked.
fn production(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim_start() != "#[cfg(test)]" {
            kept.push_str(line);
            kept.push('\n');
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let Some(next) = lines.next() else { break };
        let item = next.trim_start();
        if !(item.starts_with("mod ") || item.starts_with("pub mod ")) || item.ends_with(';') {
            kept.push_str(line);
            kept.push('\n');
            kept.push_str(next);
            kept.push('\n');
            continue;
        }
        let close = format!("{indent}}}");
        for skipped in lines.by_ref() {
            if skipped == close {
                break;
            }
        }
    }
    kept
}

struct File {
    /// The path under `src/`, e.g. `server/supply.rs`.
    rel: String,
    code: String,
}

fn files() -> Vec<File> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = common::root().join("src");
    let mut paths = Vec::new();
    walk(&src, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            File {
                rel: p.strip_prefix(&src).unwrap().to_string_lossy().into_owned(),
                code: production(&text),
            }
        })
        .collect()
}

/// The top-level module a file belongs to (`allowlist` for
/// `allowlist/load.rs`, `yaml` for `yaml.rs`).
fn top(rel: &str) -> &str {
    rel.split('/').next().unwrap().trim_end_matches(".rs")
}

/// The identifiers right after each `prefix` in `code`, and after each
/// name of a `prefix{a, b::c}` group.
fn after<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    let ident = |s: &'a str| {
        let end = s
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        &s[..end]
    };
    let mut found = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let rest = &code[at + prefix.len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                found.extend(group.split(',').map(|n| ident(n.trim())));
            }
            None => found.push(ident(rest)),
        }
    }
    found.retain(|n| !n.is_empty());
    found
}

/// Fails naming a circle if `graph` has one.
fn assert_no_circle(graph: &BTreeMap<String, BTreeSet<String>>, what: &str) {
    fn visit<'a>(
        node: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
        what: &str,
    ) {
        if let Some(at) = path.iter().position(|n| *n == node) {
            panic!("{what} import circle: {} -> {node}", path[at..].join(" -> "));
        }
        if !done.insert(node) {
            return;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, path, done, what);
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, graph, &mut Vec::new(), &mut done, what);
    }
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let mut against = Vec::new();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files() {
        let from = top(&file.rel);
        let Some(floor) = level(from) else { continue };
        for to in after(&file.code, "crate::") {
            let Some(to_floor) = level(to) else { continue };
            if to == from {
                continue;
            }
            graph.entry(from.to_owned()).or_default().insert(to.to_owned());
            if to_floor > floor {
                against.push(format!("{} -> {to}", file.rel));
            }
        }
    }
    assert!(against.is_empty(), "imports against the layers: {against:?}");
    assert!(
        graph["server"].contains("audit") && graph["judge"].contains("policy"),
        "{graph:?}"
    );
    assert_no_circle(&graph, "module");
}

#[test]
fn every_floor_module_exists_or_is_reserved() {
    let src = common::root().join("src");
    for module in LAYERS.iter().flat_map(|floor| floor.iter()) {
        let exists = src.join(format!("{module}.rs")).is_file() || src.join(module).is_dir();
        assert!(
            exists != RESERVED.contains(module),
            "{module}: {}",
            if exists {
                "exists: drop it from RESERVED"
            } else {
                "no such module: add it to RESERVED or drop it"
            }
        );
    }
}

#[test]
fn files_of_one_module_import_one_another_without_a_circle() {
    let files = files();
    // Each directory's files, by name: siblings import each other as
    // `super::name` or `crate::dir::name`.
    let mut dirs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        if let Some((dir, name)) = f.rel.rsplit_once('/') {
            let name = name.trim_end_matches(".rs");
            if name != "mod" {
                dirs.entry(dir.to_owned()).or_default().insert(name.to_owned());
            }
        }
    }
    let mut checked = 0;
    for (dir, siblings) in &dirs {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for f in files
            .iter()
            .filter(|f| f.rel.rsplit_once('/').is_some_and(|(d, _)| d == dir))
        {
            let name = f.rel.rsplit_once('/').unwrap().1.trim_end_matches(".rs");
            let named = after(&f.code, "super::")
                .into_iter()
                .chain(after(&f.code, &format!("crate::{}::", dir.replace('/', "::"))));
            let uses: BTreeSet<String> = named
                .filter(|n| siblings.contains(*n) && *n != name)
                .map(str::to_owned)
                .collect();
            graph.insert(name.to_owned(), uses);
        }
        assert_no_circle(&graph, dir);
        checked += graph.len();
    }
    assert!(checked >= 25, "{checked} files checked");
}

#[test]
fn no_function_runs_over_80_lines() {
    let mut long = Vec::new();
    for file in files() {
        let lines: Vec<&str> = file.code.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            // Every visibility and qualifier a function is written with:
            // `pub(super)` ones (what a split room's files share) count too.
            let unqualified = ["pub(crate) ", "pub(super) ", "pub "]
                .iter()
                .fold(trimmed, |t, v| t.strip_prefix(v).unwrap_or(t));
            let unqualified = ["const ", "async ", "unsafe "]
                .iter()
                .fold(unqualified, |t, q| t.strip_prefix(q).unwrap_or(t));
            let is_fn = unqualified.starts_with("fn ");
            if !is_fn || line.trim_end().ends_with(';') {
                continue;
            }
            // The body ends at the first `}` line indented as the `fn`.
            let indent = &line[..line.len() - trimmed.len()];
            let close = format!("{indent}}}");
            if let Some(end) = lines[i + 1..].iter().position(|l| *l == close)
                && end + 2 > MAX_FUNCTION_LINES
            {
                let name: String = trimmed
                    .split("fn ")
                    .nth(1)
                    .unwrap_or("")
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                long.push(format!("{}:{} {name} ({} lines)", file.rel, i + 1, end + 2));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines: {long:?}"
    );
}

/// The most production lines (code outside test modules, comments and
/// blank lines not counted) a file may hold: past it, a file mixes
/// concerns a reader cannot keep apart.
const MAX_FILE_LINES: usize = 600;

fn production_lines(code: &str) -> usize {
    code.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

#[test]
fn no_file_holds_more_than_600_production_lines() {
    let over: Vec<String> = files()
        .iter()
        .map(|f| (f, production_lines(&f.code)))
        .filter(|(_, lines)| *lines > MAX_FILE_LINES)
        .map(|(f, lines)| format!("{} ({lines})", f.rel))
        .collect();
    assert!(
        over.is_empty(),
        "files over {MAX_FILE_LINES} production lines: {over:?}"
    );
}

/// Kubernetes API paths come from kube's resource types (`url_path`, `Api`),
/// never from strings: a path written by hand drifts from the group,
/// version or plural it means, and no type checks it.
#[test]
fn no_api_path_is_written_by_hand() {
    let mut by_hand = Vec::new();
    for file in files() {
        for (n, line) in file.code.lines().enumerate() {
            if ["\"/api/", "\"/apis/", "(\"/api/", "!(\"/api"]
                .iter()
                .any(|p| line.contains(p))
            {
                by_hand.push(format!("{}:{}: {}", file.rel, n + 1, line.trim()));
            }
        }
    }
    assert!(by_hand.is_empty(), "API paths written by hand: {by_hand:?}");
}

/// ARCHITECTURE.md is the one map of the code: its floors are the ones
/// checked above, and every module and every file of a module folder is
/// named in it.
#[test]
fn the_map_names_every_floor_module_and_file() {
    let map = std::fs::read_to_string(common::root().join("ARCHITECTURE.md")).unwrap();
    for (i, floor) in LAYERS.iter().enumerate() {
        let row = map
            .lines()
            .find(|l| l.starts_with(&format!("| {} |", i + 1)))
            .unwrap_or_else(|| panic!("ARCHITECTURE.md has no floor {}", i + 1));
        let named: BTreeSet<&str> = row
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|n| *n != "main")
            .collect();
        assert_eq!(named, floor.iter().copied().collect(), "floor {}: {row}", i + 1);
    }
    let mut unnamed = Vec::new();
    for file in files() {
        let Some((dir, name)) = file.rel.rsplit_once('/') else {
            if !matches!(file.rel.as_str(), "lib.rs" | "main.rs" | "testing.rs") {
                let module = top(&file.rel);
                if !map.contains(&format!("`{module}`")) {
                    unnamed.push(file.rel.clone());
                }
            }
            continue;
        };
        let name = name.trim_end_matches(".rs");
        let spelled = [
            format!("`{name}`"),
            format!("`{name}.rs`"),
            format!("{}::{name}", dir.replace('/', "::")),
        ];
        if name != "mod" && !spelled.iter().any(|s| map.contains(s.as_str())) {
            unnamed.push(file.rel.clone());
        }
    }
    assert!(unnamed.is_empty(), "ARCHITECTURE.md does not name: {unnamed:?}");
}
