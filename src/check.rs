//! `digest-gate check`: the webhook's decisions, run offline on manifest files
//! (multi-document YAML, JSON, `kind: List`), with `--fix` editing image values
//! where they stand so the result can be committed as is.
//!
//! JSON is read an item at a time ([`crate::json`]): `kubectl get … -o json`
//! of a whole cluster is one `kind: List`, checked in the memory of one of
//! its objects. YAML streams are read a document at a time. Each object's
//! report is written out ([`crate::output::Writer`]) as soon as it is judged;
//! with `--fix` the input is kept whole to be edited.

use std::collections::HashSet;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use json_patch::PatchOperation;
use serde_json::Value;

use crate::edit::Edit;
use crate::json::{self, JsonError, Part, Piece};
use crate::judge::{self, EmbeddedRewrite, ImageJudgement, Judgement};
use crate::output::Writer;
use crate::policy::Mode;
use crate::report::{self, ObjectReport, Position, Report};
use crate::yaml::{self, Document, Offsets};

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
    /// Standard input copied to an unnamed temporary file, to be read again.
    Spilled(Arc<std::fs::File>),
}

/// One manifest, opened.
struct Opened {
    name: String,
    reader: Box<dyn Read>,
    /// Found in a directory: a file that holds no Kubernetes object (a
    /// `values.yaml`, a workflow) or a Helm template is skipped, not an
    /// error.
    found: bool,
}

impl Manifest {
    /// A manifest given as text, e.g. by a test or a library user.
    pub fn text(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            origin: Place::Text(text.into()),
        }
    }

    /// The same manifest, readable again, for a run that reads its sources
    /// twice (`--registry`): standard input can be read once, so it is
    /// copied to a temporary file (not to memory: it may be a cluster's
    /// dump).
    pub fn buffered(self) -> Result<Self, String> {
        let Place::Stdin = self.origin else {
            return Ok(self);
        };
        let mut file =
            crate::output::temporary().map_err(|e| format!("-: cannot keep standard input: {e}"))?;
        std::io::copy(&mut std::io::stdin().lock(), &mut file)
            .map_err(|e| format!("-: cannot read standard input: {e}"))?;
        Ok(Self {
            name: self.name,
            origin: Place::Spilled(Arc::new(file)),
        })
    }

    /// Opens it; standard input can be read once.
    fn open(&self) -> Result<Opened, String> {
        let (reader, found): (Box<dyn Read>, bool) = match &self.origin {
            Place::Stdin => (Box::new(std::io::stdin()), false),
            Place::File { path, found } => (
                Box::new(std::fs::File::open(path).map_err(|e| format!("{}: cannot read: {e}", self.name))?),
                *found,
            ),
            Place::Text(text) => (Box::new(std::io::Cursor::new(text.clone().into_bytes())), false),
            Place::Spilled(file) => {
                // A clone shares the file's offset: each pass starts over.
                let file = file
                    .try_clone()
                    .and_then(|mut f| f.rewind().map(|()| f))
                    .map_err(|e| format!("-: cannot read standard input again: {e}"))?;
                (Box::new(file), false)
            }
        };
        Ok(Opened {
            name: self.name.clone(),
            reader,
            found,
        })
    }
}

/// What the `-f` arguments name: the manifests to read, the arguments
/// that cannot be used, and what was left out on the way (charts met
/// while walking a tree).
#[derive(Debug, Default)]
pub struct Sources {
    pub manifests: Vec<Manifest>,
    pub problems: Vec<String>,
    pub skipped: Vec<report::Skipped>,
}

/// The manifests `-f` arguments name: files, `-` (stdin), or directories,
/// walked recursively (like `kubectl apply -R -f dir`) for their `.yaml`,
/// `.yml` and `.json` files in sorted order, hidden files and directories
/// left out. A Helm chart is not manifests until rendered: named, it is a
/// problem that says what to run; met in a tree, it is skipped whole.
pub fn sources(args: &[String]) -> Sources {
    let mut found = Sources::default();
    let mut stdin = false;
    for arg in args {
        if arg == "-" {
            if !std::mem::replace(&mut stdin, true) {
                found.manifests.push(Manifest {
                    name: "-".into(),
                    origin: Place::Stdin,
                });
            }
            continue;
        }
        let path = Path::new(arg);
        if is_chart(path) {
            found.problems.push(format!("{arg}: {}", chart_advice(arg)));
        } else if path.is_dir() {
            let mut seen = HashSet::new();
            walk(path, &mut seen, &mut found);
        } else {
            found.manifests.push(Manifest {
                name: arg.clone(),
                origin: Place::File {
                    path: path.to_owned(),
                    found: false,
                },
            });
        }
    }
    found
}

// === impl Sources ===

impl From<Vec<Manifest>> for Sources {
    fn from(manifests: Vec<Manifest>) -> Self {
        Self {
            manifests,
            ..Self::default()
        }
    }
}

impl Sources {
    /// The same sources, readable twice ([`Manifest::buffered`]).
    pub fn buffered(self) -> Result<Self, String> {
        let manifests = self
            .manifests
            .into_iter()
            .map(Manifest::buffered)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { manifests, ..self })
    }
}

/// A Helm chart's directory: the one that holds its `Chart.yaml`.
fn is_chart(dir: &Path) -> bool {
    dir.is_dir() && dir.join("Chart.yaml").is_file()
}

