//! What users see, pinned: `check` over every fixture directory in every
//! output and mode, `allowlist lint` and `convert` over every test
//! allowlist, and the `/metrics` of a server that answered the incident's
//! reviews, each compared with a file under `tests/golden/`.
//!
//! A golden changes only on purpose, in the commit that changes the
//! behaviour. `DIGEST_GATE_UPDATE_GOLDEN=1 cargo test --test golden` writes
//! the files instead of comparing; `git diff tests/golden` then shows what
//! changed for a user.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod common;

use common::{admin_get, review, root, runtime_reviews, start_server};

/// Compares `actual` with the golden file `name`, or writes it.
fn assert_golden(name: &str, actual: &str) {
    let path = root().join("tests/golden").join(name);
    if std::env::var_os("DIGEST_GATE_UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with DIGEST_GATE_UPDATE_GOLDEN=1 to write it",
            path.display()
        )
    });
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the output, first at line {}:\n  golden: {:?}\n  now:    {:?}",
            path.display(),
            line + 1,
            expected.lines().nth(line),
            actual.lines().nth(line)
        );
    }
}

/// The binary run from the repository's root with relative paths, so
/// that what it prints names files the same on every machine; the app
/// version is masked so a release does not rewrite every golden.
fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_digest-gate"))
        .args(args)
        .current_dir(root())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("the binary runs");
    let version = env!("CARGO_PKG_VERSION");
    let mask = |bytes: &[u8]| String::from_utf8_lossy(bytes).replace(version, "<version>");
    format!(
        "$ digest-gate {}\nexit: {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        out.status.code().expect("exited"),
        mask(&out.stdout),
        mask(&out.stderr)
    )
}

/// The entries of `dir` (relative to the root) that `keep` keeps, as
/// relative paths, with `more`, sorted.
fn entries(dir: &str, keep: fn(&Path) -> bool, more: &str) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| keep(p))
        .map(|p| format!("{dir}/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    found.push(more.to_owned());
    found.sort();
    found
}

/// Directories of real manifests `check` is run over.
fn fixture_directories() -> Vec<String> {
    entries("tests/fixtures/upstream", Path::is_dir, "examples/manifests")
}

fn slug(path: &str) -> String {
    path.rsplit('/').next().unwrap().to_owned()
}

#[test]
fn check_prints_what_it_printed_in_every_output_and_mode() {
    let dirs = fixture_directories();
    assert!(dirs.len() >= 5, "{dirs:?}");
    for dir in &dirs {
        let mut all = String::new();
        for mode in ["rewrite", "enforce", "audit"] {
            for output in ["text", "json", "sarif"] {
                let args = [
                    "check",
                    "--allowlist",
                    "examples/allowlist.yaml",
                    "--mode",
                    mode,
                    "-o",
                    output,
                    "-f",
                    dir,
                ];
                all.push_str(&run(&args));
                all.push('\n');
            }
        }
        assert_golden(&format!("check/{}.txt", slug(dir)), &all);
    }
}

/// Every allowlist the tests use.
fn allowlists() -> Vec<String> {
    entries("tests/data/allowlists", Path::is_file, "examples/allowlist.yaml")
}

#[test]
fn allowlist_lint_and_convert_print_what_they_printed() {
    let files = allowlists();
    assert!(files.len() >= 5, "{files:?}");
    for file in &files {
        let text = format!(
            "{}\n{}",
            run(&["allowlist", "lint", file]),
            run(&["allowlist", "convert", file])
        );
        assert_golden(&format!("allowlist/{}.txt", slug(file)), &text);
    }
    // All of them merged, as a directory of sources is.
    let mut args = vec!["allowlist", "lint"];
    args.extend(files.iter().map(String::as_str));
    let mut text = run(&args);
    args[1] = "convert";
    text.push('\n');
    text.push_str(&run(&args));
    assert_golden("allowlist/all-merged.txt", &text);
}

/// One sample line: its name and labels, and its value.
fn sample(line: &str) -> (&str, &str) {
    match line.rfind(' ') {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, ""),
    }
}

/// The exposition as families: HELP and TYPE, label sets, and the values
/// of counters and gauges. Histograms keep only their label sets (their
/// buckets hold timings), and so do timestamps and the certificate's
/// expiry, which differ on every run.
fn metric_families(text: &str) -> String {
    let mut families: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        if line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut words = rest.splitn(3, ' ');
            let (what, name) = (words.next().unwrap(), words.next().unwrap());
            current = name.to_owned();
            if what == "TYPE" {
                kinds.insert(name.to_owned(), words.next().unwrap_or("").to_owned());
            }
            families
                .entry(current.clone())
                .or_default()
                .0
                .push(line.to_owned());
            continue;
        }
        let kind = kinds.get(&current).map(String::as_str).unwrap_or("");
        let (series, value) = sample(line);
        let name = series.split_once('{').map_or(series, |(n, _)| n);
        let kept = if kind == "histogram" {
            // One line per label set: the count's.
            if !name.ends_with("_count") {
                continue;
            }
            format!("{series} <varies>")
        } else if current.ends_with("_timestamp_seconds") {
            // Reload times, the audit's, and the certificate's expiry.
            format!("{series} <varies>")
        } else {
            format!("{series} {value}")
        };
        families.entry(current.clone()).or_default().1.push(kept);
    }
    let mut out = String::new();
    for (_, (meta, mut samples)) in families {
        samples.sort();
        for line in meta.iter().chain(&samples) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[tokio::test]
async fn metrics_after_the_incident_reviews_are_what_they_were() {
    let (running, pki) = start_server("golden-metrics", |_| {}).await;
    let mut client = common::Client::open(running.webhook_addr, &pki.ca_pem).await;
    let objects: Vec<Value> = runtime_reviews().into_iter().map(|(_, o)| o).collect();
    assert!(objects.len() >= 12, "{}", objects.len());
    for (i, object) in objects.iter().enumerate() {
        for endpoint in ["/mutate", "/validate"] {
            let uid = format!("golden-{i}");
            let answer = client
                .review(endpoint, &review(&uid, "CREATE", object, None))
                .await;
            assert_eq!(answer["response"]["uid"], uid.as_str());
        }
    }
    // Refused before review: a wrong content type and an unknown path.
    let (status, _) = client.post("/mutate", "text/plain", b"{}".to_vec()).await;
    assert_eq!(status, 415);
    let (status, _) = client
        .post("/elsewhere", "application/json", b"{}".to_vec())
        .await;
    assert_eq!(status, 404);
    let (status, text) = admin_get(running.admin_addr, "/metrics").await;
    assert_eq!(status, 200);
    assert_golden("metrics/incident-reviews.txt", &metric_families(&text));
    drop(client);
    running.drain();
    running.wait().await;
}
