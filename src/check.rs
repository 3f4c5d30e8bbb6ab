//! `digest-gate check`: the webhook's decisions, run offline on manifest files
//! (multi-document YAML, JSON, `kind: List`), with `--fix` editing image values
//! where they stand so the result can be committed as is.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use json_patch::PatchOperation;
use serde_json::Value;

use crate::allowlist::Allowlist;
use crate::judge::{self, EmbeddedRewrite, ImageJudgement, Judgement};
use crate::policy::Mode;
use crate::report::{self, Keep, ObjectReport, Position, Report};
use crate::yaml::{self, Document, Edit, Offsets};

/// Where a manifest comes from.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The path as given or found, or `-` for standard input.
    pub name: String,
    origin: Place,
}

#[derive(Debug, Clone)]
enum Place {
    Stdin,
    /// `found`: met while walking a directory rather than named.
    File {
        path: PathBuf,
        found: bool,
    },
    Text(String),
}

/// One manifest, read.
#[derive(Debug, Clone)]
pub struct Input {
    pub name: String,
    pub text: String,
    /// Found in a directory: a file that holds no Kubernetes object (a
    /// `values.yaml`, a workflow) or a Helm template is skipped, not an
    /// error.
    pub found: bool,
}

impl Manifest {
    /// A manifest given as text, e.g. by a test or a library user.
    pub fn text(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            origin: Place::Text(text.into()),
        }
    }

    /// The same manifest read now, for a run that reads its sources twice
    /// (`--registry`): standard input can be read once.
    pub fn buffered(self) -> Result<Self, String> {
        match self.origin {
            Place::Stdin => Ok(Self::text(self.name.clone(), self.read()?.text)),
            _ => Ok(self),
        }
    }

    /// Reads it; standard input can be read once.
    fn read(&self) -> Result<Input, String> {
        let (text, found) = match &self.origin {
            Place::Stdin => {
                let mut text = String::new();
                std::io::stdin()
                    .read_to_string(&mut text)
                    .map_err(|e| format!("-: cannot read standard input: {e}"))?;
                (text, false)
            }
            Place::File { path, found } => {
                let bytes = std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", self.name))?;
                let text =
                    String::from_utf8(bytes).map_err(|_| format!("{}: is not UTF-8 text", self.name))?;
                (text, *found)
            }
            Place::Text(text) => (text.clone(), false),
        };
        Ok(Input {
            name: self.name.clone(),
            text,
            found,
        })
    }
}

/// The manifests `-f` arguments name: files, `-` (stdin), or directories,
/// walked recursively (like `kubectl apply -R -f dir`) for their `.yaml`,
/// `.yml` and `.json` files in sorted order, hidden files and directories
/// left out. Arguments that cannot be used are returned as problems.
pub fn sources(args: &[String]) -> (Vec<Manifest>, Vec<String>) {
    let mut sources = Vec::new();
    let mut problems = Vec::new();
    let mut stdin = false;
    for arg in args {
        if arg == "-" {
            if !std::mem::replace(&mut stdin, true) {
                sources.push(Manifest {
                    name: "-".into(),
                    origin: Place::Stdin,
                });
            }
            continue;
        }
        let path = Path::new(arg);
        if path.is_dir() {
            let mut seen = HashSet::new();
            walk(path, &mut seen, &mut sources, &mut problems);
        } else {
            sources.push(Manifest {
                name: arg.clone(),
                origin: Place::File {
                    path: path.to_owned(),
                    found: false,
                },
            });
        }
    }
    (sources, problems)
}

/// Adds the manifests under `dir`. Symbolic links are followed, each
/// directory once, so a link back up the tree ends the walk there.
fn walk(dir: &Path, seen: &mut HashSet<PathBuf>, sources: &mut Vec<Manifest>, problems: &mut Vec<String>) {
    let shown = dir.display();
    match dir.canonicalize() {
        Ok(real) => {
            if !seen.insert(real) {
                return;
            }
        }
        Err(e) => return problems.push(format!("{shown}: cannot read directory: {e}")),
    }
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries.filter_map(Result::ok).map(|e| e.path()).collect(),
        Err(e) => return problems.push(format!("{shown}: cannot list directory: {e}")),
    };
    entries.sort();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            walk(&path, seen, sources, problems);
        } else if path.is_file()
            && path
                .extension()
                .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
        {
            sources.push(Manifest {
                name: path.display().to_string(),
                origin: Place::File { path, found: true },
            });
        }
    }
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
pub struct Checked {
    /// The objects judged; its errors are the inputs that could not be used.
    pub report: Report,
    /// With `--fix`: every input judged, rewritten where needed.
    pub fixed: Vec<Fixed>,
    /// With `--fix`: images still denied after fixing.
    pub still_denied: usize,
    /// Files read, skipped ones included.
    pub read: usize,
    /// Whether a Kubernetes object, or a `kind: List` (even empty), was
    /// found: a run that found none checked nothing and says so.
    pub found_objects: bool,
    /// With `learn`: every distinct reference a workload will run
    /// (canonical repository, digest), what `--registry` verifies.
    pub will_run: std::collections::BTreeSet<(String, String)>,
}