fn chart_advice(chart: &str) -> String {
    format!(
        "a Helm chart (it holds Chart.yaml), whose templates are not manifests until rendered: \
         render it and check the result, e.g. helm template RELEASE {chart} | digest-gate check --allowlist ... -f -"
    )
}

/// Adds the manifests under `dir`. Symbolic links are followed, each
/// directory once, so a link back up the tree ends the walk there.
fn walk(dir: &Path, seen: &mut HashSet<PathBuf>, found: &mut Sources) {
    let shown = dir.display();
    match dir.canonicalize() {
        Ok(real) => {
            if !seen.insert(real) {
                return;
            }
        }
        Err(e) => {
            return found
                .problems
                .push(format!("{shown}: cannot read directory: {e}"));
        }
    }
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries.filter_map(Result::ok).map(|e| e.path()).collect(),
        Err(e) => {
            return found
                .problems
                .push(format!("{shown}: cannot list directory: {e}"));
        }
    };
    entries.sort();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        if is_chart(&path) {
            let shown = path.display().to_string();
            found.skipped.push(report::Skipped {
                reason: chart_advice(&shown),
                source: shown,
            });
        } else if path.is_dir() {
            walk(&path, seen, found);
        } else if path.is_file()
            && path
                .extension()
                .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
        {
            found.manifests.push(Manifest {
                name: path.display().to_string(),
                origin: Place::File { path, found: true },
            });
        }
    }
}

/// A manifest after `--fix`: its text and the edits that fix it, applied
/// as it is written out ([`Fixed::write_to`]), so a big input is not held
/// twice.
#[derive(Debug, Clone)]
pub struct Fixed {
    pub name: String,
    text: String,
    edits: Vec<Edit>,
    /// Images rewritten in this file.
    pub rewrites: usize,
}

impl Fixed {
    /// Writes the fixed text.
    pub fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let mut at = 0;
        for e in &self.edits {
            out.write_all(&self.text.as_bytes()[at..e.start])?;
            out.write_all(e.text.as_bytes())?;
            at = e.end;
        }
        out.write_all(&self.text.as_bytes()[at..])
    }

    /// The fixed text.
    pub fn text(&self) -> String {
        let mut out = Vec::with_capacity(self.text.len());
        self.write_to(&mut out).expect("writing to memory succeeds");
        String::from_utf8(out).expect("edits keep UTF-8")
    }

    fn ends_with_newline(&self) -> bool {
        match self.edits.last() {
            Some(e) if e.end == self.text.len() => e.text.ends_with('\n'),
            _ => self.text.ends_with('\n'),
        }
    }
}

/// Everything a check run found.
#[derive(Debug, Clone, Default)]
pub struct Checked {
    /// The objects judged (those not yet written out); its errors are the
    /// inputs that could not be used.
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
    /// Objects of a kind digest-gate reads that were judged.
    pub judged_kinds: usize,
    /// With `learn`: every distinct reference a workload will run
    /// (canonical repository, digest), what `--registry` verifies.
    pub will_run: std::collections::BTreeSet<(String, String)>,
}

/// Checks `sources` one at a time, each object judged and dropped before
/// the next is read; with `fix`, also rewrites them. Each object's report
/// goes to `out` once it cannot be taken back (a file found in a directory
/// may turn out to be a template, skipped whole); without `out` the report
/// keeps them all.
/// With `learn`, it also collects what each workload will run
/// ([`Checked::will_run`]); otherwise no image is looked at twice.
pub fn check(
    sources: &Sources,
    rules: judge::Rules<'_>,
    fix: bool,
    learn: bool,
    mut out: Option<&mut Writer<'_>>,
) -> Checked {
    let mut outcome = Checked::default();
    outcome.report.errors.clone_from(&sources.problems);
    outcome.report.skipped.clone_from(&sources.skipped);
    if rules.published.is_some() {
        outcome.report.summary.registry = Some(Default::default());
    }
    for source in &sources.manifests {
        match source.open() {
            Ok(opened) => {
                outcome.read += 1;
                let mut file = FileCheck {
                    name: &opened.name,
                    found: opened.found,
                    rules,
                    fix,
                    learn,
                    out: out.as_deref_mut(),
                    fixing: Fixing::default(),
                    others: Vec::new(),
                    objects: false,
                };
                file.run(opened.reader, &mut outcome);
                if let Some(w) = out.as_deref_mut() {
                    w.flush(&mut outcome.report);
                }
            }
            Err(e) => outcome.report.errors.push(e),
        }
    }
    nothing_judged(&mut outcome);
    outcome
}

