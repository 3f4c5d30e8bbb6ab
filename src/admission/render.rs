//! What admission renders of a judgement besides its verdict: the warnings
//! `kubectl` shows, the JSON Patch with the rewritten-images record, and the
//! audit annotation keys that keep a reinvocation's answers apart. The
//! judge decides and finds the fixes; this words and encodes them.

use std::collections::{BTreeMap, HashMap};

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use serde_json::{Map, Value};

use crate::allowlist::Allowlist;
use crate::judge::{ImageJudgement, Judgement};
use crate::objects::Role;
use crate::policy::{Finding, Mode, Trigger, Verdict};
use crate::published::Published;
use crate::reference::{self, short_digest};
use crate::text::{self, Cut};

/// Annotation recording, per JSON Pointer, the image before and after.
pub const REWRITTEN_ANNOTATION: &str = "digest-gate.dev/rewritten-images";
/// The longest warning digest-gate sends: 120 characters is what the
/// apiserver's warning guidance recommends. (It only truncates, to 256
/// runes each, once a response's warnings exceed 4,096 characters in all.)
pub const MAX_WARNING_LEN: usize = 120;
/// Warnings beyond this many are summarised in one.
const MAX_WARNINGS: usize = 16;
/// Denied images listed in one message before "and N more".
const MAX_DENIALS_LISTED: usize = 8;

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

/// What one answer carries beside the verdict.
#[derive(Debug, Clone)]
pub struct Rendered {
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

// === impl Rendered ===

impl Rendered {
    /// Renders judgement `j` of `object`.
    pub fn of(j: &Judgement, object: &Value) -> Self {
        let mut rendered = Self {
            invocation: 1,
            rewriting: None,
        };
        // The record is read only when an answer can carry audit
        // annotations: an allowed UPDATE of an object rewritten long ago
        // need not parse it.
        let rewrites = j.rewrites().next().is_some();
        if rewrites || j.mode == Mode::Audit {
            let history = history(object);
            rendered.invocation = 1 + history.as_ref().map_or(0, invocations);
            if rewrites {
                rendered.rewriting = Some(rewrite(j, object, history, rendered.invocation));
            }
        }
        rendered
    }

    /// The JSON Patch the mutating answer sends, and this invocation's
    /// record (pointer → from/to, the `rewritten-images` audit annotation):
    /// the image replacements, then the annotation unless `metadata` cannot
    /// change (a `pods/ephemeralcontainers` update). Taken, not copied: the
    /// record is the largest part of a rewrite answer.
    pub fn take_patch(&mut self, with_annotation: bool) -> Option<(Vec<PatchOperation>, String)> {
        let r = self.rewriting.take()?;
        let mut ops = r.ops;
        if with_annotation {
            ops.push(r.annotation);
        }
        Some((ops, r.record))
    }

