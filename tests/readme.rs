//! The README's command samples that run without a cluster, run: the
//! output printed under a command is what the command prints, digests
//! shortened as the README shortens them. A sample that drifts from the
//! tool fails here.

use std::process::Command;

mod common;

use common::root;

/// The text block that follows the sh block holding exactly `command`.
fn sample_after(readme: &str, command: &str) -> String {
    let block = format!("```sh\n{command}\n```\n");
    let at = readme
        .find(&block)
        .unwrap_or_else(|| panic!("README.md has no sample `{command}`"));
    let rest = &readme[at + block.len()..];
    let start = rest.find("```text\n").expect("an output block follows") + "```text\n".len();
    let end = rest[start..].find("```").expect("the output block ends");
    rest[start..start + end].to_owned()
}

/// `sha256:` and 64 hex digits shortened to the first 8 and an ellipsis,
/// as the README prints them.
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
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let command = "cargo run --release -- check --allowlist examples/allowlist.yaml -f examples/manifests/";
    let expected = sample_after(&readme, command);
    let args: Vec<&str> = command.split(' ').skip(4).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_digest-gate"))
        .args(&args)
        .current_dir(root())
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(shortened(&String::from_utf8(out.stdout).unwrap()), expected);
}
