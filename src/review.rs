//! Judging a whole object: walk its image sites, decide each, and turn the
//! rewrites into an RFC 6902 JSON Patch plus the
//! `digest-gate.dev/rewritten-images` annotation.
//!
//! Applying the patch and reviewing the result again yields no further change:
//! every rewrite target is a promoted digest.

use std::collections::HashSet;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use serde_json::{Map, Value};

use crate::allowlist::Allowlist;
use crate::objects::{self, Embedded, Site, Walk};
use crate::policy::{Decision, Denial, Finding, Policy, Verdict};
use crate::yaml::{self, Edit, Offsets};

/// Annotation recording, per JSON Pointer, the image before and after.
pub const REWRITTEN_ANNOTATION: &str = "digest-gate.dev/rewritten-images";

/// One judged image site.
#[derive(Debug, Clone)]
pub struct ImageReview {
    pub site: Site,
    pub decision: Decision,
}

impl ImageReview {
    /// The image as written, or "" where the site has none usable.
    pub fn image(&self) -> &str {
        self.site.image.as_deref().unwrap_or("")
    }

    /// The message for people: which container, which image, why, and what
    /// to use instead.
    pub fn message(&self) -> String {
        self.decision.message(&self.site.describe(), self.image())
    }
}

/// A rewritten embedded document (a ConfigMap value).
#[derive(Debug, Clone)]
pub struct EmbeddedRewrite {
    /// Pointer of the string in the object.
    pub pointer: String,
    pub original: String,
    pub rewritten: String,
    /// The edits that turn `original` into `rewritten`.
    pub edits: Vec<Edit>,
}

/// The review of one object.
#[derive(Debug, Clone)]
pub struct Review {
    /// The object's kind as reviewed.
    pub kind: String,
    /// Whether digest-gate knows where this kind keeps images.
    pub known: bool,
    /// Judged images; on UPDATE, only new or changed ones.
    pub images: Vec<ImageReview>,
    /// The worst image verdict (`Allow` when there are none).
    pub verdict: Verdict,
    pub embedded: Vec<EmbeddedRewrite>,
}

/// Reviews `object` (with its previous version on UPDATE) by its own kind.
pub fn review(object: &Value, old: Option<&Value>, policy: &Policy, allowlist: &Allowlist) -> Review {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let group = objects::group_of(object.get("apiVersion").and_then(Value::as_str).unwrap_or(""));
    review_as(group, kind, object, old, policy, allowlist)
}

/// Reviews `object` read as `group`/`kind`.
pub fn review_as(
    group: &str,
    kind: &str,
    object: &Value,
    old: Option<&Value>,
    policy: &Policy,
    allowlist: &Allowlist,
) -> Review {
    let Walk {
        known,
        sites,
        embedded: sources,
    } = objects::walk_as(group, kind, object);
    let old_walk = old.map(|old| objects::walk_as(group, kind, old));
    let unchanged = old_walk.as_ref().map(previous_images);
    let mode = policy.mode_for(kind);
    let mut images: Vec<ImageReview> = sites
        .into_iter()
        .filter(|site| match (&unchanged, &site.image) {
            (Some(seen), Ok(image)) => !seen.contains(&(site.pointer.as_str(), image.as_str())),
            _ => true,
        })
        .map(|site| {
            let decision = match &site.image {
                Ok(image) => policy.decide(kind, image, allowlist),
                Err(reason) => Decision::malformed(mode, reason.clone()),
            };
            ImageReview { site, decision }
        })
        .collect();
    let embedded = if sources.is_empty() {
        Vec::new()
    } else {
        rewrite_embedded(&sources, &mut images)
    };
    let verdict = images
        .iter()
        .map(|i| i.decision.verdict)
        .max()
        .unwrap_or(Verdict::Allow);
    Review {
        kind: kind.to_owned(),
        known,
        images,
        verdict,
        embedded,
    }
}

/// (pointer, image) pairs of the old object. A controller must be able to
/// update or finalize an object whose digest was revoked after it was
/// admitted, so images it already had are not judged again.
fn previous_images(walk: &Walk) -> HashSet<(&str, &str)> {
    walk.sites
        .iter()
        .filter_map(|s| s.image.as_ref().ok().map(|i| (s.pointer.as_str(), i.as_str())))
        .collect()
}