    /// What audit mode says it would have done, as audit annotations:
    /// `would-rewrite` (pointer → promoted reference) and `would-deny`
    /// (pointer → message), each when something would be.
    pub fn audit_annotations(&self, j: &Judgement) -> BTreeMap<String, String> {
        let mut would_deny = Map::new();
        let mut would_rewrite = Map::new();
        for i in &j.images {
            if let Some(to) = i.decision.finding.rewrite_to() {
                would_rewrite.insert(i.site.path().into_owned(), Value::String(to.to_owned()));
            } else if i.would_be() == Verdict::Deny {
                would_deny.insert(i.site.path().into_owned(), Value::String(i.message()));
            }
        }
        let mut out = BTreeMap::new();
        for (base, found) in [("would-rewrite", would_rewrite), ("would-deny", would_deny)] {
            if !found.is_empty() {
                out.insert(self.audit_key(base), Value::Object(found).to_string());
            }
        }
        out
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
}

/// The warnings for `kubectl`, one per image that has one, the last
/// summarising what does not fit.
pub fn warnings(j: &Judgement) -> Vec<String> {
    let warnings = image_warnings(j);
    if warnings.len() <= MAX_WARNINGS {
        return warnings;
    }
    let (mut kept, more) = text::first(warnings, MAX_WARNINGS - 1);
    kept.push(format!(
        "digest-gate: and {more} more image(s); see the rewritten-images annotation"
    ));
    kept
}

/// A denial's message: the images' messages, the first few of them.
pub fn denial(messages: Vec<String>) -> String {
    let (listed, more) = text::first(messages, MAX_DENIALS_LISTED);
    let mut joined = listed.join("; ");
    if more > 0 {
        joined.push_str(&format!("; and {more} more image(s)"));
    }
    joined
}

/// One warning per image that has one. Images whose labels read alike
/// (the same container name in two runtimes of one ConfigMap) are told
/// apart by their repository.
fn image_warnings(j: &Judgement) -> Vec<String> {
    let labels: Vec<String> = j.images.iter().map(short_label).collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for label in &labels {
        *seen.entry(label.as_str()).or_default() += 1;
    }
    j.images
        .iter()
        .zip(&labels)
        .filter_map(|(i, label)| {
            if seen[label.as_str()] > 1 {
                let image = i.image();
                let name = reference::parse(image).map_or(image, |r| r.name());
                let basename = name.rsplit('/').next().unwrap_or(name);
                warning(i, &format!("{label} ({basename})"))
            } else {
                warning(i, label)
            }
        })
        .collect()
}

/// A warning per allowed image whose reference the registries said cannot
/// be pulled (`serve --verify-registry`): it is promoted, and admitted, but
/// its Pods will not start.
pub fn unpullable(j: &Judgement, allowlist: &Allowlist, published: &Published) -> Vec<String> {
    if published.is_empty() {
        return Vec::new();
    }
    j.images
        .iter()
        .filter(|i| i.decision.verdict == Verdict::Allow)
        .filter_map(|i| {
            let pinned = i.will_run(allowlist)?;
            let known = published
                .get(&pinned.repository, &pinned.digest)
                .filter(|k| k.state.fails())?;
            Some(fit(format!(
                "digest-gate: {}: {} is promoted, but {}: {}",
                short_label(i),
                short_digest(&pinned.digest),
                known.state,
                known.detail
            )))
        })
        .collect()
}

/// How a warning names the image: `"ovms"` for a container (behind
/// the part or Template object it is in), the site's description
/// otherwise.
fn short_label(i: &ImageJudgement) -> String {
    match (i.site.role, &i.site.name) {
        (Role::Container, Some(name)) => match &i.site.within {
            Some(within) => format!("{within}: \"{name}\""),
            None => format!("\"{name}\""),
        },
        _ => i.site.describe(),
    }
}

/// The one-line warning for `kubectl` (at most [`MAX_WARNING_LEN`]
/// characters) under `label`: for a rewrite, and in audit mode for what
/// would happen. A rewrite names the release that promoted its target
/// when one did; the release is what is shortened first to fit.
fn warning(i: &ImageJudgement, label: &str) -> Option<String> {
    let release = i
        .promoted_by()
        .and_then(|b| b.provenance.release())
        .unwrap_or_default();
    let text = match (i.decision.verdict, i.decision.mode, &i.decision.finding) {
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

fn rewrite(
    j: &Judgement,
    object: &Value,
    history: Option<Map<String, Value>>,
    invocation: usize,
) -> Rewriting {
    let this: Map<String, Value> = j
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
    let annotation = if invocation <= 1 && history.is_none() {
        Annotation::Text(record.clone())
    } else {
        Annotation::Record(this, history)
    };
    Rewriting {
        ops: j.fix_ops(),
        annotation: annotation_op(object, annotation, invocation),
        record,
    }
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
    use crate::allowlist::Allowlist;
    use crate::judge::{ObjectVerdict, judge};
    use crate::policy::Policy;
    use proptest::prelude::*;
    use serde_json::json;

    use crate::testing::{BAD, GOOD, REPO};

    fn allowlist() -> Allowlist {
        crate::testing::incident_allowlist()
    }

    /// The patch a mutating answer sends.
    fn patch(j: &Judgement, object: &Value) -> Vec<PatchOperation> {
        Rendered::of(j, object)
            .take_patch(true)
            .map(|(ops, _)| ops)
            .unwrap_or_default()
    }

    /// rhods-operator 1.21.0's CSV as the allowlist.
    fn operator_allowlist() -> Allowlist {
        let csv = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/allowlists/rhods-operator.csv.yaml");
        crate::allowlist::load_paths(&[csv]).unwrap().allowlist
    }

    fn pod_warnings(containers: Value) -> Vec<String> {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": containers}});
        warnings(&judge(&pod, None, &Policy::default(), &operator_allowlist()))
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
        let w = warnings(&judge(&cm, None, &Policy::default(), &operator_allowlist()));
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
        let patched = apply(&pod, &patch(&r, &pod));
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
        assert!(patch(&again, &patched).is_empty());
    }

    #[test]
    fn annotation_merges_with_earlier_records() {
        let earlier = json!({"/spec/containers/1/image": {"from": "a", "to": "b"}}).to_string();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"annotations": {REWRITTEN_ANNOTATION: earlier, "other": "x"}},
            "spec": {"containers": [{"name": "c", "image": format!("{REPO}:v1.21.0-15")}]}});
        let r = judge(&pod, None, &Policy::default(), &allowlist());
        let patched = apply(&pod, &patch(&r, &pod));
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
        let patched = apply(&sr, &patch(&r, &sr));
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
        let patched = apply(&cm, &patch(&r, &cm));
        assert_eq!(patched["data"]["default-config"], text.replace(BAD, GOOD));
        let again = judge(&patched, None, &Policy::default(), &allowlist());
        assert!(patch(&again, &patched).is_empty());
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
        assert!(patch(&r, &pod).is_empty());
        assert!(r.images[0].message().starts_with("container \"c\": "));
        policy.mode = Mode::Audit;
        let r = judge(&pod, None, &policy, &allowlist());
        assert_eq!(r.verdict, ObjectVerdict::Allow);
        assert!(patch(&r, &pod).is_empty());
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
            prop_assert!(json_patch::patch(&mut patched, &patch(&r, &object)).is_ok());
        }

        #[test]
        fn rewrites_are_idempotent(images in prop::collection::vec(image_choice(), 1..8), mode in prop_oneof![Just(Mode::Rewrite), Just(Mode::Enforce), Just(Mode::Audit)]) {
            let containers: Vec<Value> = images.iter().enumerate().map(|(i, image)| json!({"name": format!("c{i}"), "image": image})).collect();
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}});
            let policy = Policy { mode, ..Policy::default() };
            let list = allowlist();
            let first = judge(&pod, None, &policy, &list);
            let patched = apply(&pod, &patch(&first, &pod));
            let second = judge(&patched, None, &policy, &list);
            prop_assert_eq!(second.rewrites().count(), 0);
            prop_assert!(patch(&second, &patched).is_empty());
            let denied = |r: &Judgement| r.denials().map(|i| i.site.pointer.clone()).collect::<Vec<_>>();
            prop_assert_eq!(denied(&first), denied(&second));
            prop_assert!(second.verdict <= first.verdict);
        }
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