/// A run that judged no object of a kind digest-gate reads: an error when
/// something was skipped or nothing was found (a CI step pointed at the
/// wrong file must not pass), else a note (only CRDs, an empty List).
fn nothing_judged(outcome: &mut Checked) {
    let skipped = outcome.report.skipped.len();
    if outcome.report.errors.is_empty() && outcome.found_objects && outcome.judged_kinds == 0 {
        let objects = outcome.report.summary.objects;
        let read = format!(
            "none of the {objects} object{} read is of a kind digest-gate reads",
            if objects == 1 { "" } else { "s" },
        );
        match skipped {
            0 if objects == 0 => outcome
                .report
                .notes
                .push("the input held no object (an empty List): nothing to judge".to_owned()),
            0 => outcome
                .report
                .notes
                .push(format!("{read}: nothing held an image to judge")),
            k => outcome.report.errors.push(format!(
                "{read}, and {k} input{} {} skipped (see above): nothing was judged",
                if k == 1 { "" } else { "s" },
                if k == 1 { "was" } else { "were" }
            )),
        }
    }
    if outcome.report.errors.is_empty() && !outcome.found_objects {
        let skipped = outcome.report.skipped.len();
        outcome.report.errors.push(match outcome.read {
            0 if skipped > 0 => {
                format!("no manifest read: {skipped} skipped (see above); nothing was checked")
            }
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
}

/// Why the text of `name` could not be read; for a Helm template, the
/// usual reason, what to run instead: the parser's own words (`a mapping
/// key must be a scalar`) do not point there.
fn unreadable(name: &str, text: &str, error: &str) -> String {
    let mut message = format!("{name}: not valid YAML or JSON: {error}");
    if let Some(line) = template_line(text) {
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
    /// Wrapped in an AdmissionReview: judged as the webhook would.
    review: Option<Review<'d>>,
}

/// What an AdmissionReview says of the object it wraps: the kind the
/// apiserver names (which the webhook judges by), and on UPDATE the object
/// before, so only images new or changed are judged.
struct Review<'d> {
    group: &'d str,
    kind: &'d str,
    operation: &'d str,
    old: Option<&'d Value>,
}

/// A string value, or "" for anything else.
fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

/// The object an `admission.k8s.io` AdmissionReview carries, at
/// `/request/object`, read by the webhook's own rule ([`judge::asked`]):
/// a review the webhook would allow unjudged (a DELETE, an object being
/// finalized), or could not answer, is not an object to check, and says
/// why.
fn review(value: &Value) -> Content<'_> {
    let request = &value["request"];
    let operation = str_of(&request["operation"]);
    let (object, old) = match judge::asked(operation, request.get("object"), request.get("oldObject")) {
        judge::Asked::Judge { object, old } => (object, old),
        judge::Asked::Unjudged(judge::Unjudged::Operation) => {
            return Content::Other(format!(
                "an AdmissionReview of a {operation}, which the webhook allows without judging"
            ));
        }
        judge::Asked::Unjudged(judge::Unjudged::Finalizing) => {
            return Content::Other(
                "an AdmissionReview of an object being deleted (deletionTimestamp set), which the webhook allows without judging"
                    .to_owned(),
            );
        }
        judge::Asked::Unanswerable(why) => {
            return Content::Other(format!("an AdmissionReview the webhook cannot answer: {why}"));
        }
    };
    let kind = str_of(&request["kind"]["kind"]);
    let (group, kind) = match kind {
        // A review written by hand may leave request.kind out: the
        // object's own kind stands for it.
        "" => {
            let subject = judge::Subject::of(object, None);
            (subject.group, subject.kind)
        }
        kind => (str_of(&request["kind"]["group"]), kind),
    };
    Content::Objects(vec![Found {
        object,
        prefix: "/request/object".to_owned(),
        item: None,
        review: Some(Review {
            group,
            kind,
            operation,
            old: old.filter(|o| o.is_object()),
        }),
    }])
}

/// API groups of configuration files that sit beside manifests but are
/// read by a tool, never applied: kustomize's `kustomization.yaml`.
const TOOL_GROUPS: &[&str] = &["kustomize.config.k8s.io/"];

/// Lists nested deeper than this are judged as objects, not opened.
const MAX_LIST_DEPTH: usize = 8;

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
    if kind == "AdmissionReview" && api_version.starts_with("admission.k8s.io/") {
        return review(value);
    }
    let mut objects = Vec::new();
    items_of(value, String::new(), &mut 0, 0, &mut objects);
    Content::Objects(objects)
}

/// The objects `value` stands for: itself, or the items of a List (and
/// of the Lists in it, numbered in reading order from `next`).
fn items_of<'d>(value: &'d Value, prefix: String, next: &mut usize, depth: usize, out: &mut Vec<Found<'d>>) {
    let list = value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"));
    if let (true, Some(Value::Array(items)), true) = (list, value.get("items"), depth < MAX_LIST_DEPTH) {
        for (i, item) in items.iter().enumerate() {
            items_of(item, format!("{prefix}/items/{i}"), next, depth + 1, out);
        }
        return;
    }
    let item = (depth > 0).then(|| {
        *next += 1;
        *next - 1
    });
    out.push(Found {
        object: value,
        prefix,
        item,
        review: None,
    });
}

/// Gives each item of a List (and of the Lists in it) the kind and
/// apiVersion the List names when the item names none: an apiserver's own
/// lists (`PodList`, `v1`) say them once, for all their items, and an item
/// without a kind would be skipped, unjudged.
fn complete_lists(value: &mut Value) {
    let Some(obj) = value.as_object_mut() else {
        return;
    };
    let text = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_owned);
    let (kind, api_version) = (text("kind"), text("apiVersion"));
    if !kind.as_deref().is_some_and(|k| k.ends_with("List")) {
        return;
    }
    if let Some(Value::Array(items)) = obj.get_mut("items") {
        for item in items {
            complete(item, kind.as_deref(), api_version.as_deref());
            complete_lists(item);
        }
    }
}

