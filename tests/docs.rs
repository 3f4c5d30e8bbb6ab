//! The shell samples of README.md and docs/, each one of three kinds,
//! marked in the Markdown:
//!
//! - ```` ```console ```` blocks run **offline** here, on the debug binary,
//!   with trycmd: `$ ` lines are commands (run from the repository root),
//!   `? N` the exit code, the rest the output, `[..]` standing for what the
//!   text shortens (digests) and a `...` line for lines left out.
//! - ```` ```sh ```` blocks after `<!-- sample: loopback ID -->` run
//!   **against loopback** in the e2e or registry suites, read from here by
//!   `docs_sample("ID")` (tests/support.py); a test file that reads samples
//!   must name the ID as a call's first argument (`("ID"`).
//! - ```` ```sh ```` blocks after `<!-- sample: not run: REASON -->` are
//!   **not run**, for the reason given, and counted.
//!
//! An unmarked shell block, or a loopback ID no test runs, fails here. A
//! sample whose output stops being true fails the build. Not a libtest
//! harness (`harness = false`), so the census is printed on every run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const SHELLS: [&str; 5] = ["sh", "bash", "shell", "console", "trycmd"];

#[derive(Default)]
struct Census {
    offline: usize,
    loopback: BTreeMap<String, String>,
    not_run: Vec<(String, String)>,
    unmarked: Vec<String>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn relative(page: &Path) -> String {
    page.strip_prefix(root()).unwrap().display().to_string()
}

/// The marker on the last non-blank line before a fence, if any.
fn marker(lines: &[&str], fence: usize) -> Option<String> {
    let before = lines[..fence].iter().rev().find(|l| !l.trim().is_empty())?;
    let inner = before.trim().strip_prefix("<!-- sample:")?.strip_suffix("-->")?;
    Some(inner.trim().to_owned())
}

fn census() -> Census {
    let mut census = Census::default();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut open = false;
        for (n, line) in lines.iter().enumerate() {
            let Some(lang) = line.strip_prefix("```") else {
                continue;
            };
            if open {
                open = false;
                continue;
            }
            open = true;
            let at = format!("{}:{}", relative(&page), n + 1);
            if !SHELLS.contains(&lang.trim()) {
                continue;
            }
            if matches!(lang.trim(), "console" | "trycmd") {
                census.offline += 1;
                continue;
            }
            match marker(&lines, n) {
                Some(m) if m.starts_with("loopback ") => {
                    let id = m["loopback ".len()..].trim().to_owned();
                    if let Some(other) = census.loopback.insert(id.clone(), at.clone()) {
                        census.unmarked.push(format!("{at}: loopback ID {id} is also used at {other}"));
                    }
                }
                Some(m) if m.starts_with("not run:") && m.len() > "not run:".len() + 3 => {
                    census.not_run.push((at, m["not run:".len()..].trim().to_owned()));
                }
                _ => census.unmarked.push(format!(
                    "{at}: a ```{lang} block with no `<!-- sample: loopback ID -->` or `<!-- sample: not run: REASON -->` before it"
                )),
            }
        }
    }
    census
}

/// The test files that run loopback samples: those that read them with
/// `docs_sample` (tests/support.py), directly or through a runner of theirs.
fn runners() -> String {
    let mut text = String::new();
    for dir in ["tests/e2e", "tests/registry"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let source = std::fs::read_to_string(&path).unwrap_or_default();
            if path.extension().is_some_and(|e| e == "py") && source.contains("docs_sample(") {
                text.push_str(&source);
            }
        }
    }
    text
}

fn main() {
    let mut census = census();
    let runners = runners();
    for (id, at) in &census.loopback {
        if !runners.contains(&format!("(\"{id}\"")) {
            census.unmarked.push(format!(
                "{at}: loopback sample {id} is run by no test (docs_sample(\"{id}\"))"
            ));
        }
    }
    println!(
        "docs samples: {} run offline (trycmd), {} run against loopback (e2e and registry tests), {} not run",
        census.offline,
        census.loopback.len(),
        census.not_run.len()
    );
    for (at, why) in &census.not_run {
        println!("  not run: {at}: {why}");
    }
    assert!(census.unmarked.is_empty(), "{}", census.unmarked.join("\n"));
    assert!(census.offline > 0 && !census.loopback.is_empty());
    trycmd::TestCases::new()
        .register_bin("digest-gate", Path::new(env!("CARGO_BIN_EXE_digest-gate")))
        .case("README.md")
        .case("docs/*.md")
        .run();
}
