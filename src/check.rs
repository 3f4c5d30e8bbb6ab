//! `digest-gate check`: the webhook's decisions, run offline on manifest files
//! (multi-document YAML, JSON, `kind: List`), with `--fix` editing image values
//! where they stand so the result can be committed as is.

use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;

use json_patch::PatchOperation;
use serde_json::Value;

use crate::allowlist::Allowlist;
use crate::judge::{self, EmbeddedRewrite, ImageJudgement, Judgement};
use crate::policy::{Mode, Policy};
use crate::report::{self, ObjectReport, Report};
use crate::yaml::{self, Document, Edit, Offsets};

/// One manifest input.
#[derive(Debug, Clone)]
pub struct Input {
    /// The path as given, or `-` for standard input.
    pub name: String,
    pub text: String,
}

/// Reads `-f` arguments: files, `-` (stdin), or directories (their `.yaml`,
/// `.yml` and `.json` files, like `kubectl apply -f dir`). Unreadable inputs
/// are returned as problems.
pub fn read_inputs(args: &[String]) -> (Vec<Input>, Vec<String>) {
    let mut inputs = Vec::new();
    let mut problems = Vec::new();
    let mut stdin_read = false;
    for arg in args {
        if arg == "-" {
            if stdin_read {
                continue;
            }
            stdin_read = true;
            let mut text = String::new();
            match std::io::stdin().read_to_string(&mut text) {
                Ok(_) => inputs.push(Input {
                    name: "-".into(),
                    text,
                }),
                Err(e) => problems.push(format!("-: cannot read standard input: {e}")),
            }
            continue;
        }
        let path = Path::new(arg);
        let files = if path.is_dir() {
            match std::fs::read_dir(path) {
                Ok(entries) => {
                    let mut files: Vec<_> = entries
                        .filter_map(Result::ok)
                        .map(|e| e.path())
                        .filter(|p| {
                            p.is_file()
                                && p.extension()
                                    .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
                        })
                        .collect();
                    files.sort();
                    files
                }
                Err(e) => {
                    problems.push(format!("{arg}: cannot list directory: {e}"));
                    continue;
                }
            }
        } else {
            vec![path.to_owned()]
        };
        for file in files {
            let name = file.display().to_string();
            match std::fs::read(&file) {
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) => inputs.push(Input { name, text }),
                    Err(_) => problems.push(format!("{name}: is not UTF-8 text")),
                },
                Err(e) => problems.push(format!("{name}: cannot read: {e}")),
            }
        }
    }
    (inputs, problems)
}

/// A manifest after `--fix`.
#[derive(Debug, Clone)]
pub struct Fixed {
    pub name: String,
    pub text: String,
    /// Images rewritten in this file.
    pub rewrites: usize,
}

/// Everything a check run found.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The objects judged; its errors are the inputs that could not be used.
    pub report: Report,
    /// With `--fix`: every input, rewritten where needed.
    pub fixed: Vec<Fixed>,
    /// With `--fix`: images still denied after fixing.
    pub still_denied: usize,
}

/// Checks `inputs`; with `fix`, also rewrites them.
pub fn check(inputs: &[Input], allowlist: &Allowlist, policy: &Policy, fix: bool) -> Outcome {
    let mut outcome = Outcome::default();
    for input in inputs {
        check_input(input, allowlist, policy, fix, &mut outcome);
    }
    outcome
}

/// Parses a manifest stream. JSON that YAML cannot read (rare escapes) is
/// read as JSON, without positions.
fn documents(text: &str) -> Result<(Vec<Document>, bool), String> {
    match yaml::parse_stream(text) {
        Ok(docs) => Ok((docs, true)),
        Err(e) => {
            let trimmed = text.trim_start();
            if (trimmed.starts_with('{') || trimmed.starts_with('['))
                && let Ok(value) = serde_json::from_str::<Value>(text)
            {
                return Ok((vec![Document::from_value(value)], false));
            }
            Err(e.to_string())
        }
    }
}

