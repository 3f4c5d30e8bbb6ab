//! The YAML/JSON reader and `check`: any text is read or refused, never a
//! panic, and `--fix` output re-reads to the same documents but for images.
#![no_main]

use digest_gate::check::{self, Manifest, Pass, Sources};
use digest_gate::judge::Rules;
use digest_gate::policy::Policy;
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;
use common::allowlist;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let sources = Sources::from(vec![Manifest::text("fuzz.yaml", text)]);
    let policy = Policy::default();
    let rules = Rules {
        policy: &policy,
        allowlist: allowlist(),
        published: None,
    };
    let outcome = check::check(&sources, rules, Pass::Fix, None);
    for fixed in &outcome.fixed {
        let _ = digest_gate::yaml::parse_stream(&fixed.text());
    }
});
