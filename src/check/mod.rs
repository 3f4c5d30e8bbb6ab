//! `digest-gate check`: the webhook's decisions, run offline on manifest files
//! (multi-document YAML, JSON, `kind: List`), with `--fix` editing image values
//! where they stand so the result can be committed as is.
//!
//! One file's way through, down and back once: [`manifest`] names and opens
//! it, [`read`] reads it as JSON or YAML and hands each object ([`content`]
//! says what a document holds and where things stand) to the step here that
//! judges it, reports it, learns what it will run and gathers its fixes;
//! [`fix`] proves and records them when the file ends.
//!
//! JSON is read an item at a time ([`crate::json`]): `kubectl get … -o json`
//! of a whole cluster is one `kind: List`, checked in the memory of one of
//! its objects. YAML streams are read a document at a time. Each object's
//! report is written out ([`crate::output::Writer`]) as soon as it is judged;
//! with `--fix` the input is kept whole to be edited.

mod content;
mod error;
mod fix;
mod manifest;
mod read;

pub use error::{CheckError, ErrorKind, FixError};
pub use fix::{Fixed, write_fixed};
pub use manifest::{Manifest, Sources, sources};

use content::{Found, Located, Review};
use fix::Fixing;
use read::Read;

use crate::judge::{self, Judgement};
use crate::output::Writer;
use crate::policy::Mode;
use crate::report::{self, ObjectReport, Report};

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
    /// With [`Pass::Learn`]: every distinct reference a workload will run
    /// (canonical repository, digest), what `--registry` verifies.
    pub will_run: std::collections::BTreeSet<crate::reference::Pinned>,
}

/// What a run over the sources is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Judge and report.
    Judge,
    /// Judge, report, and rewrite the files ([`Checked::fixed`]).
    Fix,
    /// Only learn what each workload will run ([`Checked::will_run`]), for
    /// `--registry` to ask about before the pass that reports; its reports
    /// are not meant to be read. Otherwise no image is looked at twice.
    Learn,
}

/// Checks `sources` one at a time, each object judged and dropped before
/// the next is read, for what `pass` is for. Each object's report goes to
/// `out` once it cannot be taken back (a file found in a directory may turn
/// out to be a template, skipped whole); without `out` the report keeps
/// them all.
pub fn check(
    sources: &Sources,
    rules: judge::Rules<'_>,
    pass: Pass,
    out: Option<&mut Writer<'_>>,
) -> Checked {
    check_showing(sources, rules, pass, out, &indicatif::ProgressBar::hidden())
}

/// [`check`], `progress` counting the objects judged, with the file being
/// read as its message.
pub fn check_showing(
    sources: &Sources,
    rules: judge::Rules<'_>,
    pass: Pass,
    mut out: Option<&mut Writer<'_>>,
    progress: &indicatif::ProgressBar,
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
                progress.set_message(opened.name.clone());
                let mut file = FileCheck {
                    progress,
                    name: &opened.name,
                    found: opened.found,
                    rules,
                    pass,
                    out: out.as_deref_mut(),
                    outcome: &mut outcome,
                    fixing: Fixing::default(),
                    others: Vec::new(),
                    objects: false,
                };
                file.run(opened.reader);
                if let Some(w) = out.as_deref_mut() {
                    w.flush(&mut outcome.report);
                }
            }
            Err(e) => outcome.report.errors.push(e.to_string()),
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

/// One file being checked.
struct FileCheck<'a, 'w> {
    /// Objects judged, on a terminal.
    progress: &'a indicatif::ProgressBar,
    name: &'a str,
    found: bool,
    rules: judge::Rules<'a>,
    pass: Pass,
    /// Where reports go once they cannot be taken back.
    out: Option<&'a mut Writer<'w>>,
    outcome: &'a mut Checked,
    fixing: Fixing,
    /// Documents that are not Kubernetes objects: errors in a file named
    /// on the command line, the reason to skip one found in a directory
    /// that holds nothing else.
    others: Vec<content::Other>,
    objects: bool,
}