/// Why `input` could not be read; for a Helm template, the usual reason, what
/// to run instead: the parser's own words (`a mapping key must be a scalar`)
/// do not point there.
fn unreadable(input: &Input, error: &str) -> String {
    let mut message = format!("{}: not valid YAML or JSON: {error}", input.name);
    if let Some(at) = input.text.find("{{") {
        let line = input.text[..at].matches('\n').count() + 1;
        message.push_str(&format!(
            "; it looks like a Helm template ('{{{{' on line {line}): render it and check the result, \
             e.g. helm template RELEASE CHART | digest-gate check --allowlist ... -f -"
        ));
    }
    message
}

/// An object found in a document, with its pointer prefix in the document.
struct Found<'d> {
    object: &'d Value,
    prefix: String,
    item: Option<usize>,
}

fn objects_of(value: &Value) -> Option<Vec<Found<'_>>> {
    let obj = value.as_object()?;
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if let (true, Some(Value::Array(items))) = (kind.ends_with("List"), obj.get("items")) {
        return Some(
            items
                .iter()
                .enumerate()
                .map(|(i, object)| Found {
                    object,
                    prefix: format!("/items/{i}"),
                    item: Some(i),
                })
                .collect(),
        );
    }
    Some(vec![Found {
        object: value,
        prefix: String::new(),
        item: None,
    }])
}

fn check_input(input: &Input, allowlist: &Allowlist, policy: &Policy, fix: bool, outcome: &mut Outcome) {
    let (docs, positioned) = match documents(&input.text) {
        Ok(d) => d,
        Err(e) => {
            outcome.report.errors.push(unreadable(input, &e));
            return;
        }
    };
    let offsets = Offsets::new(&input.text);
    let mut fixing = Fixing::default();
    for doc in &docs {
        if doc.value.is_null() {
            continue;
        }
        let Some(found) = objects_of(&doc.value) else {
            outcome.report.errors.push(format!(
                "{}:{}: document {} is not a Kubernetes object (found {})",
                input.name,
                doc.line,
                doc.index,
                yaml::type_name(&doc.value)
            ));
            continue;
        };
        for f in found {
            let j = judge::judge(f.object, None, policy, allowlist);
            outcome.report.push(report(input, doc, &f, &j));
            if fix {
                // What --fix leaves counts against the exit code unless audited.
                if j.mode != Mode::Audit {
                    outcome.still_denied += j.unfixable().count();
                }
                fixing.add(&input.text, &offsets, doc, f.prefix, &j);
            }
        }
    }
    if fix {
        fixing.finish(input, &docs, positioned, outcome);
    }
}

/// The fixes of one file, gathered object by object. Fixing applies every
/// rewrite the allowlist allows, whatever the mode: a developer running
/// --fix wants manifests that pass in any mode.
#[derive(Default)]
struct Fixing {
    edits: Vec<Edit>,
    expected: Vec<Expected>,
    failed: Option<String>,
    rewrites: usize,
}

impl Fixing {
    /// Adds the fixes of the object at `prefix` in `doc`.
    fn add(&mut self, text: &str, offsets: &Offsets, doc: &Document, prefix: String, j: &Judgement) {
        self.rewrites += j.images.iter().filter(|i| i.fix.is_some()).count();
        for (at, edit) in file_edits(text, offsets, doc, &prefix, j) {
            match edit {
                Ok(mut e) => self.edits.append(&mut e),
                Err(e) => self.failed = Some(format!("{at}: {e}")),
            }
        }
        let ops = j.fix_ops();
        if !ops.is_empty() {
            self.expected.push((doc.index, prefix, ops));
        }
    }

    /// Applies the edits, proves nothing else moved, and records the file.
    fn finish(self, input: &Input, docs: &[Document], positioned: bool, outcome: &mut Outcome) {
        let text = if self.edits.is_empty() && self.failed.is_none() {
            Ok(input.text.clone())
        } else if !positioned {
            Err("the file could only be read as JSON, without positions".to_owned())
        } else if let Some(e) = self.failed {
            Err(e)
        } else {
            yaml::apply_edits(&input.text, self.edits)
                .map_err(|e| e.to_string())
                .and_then(|t| verify(&t, docs, &self.expected).map(|()| t))
        };
        let (text, rewrites) = match text {
            Ok(text) => (text, self.rewrites),
            Err(e) => {
                outcome.still_denied += self.rewrites;
                outcome.report.errors.push(format!(
                    "{}: cannot rewrite in place ({e}); apply the rewrites above by hand",
                    input.name
                ));
                (input.text.clone(), 0)
            }
        };
        outcome.fixed.push(Fixed {
            name: input.name.clone(),
            text,
            rewrites,
        });
    }
}