/// Rewrites images inside embedded documents by editing their text, so the
/// rest of the document (comments, order, quoting) stays as written. A site
/// that cannot be edited in place is denied with the reference to use.
fn rewrite_embedded(sources: &[Embedded], images: &mut [ImageReview]) -> Vec<EmbeddedRewrite> {
    let mut out = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        let offsets = Offsets::new(&source.text);
        let mut edits = Vec::new();
        let mut members = Vec::new();
        for (i, image) in images.iter_mut().enumerate() {
            let Some(at) = image.site.embedded.as_ref().filter(|e| e.source == index) else {
                continue;
            };
            if image.decision.verdict != Verdict::Rewrite {
                continue;
            }
            let Some(to) = image.decision.rewrite_to().map(str::to_owned) else {
                continue;
            };
            let node = source.documents[at.document].node(&at.pointer);
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
                    let to = images[i].decision.rewrite_to().unwrap_or_default().to_owned();
                    cannot_rewrite(&mut images[i], to, e.to_string());
                }
            }
        }
    }
    out
}

fn cannot_rewrite(image: &mut ImageReview, to: String, why: String) {
    image.decision = Decision::new(
        image.decision.mode,
        Finding::Deny(Denial::CannotRewrite { to, why }),
    );
}

// === impl Review ===

impl Review {
    /// Images the admission rewrites.
    pub fn rewrites(&self) -> impl Iterator<Item = &ImageReview> {
        self.images
            .iter()
            .filter(|i| i.decision.verdict == Verdict::Rewrite)
    }

    /// Images the admission denies.
    pub fn denials(&self) -> impl Iterator<Item = &ImageReview> {
        self.images.iter().filter(|i| i.decision.verdict == Verdict::Deny)
    }

    /// The JSON Patch that applies every rewrite to `object` and records it in
    /// the annotation; empty when nothing is rewritten.
    pub fn patch(&self, object: &Value) -> Vec<PatchOperation> {
        self.patch_with(object, Some(self.record()))
    }

    /// Original and new image per JSON Pointer, for this review's rewrites:
    /// what the annotation adds to the object's history.
    pub fn record(&self) -> Map<String, Value> {
        self.rewrites()
            .map(|i| {
                let to = i.decision.rewrite_to().expect("rewrites have a target");
                (
                    i.site.pointer.clone(),
                    serde_json::json!({"from": i.image(), "to": to}),
                )
            })
            .collect()
    }

    /// [`Review::patch`] with `record` (from [`Review::record`]) as the
    /// annotation's new entries, or no annotation at all: a subresource
    /// update (`pods/ephemeralcontainers`) cannot change metadata.
    pub fn patch_with(&self, object: &Value, record: Option<Map<String, Value>>) -> Vec<PatchOperation> {
        let mut ops: Vec<PatchOperation> = self
            .rewrites()
            .filter(|i| i.site.embedded.is_none())
            .map(|i| {
                PatchOperation::Replace(ReplaceOperation {
                    path: pointer(&i.site.pointer),
                    value: Value::String(
                        i.decision
                            .rewrite_to()
                            .expect("rewrites have a target")
                            .to_owned(),
                    ),
                })
            })
            .collect();
        for e in &self.embedded {
            ops.push(PatchOperation::Replace(ReplaceOperation {
                path: pointer(&e.pointer),
                value: Value::String(e.rewritten.clone()),
            }));
        }
        if let Some(record) = record.filter(|_| !ops.is_empty()) {
            ops.push(annotation_op(object, record));
        }
        ops
    }
}

fn pointer(p: &str) -> PointerBuf {
    PointerBuf::parse(p).expect("walkers build valid pointers")
}

