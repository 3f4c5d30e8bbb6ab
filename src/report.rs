//! The report `check` and `audit` both give: one [`ObjectReport`] per object
//! judged, a [`Summary`], the errors that make a run unusable and notes that
//! do not. Both commands build it with [`ObjectReport::new`], so the JSON
//! schema is one (`--output json`), and render it with [`json`] and [`text`].

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use crate::allowlist::Allowlist;
use crate::judge::{ImageJudgement, ImageVerdict, Judgement, ObjectVerdict};
use crate::objects::Role;
use crate::policy::{Finding, Mode, Reason, Verdict, audit_marker};
use crate::published::{Counts, Published, State};
use crate::reference;

/// What is reported for an image (the JSON contract's `images[]`).
#[derive(Debug, Clone, Serialize)]
pub struct ImageReport {
    pub path: String,
    pub container: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    pub image: Value,
    /// `allow`, `exempt`, `rewrite` or `deny`.
    pub verdict: ImageVerdict,
    pub rewrite: Option<String>,
    /// The machine-readable reason, e.g. `digest_not_promoted` (the metrics'
    /// `reason` label).
    pub code: Reason,
    pub reason: String,
    /// In audit mode: what rewrite mode would do.
    #[serde(rename = "wouldBe", skip_serializing_if = "Option::is_none")]
    pub would_be: Option<Verdict>,
    /// The file line; null for objects read from a cluster.
    pub line: Option<usize>,
    /// The 1-based column (in characters) where the image's value starts,
    /// when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    /// Every source promoting the digest the image is allowed on or
    /// rewritten to, newest release first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub promotions: Vec<PromotionReport>,
    /// What the registry said of the reference the image will run
    /// (`--registry`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry: Option<RegistryReport>,
    /// `preflight`: what an operator upgrade does to the image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<UpgradeChange>,
    /// A Pod read from a cluster: what its node resolved the image to
    /// (`status.containerStatuses[].imageID`), where that differs from the
    /// digest the spec names (a tag resolved by the node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
}

vocabulary! {
    "snake_case";
    /// What an operator upgrade does to an image (`preflight`), beside its
    /// reason `code`: the SARIF rule and the category the report counts.
    #[derive(PartialOrd, Ord)]
    pub enum UpgradeChange {
        /// Complies now and will not once the upgrade is approved.
        StaleAfterUpgrade,
        /// Does not comply now, and will not after either.
        AlreadyStale,
        /// Does not comply now, and will once the upgrade is approved.
        FixedByUpgrade,
    }
}

/// What a registry said of the reference an image will run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryReport {
    /// The reference verified: the rewrite target, or the image as written.
    pub reference: String,
    pub state: State,
    pub detail: String,
    pub checked_at: String,
}

/// One source promoting a digest (the JSON contract's `promotions[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromotionReport {
    /// The allowlist file (a mounted ConfigMap's key).
    pub source: String,
    pub line: u32,
    /// `ClusterServiceVersion rhods-operator.1.21.0`, `plain list`, ...
    pub origin: String,
    /// The operator release, when the source is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// The sources promoting the digest `image` names, in `allowlist`.
fn promotions(allowlist: &Allowlist, image: &str) -> Vec<PromotionReport> {
    let Ok(r) = reference::parse(image) else {
        return Vec::new();
    };
    let (Some(digest), Some(repository)) = (
        r.digest(),
        r.canonical_repository(allowlist.short_name_registry()),
    ) else {
        return Vec::new();
    };
    allowlist
        .candidates(&repository)
        .promotions(digest)
        .into_iter()
        .map(|(p, line)| PromotionReport {
            source: p.source.to_string(),
            line,
            origin: p.origin.clone(),
            version: p.version.as_ref().map(ToString::to_string),
        })
        .collect()
}

/// Where an image stands in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    /// 1-based, in characters; unknown inside a rewritten embedded text.
    pub column: Option<usize>,
}

/// An owner of an object, nearest first in [`ObjectReport::owners`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Owner {
    pub kind: String,
    pub name: String,
}