/// A document's fixes: the operations on the object at `.1` in document `.0`.
type Expected = (usize, String, Vec<PatchOperation>);

/// The file edits for the judgement's fixes of the object at `prefix` in
/// `doc`, each with the pointer it edits in the document.
fn file_edits(
    text: &str,
    offsets: &Offsets,
    doc: &Document,
    prefix: &str,
    j: &Judgement,
) -> Vec<(String, Result<Vec<Edit>, String>)> {
    let images = j.images.iter().filter(|i| i.site.embedded.is_none());
    let mut out: Vec<_> = images
        .filter_map(|i| {
            let to = i.fix.as_deref()?;
            let at = format!("{prefix}{}", i.site.pointer);
            let edit = doc
                .node(&at)
                .ok_or_else(|| "positions unknown".to_owned())
                .and_then(|n| {
                    yaml::scalar_edit(text, offsets, &n, to)
                        .map(|e| vec![e])
                        .map_err(|e| e.to_string())
                });
            Some((at, edit))
        })
        .collect();
    for e in &j.embedded {
        let at = format!("{prefix}{}", e.pointer);
        let edit = embedded_edits(text, offsets, doc, &at, e);
        out.push((at, edit));
    }
    out
}

/// Edits of the file for a rewritten embedded document: in a literal block
/// each line maps to a file line; any other style is replaced whole.
fn embedded_edits(
    text: &str,
    offsets: &Offsets,
    doc: &Document,
    at: &str,
    e: &EmbeddedRewrite,
) -> Result<Vec<Edit>, String> {
    let node = doc.node(at).ok_or("positions unknown")?;
    if let Ok(mapped) = yaml::map_literal_edits(text, offsets, &node, &e.original, &e.edits) {
        return Ok(mapped);
    }
    yaml::scalar_edit(text, offsets, &node, &e.rewritten)
        .map(|edit| vec![edit])
        .map_err(|err| err.to_string())
}

/// Re-reads the fixed text: it must hold exactly the original documents with
/// the rewrites applied, or nothing is written.
fn verify(text: &str, original: &[Document], expected: &[Expected]) -> Result<(), String> {
    let docs = yaml::parse_stream(text).map_err(|e| format!("the result does not parse: {e}"))?;
    if docs.len() != original.len() {
        return Err("the result has a different number of documents".into());
    }
    for (before, after) in original.iter().zip(&docs) {
        let mut want = before.value.clone();
        for (_, prefix, ops) in expected.iter().filter(|(i, ..)| *i == before.index) {
            let object = want
                .pointer_mut(prefix)
                .ok_or_else(|| format!("{prefix}: not in the document"))?;
            json_patch::patch(object, ops).map_err(|e| e.to_string())?;
        }
        if want != after.value {
            return Err(format!(
                "document {} would change beyond its images",
                before.index
            ));
        }
    }
    Ok(())
}

/// The file line of an image. Inside an embedded literal block the line is
/// the block's first line plus the image's line in the embedded text.
fn line_of_site(doc: &Document, at: &str, image: &ImageJudgement) -> usize {
    if let Some(n) = doc.node(at) {
        return n.line;
    }
    let outer = at.split('#').next().unwrap_or(at);
    match (doc.node(outer), &image.site.embedded) {
        (Some(n), Some(e)) if n.is_literal_block() => n.line + e.line - 1,
        _ => doc.line_of(outer),
    }
}

fn report(input: &Input, doc: &Document, found: &Found<'_>, j: &Judgement) -> ObjectReport {
    let line_of = |i: &ImageJudgement| {
        Some(line_of_site(
            doc,
            &format!("{}{}", found.prefix, i.site.path()),
            i,
        ))
    };
    ObjectReport {
        document: Some(doc.index),
        item: found.item,
        line: Some(doc.line_of(&found.prefix)),
        ..ObjectReport::new(input.name.clone(), found.object, j, line_of)
    }
}

// === output ===