/// Checks `sources` one at a time, each document judged and dropped before
/// the next is read; with `fix`, also rewrites them. The report keeps
/// `keep` of each object.
/// With `learn`, it also collects what each workload will run
/// ([`Checked::will_run`]); otherwise no image is looked at twice.
pub fn check(sources: &[Manifest], rules: judge::Rules<'_>, fix: bool, keep: Keep, learn: bool) -> Checked {
    let mut outcome = Checked {
        report: Report::keeping(keep),
        ..Checked::default()
    };
    if rules.published.is_some() {
        outcome.report.summary.registry = Some(Default::default());
    }
    for source in sources {
        match source.read() {
            Ok(input) => {
                outcome.read += 1;
                FileCheck::new(&input, rules, fix, learn).run(&mut outcome);
            }
            Err(e) => outcome.report.errors.push(e),
        }
    }
    if outcome.report.errors.is_empty() && !outcome.found_objects {
        let skipped = outcome.report.skipped.len();
        outcome.report.errors.push(match outcome.read {
            0 => "no manifest found: the directories given hold no .yaml, .yml or .json file".to_owned(),
            n => format!(
                "no Kubernetes object found in the {n} file{} read{}; nothing was checked",
                if n == 1 { "" } else { "s" },
                match skipped {
                    0 => String::new(),
                    k => format!(" ({k} skipped, see above)"),
                }
            ),
        });
    }
    outcome
}

/// Why `input` could not be read; for a Helm template, the usual reason, what
/// to run instead: the parser's own words (`a mapping key must be a scalar`)
/// do not point there.
fn unreadable(input: &Input, error: &str) -> String {
    let mut message = format!("{}: not valid YAML or JSON: {error}", input.name);
    if let Some(line) = template_line(&input.text) {
        message.push_str(&format!("; {}", template_advice(line)));
    }
    message
}

/// The line of the first `{{`, if any.
fn template_line(text: &str) -> Option<usize> {
    let at = text.find("{{")?;
    Some(text[..at].matches('\n').count() + 1)
}

fn template_advice(line: usize) -> String {
    format!(
        "it looks like a Helm template ('{{{{' on line {line}): render it and check the result, \
         e.g. helm template RELEASE CHART | digest-gate check --allowlist ... -f -"
    )
}

/// What a document holds.
enum Content<'d> {
    /// Objects, each with its pointer prefix in the document; a `kind: List`
    /// gives its items, possibly none.
    Objects(Vec<Found<'d>>),
    /// Not a Kubernetes object: what it is instead.
    Other(String),
}

/// An object found in a document, with its pointer prefix in the document.
struct Found<'d> {
    object: &'d Value,
    prefix: String,
    item: Option<usize>,
}

/// API groups of configuration files that sit beside manifests but are
/// read by a tool, never applied: kustomize's `kustomization.yaml`.
const TOOL_GROUPS: &[&str] = &["kustomize.config.k8s.io/"];

fn content(value: &Value, found: bool) -> Content<'_> {
    let Some(obj) = value.as_object() else {
        return Content::Other(format!("found {}", yaml::type_name(value)));
    };
    let text = |k: &str| obj.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let (Some(api_version), Some(kind)) = (text("apiVersion"), text("kind")) else {
        return Content::Other("a mapping without apiVersion and kind".to_owned());
    };
    if found && TOOL_GROUPS.iter().any(|g| api_version.starts_with(g)) {
        return Content::Other(format!("a {kind} for {api_version}, read by a tool, not applied"));
    }
    if let (true, Some(Value::Array(items))) = (kind.ends_with("List"), obj.get("items")) {
        return Content::Objects(
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
    Content::Objects(vec![Found {
        object: value,
        prefix: String::new(),
        item: None,
    }])
}

/// A document that is not a Kubernetes object: its line, index, and what
/// it is instead.
type Other = (usize, usize, String);

/// One file being checked.
struct FileCheck<'a> {
    input: &'a Input,
    rules: judge::Rules<'a>,
    fix: bool,
    learn: bool,
    offsets: Offsets,
    fixing: Fixing,
    /// Documents that are not Kubernetes objects: errors in a file named
    /// on the command line, the reason to skip one found in a directory
    /// that holds nothing else.
    others: Vec<Other>,
    objects: bool,
}

impl<'a> FileCheck<'a> {
    fn new(input: &'a Input, rules: judge::Rules<'a>, fix: bool, learn: bool) -> Self {
        Self {
            input,
            rules,
            fix,
            learn,
            offsets: Offsets::new(&input.text),
            fixing: Fixing::default(),
            others: Vec::new(),
            objects: false,
        }
    }