/// Gives `item` the kind a `<Kind>List` names, and its apiVersion, where
/// it names none.
fn complete(item: &mut Value, list_kind: Option<&str>, api_version: Option<&str>) {
    let Some(obj) = item.as_object_mut() else {
        return;
    };
    let named = |obj: &serde_json::Map<String, Value>, k: &str| {
        obj.get(k).and_then(Value::as_str).is_some_and(|s| !s.is_empty())
    };
    let kind = list_kind
        .and_then(|k| k.strip_suffix("List"))
        .filter(|k| !k.is_empty());
    if let (false, Some(kind)) = (named(obj, "kind"), kind) {
        obj.insert("kind".into(), kind.into());
        if let (false, Some(v)) = (named(obj, "apiVersion"), api_version) {
            obj.insert("apiVersion".into(), v.into());
        }
    }
}

/// A document that is not a Kubernetes object: its line, where it is
/// (`document 3`, `item 2 of document 0`), and what it is instead.
type Other = (usize, String, String);

/// Where an object stands in its file.
enum Located<'d> {
    /// In a YAML (or JSON) document read whole, at `prefix`.
    Yaml { doc: &'d Document, prefix: &'d str },
    /// In a JSON value read on its own, at `prefix` in it.
    Json { piece: &'d Piece, prefix: &'d str },
}

impl Located<'_> {
    /// The object's first line.
    fn line(&self) -> usize {
        match self {
            Self::Yaml { doc, prefix } => doc.line_of(prefix),
            Self::Json { piece, prefix } => piece.line_of(prefix),
        }
    }

    /// Where an image stands. Inside an embedded literal block the line is
    /// the block's first line plus the image's line in the embedded text
    /// (the column is not tracked there).
    fn position(&self, image: &ImageJudgement) -> Position {
        match self {
            Self::Yaml { doc, prefix } => {
                position_of_site(doc, &format!("{prefix}{}", image.site.path()), image)
            }
            Self::Json { piece, prefix } => {
                let at = format!("{prefix}{}", image.site.path());
                if let Some(start) = piece.start_of(&at) {
                    return Position {
                        line: start.line,
                        column: Some(start.col + 1),
                    };
                }
                // Embedded text is in a JSON string: one line.
                let outer = at.split('#').next().unwrap_or(&at);
                Position {
                    line: piece.line_of(outer),
                    column: None,
                }
            }
        }
    }
}

/// One file being checked.
struct FileCheck<'a, 'w> {
    name: &'a str,
    found: bool,
    rules: judge::Rules<'a>,
    fix: bool,
    learn: bool,
    /// Where reports go once they cannot be taken back.
    out: Option<&'a mut Writer<'w>>,
    fixing: Fixing,
    /// Documents that are not Kubernetes objects: errors in a file named
    /// on the command line, the reason to skip one found in a directory
    /// that holds nothing else.
    others: Vec<Other>,
    objects: bool,
}

impl FileCheck<'_, '_> {
    /// Checks the file `reader` reads: as JSON a value at a time when it
    /// starts as JSON does, as YAML otherwise (and when the JSON reader
    /// refused it before judging anything).
    fn run(&mut self, reader: Box<dyn Read>, outcome: &mut Checked) {
        let mut source = json::Source::new(reader);
        let first = match source.first() {
            Ok(first) => first,
            Err(e) => return outcome.report.errors.push(format!("{}: {e}", self.name)),
        };
        let looks_json = matches!(first, Some(b'{' | b'['));
        if looks_json && !self.fix {
            match self.json(&mut source, None, outcome) {
                Ok(()) => return self.end(outcome),
                Err(e) if !source.untouched() => return self.broken(&e, outcome),
                Err(_) => {}
            }
        }
        let text = match source
            .into_rest()
            .map_err(|e| e.to_string())
            .and_then(|b| String::from_utf8(b).map_err(|_| "is not UTF-8 text".to_owned()))
        {
            Ok(text) => text,
            Err(e) => return outcome.report.errors.push(format!("{}: {e}", self.name)),
        };
        if looks_json && self.fix {
            let mut again = json::Source::new(text.as_bytes());
            let read = self.json(&mut again, Some(&text), outcome);
            let untouched = again.untouched();
            match read {
                Ok(()) => {
                    self.end(outcome);
                    return self.finish_fixing(text, true, outcome);
                }
                Err(e) if !untouched => {
                    self.broken(&e, outcome);
                    return self.finish_fixing(text, true, outcome);
                }
                Err(_) => {}
            }
        }
        if let Some(leniencies) = self.yaml(&text, outcome) {
            self.end(outcome);
            for advice in leniencies {
                outcome.report.notes.push(format!("{}: {advice}", self.name));
            }
            if self.fix {
                self.finish_fixing(text, false, outcome);
            }
        }
    }

    /// JSON that broke after something was judged: what was read stands,
    /// and the run fails (exit 2): nothing past the break was checked.
    fn broken(&mut self, e: &JsonError, outcome: &mut Checked) {
        outcome.found_objects |= self.objects;
        outcome.report.errors.push(format!(
            "{}: {e}; the objects before it were checked, nothing after it",
            self.name
        ));
    }