/// What is reported for an object (the JSON contract's `results[]`).
#[derive(Debug, Clone, Serialize)]
pub struct ObjectReport {
    /// The file (`-` for stdin), or `cluster:<context>`.
    pub source: String,
    /// The document's index in the file; null for cluster objects.
    pub document: Option<usize>,
    /// The index in a `kind: List`.
    pub item: Option<usize>,
    /// The object's first line in the file; null for cluster objects.
    pub line: Option<usize>,
    #[serde(rename = "apiVersion")]
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The object's uid, for what `audit` writes about it (policy report
    /// resources, Events); not part of the JSON contract.
    #[serde(skip)]
    pub uid: Option<String>,
    /// The controllers the object belongs to, nearest first: what a person
    /// has to change so the finding does not come back.
    pub owners: Vec<Owner>,
    pub verdict: ObjectVerdict,
    pub images: Vec<ImageReport>,
}

/// Object counts by verdict.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    pub objects: usize,
    pub allow: usize,
    pub rewrite: usize,
    pub deny: usize,
    pub skipped: usize,
    /// In audit mode: the objects allowed that rewrite mode would rewrite,
    /// and those it would deny.
    #[serde(rename = "wouldRewrite", skip_serializing_if = "is_zero")]
    pub would_rewrite: usize,
    #[serde(rename = "wouldDeny", skip_serializing_if = "is_zero")]
    pub would_deny: usize,
    /// Set by `--registry`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry: Option<Counts>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Summary {
    /// Adds the counts of `other` (another cluster's, in a fleet's run).
    pub fn add(&mut self, other: &Summary) {
        self.objects += other.objects;
        self.allow += other.allow;
        self.rewrite += other.rewrite;
        self.deny += other.deny;
        self.skipped += other.skipped;
        self.would_rewrite += other.would_rewrite;
        self.would_deny += other.would_deny;
        if let Some(counts) = other.registry {
            self.registry.get_or_insert_with(Counts::default).add_all(counts);
        }
    }

    /// `N objects checked: …`, as the text report ends; `fixed`: worded
    /// as `check --fix` words it.
    pub fn checked(&self, fixed: bool) -> String {
        let mut line = format!(
            "{} object{} checked: {} allowed, {} {}, {} denied, {} skipped",
            self.objects,
            if self.objects == 1 { "" } else { "s" },
            self.allow,
            self.rewrite,
            if fixed { "fixed" } else { "to rewrite" },
            self.deny,
            self.skipped
        );
        if self.would_rewrite + self.would_deny > 0 {
            line.push_str(&format!(
                " (audit: {} would be rewritten, {} denied)",
                self.would_rewrite, self.would_deny
            ));
        }
        line
    }
}

/// A file `check` found in a directory and did not judge: it holds no
/// Kubernetes object, or is a Helm template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub source: String,
    pub reason: String,
}

/// Everything a run found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The objects told and not yet written out: a run writing as it goes
    /// (`output::Writer`) takes them as it writes them, so what
    /// stays here is what is still to be written.
    pub results: Vec<ObjectReport>,
    pub summary: Summary,
    /// Files left out, each with why.
    pub skipped: Vec<Skipped>,
    /// What could not be read or used (exit code 2).
    pub errors: Vec<String>,
    /// What a reader should know that does not fail the run, e.g. a kind
    /// whose CRD is not installed.
    pub notes: Vec<String>,
}

// === impl ObjectReport ===

impl ObjectReport {
    /// The report of `object` judged as `j`, found in `source`. Positions
    /// (`document`, `item`, `line`) are the caller's: `position_of` gives
    /// an image's position, if the source has lines. `owners` starts with the
    /// object's own controller reference, if it has one.
    pub fn new(
        source: String,
        object: &Value,
        j: &Judgement,
        allowlist: &Allowlist,
        position_of: impl Fn(&ImageJudgement) -> Option<Position>,
    ) -> ObjectReport {
        let text = |p: &str| object.pointer(p).and_then(Value::as_str).map(str::to_owned);
        let images = j
            .images
            .iter()
            .map(|i| image_report(object, j.mode, i, position_of(i), allowlist))
            .collect();
        ObjectReport {
            source,
            document: None,
            item: None,
            line: None,
            api_version: text("/apiVersion"),
            kind: text("/kind"),
            namespace: text("/metadata/namespace"),
            name: text("/metadata/name"),
            uid: text("/metadata/uid"),
            owners: controller_of(object).into_iter().collect(),
            verdict: j.verdict,
            images,
        }
    }