    fn run(mut self, outcome: &mut Checked) {
        let mark = outcome.report.mark();
        let still_denied = outcome.still_denied;
        let mut docs = yaml::documents(&self.input.text);
        let mut positioned = true;
        for (read, doc) in docs.by_ref().enumerate() {
            match doc {
                Ok(doc) => self.document(&doc, outcome),
                // JSON that YAML cannot read (rare escapes) is read as JSON,
                // without positions.
                Err(e) => {
                    if read == 0
                        && let Some(doc) = json_document(&self.input.text)
                    {
                        positioned = false;
                        self.document(&doc, outcome);
                        continue;
                    }
                    if let Some(line) = template_line(&self.input.text).filter(|_| self.input.found) {
                        outcome.report.rewind(mark);
                        outcome.still_denied = still_denied;
                        return self.skip(outcome, template_advice(line));
                    }
                    return outcome.report.errors.push(unreadable(self.input, &e.to_string()));
                }
            }
        }
        if self.input.found && !self.objects {
            let why = match self.others.first() {
                Some((_, _, what)) => format!("holds no Kubernetes object ({what})"),
                None => "holds no Kubernetes object (it is empty)".to_owned(),
            };
            return self.skip(outcome, why);
        }
        // Said of the manifests judged, not of files skipped.
        for leniency in docs.leniencies() {
            if let Some(advice) = leniency.advice() {
                outcome
                    .report
                    .notes
                    .push(format!("{}: {advice}", self.input.name));
            }
        }
        outcome.found_objects |= self.objects;
        let name = &self.input.name;
        outcome
            .report
            .errors
            .extend(self.others.iter().map(|(line, index, what)| {
                format!("{name}:{line}: document {index} is not a Kubernetes object ({what})")
            }));
        if self.fix {
            self.fixing.finish(self.input, positioned, outcome);
        }
    }

    fn skip(&self, outcome: &mut Checked, reason: String) {
        outcome.report.skipped.push(report::Skipped {
            source: self.input.name.clone(),
            reason,
        });
    }

    fn document(&mut self, doc: &Document, outcome: &mut Checked) {
        if doc.value.is_null() {
            return;
        }
        let found = match content(&doc.value, self.input.found) {
            Content::Objects(found) => found,
            Content::Other(what) => {
                self.others.push((doc.line, doc.index, what));
                return;
            }
        };
        self.objects = true;
        for f in found {
            let j = judge::judge_as(judge::Subject::of(f.object, None), self.rules);
            let allowlist = self.rules.allowlist;
            if self.learn {
                outcome
                    .will_run
                    .extend(j.images.iter().filter_map(|i| i.will_run(allowlist)));
            }
            let mut object = report(self.input, doc, &f, &j, allowlist);
            if let Some(published) = self.rules.published {
                object = object.with_registry(&j, allowlist, published);
            }
            outcome.report.push(object);
            if self.fix {
                // What --fix leaves counts against the exit code unless audited.
                if j.mode != Mode::Audit {
                    outcome.still_denied += j.unfixable().count();
                }
                self.fixing
                    .add(&self.input.text, &self.offsets, doc, f.prefix, &j);
            }
        }
    }
}

