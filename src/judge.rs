//! Judging one object: walk its image sites, decide each against the policy,
//! and return one typed [`Judgement`]: per image its [`Outcome`], reason code,
//! message and warning; for the object its [`ObjectVerdict`] and the JSON
//! Patch (RFC 6902) that puts it on promoted digests, with the
//! `digest-gate.dev/rewritten-images` annotation recording what changed.
//! `admission` and `check` only encode what this returns.
//!
//! Applying the patch and judging the result again yields no further change:
//! every rewrite target is a promoted digest.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use json_patch::jsonptr::{Pointer, PointerBuf};
use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::allowlist::Allowlist;
use crate::objects::{self, Embedded, Role, Site, Walk};
use crate::policy::{Decision, Denial, Finding, Mode, Policy, PromotedBy, Reason, Trigger, Verdict};
use crate::reference::{self, short_digest};
use crate::text::{self, Cut};
use crate::yaml::{self, Edit, Offsets};

/// Annotation recording, per JSON Pointer, the image before and after.
pub const REWRITTEN_ANNOTATION: &str = "digest-gate.dev/rewritten-images";
/// The longest warning digest-gate sends: 120 characters is what the
/// apiserver's warning guidance recommends. (It only truncates, to 256
/// runes each, once a response's warnings exceed 4,096 characters in all.)
pub const MAX_WARNING_LEN: usize = 120;

/// What happens to one image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Promoted, or an unlisted repository where those are allowed; in audit
    /// mode, everything that is not exempt.
    Allow,
    /// Matched an exemption: allowed, and said so.
    Exempt { pattern: String },
    /// Rewritten to the promoted reference `to`.
    Rewrite { to: String },
    /// Denied; `instead` is the promoted reference to use when one is known
    /// (enforce mode, or a rewrite that cannot be applied in place).
    Deny { instead: Option<String> },
}

impl Outcome {
    /// The outcome without its payload, as reports and the images metric
    /// name it.
    pub fn verdict(&self) -> ImageVerdict {
        match self {
            Self::Allow => ImageVerdict::Allow,
            Self::Exempt { .. } => ImageVerdict::Exempt,
            Self::Rewrite { .. } => ImageVerdict::Rewrite,
            Self::Deny { .. } => ImageVerdict::Deny,
        }
    }
}

/// What a report says happened to one image: an [`Outcome`] without its
/// payload. Its names are derived once, for reports, serde and metrics.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum ImageVerdict {
    Allow,
    Exempt,
    Rewrite,
    Deny,
}

/// What happens to a whole object.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum ObjectVerdict {
    /// A kind digest-gate does not read images of.
    Skipped,
    Allow,
    Rewrite,
    Deny,
}

impl ObjectVerdict {
    /// Lower-case name, as reports and metrics use it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One judged image site.
#[derive(Debug, Clone)]
pub struct ImageJudgement {
    pub site: Site,
    /// The policy's decision: what the image is, and the mode applied to it.
    pub decision: Decision,
    /// The promoted reference `--fix` writes here whatever the mode: set
    /// when rewrite mode would rewrite the image and the edit can be made.
    pub fix: Option<String>,
}

impl ImageJudgement {
    fn new(site: Site, decision: Decision) -> Self {
        let fix = decision.finding.rewrite_to().map(str::to_owned);
        Self { site, decision, fix }
    }

    /// What happens to the image, from the decision (so the two never
    /// disagree).
    pub fn outcome(&self) -> Outcome {
        let to = || self.decision.finding.rewrite_to().map(str::to_owned);
        match (&self.decision.verdict, &self.decision.finding) {
            (_, Finding::Exempt { pattern }) => Outcome::Exempt {
                pattern: pattern.clone(),
            },
            (Verdict::Allow, _) => Outcome::Allow,
            (Verdict::Rewrite, _) => Outcome::Rewrite {
                to: to().unwrap_or_default(),
            },
            (Verdict::Deny, Finding::Deny(Denial::CannotRewrite { to, .. })) => Outcome::Deny {
                instead: Some(to.clone()),
            },
            (Verdict::Deny, _) => Outcome::Deny { instead: to() },
        }
    }

    /// The image as written, or "" where the site has none usable.
    pub fn image(&self) -> &str {
        self.site.image.as_deref().unwrap_or("")
    }