    /// Reads the JSON values of `source` (`text`: its whole text, kept for
    /// `--fix`).
    fn json<R: Read>(
        &mut self,
        source: &mut json::Source<R>,
        text: Option<&str>,
        outcome: &mut Checked,
    ) -> Result<(), JsonError> {
        // The next item's number, and the document it is in.
        let mut numbered = (0, 0);
        json::read(source, |part| {
            match part {
                Part::Whole { document, piece } => {
                    let mut value = piece.value()?;
                    complete_lists(&mut value);
                    match content(&value, self.found) {
                        Content::Objects(found) => {
                            self.objects = true;
                            for f in &found {
                                self.json_object(&piece, f, document, text, outcome);
                            }
                        }
                        Content::Other(what) => {
                            self.others
                                .push((piece.start.line, format!("document {document}"), what));
                        }
                    }
                }
                Part::Item {
                    document,
                    index,
                    piece,
                    list,
                } => {
                    let mut value = piece.value()?;
                    // A List's items are judged whatever they hold, of the
                    // kind the List names when they name none; a bare
                    // array's must be objects.
                    match &list {
                        Some(head) => complete(&mut value, head.kind.as_deref(), head.api_version.as_deref()),
                        None => {
                            if let Content::Other(what) = content(&value, self.found) {
                                let at = format!("item {index} of document {document}");
                                self.others.push((piece.start.line, at, what));
                                return Ok(());
                            }
                        }
                    }
                    complete_lists(&mut value);
                    let mut found = Vec::new();
                    if numbered.1 != document {
                        numbered = (0, document);
                    }
                    items_of(&value, String::new(), &mut numbered.0, 1, &mut found);
                    self.objects = true;
                    for f in &found {
                        self.json_object(&piece, f, document, text, outcome);
                    }
                }
                Part::End {
                    document,
                    start,
                    head,
                    items,
                } => self.list_end(document, start.line, head.as_ref(), items),
            }
            Ok(())
        })
    }

    /// The end of a list read an item at a time: a `kind: List` (even
    /// empty), a bare array of objects, or something else whose items
    /// were taken for a List's.
    fn list_end(&mut self, document: usize, line: usize, head: Option<&Value>, items: usize) {
        let what = match head {
            None if items == 0 => Some("an empty list".to_owned()),
            None => None,
            Some(head) => match content(head, self.found) {
                Content::Other(what) => Some(what),
                Content::Objects(_) if head["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
                    self.objects = true;
                    None
                }
                Content::Objects(_) => Some(format!(
                    "a {} with a top-level items list, read as a List's items",
                    head["kind"].as_str().unwrap_or_default()
                )),
            },
        };
        if let Some(what) = what {
            self.others.push((line, format!("document {document}"), what));
        }
    }

    /// Reads the YAML documents of `text`; `None` when the file was
    /// skipped or could not be read, else what was read leniently.
    fn yaml(&mut self, text: &str, outcome: &mut Checked) -> Option<Vec<String>> {
        let mark = outcome.report.mark();
        let (still_denied, judged_kinds) = (outcome.still_denied, outcome.judged_kinds);
        let offsets = Offsets::new(text);
        let mut docs = yaml::documents(text);
        for doc in docs.by_ref() {
            match doc {
                Ok(mut doc) => {
                    complete_lists(&mut doc.value);
                    self.yaml_document(&doc, text, &offsets, outcome);
                }
                Err(e) => {
                    if let Some(line) = template_line(text).filter(|_| self.found) {
                        outcome.report.rewind(mark);
                        outcome.still_denied = still_denied;
                        outcome.judged_kinds = judged_kinds;
                        self.skip(outcome, template_advice(line));
                        return None;
                    }
                    outcome
                        .report
                        .errors
                        .push(unreadable(self.name, text, &e.to_string()));
                    return None;
                }
            }
        }
        Some(docs.leniencies().iter().filter_map(|l| l.advice()).collect())
    }

    /// Says what the file held: skipped when found in a directory with
    /// nothing to judge, else the documents that are not objects.
    fn end(&mut self, outcome: &mut Checked) {
        if self.found && !self.objects {
            let why = match self.others.first() {
                Some((_, _, what)) => format!("holds no Kubernetes object ({what})"),
                None => "holds no Kubernetes object (it is empty)".to_owned(),
            };
            self.others.clear();
            return self.skip(outcome, why);
        }
        outcome.found_objects |= self.objects;
        let name = self.name;
        outcome.report.errors.extend(
            self.others
                .drain(..)
                .map(|(line, at, what)| format!("{name}:{line}: {at} is not a Kubernetes object ({what})")),
        );
    }

    fn skip(&self, outcome: &mut Checked, reason: String) {
        outcome.report.skipped.push(report::Skipped {
            source: self.name.to_owned(),
            reason,
        });
    }

    fn yaml_document(&mut self, doc: &Document, text: &str, offsets: &Offsets, outcome: &mut Checked) {
        if doc.value.is_null() {
            return;
        }
        let found = match content(&doc.value, self.found) {
            Content::Objects(found) => found,
            Content::Other(what) => {
                self.others
                    .push((doc.line, format!("document {}", doc.index), what));
                return;
            }
        };
        self.objects = true;
        for f in found {
            let at = Located::Yaml {
                doc,
                prefix: &f.prefix,
            };
            let j = self.judge(&f, &at, doc.index, outcome);
            if self.fix && f.review.is_none() {
                self.fixing.add_yaml(text, offsets, doc, f.prefix, &j);
            }
        }
    }

