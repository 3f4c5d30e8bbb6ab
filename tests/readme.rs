//! README.md and docs/ hold together: every relative link leads to a file
//! and a heading that exist. (Their shell samples run in tests/docs.rs.)

mod common;

use common::root;

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// turned to hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every relative link of README.md and docs/ names a file that exists and,
/// with `#`, a heading in it: the docs moved once, and a moved page or a
/// renamed heading fails here instead of in a reader's browser.
#[test]
fn the_docs_links_lead_somewhere() {
    let mut pages = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.starts_with("http") || target.contains(' ') {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            if !file.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
            } else if !fragment.is_empty()
                && file.is_file()
                && !anchors(&std::fs::read_to_string(&file).unwrap()).contains(&fragment.to_owned())
            {
                broken.push(format!("{}: {target}: no such heading", page.display()));
            }
        }
    }
    assert!(pages.len() > 10, "README.md and the docs pages");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
