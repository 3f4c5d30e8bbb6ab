//! The distribution project's published reference test vectors, re-typed as
//! data in `tests/data/reference_vectors.json`, run against our parser.

mod common;

use digest_gate::reference::{self, ReferenceError};
use serde_json::Value;

fn vectors() -> Value {
    let text = std::fs::read_to_string(common::root().join("tests/data/reference_vectors.json"))
        .expect("vector file");
    serde_json::from_str(&text).expect("vector file is JSON")
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

/// Distribution's error values and the labels of ours that mean the same.
fn labels_for(go_error: &str) -> &'static [&'static str] {
    match go_error {
        "ErrNameEmpty" => &["empty"],
        "ErrReferenceInvalidFormat" => &["invalid_format", "digest_format"],
        "ErrNameContainsUppercase" => &["uppercase"],
        "ErrNameTooLong" => &["name_too_long"],
        "ErrDigestInvalidLength" => &["digest_length"],
        "ErrDigestUnsupported" => &["digest_unsupported"],
        other => panic!("unmapped error {other}"),
    }
}

#[test]
fn parse_vectors() {
    let v = vectors();
    let cases = v["parse"].as_array().unwrap();
    assert!(cases.len() >= 50);
    for case in cases {
        let input = s(case, "input");
        let got = reference::parse(input);
        if let Some(want) = case["error"].as_str() {
            let err = got.expect_err(input);
            assert!(
                labels_for(want).contains(&err.label()),
                "{input:?}: got {err:?} ({}), want {want}",
                err.label()
            );
            continue;
        }
        let r = got.unwrap_or_else(|e| panic!("{input:?} should parse: {e}"));
        assert_eq!(r.to_string(), input, "display of {input:?}");
        assert_eq!(r.name(), s(case, "name"), "name of {input:?}");
        assert_eq!(
            r.grammar_domain().unwrap_or(""),
            s(case, "domain"),
            "domain of {input:?}"
        );
        assert_eq!(r.tag().unwrap_or(""), s(case, "tag"), "tag of {input:?}");
        assert_eq!(r.digest().unwrap_or(""), s(case, "digest"), "digest of {input:?}");
    }
}

#[test]
fn name_grammar_vectors() {
    let v = vectors();
    for case in v["names"].as_array().unwrap() {
        let input = s(case, "input");
        let got = reference::parse(input);
        if !case["match"].as_bool().unwrap() {
            assert!(got.is_err(), "{input:?} should not parse as a name: {got:?}");
            continue;
        }
        if input.len() > reference::NAME_MAX_LEN {
            assert_eq!(got, Err(ReferenceError::NameTooLong { len: input.len() }));
            continue;
        }
        let r = got.unwrap_or_else(|e| panic!("{input:?} should parse: {e}"));
        assert_eq!((r.tag(), r.digest()), (None, None), "{input:?}");
        let domain = s(case, "domain");
        assert_eq!(r.grammar_domain().unwrap_or(""), domain, "domain of {input:?}");
        let path = r.name().strip_prefix(domain).unwrap().trim_start_matches('/');
        assert_eq!(path, s(case, "path"), "path of {input:?}");
    }
}

#[test]
fn normalized_name_vectors() {
    let v = vectors();
    for name in v["normalized_valid"].as_array().unwrap() {
        let name = name.as_str().unwrap();
        let r = reference::parse(name).unwrap_or_else(|e| panic!("{name:?}: {e}"));
        assert!(r.canonical_repository(Some("docker.io")).is_some(), "{name:?}");
    }
    for name in v["normalized_invalid"].as_array().unwrap() {
        let name = name.as_str().unwrap();
        let normalised = reference::parse(name)
            .ok()
            .and_then(|r| r.canonical_repository(Some("docker.io")));
        assert!(
            normalised.is_none(),
            "{name:?} should not normalise: {normalised:?}"
        );
    }
    for case in v["normalized"].as_array().unwrap() {
        let input = s(case, "input");
        let r = reference::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        let registry = s(case, "registry");
        // Deliberate deviation (see the vector file): registries compare
        // case-insensitively, so the canonical form lower-cases them, except
        // a single-label host, which is one only by its upper case.
        let host = reference::canonical_host(registry);
        let full = format!("{host}/{}", s(case, "path"));
        assert_eq!(
            r.canonical_repository(Some("docker.io")).as_deref(),
            Some(full.as_str()),
            "{input:?}"
        );
        let written_registry = r.registry().map_or("docker.io", |(reg, _)| reg);
        let written_registry = if written_registry == "index.docker.io" {
            "docker.io"
        } else {
            written_registry
        };
        assert_eq!(written_registry, registry, "registry of {input:?}");
    }
}