    /// Why: the finding's stable code (whatever the mode made of it).
    pub fn reason(&self) -> Reason {
        self.decision.reason()
    }

    /// The message for people: which container, which image, why, and what
    /// to use instead.
    pub fn message(&self) -> String {
        self.decision.message(&self.site.describe(), self.image())
    }

    /// The verdict rewrite mode would reach; what audit mode reports.
    pub fn would_be(&self) -> Verdict {
        self.decision.would_be()
    }

    /// Who promoted the digest this image is rewritten to.
    pub fn promoted_by(&self) -> Option<&PromotedBy> {
        match &self.decision.finding {
            Finding::Rewrite { by, .. } => by.as_ref(),
            _ => None,
        }
    }

    /// How a warning names the image: `"ovms"` for a container (behind
    /// the part or Template object it is in), the site's description
    /// otherwise.
    fn short_label(&self) -> String {
        match (self.site.role, &self.site.name) {
            (Role::Container, Some(name)) => match &self.site.within {
                Some(within) => format!("{within}: \"{name}\""),
                None => format!("\"{name}\""),
            },
            _ => self.site.describe(),
        }
    }

    /// The one-line warning for `kubectl` (at most [`MAX_WARNING_LEN`]
    /// characters) under `label`: for a rewrite, and in audit mode for what
    /// would happen. A rewrite names the release that promoted its target
    /// when one did; the release is what is shortened first to fit.
    fn warning(&self, label: &str) -> Option<String> {
        let release = self
            .promoted_by()
            .and_then(|b| b.provenance.release())
            .unwrap_or_default();
        let text = match (self.decision.verdict, self.decision.mode, &self.decision.finding) {
            (Verdict::Rewrite, _, Finding::Rewrite { to, trigger, .. }) => {
                let target = short_target(to);
                match trigger {
                    Trigger::TagOnly { tag } => format!("digest-gate: {label}: tag {tag} pinned to {target}"),
                    Trigger::UnpromotedDigest { digest } => format!(
                        "digest-gate: {label}: {} never promoted; rewritten to {target}",
                        short_digest(digest)
                    ),
                }
            }
            (_, Mode::Audit, Finding::Rewrite { to, .. }) => format!(
                "digest-gate audit: {label} would be rewritten to {}",
                short_target(to)
            ),
            (_, Mode::Audit, Finding::Deny(d)) => {
                return Some(fit(format!(
                    "digest-gate audit: {label} would be denied: {}",
                    d.short()
                )));
            }
            _ => return None,
        };
        Some(fit(with_release(text, &release)))
    }
}

/// `text (release)`, the release cut short (or left out) to keep the whole
/// within [`MAX_WARNING_LEN`] characters.
fn with_release(text: String, release: &str) -> String {
    if release.is_empty() {
        return text;
    }
    let room = MAX_WARNING_LEN.saturating_sub(text.chars().count() + 3);
    if release.chars().count() <= room {
        return format!("{text} ({release})");
    }
    // Worth showing only while the package's name still reads.
    if room < 8 {
        return text;
    }
    let cut: String = release.chars().take(room - 1).collect();
    format!("{text} ({cut}…)")
}

/// `sha256:8af20e48bb48`: the digest is what changed.
fn short_target(to: &str) -> String {
    match to.rsplit_once('@') {
        Some((_, digest)) => short_digest(digest).to_owned(),
        None => to.to_owned(),
    }
}

/// Keeps a warning within [`MAX_WARNING_LEN`] characters on one line: the
/// container name in it comes from the request.
fn fit(warning: String) -> String {
    text::one_line_owned(warning, MAX_WARNING_LEN, Cut::End)
}

/// A rewritten embedded document (a ConfigMap value).
#[derive(Debug, Clone)]
pub struct EmbeddedRewrite {
    /// Pointer of the string in the object.
    pub pointer: PointerBuf,
    pub original: String,
    pub rewritten: String,
    /// The edits that turn `original` into `rewritten`.
    pub edits: Vec<Edit>,
}

/// What the mutating webhook sends for an object it rewrites.
#[derive(Debug, Clone)]
pub struct Rewriting {
    /// The image replacements, in the object (no annotation).
    pub ops: Vec<PatchOperation>,
    /// The operation that records them in the rewritten-images annotation.
    pub annotation: PatchOperation,
    /// This invocation's record (pointer → from/to) as JSON: the
    /// `rewritten-images` audit annotation.
    pub record: String,
}

/// The judgement of one object.
#[derive(Debug, Clone)]
pub struct Judgement {
    /// The object's kind as judged.
    pub kind: String,
    /// The mode for this kind.
    pub mode: Mode,
    /// Judged images; on UPDATE, only new or changed ones.
    pub images: Vec<ImageJudgement>,
    /// The worst image verdict (`Allow` when there are none), or `Skipped`
    /// for a kind digest-gate does not read.
    pub verdict: ObjectVerdict,
    /// Rewrites of embedded documents, for every image with a fix.
    pub embedded: Vec<EmbeddedRewrite>,
    /// Which invocation of the mutating webhook this is for the object: 1 +
    /// the invocations its rewritten-images annotation records (read when
    /// something is rewritten, or in audit mode; 1 otherwise). A
    /// reinvocation must not reuse an audit annotation key: the apiserver
    /// keeps the first value and drops the later one.
    pub invocation: usize,
    /// When some image is rewritten: the patch (sent when the object's
    /// verdict is `Rewrite`, that is when nothing is denied).
    pub rewriting: Option<Rewriting>,
}

/// Judges `object` (with its previous version on UPDATE) by its own kind.
pub fn judge(object: &Value, old: Option<&Value>, policy: &Policy, allowlist: &Allowlist) -> Judgement {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let group = objects::group_of(object.get("apiVersion").and_then(Value::as_str).unwrap_or(""));
    judge_as(group, kind, object, old, policy, allowlist)
}

/// Judges `object` read as `group`/`kind`.
pub fn judge_as(
    group: &str,
    kind: &str,
    object: &Value,
    old: Option<&Value>,
    policy: &Policy,
    allowlist: &Allowlist,
) -> Judgement {
    // ConfigMaps of other names are not read at all (`--configmap-names`,
    // the chart's webhook.configMaps.names); other kinds pay nothing for it.
    let skipped = group.is_empty()
        && kind == "ConfigMap"
        && !policy.judges_configmap(
            object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or(""),
        );
    let Walk {
        known,
        sites,
        embedded: sources,
    } = if skipped {
        Walk::default()
    } else {
        objects::walk_as(group, kind, object)
    };
    let old_walk = old.map(|old| objects::walk_as(group, kind, old));
    let unchanged = old_walk.as_ref().map(previous_images);
    let mode = policy.mode_for(kind);
    let mut images: Vec<ImageJudgement> = sites
        .into_iter()
        .filter(|site| match (&unchanged, &site.image) {
            (Some(seen), Ok(image)) => !seen.contains(&(site.path(), image.as_str())),
            _ => true,
        })
        .map(|site| {
            let decision = match &site.image {
                Ok(image) => policy.decide(kind, image, allowlist),
                Err(reason) => Decision::malformed(mode, reason.clone()),
            };
            ImageJudgement::new(site, decision)
        })
        .collect();
    let embedded = if sources.is_empty() {
        Vec::new()
    } else {
        rewrite_embedded(&sources, &mut images)
    };
    let verdict = if known {
        match images.iter().map(|i| i.decision.verdict).max() {
            None | Some(Verdict::Allow) => ObjectVerdict::Allow,
            Some(Verdict::Rewrite) => ObjectVerdict::Rewrite,
            Some(Verdict::Deny) => ObjectVerdict::Deny,
        }
    } else {
        ObjectVerdict::Skipped
    };
    let mut judgement = Judgement {
        kind: kind.to_owned(),
        mode,
        images,
        verdict,
        embedded,
        invocation: 1,
        rewriting: None,
    };
    // The record is read only when an answer can carry audit annotations:
    // an allowed UPDATE of an object rewritten long ago need not parse it.
    let rewrites = judgement.rewrites().next().is_some();
    if rewrites || mode == Mode::Audit {
        let history = history(object);
        judgement.invocation = 1 + history.as_ref().map_or(0, invocations);
        if rewrites {
            judgement.rewriting = Some(judgement.rewrite(object, history));
        }
    }
    judgement
}

/// (pointer, image) pairs of the old object. A controller must be able to
/// update or finalize an object whose digest was revoked after it was
/// admitted, so images it already had are not judged again.
fn previous_images(walk: &Walk) -> HashSet<(Cow<'_, str>, &str)> {
    walk.sites
        .iter()
        .filter_map(|s| s.image.as_ref().ok().map(|i| (s.path(), i.as_str())))
        .collect()
}

/// Rewrites images inside embedded documents by editing their text, so the
/// rest of the document (comments, order, quoting) stays as written. Every
/// image with a fix is edited, whatever the mode, so `check --fix` can
/// write them; in rewrite mode, a site that cannot be edited in place is
/// denied with the reference to use, elsewhere it just has no fix.
fn rewrite_embedded(sources: &[Embedded], images: &mut [ImageJudgement]) -> Vec<EmbeddedRewrite> {
    let mut out = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        let offsets = Offsets::new(&source.text);
        let mut edits = Vec::new();
        let mut members = Vec::new();
        for (i, image) in images.iter_mut().enumerate() {
            let Some(at) = image.site.embedded.as_ref().filter(|e| e.source == index) else {
                continue;
            };
            let Some(to) = image.fix.clone() else {
                continue;
            };
            let node = source.documents[at.document].node(at.pointer.as_str());
            let edit = node
                .ok_or_else(|| "its position in the text is unknown".to_owned())
                .and_then(|n| yaml::scalar_edit(&source.text, &offsets, &n, &to).map_err(|e| e.to_string()));
            match edit {
                Ok(e) => {
                    edits.push(e);
                    members.push(i);
                }
                Err(why) => cannot_rewrite(image, to, why),
            }
        }
        if edits.is_empty() {
            continue;
        }
        match yaml::apply_edits(&source.text, edits.clone()) {
            Ok(rewritten) => out.push(EmbeddedRewrite {
                pointer: source.pointer.clone(),
                original: source.text.clone(),
                rewritten,
                edits,
            }),
            Err(e) => {
                for i in members {
                    let to = images[i].fix.clone().unwrap_or_default();
                    cannot_rewrite(&mut images[i], to, e.to_string());
                }
            }
        }
    }
    out
}