/// Adds (or merges into) the rewritten-images annotation. Earlier records are
/// kept so the annotation tells the object's whole history.
fn annotation_op(object: &Value, mut record: Map<String, Value>) -> PatchOperation {
    let metadata = object.get("metadata");
    let annotations = metadata.and_then(|m| m.get("annotations"));
    if let Some(previous) = annotations
        .and_then(|a| a.get(REWRITTEN_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Map<String, Value>>(s).ok())
    {
        for (k, v) in previous {
            record.entry(k).or_insert(v);
        }
    }
    let text = Value::String(Value::Object(record).to_string());
    let (path, value) = match (metadata, annotations) {
        (Some(Value::Object(_)), Some(Value::Object(_))) => (
            format!(
                "/metadata/annotations/{}",
                yaml::escape_token(REWRITTEN_ANNOTATION)
            ),
            text,
        ),
        (Some(Value::Object(_)), _) => (
            "/metadata/annotations".to_owned(),
            serde_json::json!({ REWRITTEN_ANNOTATION: text }),
        ),
        _ => (
            "/metadata".to_owned(),
            serde_json::json!({ "annotations": { REWRITTEN_ANNOTATION: text } }),
        ),
    };
    PatchOperation::Add(AddOperation {
        path: pointer(&path),
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
        let r = review(&pod, None, &Policy::default(), &list);
        assert_eq!(r.verdict, Verdict::Rewrite);
        let patched = apply(&pod, &r.patch(&pod));
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
            json!({"/spec/containers/0/image": {"from": format!("{REPO}@{BAD}"), "to": format!("{REPO}@{GOOD}")}})
        );
        let again = review(&patched, None, &Policy::default(), &list);
        assert_eq!(again.verdict, Verdict::Allow);
        assert!(again.patch(&patched).is_empty());
    }

    #[test]
    fn annotation_merges_with_earlier_records() {
        let earlier = json!({"/spec/containers/1/image": {"from": "a", "to": "b"}}).to_string();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"annotations": {REWRITTEN_ANNOTATION: earlier, "other": "x"}},
            "spec": {"containers": [{"name": "c", "image": format!("{REPO}:v1.21.0-15")}]}});
        let r = review(&pod, None, &Policy::default(), &allowlist());
        let patched = apply(&pod, &r.patch(&pod));
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
        let r = review(&sr, None, &Policy::default(), &allowlist());
        let patched = apply(&sr, &r.patch(&sr));
        assert!(patched["metadata"]["annotations"][REWRITTEN_ANNOTATION].is_string());
    }

    #[test]
    fn embedded_runtime_text_is_edited_in_place() {
        let text = format!(
            "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nspec:\n  containers:\n    - name: ovms\n      # the runtime\n      image: >-\n        {REPO}@{BAD}\n      args: ['--port=8001']\n"
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "servingruntimes-config"},
                        "data": {"default-config": text}});
        let r = review(&cm, None, &Policy::default(), &allowlist());
        assert_eq!(r.verdict, Verdict::Rewrite);
        let patched = apply(&cm, &r.patch(&cm));
        assert_eq!(patched["data"]["default-config"], text.replace(BAD, GOOD));
        assert!(
            review(&patched, None, &Policy::default(), &allowlist())
                .patch(&patched)
                .is_empty()
        );
    }

    #[test]
    fn updates_judge_only_new_or_changed_images() {
        let revoked = format!("{REPO}@{BAD}");
        let old = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "a", "image": revoked}]}});
        let mut new = old.clone();
        new["metadata"] = json!({"finalizers": []});
        let r = review(&new, Some(&old), &Policy::default(), &allowlist());
        assert!(r.images.is_empty());
        assert_eq!(r.verdict, Verdict::Allow);
        new["spec"]["containers"][0]["image"] = json!("quay.io/x/y:1");
        let r = review(&new, Some(&old), &Policy::default(), &allowlist());
        assert_eq!(r.verdict, Verdict::Deny);
    }

    #[test]
    fn enforce_and_audit_modes() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "c", "image": format!("{REPO}@{BAD}")}]}});
        let mut policy = Policy {
            mode: Mode::Enforce,
            ..Policy::default()
        };
        let r = review(&pod, None, &policy, &allowlist());
        assert_eq!(r.verdict, Verdict::Deny);
        assert!(r.patch(&pod).is_empty());
        assert!(r.images[0].message().starts_with("container \"c\": "));
        policy.mode = Mode::Audit;
        let r = review(&pod, None, &policy, &allowlist());
        assert_eq!(r.verdict, Verdict::Allow);
        assert!(r.patch(&pod).is_empty());
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
            let r = review(&object, None, &Policy::default(), &allowlist());
            let mut patched = object.clone();
            prop_assert!(json_patch::patch(&mut patched, &r.patch(&object)).is_ok());
        }

        #[test]
        fn rewrites_are_idempotent(images in prop::collection::vec(image_choice(), 1..8), mode in prop_oneof![Just(Mode::Rewrite), Just(Mode::Enforce), Just(Mode::Audit)]) {
            let containers: Vec<Value> = images.iter().enumerate().map(|(i, image)| json!({"name": format!("c{i}"), "image": image})).collect();
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}});
            let policy = Policy { mode, ..Policy::default() };
            let list = allowlist();
            let first = review(&pod, None, &policy, &list);
            let patched = apply(&pod, &first.patch(&pod));
            let second = review(&patched, None, &policy, &list);
            prop_assert_eq!(second.rewrites().count(), 0);
            prop_assert!(second.patch(&patched).is_empty());
            let denied = |r: &Review| r.denials().map(|i| i.site.pointer.clone()).collect::<Vec<_>>();
            prop_assert_eq!(denied(&first), denied(&second));
            prop_assert!(second.verdict <= first.verdict);
        }
    }

    #[test]
    fn malformed_sites_deny_with_their_reason() {
        let sr = json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime", "spec": {"containers": {"name": "x"}}});
        let r = review(&sr, None, &Policy::default(), &allowlist());
        assert_eq!(r.verdict, Verdict::Deny);
        assert_eq!(
            r.images[0].message(),
            "at /spec/containers: spec.containers must be a list of containers, found a mapping"
        );
    }
}