    fn json_object(
        &mut self,
        piece: &Piece,
        f: &Found<'_>,
        document: usize,
        text: Option<&str>,
        outcome: &mut Checked,
    ) {
        let at = Located::Json {
            piece,
            prefix: &f.prefix,
        };
        let j = self.judge(f, &at, document, outcome);
        if let (true, Some(text), None) = (self.fix, text, &f.review) {
            self.fixing.add_json(text, piece, document, &f.prefix, &j);
        }
    }

    /// Judges one object and reports it.
    fn judge(
        &mut self,
        f: &Found<'_>,
        at: &Located<'_>,
        document: usize,
        outcome: &mut Checked,
    ) -> Judgement {
        let subject = match &f.review {
            Some(r) => judge::Subject {
                group: r.group,
                kind: r.kind,
                object: f.object,
                old: r.old,
            },
            None => judge::Subject::of(f.object, None),
        };
        if crate::objects::kinds::find(subject.group, subject.kind).is_some() {
            outcome.judged_kinds += 1;
        }
        let j = judge::judge_as(subject, self.rules);
        if let Some(r) = &f.review {
            self.reviewed(r, outcome);
            if self.fix {
                // Refused: nothing of it is reported as fixed.
                return j;
            }
        }
        let allowlist = self.rules.allowlist;
        if self.learn {
            outcome
                .will_run
                .extend(j.images.iter().filter_map(|i| i.will_run(allowlist)));
        }
        let mut object = ObjectReport {
            document: Some(document),
            item: f.item,
            line: Some(at.line()),
            ..ObjectReport::new(self.name.to_owned(), f.object, &j, allowlist, |i| {
                Some(at.position(i))
            })
        };
        if let Some(published) = self.rules.published {
            object = object.with_registry(&j, allowlist, published);
        }
        outcome.report.push(object);
        // What --fix leaves counts against the exit code unless audited.
        if self.fix && j.mode != Mode::Audit {
            outcome.still_denied += j.unfixable().count();
        }
        // A file named on the command line cannot be skipped: its reports
        // go out now. A found one's wait for its end.
        if let (false, Some(w)) = (self.found, self.out.as_deref_mut()) {
            w.flush(&mut outcome.report);
        }
        j
    }

    /// Says that a review was read, and what of it was judged; `--fix`
    /// cannot edit one: it is what the apiserver sends, not a manifest.
    fn reviewed(&mut self, r: &Review<'_>, outcome: &mut Checked) {
        let judged = match r.old {
            Some(_) => "only the images new or changed against its oldObject judged, as the webhook does",
            None => "judged as the webhook would",
        };
        outcome.report.notes.push(format!(
            "{}: read an AdmissionReview ({} of a {}): its request.object {judged}",
            self.name, r.operation, r.kind
        ));
        if self.fix {
            outcome.report.errors.push(format!(
                "{}: --fix cannot edit an AdmissionReview, which is what the apiserver sends, not a manifest: fix the manifest its request.object came from",
                self.name
            ));
        }
    }

    fn finish_fixing(&mut self, text: String, json: bool, outcome: &mut Checked) {
        std::mem::take(&mut self.fixing).finish(self.name, text, json, outcome);
    }
}

/// The fixes of one file, gathered object by object. Fixing applies every
/// rewrite the allowlist allows, whatever the mode: a developer running
/// --fix wants manifests that pass in any mode.
#[derive(Default)]
struct Fixing {
    edits: Vec<Edit>,
    expected: Vec<Expected>,
    /// JSON: the operations on each value read on its own, to check the
    /// result against.
    expected_json: Vec<JsonExpected>,
    failed: Option<String>,
    rewrites: usize,
}

/// A value read on its own whose objects were fixed: where it stood in
/// the original (document, item, byte range) and the operations on each
/// object in it.
struct JsonExpected {
    document: usize,
    start: usize,
    end: usize,
    objects: Vec<(String, Vec<PatchOperation>)>,
}