fn cannot_rewrite(image: &mut ImageJudgement, to: String, why: String) {
    image.fix = None;
    if image.decision.verdict != Verdict::Rewrite {
        return;
    }
    image.decision = Decision::new(
        image.decision.mode,
        Finding::Deny(Denial::CannotRewrite { to, why }),
    );
}

// === impl Judgement ===

impl Judgement {
    /// The warnings for `kubectl`, one per image that has one. Images whose
    /// labels read alike (the same container name in two runtimes of one
    /// ConfigMap) are told apart by their repository.
    pub fn warnings(&self) -> Vec<String> {
        let labels: Vec<String> = self.images.iter().map(ImageJudgement::short_label).collect();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for label in &labels {
            *seen.entry(label.as_str()).or_default() += 1;
        }
        self.images
            .iter()
            .zip(&labels)
            .filter_map(|(i, label)| {
                if seen[label.as_str()] > 1 {
                    let image = i.image();
                    let name = reference::parse(image).map_or(image, |r| r.name());
                    let basename = name.rsplit('/').next().unwrap_or(name);
                    i.warning(&format!("{label} ({basename})"))
                } else {
                    i.warning(label)
                }
            })
            .collect()
    }

    /// Who promoted the digests the images are rewritten to, each once:
    /// what the decision log names. Cheap copies: the log describes them
    /// only when it writes the line.
    pub fn promoted_by(&self) -> Vec<PromotedBy> {
        let mut out: Vec<PromotedBy> = Vec::new();
        for by in self.images.iter().filter_map(ImageJudgement::promoted_by) {
            if !out.contains(by) {
                out.push(by.clone());
            }
        }
        out
    }