impl FileCheck<'_, '_> {
    /// Reads the file and says how it ended: what it held, what could not
    /// be read, and with `--fix` the file fixed.
    fn run(&mut self, reader: Box<dyn std::io::Read>) {
        let mark = (
            self.outcome.report.mark(),
            self.outcome.still_denied,
            self.outcome.judged_kinds,
        );
        let fixing = self.pass == Pass::Fix;
        match read::file(reader, fixing, self) {
            Read::Done { whole, leniencies } => {
                self.end();
                for advice in leniencies {
                    self.outcome.report.notes.push(format!("{}: {advice}", self.name));
                }
                if let Some(whole) = whole {
                    self.finish_fixing(whole);
                }
            }
            Read::Broken { error, whole } => {
                self.outcome.found_objects |= self.objects;
                self.error(None, ErrorKind::Broken(error));
                if let Some(whole) = whole {
                    self.finish_fixing(whole);
                }
            }
            Read::Template(line) => {
                self.outcome.report.rewind(mark.0);
                (self.outcome.still_denied, self.outcome.judged_kinds) = (mark.1, mark.2);
                self.skip(error::template_advice(line));
            }
            Read::Failed(kind) => self.error(None, kind),
        }
    }

    fn error(&mut self, line: Option<usize>, kind: ErrorKind) {
        let e = CheckError {
            file: self.name.to_owned(),
            line,
            kind,
        };
        self.outcome.report.errors.push(e.to_string());
    }

    /// Says what the file held: skipped when found in a directory with
    /// nothing to judge, else the documents that are not objects.
    fn end(&mut self) {
        if self.found && !self.objects {
            let why = match self.others.first() {
                Some((_, _, what)) => format!("holds no Kubernetes object ({what})"),
                None => "holds no Kubernetes object (it is empty)".to_owned(),
            };
            self.others.clear();
            return self.skip(why);
        }
        self.outcome.found_objects |= self.objects;
        for (line, at, what) in std::mem::take(&mut self.others) {
            self.error(Some(line), ErrorKind::NotAnObject { at, what });
        }
    }

    fn skip(&mut self, reason: String) {
        self.outcome.report.skipped.push(report::Skipped {
            source: self.name.to_owned(),
            reason,
        });
    }

    /// Judges one object and reports it, or (learning) what it will run.
    fn judge(&mut self, f: &Found<'_>, at: &Located<'_>, document: usize) -> Judgement {
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
            self.outcome.judged_kinds += 1;
        }
        let j = judge::judge_as(subject, self.rules);
        let fixing = self.pass == Pass::Fix;
        if let Some(r) = &f.review {
            self.reviewed(r);
            if fixing {
                // Refused: nothing of it is reported as fixed.
                return j;
            }
        }
        let allowlist = self.rules.allowlist;
        if self.pass == Pass::Learn {
            let will_run = j.images.iter().filter_map(|i| i.will_run(allowlist));
            self.outcome.will_run.extend(will_run);
            return j;
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
        self.outcome.report.push(object);
        self.progress.inc(1);
        // What --fix leaves counts against the exit code unless audited.
        if fixing && j.mode != Mode::Audit {
            self.outcome.still_denied += j.unfixable().count();
        }
        // A file named on the command line cannot be skipped: its reports
        // go out now. A found one's wait for its end.
        if let (false, Some(w)) = (self.found, self.out.as_deref_mut()) {
            w.flush(&mut self.outcome.report);
        }
        j
    }

    /// Says that a review was read, and what of it was judged; `--fix`
    /// cannot edit one: it is what the apiserver sends, not a manifest.
    fn reviewed(&mut self, r: &Review<'_>) {
        let judged = match r.old {
            Some(_) => "only the images new or changed against its oldObject judged, as the webhook does",
            None => "judged as the webhook would",
        };
        self.outcome.report.notes.push(format!(
            "{}: read an AdmissionReview ({} of a {}): its request.object {judged}",
            self.name, r.operation, r.kind
        ));
        if self.pass == Pass::Fix {
            self.error(None, ErrorKind::FixReview);
        }
    }

    fn finish_fixing(&mut self, whole: read::Whole) {
        let fixing = std::mem::take(&mut self.fixing);
        match fixing.finish(self.name, whole.text, whole.json) {
            Ok(fixed) => self.outcome.fixed.push(fixed),
            Err(unfixed) => {
                self.outcome.still_denied += unfixed.rewrites;
                self.error(None, ErrorKind::Unfixable(unfixed.error));
                self.outcome.fixed.push(unfixed.fixed);
            }
        }
    }
}

impl read::Sink for FileCheck<'_, '_> {
    fn in_tree(&self) -> bool {
        self.found
    }

    fn holds_objects(&mut self) {
        self.objects = true;
    }

    fn object(&mut self, found: &Found<'_>, at: &Located<'_>, document: usize) {
        let j = self.judge(found, at, document);
        if self.pass == Pass::Fix && found.review.is_none() {
            self.fixing.add(at, document, &j);
        }
    }

    fn other(&mut self, other: content::Other) {
        self.others.push(other);
    }
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
            if fix { Pass::Fix } else { Pass::Judge },
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
                skipped: 1,
                ..Default::default()
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