impl Fixing {
    /// Adds the fixes of the object at `prefix` in `doc`.
    fn add_yaml(&mut self, text: &str, offsets: &Offsets, doc: &Document, prefix: String, j: &Judgement) {
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

    /// Adds the fixes of the object at `prefix` in `piece`: each rewritten
    /// string replaced whole (embedded documents too: a JSON string has no
    /// lines to keep).
    fn add_json(&mut self, text: &str, piece: &Piece, document: usize, prefix: &str, j: &Judgement) {
        self.rewrites += j.images.iter().filter(|i| i.fix.is_some()).count();
        let plain = j
            .images
            .iter()
            .filter(|i| i.site.embedded.is_none())
            .filter_map(|i| Some((i.site.pointer.to_string(), i.fix.clone()?)));
        let embedded = j
            .embedded
            .iter()
            .map(|e| (e.pointer.to_string(), e.rewritten.clone()));
        for (pointer, to) in plain.chain(embedded) {
            let at = format!("{prefix}{pointer}");
            match piece.locate(&at) {
                Some(span) if text.as_bytes().get(span.start.offset) == Some(&b'"') => {
                    self.edits.push(Edit {
                        start: span.start.offset,
                        end: span.end,
                        text: serde_json::to_string(&to).expect("strings serialise"),
                    })
                }
                Some(_) => self.failed = Some(format!("{at}: not a string")),
                None => self.failed = Some(format!("{at}: positions unknown")),
            }
        }
        let ops = j.fix_ops();
        if ops.is_empty() {
            return;
        }
        let start = piece.start.offset;
        match self.expected_json.last_mut() {
            Some(last) if last.start == start => last.objects.push((prefix.to_owned(), ops)),
            _ => self.expected_json.push(JsonExpected {
                document,
                start,
                end: start + piece.bytes.len(),
                objects: vec![(prefix.to_owned(), ops)],
            }),
        }
    }

    /// Proves the edits change nothing but the images, and records the
    /// file: JSON with its edits, to be applied as it is written out; YAML
    /// fixed (its proof reads the whole result).
    fn finish(mut self, name: &str, original: String, json: bool, outcome: &mut Checked) {
        self.edits.sort_by_key(|e| (e.start, e.end));
        self.edits.dedup();
        let checked = if let Some(e) = self.failed {
            Err(e)
        } else if self.edits.is_empty() {
            Ok(None)
        } else if json {
            verify_json(&original, &self.edits, &self.expected_json).map(|()| None)
        } else {
            crate::edit::apply(&original, self.edits.clone())
                .map_err(|e| e.to_string())
                .and_then(|t| verify(&t, &original, &self.expected).map(|()| Some(t)))
        };
        let fixed = match checked {
            Ok(None) => Fixed {
                name: name.to_owned(),
                text: original,
                edits: self.edits,
                rewrites: self.rewrites,
            },
            Ok(Some(text)) => Fixed {
                name: name.to_owned(),
                text,
                edits: Vec::new(),
                rewrites: self.rewrites,
            },
            Err(e) => {
                outcome.still_denied += self.rewrites;
                outcome.report.errors.push(format!(
                    "{name}: cannot rewrite in place ({e}); apply the rewrites above by hand"
                ));
                Fixed {
                    name: name.to_owned(),
                    text: original,
                    edits: Vec::new(),
                    rewrites: 0,
                }
            }
        };
        outcome.fixed.push(fixed);
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

/// Proves fixed JSON: each value that was fixed, with its edits applied,
/// must read as the original with the rewrites applied. The edits replace
/// whole string tokens with JSON strings inside those values (sorted, none
/// overlapping), so everything else is the original's, and the result is
/// JSON wherever the original was.
fn verify_json(original: &str, edits: &[Edit], expected: &[JsonExpected]) -> Result<(), String> {
    if let Some(pair) = edits.windows(2).find(|p| p[1].start < p[0].end) {
        let line = original[..pair[1].start].matches('\n').count() + 1;
        return Err(crate::edit::EditError::Conflict { line }.to_string());
    }
    let mut covered = 0;
    for want in expected {
        let inside: Vec<Edit> = edits
            .iter()
            .filter(|e| e.start >= want.start && e.end <= want.end)
            .map(|e| Edit {
                start: e.start - want.start,
                end: e.end - want.start,
                text: e.text.clone(),
            })
            .collect();
        covered += inside.len();
        let before = &original[want.start..want.end];
        let after = crate::edit::apply(before, inside).map_err(|e| e.to_string())?;
        let mut value: Value =
            serde_json::from_str(before).map_err(|e| format!("the original no longer parses: {e}"))?;
        for (prefix, ops) in &want.objects {
            let object = value
                .pointer_mut(prefix)
                .ok_or_else(|| format!("{prefix}: not in the value"))?;
            json_patch::patch(object, ops).map_err(|e| e.to_string())?;
        }
        let fixed: Value =
            serde_json::from_str(&after).map_err(|e| format!("the result does not parse: {e}"))?;
        if fixed != value {
            return Err(format!(
                "document {} would change beyond its images",
                want.document
            ));
        }
    }
    if covered != edits.len() {
        return Err("the rewritten values do not line up".into());
    }
    Ok(())
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

/// Where an image stands in a YAML document.
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

// === output ===

/// Writes the fixed manifests for stdout: one input as it is; several in a
/// single stream, each behind a `# Source:` comment.
pub fn write_fixed(fixed: &[Fixed], out: &mut impl std::io::Write) -> std::io::Result<()> {
    if let [one] = fixed {
        return one.write_to(out);
    }
    for (i, f) in fixed.iter().enumerate() {
        if i > 0 {
            out.write_all(b"---\n")?;
        }
        writeln!(out, "# Source: {}", f.name)?;
        f.write_to(out)?;
        if !f.ends_with_newline() {
            out.write_all(b"\n")?;
        }
    }
    Ok(())
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
            &Sources::from(vec![Manifest::text("m.yaml", text)]),
            judge::Rules {
                policy: &crate::policy::Policy::default(),
                allowlist: &list,
                published: None,
            },
            fix,
            false,
            None,
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
        assert_eq!(o.fixed[0].text(), want);
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
        let report = crate::output::render(&o.report, crate::output::Format::Text { fixed: false }, None);
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
    fn bare_arrays_hold_objects_and_nested_lists_are_opened() {
        let pod = |name: &str| {
            format!(
                "{{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {{\"name\": \"{name}\"}}, \"spec\": {{\"containers\": [{{\"name\": \"c\", \"image\": \"{REPO}@{BAD}\"}}]}}}}"
            )
        };
        let text = format!(
            "[\n{},\n{{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n{},\n{}]}},\n{}\n]\n",
            pod("a"),
            pod("b"),
            pod("c"),
            pod("d")
        );
        let o = run(&text, false);
        assert!(o.report.errors.is_empty(), "{:?}", o.report.errors);
        let seen: Vec<_> = o
            .report
            .results
            .iter()
            .map(|r| (r.name.clone().unwrap(), r.item, r.line, r.images[0].line))
            .collect();
        let at = |name: &str, item: usize, line: usize| (name.to_owned(), Some(item), Some(line), Some(line));
        assert_eq!(seen, [at("a", 0, 2), at("b", 1, 4), at("c", 2, 5), at("d", 3, 6)]);

        let o = run("[\"a\", 1]", false);
        assert_eq!(
            o.report.errors,
            [
                "m.yaml:1: item 0 of document 0 is not a Kubernetes object (found a string)",
                "m.yaml:1: item 1 of document 0 is not a Kubernetes object (found a number)"
            ]
        );
        assert_eq!(exit_code(&o, false), 2);
    }

    #[test]
    fn json_documents_joined_by_yaml_markers_are_read_and_fixed() {
        let pod = |name: &str| {
            format!(
                "{{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {{\"name\": \"{name}\"}}, \"spec\": {{\"containers\": [{{\"name\": \"c\", \"image\": \"{REPO}@{BAD}\"}}]}}}}"
            )
        };
        let text = format!("{}\n---\n{}\n", pod("a"), pod("b"));
        let o = run(&text, true);
        assert!(o.report.errors.is_empty(), "{:?}", o.report.errors);
        let seen: Vec<_> = o.report.results.iter().map(|r| (r.document, r.line)).collect();
        assert_eq!(seen, [(Some(0), Some(1)), (Some(1), Some(3))]);
        assert_eq!(o.fixed[0].text(), text.replace(BAD, GOOD));
    }

    #[test]
    fn an_apiservers_own_list_gives_its_items_their_kind() {
        let item = format!(
            "{{\"metadata\": {{\"name\": \"p\"}}, \"spec\": {{\"containers\": [{{\"name\": \"c\", \"image\": \"{REPO}@{BAD}\"}}]}}}}"
        );
        let json = format!("{{\"kind\": \"PodList\", \"apiVersion\": \"v1\", \"items\": [{item}]}}");
        let yaml = format!("kind: PodList\napiVersion: v1\nitems: [{item}]\n");
        let nested = format!("{{\"kind\": \"List\", \"items\": [{json}]}}");
        for text in [&json, &yaml, &nested] {
            let o = run(text, false);
            let r = &o.report.results[0];
            assert_eq!(
                (r.api_version.as_deref(), r.kind.as_deref(), r.verdict),
                (Some("v1"), Some("Pod"), judge::ObjectVerdict::Rewrite),
                "{text}"
            );
        }
        // A kubectl List names no kind for its items: they keep their own.
        let o = run(&format!("{{\"kind\": \"List\", \"items\": [{item}]}}"), false);
        assert_eq!(o.report.results[0].verdict, judge::ObjectVerdict::Skipped);
    }

    #[test]
    fn a_json_fix_is_proved_value_by_value() {
        let original = "[{\"a\": \"x\", \"b\": \"y\"}]";
        let op = |path: &str| -> Vec<PatchOperation> {
            serde_json::from_value(serde_json::json!([{"op": "replace", "path": path, "value": "z"}]))
                .unwrap()
        };
        let expected = |path: &str| JsonExpected {
            document: 0,
            start: 1,
            end: original.len() - 1,
            objects: vec![(String::new(), op(path))],
        };
        let edit = |start: usize| Edit {
            start,
            end: start + 3,
            text: "\"z\"".into(),
        };
        // "x" stands at byte 7, "y" at byte 17.
        assert_eq!(verify_json(original, &[edit(7)], &[expected("/a")]), Ok(()));
        assert_eq!(
            verify_json(original, &[edit(17)], &[expected("/a")]),
            Err("document 0 would change beyond its images".into())
        );
        assert!(verify_json(original, &[edit(7), edit(8)], &[expected("/a")]).is_err());
        assert_eq!(
            verify_json(original, &[edit(7)], &[]),
            Err("the rewritten values do not line up".into())
        );
    }

    /// A review is read by the webhook's own rule: an object being
    /// finalized is allowed unjudged there, so it is not checked here.
    #[test]
    fn a_review_of_an_object_being_finalized_is_not_judged() {
        let review = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "UPDATE", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "object": {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "deletionTimestamp": "2026-12-07T00:00:00Z"},
                    "spec": {"containers": [{"name": "c", "image": format!("{REPO}@{BAD}")}]}}}});
        let o = run(&review.to_string(), false);
        assert!(o.report.results.is_empty());
        assert_eq!(o.report.errors.len(), 1, "{:?}", o.report.errors);
        assert!(
            o.report.errors[0].contains("an object being deleted (deletionTimestamp set)"),
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
        assert!(o.fixed[0].text().contains(&format!("image: {REPO}@{GOOD}}}")));
        assert!(o.fixed[0].text().contains(&format!("image: {REPO}:latest}}")));
    }
}