    /// Images the admission rewrites.
    pub fn rewrites(&self) -> impl Iterator<Item = &ImageJudgement> {
        self.images
            .iter()
            .filter(|i| i.decision.verdict == Verdict::Rewrite)
    }

    /// Images the admission denies.
    pub fn denials(&self) -> impl Iterator<Item = &ImageJudgement> {
        self.images.iter().filter(|i| i.decision.verdict == Verdict::Deny)
    }

    /// Images rewrite mode would still deny after every fix: what `--fix`
    /// leaves for a person.
    pub fn unfixable(&self) -> impl Iterator<Item = &ImageJudgement> {
        self.images
            .iter()
            .filter(|i| i.fix.is_none() && i.would_be() != Verdict::Allow)
    }

    /// The replacements that put every image with a fix on its promoted
    /// digest, pointers relative to the object: the mutating webhook's patch
    /// in rewrite mode, what `check --fix` writes in any mode.
    pub fn fix_ops(&self) -> Vec<PatchOperation> {
        let mut ops: Vec<PatchOperation> = self
            .images
            .iter()
            .filter(|i| i.site.embedded.is_none())
            .filter_map(|i| Some(replace(&i.site.pointer, i.fix.clone()?)))
            .collect();
        for e in &self.embedded {
            ops.push(replace(&e.pointer, e.rewritten.clone()));
        }
        ops
    }