    /// Each image's registry state: what `published` knows of the reference
    /// it will run.
    pub fn with_registry(mut self, j: &Judgement, allowlist: &Allowlist, published: &Published) -> Self {
        for (report, i) in self.images.iter_mut().zip(&j.images) {
            report.registry = i.will_run(allowlist).and_then(|pinned| {
                let known = published.get(&pinned.repository, &pinned.digest)?;
                Some(RegistryReport {
                    reference: format!("{}@{}", pinned.repository, pinned.digest),
                    state: known.state,
                    detail: known.detail.clone(),
                    checked_at: humantime::format_rfc3339_seconds(known.checked_at).to_string(),
                })
            });
        }
        self
    }

    /// How text output names the object at an image's line: `file:line:
    /// Kind ns/name` for a file, `ns/Kind/name` (as kubectl names it) for a
    /// cluster object.
    /// How text reports name the object (and the image's line, if any).
    pub fn label(&self, image_line: Option<usize>) -> String {
        let kind = self.kind.as_deref().unwrap_or("object");
        let name = self.name.as_deref().unwrap_or("(unnamed)");
        match (image_line.or(self.line), &self.namespace) {
            (Some(line), Some(ns)) => format!("{}:{line}: {kind} {ns}/{name}", self.source),
            (Some(line), None) => format!("{}:{line}: {kind} {name}", self.source),
            (None, Some(ns)) => format!("{ns}/{kind}/{name}"),
            (None, None) => format!("{kind}/{name}"),
        }
    }
}

fn image_report(
    object: &Value,
    mode: Mode,
    i: &ImageJudgement,
    position: Option<Position>,
    allowlist: &Allowlist,
) -> ImageReport {
    let would_be = (mode == Mode::Audit && i.would_be() != Verdict::Allow).then(|| i.would_be());
    let (container, volume) = match i.site.role {
        Role::Volume => (None, i.site.name.clone()),
        Role::Structure => (None, None),
        _ => (i.site.name.clone(), None),
    };
    let path = i.site.path().into_owned();
    let promoted = i.decision.rewrite_to().or(match &i.decision.finding {
        Finding::Promoted => i.site.image.as_deref().ok(),
        Finding::PromotedPlatform { index, .. } => Some(index.as_str()),
        _ => None,
    });
    ImageReport {
        promotions: promoted.map(|p| promotions(allowlist, p)).unwrap_or_default(),
        image: match &i.site.image {
            Ok(s) => Value::String(s.clone()),
            Err(_) => object.pointer(&path).cloned().unwrap_or(Value::Null),
        },
        path,
        container,
        volume,
        verdict: i.verdict(),
        rewrite: i.decision.rewrite_to().map(str::to_owned),
        code: i.reason(),
        reason: i.message(),
        would_be,
        line: position.map(|p| p.line),
        column: position.and_then(|p| p.column),
        registry: None,
        change: None,
        resolved: None,
    }
}

/// The object's controller (`ownerReferences[]` with `controller: true`).
pub fn controller_of(object: &Value) -> Option<Owner> {
    let owner = controller_reference(object)?;
    Some(Owner {
        kind: owner.get("kind")?.as_str()?.to_owned(),
        name: owner.get("name")?.as_str()?.to_owned(),
    })
}

