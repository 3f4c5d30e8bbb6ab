//! The YAML test suite (yaml/yaml-test-suite, data branch, MIT) against
//! saphyr-parser alone and against the reader `check` and the webhook use.
//!
//! Every case is asserted: a valid one must read as its `in.json`, an invalid
//! one must be refused, except the cases named below with why. A change in
//! either list fails here and must be written into `src/yaml/conformance.md`,
//! which gives these figures beside PyYAML's (`tests/yaml_suite.py`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use digest_gate::yaml;
use serde_json::Value;

/// Valid cases the reader refuses, and what it says: the result would be
/// JSON (what the apiserver reads), which has no such keys.
const NOT_JSON: &[(&str, &str)] = &[
    ("2JQS", "duplicate key ''"),
    ("4FJ6", "a mapping key must be a scalar"),
    ("6BFJ", "a mapping key must be a scalar"),
    ("6PBE", "a mapping key must be a scalar"),
    ("9MMW", "a mapping key must be a scalar"),
    ("KK5P", "a mapping key must be a scalar"),
    ("LX3P", "a mapping key must be a scalar"),
    ("M2N8/00", "a mapping key must be a scalar"),
    ("M2N8/01", "a mapping key must be a scalar"),
    ("M5DY", "a mapping key must be a scalar"),
    ("Q9WF", "a mapping key must be a scalar"),
    ("RZP5", "a mapping key must be a scalar"),
    ("SBG9", "a mapping key must be a scalar"),
    ("V9D5", "a mapping key must be a scalar"),
    ("X38W", "a mapping key must be a scalar"),
    ("XW4D", "a mapping key must be a scalar"),
];

/// Invalid cases the reader accepts on purpose, as kubectl does: see
/// `src/yaml/tolerant.rs`.
const LENIENT: &[(&str, &str)] = &[("QB6E", "a quoted scalar continued under its key's indentation")];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/yaml-test-suite")
}

/// Every case directory (a case's numbered sub-directories are cases too),
/// by id: `2G84/00`.
fn cases() -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(root()).expect("the suite is in tests/fixtures") {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let id = dir.file_name().unwrap().to_string_lossy().into_owned();
        if dir.join("in.yaml").exists() {
            out.insert(id.clone(), dir.clone());
        }
        for sub in std::fs::read_dir(&dir).unwrap() {
            let sub = sub.unwrap().path();
            if sub.join("in.yaml").exists() {
                let n = sub.file_name().unwrap().to_string_lossy().into_owned();
                out.insert(format!("{id}/{n}"), sub);
            }
        }
    }
    out
}

/// The suite writes `450.00` as 450; numbers are equal by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

#[derive(Default, Debug)]
struct Tally {
    valid: usize,
    invalid: usize,
    parser_valid: usize,
    parser_invalid: usize,
    reader_valid: usize,
    reader_invalid: usize,
    with_json: usize,
    reader_json: usize,
}

#[test]
fn every_case_reads_as_the_suite_says_or_is_named_here() {
    let mut tally = Tally::default();
    let mut wrong = Vec::new();
    let mut not_json = Vec::new();
    let mut lenient = Vec::new();
    for (id, dir) in cases() {
        let text = std::fs::read_to_string(dir.join("in.yaml")).unwrap();
        let invalid = dir.join("error").exists();
        let parser_ok = saphyr_parser::Parser::new_from_str(&text).all(|r| r.is_ok());
        let read = yaml::parse_stream(&text);
        if invalid {
            tally.invalid += 1;
            tally.parser_invalid += usize::from(!parser_ok);
            tally.reader_invalid += usize::from(read.is_err());
            if read.is_ok() {
                lenient.push(id.clone());
            }
            continue;
        }
        tally.valid += 1;
        tally.parser_valid += usize::from(parser_ok);
        let json = std::fs::read_to_string(dir.join("in.json")).ok();
        tally.with_json += usize::from(json.is_some());
        let docs = match read {
            Ok(docs) => docs,
            Err(e) => {
                match NOT_JSON.iter().find(|(c, _)| *c == id) {
                    Some((_, why)) if e.message.starts_with(why) => not_json.push(id.clone()),
                    _ => wrong.push(format!("{id}: refused: {e}")),
                }
                continue;
            }
        };
        tally.reader_valid += 1;
        let Some(json) = json else {
            continue;
        };
        let want: Vec<Value> = serde_json::Deserializer::from_str(&json)
            .into_iter::<Value>()
            .map(|v| v.expect("the suite's JSON parses"))
            .collect();
        let got: Vec<Value> = docs.into_iter().map(|d| d.value).collect();
        // The suite leaves empty documents out of in.json.
        let got: Vec<Value> = if want.len() < got.len() {
            got.into_iter().filter(|v| !v.is_null()).collect()
        } else {
            got
        };
        if got.len() == want.len() && got.iter().zip(&want).all(|(a, b)| same(a, b)) {
            tally.reader_json += 1;
        } else {
            wrong.push(format!(
                "{id}: read as {}, the suite says {}",
                serde_json::to_string(&got).unwrap(),
                serde_json::to_string(&want).unwrap()
            ));
        }
    }
    println!("{tally:#?}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let names = |l: &[(&str, &str)]| l.iter().map(|(c, _)| (*c).to_owned()).collect::<Vec<_>>();
    assert_eq!(not_json, names(NOT_JSON), "valid cases refused");
    assert_eq!(lenient, names(LENIENT), "invalid cases accepted");
    // saphyr-parser alone passes the whole suite: a regression in an update
    // shows here before it shows in the reader.
    assert_eq!(
        (
            tally.valid,
            tally.parser_valid,
            tally.invalid,
            tally.parser_invalid
        ),
        (308, 308, 94, 94)
    );
}

/// saphyr's events with the line and column each starts at, up to and
/// including the first error (after which it repeats that error forever).
fn events<'a, I: saphyr_parser::Input>(
    parser: saphyr_parser::Parser<'a, I>,
) -> Vec<Result<(saphyr_parser::Event<'a>, usize, usize), String>> {
    let mut out = Vec::new();
    for r in parser {
        let failed = r.is_err();
        out.push(
            r.map(|(e, s)| (e, s.start.line(), s.start.col()))
                .map_err(|e| e.to_string()),
        );
        if failed {
            break;
        }
    }
    out
}

/// A large allowlist file is parsed from characters decoded a chunk at a
/// time (`yaml::stream::Chars`), not from its whole text: saphyr must give
/// the same events either way. Chunks of 1, 2 and 3 bytes split every
/// multi-byte character at each of its boundaries (`src/yaml/stream.rs`
/// tests the decoding itself on any text).
#[test]
fn every_case_parses_the_same_read_a_few_bytes_at_a_time() {
    use saphyr_parser::Parser;
    use std::io::BufReader;

    let mut compared = 0;
    let mut multibyte = 0;
    for (id, dir) in cases() {
        let text = std::fs::read_to_string(dir.join("in.yaml")).unwrap();
        multibyte += usize::from(!text.is_ascii());
        let whole = events(Parser::new_from_str(&text));
        for chunk in 1..=3 {
            let (chars, failure) = yaml::stream::Chars::new(BufReader::with_capacity(chunk, text.as_bytes()));
            let streamed = events(Parser::new_from_iter(chars));
            assert!(failure.borrow().is_none(), "{id}: {:?}", failure.borrow());
            assert_eq!(streamed, whole, "{id}, read {chunk} bytes at a time");
            compared += 1;
        }
    }
    assert_eq!(compared, 3 * 402);
    assert!(multibyte > 0, "no case holds non-ASCII text");
}