    /// The patch JSON of the rewrites: with the annotation, unless
    /// `metadata` cannot change (a `pods/ephemeralcontainers` update).
    pub fn patch(&self, with_annotation: bool) -> Vec<PatchOperation> {
        let Some(r) = &self.rewriting else {
            return Vec::new();
        };
        let mut ops = r.ops.clone();
        if with_annotation {
            ops.push(r.annotation.clone());
        }
        ops
    }

    /// An audit annotation key, unique to this invocation: `base` for the
    /// first, `base-N` for the N-th.
    pub fn audit_key(&self, base: &str) -> String {
        if self.invocation <= 1 {
            base.to_owned()
        } else {
            format!("{base}-{}", self.invocation)
        }
    }

    fn rewrite(&self, object: &Value, history: Option<Map<String, Value>>) -> Rewriting {
        let this: Map<String, Value> = self
            .rewrites()
            .map(|i| {
                let mut entry =
                    serde_json::json!({"from": i.image(), "to": i.fix.as_deref().unwrap_or_default()});
                if let Some(by) = i.promoted_by() {
                    entry["promotedBy"] = Value::String(by.describe());
                }
                (i.site.path().into_owned(), entry)
            })
            .collect();
        let record = serde_json::to_string(&this).expect("records serialise");
        // The first rewrite of an object without a record annotates it with
        // this very text: serialised once (the record, promotedBy included,
        // is the largest part of a rewrite answer).
        let annotation = if self.invocation <= 1 && history.is_none() {
            Annotation::Text(record.clone())
        } else {
            Annotation::Record(this, history)
        };
        Rewriting {
            ops: self.fix_ops(),
            annotation: annotation_op(object, annotation, self.invocation),
            record,
        }
    }
}

fn replace(pointer: &Pointer, value: String) -> PatchOperation {
    PatchOperation::Replace(ReplaceOperation {
        path: pointer.to_buf(),
        value: Value::String(value),
    })
}

/// The object's rewritten-images record, when it has a readable one.
fn history(object: &Value) -> Option<Map<String, Value>> {
    let text = object
        .get("metadata")?
        .get("annotations")?
        .get(REWRITTEN_ANNOTATION)?
        .as_str()?;
    serde_json::from_str(text).ok()
}

/// Invocations a record holds: entries of later invocations carry their
/// number (`"invocation": 2`), those of the first carry none.
fn invocations(record: &Map<String, Value>) -> usize {
    record
        .values()
        .map(|e| {
            e.get("invocation")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(1)
        })
        .max()
        .unwrap_or(0)
}

/// What the rewritten-images annotation says: this answer's record merged
/// into the object's history, or already serialised.
enum Annotation {
    Text(String),
    Record(Map<String, Value>, Option<Map<String, Value>>),
}

