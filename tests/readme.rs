//! The command samples of README.md and docs/ that run without a cluster,
//! run: the output printed under a command is what the command prints,
//! digests shortened as the docs shorten them. A sample that drifts from the
//! tool fails here.

use std::process::Command;

mod common;

use common::root;

/// The text block that follows the sh block holding exactly `command`.
fn sample_after(page: &str, readme: &str, command: &str) -> String {
    let block = format!("```sh\n{command}\n```\n");
    let at = readme
        .find(&block)
        .unwrap_or_else(|| panic!("{page} has no sample `{command}`"));
    let rest = &readme[at + block.len()..];
    let start = rest.find("```text\n").expect("an output block follows") + "```text\n".len();
    let end = rest[start..].find("```").expect("the output block ends");
    rest[start..start + end].to_owned()
}

/// `sha256:` and 64 hex digits shortened to the first 8 and an ellipsis,
/// as the docs print them.
fn shortened(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("sha256:") {
        let (head, tail) = rest.split_at(at + "sha256:".len());
        out.push_str(head);
        let hex = tail.bytes().take_while(u8::is_ascii_hexdigit).count();
        if hex == 64 {
            out.push_str(&tail[..8]);
            out.push('…');
            rest = &tail[64..];
        } else {
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn the_check_sample_prints_what_check_prints() {
    let command = "cargo run --release -- check --allowlist examples/allowlist.yaml -f examples/manifests/";
    let args: Vec<&str> = command.split(' ').skip(4).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_digest-gate"))
        .args(&args)
        .current_dir(root())
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let printed = shortened(&String::from_utf8(out.stdout).unwrap());
    // The landing page shows it, and the page on `check`.
    for page in ["README.md", "docs/check.md"] {
        let text = std::fs::read_to_string(root().join(page)).unwrap();
        assert_eq!(printed, sample_after(page, &text, command), "{page}");
    }
}

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