fn json_document(text: &str) -> Option<Document> {
    let trimmed = text.trim_start();
    if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
        return None;
    }
    serde_json::from_str::<Value>(text).ok().map(Document::from_value)
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
    fn finish(self, input: &Input, positioned: bool, outcome: &mut Checked) {
        let text = if self.edits.is_empty() && self.failed.is_none() {
            Ok(input.text.clone())
        } else if !positioned {
            Err("the file could only be read as JSON, without positions".to_owned())
        } else if let Some(e) = self.failed {
            Err(e)
        } else {
            yaml::apply_edits(&input.text, self.edits)
                .map_err(|e| e.to_string())
                .and_then(|t| verify(&t, &input.text, &self.expected).map(|()| t))
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

/// Re-reads the fixed text beside the original, document by document: it
/// must hold exactly the original documents with the rewrites applied, and
/// every byte outside the rewritten values (comments, quoting, layout) must
/// be as it was, or nothing is written. Values alone would let a lost
/// comment through.
fn verify(text: &str, original: &str, expected: &[Expected]) -> Result<(), String> {
    let offsets = (Offsets::new(original), Offsets::new(text));
    let mut values = (Vec::new(), Vec::new());
    let mut fixed = yaml::documents(text);
    for before in yaml::documents(original) {
        let before = before.map_err(|e| format!("the original no longer parses: {e}"))?;
        let after = fixed
            .next()
            .ok_or("the result has fewer documents")?
            .map_err(|e| format!("the result does not parse: {e}"))?;
        let mut want = before.value.clone();
        for (_, prefix, ops) in expected.iter().filter(|(i, ..)| *i == before.index) {
            let object = want
                .pointer_mut(prefix)
                .ok_or_else(|| format!("{prefix}: not in the document"))?;
            json_patch::patch(object, ops).map_err(|e| e.to_string())?;
            for op in ops {
                let at = format!("{prefix}{}", op.path());
                let (Some(b), Some(a)) = (before.node(&at), after.node(&at)) else {
                    return Err(format!("{at}: position unknown"));
                };
                values.0.push(yaml::value_range(original, &offsets.0, &b));
                values.1.push(yaml::value_range(text, &offsets.1, &a));
            }
        }
        if want != after.value {
            return Err(format!(
                "document {} would change beyond its images",
                before.index
            ));
        }
    }
    if fixed.next().is_some() {
        return Err("the result has more documents".into());
    }
    same_outside(original, values.0, text, values.1)
}

/// Whether `before` and `after` are the same text outside the given byte
/// ranges of each, taken in order.
fn same_outside(
    before: &str,
    mut in_before: Vec<(usize, usize)>,
    after: &str,
    mut in_after: Vec<(usize, usize)>,
) -> Result<(), String> {
    for ranges in [&mut in_before, &mut in_after] {
        // An anchored value reached through aliases is one range.
        ranges.sort_unstable();
        ranges.dedup();
    }
    if in_before.len() != in_after.len() {
        return Err("the rewritten values do not line up".into());
    }
    let (mut b, mut a) = (0, 0);
    for (&(bs, be), &(as_, ae)) in in_before.iter().zip(&in_after).chain(std::iter::once((
        &(before.len(), before.len()),
        &(after.len(), after.len()),
    ))) {
        if bs < b || as_ < a || before[b..bs] != after[a..as_] {
            let line = before[..b.min(before.len())].matches('\n').count() + 1;
            return Err(format!("line {line}: text outside the image values would change"));
        }
        (b, a) = (be, ae);
    }
    Ok(())
}

/// Where an image stands in the file. Inside an embedded literal block the
/// line is the block's first line plus the image's line in the embedded text
/// (the column is not tracked there).
fn position_of_site(doc: &Document, at: &str, image: &ImageJudgement) -> Position {
    if let Some(n) = doc.node(at) {
        return Position {
            line: n.line,
            column: Some(n.col + 1),
        };
    }
    let outer = at.split('#').next().unwrap_or(at);
    let line = match (doc.node(outer), &image.site.embedded) {
        (Some(n), Some(e)) if n.is_literal_block() => n.line + e.line - 1,
        _ => doc.line_of(outer),
    };
    Position { line, column: None }
}

fn report(
    input: &Input,
    doc: &Document,
    found: &Found<'_>,
    j: &Judgement,
    allowlist: &Allowlist,
) -> ObjectReport {
    let position_of = |i: &ImageJudgement| {
        Some(position_of_site(
            doc,
            &format!("{}{}", found.prefix, i.site.path()),
            i,
        ))
    };
    ObjectReport {
        document: Some(doc.index),
        item: found.item,
        line: Some(doc.line_of(&found.prefix)),
        ..ObjectReport::new(input.name.clone(), found.object, j, allowlist, position_of)
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
pub fn exit_code(outcome: &Checked, fix: bool) -> u8 {
    if fix && outcome.report.errors.is_empty() {
        // Something still wrong after fixing (1) outranks something that
        // could not be verified (2), as in `allowlist verify`.
        match (
            outcome.still_denied > 0,
            report::registry_exit_code(&outcome.report),
        ) {
            (true, _) => 1,
            (false, code) => code,
        }
    } else {
        report::exit_code(&outcome.report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{BAD, GOOD, REPO};

    fn run(text: &str, fix: bool) -> Checked {
        let list = crate::testing::incident_allowlist();
        check(
            &[Manifest::text("m.yaml", text)],
            judge::Rules {
                policy: &crate::policy::Policy::default(),
                allowlist: &list,
                published: None,
            },
            fix,
            Keep::Objects,
            false,
        )
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
                registry: None,
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
    fn a_lost_comment_is_caught_where_values_agree() {
        let before = "image: \"quay.io/a/b@sha256:1\"   # stale!\nargs: [x]\n";
        let good = "image: \"quay.io/a/b@sha256:2\"   # stale!\nargs: [x]\n";
        let lost = "image: \"quay.io/a/b@sha256:2\"\nargs: [x]\n";
        let value = vec![(7, 29)];
        assert_eq!(same_outside(before, value.clone(), good, value.clone()), Ok(()));
        assert_eq!(
            same_outside(before, value.clone(), lost, value),
            Err("line 1: text outside the image values would change".to_owned())
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