/// The `ownerReferences[]` entry with `controller: true` (at most one is,
/// as the apiserver enforces).
pub fn controller_reference(object: &Value) -> Option<&Value> {
    let refs = object.pointer("/metadata/ownerReferences")?.as_array()?;
    refs.iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

// === impl Report ===

impl Report {
    /// Adds an object's report and counts its verdict.
    pub fn push(&mut self, report: ObjectReport) {
        self.tally(&report);
        self.results.push(report);
    }

    /// Counts an object's verdict in the summary, without keeping its
    /// report.
    pub fn tally(&mut self, report: &ObjectReport) {
        *self.count(report.verdict) += 1;
        self.summary.objects += 1;
        match report.images.iter().filter_map(|i| i.would_be).max() {
            Some(Verdict::Deny) => self.summary.would_deny += 1,
            Some(Verdict::Rewrite) => self.summary.would_rewrite += 1,
            _ => {}
        }
        if let Some(counts) = &mut self.summary.registry {
            for r in report.images.iter().filter_map(|i| i.registry.as_ref()) {
                counts.add(r.state);
            }
        }
    }

    /// Where the report stands, to [`Report::rewind`] to.
    pub fn mark(&self) -> Mark {
        Mark {
            results: self.results.len(),
            summary: self.summary.clone(),
        }
    }

    /// Takes back the objects told since `mark`, e.g. those of a file that
    /// turned out not to be a manifest.
    pub fn rewind(&mut self, mark: Mark) {
        self.results.truncate(mark.results);
        self.summary = mark.summary;
    }

    fn count(&mut self, verdict: ObjectVerdict) -> &mut usize {
        let s = &mut self.summary;
        match verdict {
            ObjectVerdict::Allow => &mut s.allow,
            ObjectVerdict::Rewrite => &mut s.rewrite,
            ObjectVerdict::Deny => &mut s.deny,
            ObjectVerdict::Skipped => &mut s.skipped,
        }
    }

    /// Whether something would be rewritten or denied.
    pub fn has_findings(&self) -> bool {
        self.summary.deny + self.summary.rewrite > 0
    }
}

// === output ===

/// A position in a [`Report`].
#[derive(Debug, Clone)]
pub struct Mark {
    results: usize,
    summary: Summary,
}

/// The members of the JSON report after `results` (`--output json`),
/// serialised as their own document: `{ "summary": …, … }`, `extra`'s
/// members after `summary`.
pub fn json_tail(report: &Report, extra: &serde_json::Map<String, Value>) -> String {
    #[derive(Serialize)]
    struct Tail<'a> {
        summary: &'a Summary,
        #[serde(flatten)]
        extra: &'a serde_json::Map<String, Value>,
        #[serde(skip_serializing_if = "<[Skipped]>::is_empty")]
        skipped: &'a [Skipped],
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        errors: &'a [String],
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        notes: &'a [String],
    }
    serde_json::to_string_pretty(&Tail {
        summary: &report.summary,
        extra,
        skipped: &report.skipped,
        errors: &report.errors,
        notes: &report.notes,
    })
    .expect("reports serialise")
}

/// The end of the text report: notes, errors and a summary, after the
/// lines of the objects ([`object_lines`]). `fixed` is `check --fix`'s
/// count of images still denied after fixing: rewrites are then reported
/// as done.
pub fn text_end(report: &Report, fixed: Option<usize>) -> String {
    let mut out = String::new();
    for n in &report.notes {
        let _ = writeln!(out, "note: {n}");
    }
    // Errors are not here: `output::Writer` writes them to standard error.
    out.push_str(&report.summary.checked(fixed.is_some()));
    if let Some(still) = fixed.filter(|&n| n > 0) {
        let _ = write!(out, "; {still} image(s) still denied after fixing");
    }
    out.push('\n');
    out
}