/// The fixed manifests for stdout: one input as it is; several in a single
/// stream, each behind a `# Source:` comment.
pub fn fixed_stream(fixed: &[Fixed]) -> String {
    if let [one] = fixed {
        return one.text.clone();
    }
    let mut out = String::new();
    for (i, f) in fixed.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let _ = writeln!(out, "# Source: {}", f.name);
        out.push_str(&f.text);
        if !f.text.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// The exit code contract: 0 compliant, 1 something denied or to rewrite
/// (with `--fix`: still denied after fixing), 2 unusable input.
pub fn exit_code(outcome: &Outcome, fix: bool) -> u8 {
    if fix && outcome.report.errors.is_empty() {
        u8::from(outcome.still_denied > 0)
    } else {
        report::exit_code(&outcome.report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{BAD, GOOD, REPO};

    fn run(text: &str, fix: bool) -> Outcome {
        let list = crate::testing::incident_allowlist();
        let input = Input {
            name: "m.yaml".into(),
            text: text.into(),
        };
        check(&[input], &list, &Policy::default(), fix)
    }

    #[test]
    fn fix_edits_only_image_values() {
        let text = format!(
            "# keep me\napiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: demo}}\nspec:\n  containers:\n    - name: a   # first\n      image: \"{REPO}@{BAD}\"\n    - {{name: b, image: '{REPO}:v1.21.0-15'}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: s}}\n"
        );
        let o = run(&text, true);
        assert_eq!(
            o.report.summary,
            report::Summary {
                objects: 2,
                allow: 0,
                rewrite: 1,
                deny: 0,
                skipped: 1
            }
        );
        assert_eq!(o.still_denied, 0);
        let want = text
            .replace(&format!("\"{REPO}@{BAD}\""), &format!("\"{REPO}@{GOOD}\""))
            .replace(
                &format!("'{REPO}:v1.21.0-15'"),
                &format!("'{REPO}:v1.21.0-15@{GOOD}'"),
            );
        assert_eq!(o.fixed[0].text, want);
        assert_eq!(o.fixed[0].rewrites, 2);
        assert_eq!(exit_code(&o, true), 0);
        assert_eq!(exit_code(&run(&text, false), false), 1);
    }

    #[test]
    fn lists_report_items() {
        let text = format!(
            "{{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n  {{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {{\"name\": \"a\"}}, \"spec\": {{\"containers\": [{{\"name\": \"c\", \"image\": \"{REPO}@{GOOD}\"}}]}}}},\n  {{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {{\"name\": \"b\"}}, \"spec\": {{\"containers\": [{{\"name\": \"c\", \"image\": \"nginx\"}}]}}}}\n]}}\n"
        );
        let o = run(&text, false);
        assert_eq!(o.report.results.len(), 2);
        assert_eq!(
            (o.report.results[0].item, o.report.results[1].item),
            (Some(0), Some(1))
        );
        assert_eq!(
            (o.report.results[0].verdict, o.report.results[1].verdict),
            (judge::ObjectVerdict::Allow, judge::ObjectVerdict::Deny)
        );
        assert_eq!(o.report.results[1].images[0].line, Some(3));
        let report = report::text(&o.report, None);
        assert!(
            report
                .starts_with("m.yaml:3: Pod b: deny: container \"c\": image 'nginx' has no registry domain"),
            "{report}"
        );
        assert!(
            report.ends_with("2 objects checked: 1 allowed, 0 to rewrite, 1 denied, 0 skipped\n"),
            "{report}"
        );
    }

    #[test]
    fn unusable_documents_are_problems() {
        let o = run("- a\n- b\n", false);
        assert_eq!(exit_code(&o, false), 2);
        assert!(
            o.report.errors[0].contains("is not a Kubernetes object (found a list)"),
            "{:?}",
            o.report.errors
        );
        let o = run("kind: [\n", false);
        assert!(
            o.report.errors[0].starts_with("m.yaml: not valid YAML or JSON"),
            "{:?}",
            o.report.errors
        );
    }

    #[test]
    fn denied_images_remain_after_fixing() {
        let text = format!(
            "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n    - {{name: a, image: {REPO}:latest}}\n    - {{name: b, image: {REPO}@{BAD}}}\n"
        );
        let o = run(&text, true);
        assert_eq!(o.still_denied, 1);
        assert_eq!(exit_code(&o, true), 1);
        assert!(o.fixed[0].text.contains(&format!("image: {REPO}@{GOOD}}}")));
        assert!(o.fixed[0].text.contains(&format!("image: {REPO}:latest}}")));
    }
}