/// Adds (or merges into) the rewritten-images annotation. Earlier records are
/// kept so the annotation tells the object's whole history.
fn annotation_op(object: &Value, annotation: Annotation, invocation: usize) -> PatchOperation {
    let text = match annotation {
        Annotation::Text(text) => text,
        Annotation::Record(mut record, history) => {
            if invocation > 1 {
                for entry in record.values_mut() {
                    if let Value::Object(e) = entry {
                        e.insert("invocation".to_owned(), Value::from(invocation));
                    }
                }
            }
            for (k, v) in history.into_iter().flatten() {
                record.entry(k).or_insert(v);
            }
            Value::Object(record).to_string()
        }
    };
    let text = Value::String(text);
    let metadata = object.get("metadata");
    let annotations = metadata.and_then(|m| m.get("annotations"));
    let (tokens, value) = match (metadata, annotations) {
        (Some(Value::Object(_)), Some(Value::Object(_))) => {
            (&["metadata", "annotations", REWRITTEN_ANNOTATION][..], text)
        }
        (Some(Value::Object(_)), _) => (
            &["metadata", "annotations"][..],
            serde_json::json!({ REWRITTEN_ANNOTATION: text }),
        ),
        _ => (
            &["metadata"][..],
            serde_json::json!({ "annotations": { REWRITTEN_ANNOTATION: text } }),
        ),
    };
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(tokens.iter().copied()),
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Mode;
    use proptest::prelude::*;
    use serde_json::json;

    use crate::testing::{BAD, GOOD, REPO};

    fn allowlist() -> Allowlist {
        crate::testing::incident_allowlist()
    }

    /// rhods-operator 1.21.0's CSV as the allowlist.
    fn operator_allowlist() -> Allowlist {
        let csv = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/allowlists/rhods-operator.csv.yaml");
        crate::allowlist::load_paths(&[csv]).unwrap().allowlist
    }

    fn pod_warnings(containers: Value) -> Vec<String> {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": containers}});
        judge(&pod, None, &Policy::default(), &operator_allowlist()).warnings()
    }

    #[test]
    fn configmaps_of_other_names_are_not_read() {
        let cm = |name: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"r": format!(
                "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nmetadata: {{name: r}}\nspec:\n  containers: [{{name: c, image: '{REPO}@{BAD}'}}]\n"
            )}})
        };
        let policy = Policy {
            configmap_names: vec!["servingruntimes-config".into()],
            ..Policy::default()
        };
        let named = judge(&cm("servingruntimes-config"), None, &policy, &allowlist());
        assert_eq!(named.verdict, ObjectVerdict::Rewrite);
        let other = judge(&cm("my-runtimes"), None, &policy, &allowlist());
        assert_eq!((other.verdict, other.images.len()), (ObjectVerdict::Skipped, 0));
        // Without names, every ConfigMap holding a runtime is judged.
        assert_eq!(
            judge(&cm("my-runtimes"), None, &Policy::default(), &allowlist()).verdict,
            ObjectVerdict::Rewrite
        );
    }

    #[test]
    fn warnings_name_the_release_within_the_budget() {
        let w = pod_warnings(json!([{"name": "ovms", "image": format!("{REPO}@{BAD}")}]));
        assert_eq!(
            w,
            [
                "digest-gate: \"ovms\": sha256:7ef272bc7be8 never promoted; rewritten to sha256:8af20e48bb48 (rhods-operator 1.21.0)"
            ]
        );
        assert_eq!(w[0].chars().count(), 113);
        // A longer name: the release is shortened first, the rest kept.
        let w = pod_warnings(json!([{"name": "ovms-runtime-0", "image": format!("{REPO}@{BAD}")}]));
        assert!(
            w[0].ends_with("rewritten to sha256:8af20e48bb48 (rhods-operator 1.…)"),
            "{}",
            w[0]
        );
        assert_eq!(w[0].chars().count(), MAX_WARNING_LEN);
        // With no room for it, the release is left out.
        let long = "c".repeat(32);
        let w = pod_warnings(json!([{"name": long, "image": format!("{REPO}@{BAD}")}]));
        assert!(w[0].ends_with("rewritten to sha256:8af20e48bb48"), "{}", w[0]);
    }

    #[test]
    fn warnings_that_would_read_alike_name_the_repository() {
        // One ConfigMap, two runtimes, a container "ovms" in each.
        let runtime = |name: &str, image: &str| {
            format!(
                "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - {{name: ovms, image: '{image}'}}\n"
            )
        };
        let data = format!(
            "{}---\n{}",
            runtime("a", &format!("{REPO}@{BAD}")),
            runtime("b", &format!("{REPO}:v1.21.0-15"))
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "servingruntimes-config"},
            "data": {"default-config": data}});
        let w = judge(&cm, None, &Policy::default(), &operator_allowlist()).warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w.iter()
                .all(|w| w.starts_with("digest-gate: \"ovms\" (odh-openvino-servingruntime-rhel8): ")),
            "{w:?}"
        );
    }

    fn apply(object: &Value, ops: &[PatchOperation]) -> Value {
        let mut patched = object.clone();
        json_patch::patch(&mut patched, ops).unwrap();
        patched
    }

    #[test]
    fn rewrites_patch_images_and_annotate_then_settle() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "ovms", "image": format!("{REPO}@{BAD}")},
            {"name": "ok", "image": format!("{REPO}@{GOOD}")}]}});
        let list = allowlist();
        let r = judge(&pod, None, &Policy::default(), &list);
        assert_eq!(r.verdict, ObjectVerdict::Rewrite);
        let patched = apply(&pod, &r.patch(true));
        assert_eq!(
            patched["spec"]["containers"][0]["image"],
            format!("{REPO}@{GOOD}")
        );
        assert_eq!(patched["spec"]["containers"][1], pod["spec"]["containers"][1]);
        let note: Value = serde_json::from_str(
            patched["metadata"]["annotations"][REWRITTEN_ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            note,
            json!({"/spec/containers/0/image": {"from": format!("{REPO}@{BAD}"), "to": format!("{REPO}@{GOOD}"), "promotedBy": "plain list (l.txt:1)"}})
        );
        let again = judge(&patched, None, &Policy::default(), &list);
        assert_eq!(again.verdict, ObjectVerdict::Allow);
        assert!(again.patch(true).is_empty());
    }

    #[test]
    fn annotation_merges_with_earlier_records() {
        let earlier = json!({"/spec/containers/1/image": {"from": "a", "to": "b"}}).to_string();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"annotations": {REWRITTEN_ANNOTATION: earlier, "other": "x"}},
            "spec": {"containers": [{"name": "c", "image": format!("{REPO}:v1.21.0-15")}]}});
        let r = judge(&pod, None, &Policy::default(), &allowlist());
        let patched = apply(&pod, &r.patch(true));
        let note: Value = serde_json::from_str(
            patched["metadata"]["annotations"][REWRITTEN_ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(note.as_object().unwrap().len(), 2);
        assert_eq!(patched["metadata"]["annotations"]["other"], "x");
        assert_eq!(
            patched["spec"]["containers"][0]["image"],
            format!("{REPO}:v1.21.0-15@{GOOD}")
        );
    }

    #[test]
    fn objects_without_metadata_get_it() {
        let sr = json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
            "spec": {"containers": [{"name": "c", "image": format!("{REPO}@{BAD}")}]}});
        let r = judge(&sr, None, &Policy::default(), &allowlist());
        let patched = apply(&sr, &r.patch(true));
        assert!(patched["metadata"]["annotations"][REWRITTEN_ANNOTATION].is_string());
    }

    #[test]
    fn embedded_runtime_text_is_edited_in_place() {
        let text = format!(
            "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nspec:\n  containers:\n    - name: ovms\n      # the runtime\n      image: >-\n        {REPO}@{BAD}\n      args: ['--port=8001']\n"
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "servingruntimes-config"},
                        "data": {"default-config": text}});
        let r = judge(&cm, None, &Policy::default(), &allowlist());
        assert_eq!(r.verdict, ObjectVerdict::Rewrite);
        let patched = apply(&cm, &r.patch(true));
        assert_eq!(patched["data"]["default-config"], text.replace(BAD, GOOD));
        assert!(
            judge(&patched, None, &Policy::default(), &allowlist())
                .patch(true)
                .is_empty()
        );
    }

    #[test]
    fn updates_judge_only_new_or_changed_images() {
        let revoked = format!("{REPO}@{BAD}");
        let old = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "a", "image": revoked}]}});
        let mut new = old.clone();
        new["metadata"] = json!({"finalizers": []});
        let r = judge(&new, Some(&old), &Policy::default(), &allowlist());
        assert!(r.images.is_empty());
        assert_eq!(r.verdict, ObjectVerdict::Allow);
        new["spec"]["containers"][0]["image"] = json!("quay.io/x/y:1");
        let r = judge(&new, Some(&old), &Policy::default(), &allowlist());
        assert_eq!(r.verdict, ObjectVerdict::Deny);
    }

    #[test]
    fn enforce_and_audit_modes() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "c", "image": format!("{REPO}@{BAD}")}]}});
        let mut policy = Policy {
            mode: Mode::Enforce,
            ..Policy::default()
        };
        let r = judge(&pod, None, &policy, &allowlist());
        assert_eq!(r.verdict, ObjectVerdict::Deny);
        assert!(r.patch(true).is_empty());
        assert!(r.images[0].message().starts_with("container \"c\": "));
        policy.mode = Mode::Audit;
        let r = judge(&pod, None, &policy, &allowlist());
        assert_eq!(r.verdict, ObjectVerdict::Allow);
        assert!(r.patch(true).is_empty());
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z:/@.0-9]{0,20}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("containers".to_owned()),
                        Just("image".to_owned()),
                        Just("spec".to_owned()),
                        Just("volumes".to_owned()),
                        "[a-z]{1,6}"
                    ],
                    inner,
                    0..5
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn image_choice() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(format!("{REPO}@{GOOD}")),
            Just(format!("{REPO}@{BAD}")),
            Just(format!("{REPO}:v1.21.0-15")),
            Just(format!("{REPO}:v1.21.0-15@{BAD}")),
            Just(format!("{REPO}:latest")),
            Just(REPO.to_owned()),
            Just("ovms-1:replace".to_owned()),
            Just("quay.io/other/x:1".to_owned()),
            Just("$(vllm-cuda-image)".to_owned()),
        ]
    }

    proptest! {
        #[test]
        fn any_spec_reviews_without_panicking(spec in json_value(), kind in prop_oneof![Just("Pod"), Just("ServingRuntime"), Just("Template"), Just("ConfigMap")]) {
            let api = if kind == "ServingRuntime" { "serving.kserve.io/v1alpha1" } else { "v1" };
            let object = json!({"apiVersion": api, "kind": kind, "spec": spec.clone(), "objects": [{"kind": "Pod", "apiVersion": "v1", "spec": spec}]});
            let r = judge(&object, None, &Policy::default(), &allowlist());
            let mut patched = object.clone();
            prop_assert!(json_patch::patch(&mut patched, &r.patch(true)).is_ok());
        }

        #[test]
        fn rewrites_are_idempotent(images in prop::collection::vec(image_choice(), 1..8), mode in prop_oneof![Just(Mode::Rewrite), Just(Mode::Enforce), Just(Mode::Audit)]) {
            let containers: Vec<Value> = images.iter().enumerate().map(|(i, image)| json!({"name": format!("c{i}"), "image": image})).collect();
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}});
            let policy = Policy { mode, ..Policy::default() };
            let list = allowlist();
            let first = judge(&pod, None, &policy, &list);
            let patched = apply(&pod, &first.patch(true));
            let second = judge(&patched, None, &policy, &list);
            prop_assert_eq!(second.rewrites().count(), 0);
            prop_assert!(second.patch(true).is_empty());
            let denied = |r: &Judgement| r.denials().map(|i| i.site.pointer.clone()).collect::<Vec<_>>();
            prop_assert_eq!(denied(&first), denied(&second));
            prop_assert!(second.verdict <= first.verdict);
        }
    }

    #[test]
    fn malformed_sites_deny_with_their_reason() {
        let sr = json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime", "spec": {"containers": {"name": "x"}}});
        let r = judge(&sr, None, &Policy::default(), &allowlist());
        assert_eq!(r.verdict, ObjectVerdict::Deny);
        assert_eq!(
            r.images[0].message(),
            "at /spec/containers: spec.containers must be a list of containers, found a mapping"
        );
    }

    #[test]
    fn fit_keeps_what_fits_and_cuts_the_rest() {
        let exact = "é".repeat(MAX_WARNING_LEN);
        assert_eq!(
            fit(exact.clone()),
            exact,
            "120 characters fit, whatever their byte length"
        );
        let long = format!("{exact}x");
        let cut = fit(long.clone());
        assert_eq!(cut.chars().count(), MAX_WARNING_LEN);
        assert!(cut.ends_with("é…"), "{cut}");
        // Control characters are escaped and count at their escaped length;
        // quotes and non-ASCII are left as they are.
        assert_eq!(fit("a\nb \"ü\" \u{1b}".into()), "a\\nb \"ü\" \\u{1b}");
        let escaped = fit(format!("{}\n", "a".repeat(MAX_WARNING_LEN - 2)));
        assert_eq!(escaped.chars().count(), MAX_WARNING_LEN);
        assert!(escaped.ends_with("a\\n"), "{escaped}");
        let over = fit(format!("{}\n", "a".repeat(MAX_WARNING_LEN - 1)));
        assert_eq!(over, format!("{}…", "a".repeat(MAX_WARNING_LEN - 1)));
    }
}