/// An object's lines of the text report: one per image that needs
/// attention; compliant objects make no noise.
pub fn object_lines(r: &ObjectReport, fixed: bool, out: &mut String) {
    let owners = owner_chain(&r.owners);
    for i in &r.images {
        let (shown, reason): (String, std::borrow::Cow<'_, str>) = match (i.verdict, i.would_be) {
            (ImageVerdict::Rewrite, _) if fixed => ("fixed".into(), i.reason.as_str().into()),
            (v @ (ImageVerdict::Rewrite | ImageVerdict::Deny), _) => {
                (v.to_string(), i.reason.as_str().into())
            }
            // The reason says `what: audit: would V: why`; the line says
            // the verdict once, in front: `audit: would V: what: why`.
            (_, Some(v)) => {
                let marker = audit_marker(v);
                let reason = i.reason.replacen(&format!(": {marker}: "), ": ", 1);
                (marker, reason.into())
            }
            _ => continue,
        };
        let resolved = i
            .resolved
            .as_ref()
            .map_or(String::new(), |to| format!(" (its node runs {to})"));
        let _ = writeln!(out, "{}{owners}: {shown}: {reason}{resolved}", r.label(i.line));
    }
    registry_lines(r, &owners, out);
}

/// A line per image whose reference the registry cannot serve, or could
/// not be asked about; a denial that already says so has none.
fn registry_lines(r: &ObjectReport, owners: &str, out: &mut String) {
    for i in &r.images {
        let Some(reg) = i.registry.as_ref().filter(|reg| reg.state != State::Ok) else {
            continue;
        };
        if i.code == Reason::PromotedUnpullable {
            continue;
        }
        let consequence = if reg.state.fails() {
            "its Pods will not start"
        } else {
            "not verified"
        };
        let _ = writeln!(
            out,
            "{}{owners}: {}: {}: {}: {consequence}",
            r.label(i.line),
            reg.state,
            reg.reference,
            reg.detail
        );
    }
}

/// ` (ReplicaSet x ← Deployment y)`, or nothing without owners.
pub fn owner_chain(owners: &[Owner]) -> String {
    if owners.is_empty() {
        return String::new();
    }
    let chain: Vec<String> = owners.iter().map(|o| format!("{} {}", o.kind, o.name)).collect();
    format!(" ({})", chain.join(" ← "))
}

/// The exit code contract shared by `check` and `audit`: 0 compliant, 1
/// something denied or to rewrite, 2 something could not be read or used.
pub fn exit_code(report: &Report) -> u8 {
    if !report.errors.is_empty() {
        2
    } else {
        u8::from(report.has_findings()).max(registry_exit_code(report))
    }
}

/// With `--registry`: 1 when a verified image's Pods would not start, else
/// 2 when one could not be verified (as `allowlist verify`), else 0.
pub fn registry_exit_code(report: &Report) -> u8 {
    match &report.summary.registry {
        Some(r) if r.failing() > 0 => 1,
        Some(r) if r.unverifiable > 0 => 2,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{BAD, REPO, incident_allowlist};

    #[test]
    fn cluster_objects_are_named_with_their_owner_chain() {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "models"},
            "spec": {"containers": [{"name": "ovms", "image": format!("{REPO}@{BAD}")}]}});
        let list = incident_allowlist();
        let j = crate::judge::judge(&pod, None, &crate::policy::Policy::default(), &list);
        let mut object = ObjectReport::new("cluster:e2e".into(), &pod, &j, &list, |_| None);
        object.owners = vec![
            Owner {
                kind: "ReplicaSet".into(),
                name: "d-1".into(),
            },
            Owner {
                kind: "Deployment".into(),
                name: "d".into(),
            },
        ];
        let mut report = Report::default();
        report.push(object);
        let text = crate::output::render(&report, crate::output::Format::Text { fixed: false }, None);
        assert!(
            text.starts_with("models/Pod/p (ReplicaSet d-1 ← Deployment d): rewrite: container \"ovms\""),
            "{text}"
        );
        assert_eq!(exit_code(&report), 1);
        let json: Value =
            serde_json::from_str(&crate::output::render(&report, crate::output::Format::Json, None)).unwrap();
        let r = &json["results"][0];
        assert_eq!(
            (
                r["document"].is_null(),
                r["line"].is_null(),
                r["images"][0]["line"].is_null()
            ),
            (true, true, true)
        );
        assert_eq!(r["images"][0]["code"], "digest_not_promoted");
        report.errors.push("cannot list".into());
        assert_eq!(exit_code(&report), 2);
    }
}
