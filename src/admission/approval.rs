//! An operator upgrade's approval answered (`POST /validate-approval`): an
//! UPDATE of an InstallPlan that flips `spec.approved` to `true` is judged
//! from the pre-flight's judgement on the plan as it was (the
//! [`JUDGED_ANNOTATION`] of `oldObject`), never from the cluster or a
//! registry, so every replica gives the same answer at once. No peer answers
//! the approval itself: they judge what is created after it, when the
//! stale objects already are.
//!
//! What blocks is what the upgrade breaks: objects it leaves on images the
//! new release does not promote, and digests it promotes that will not
//! pull. In `enforce` mode for InstallPlans the approval is denied, naming
//! them; in `rewrite` and `audit` it is allowed with a warning that says the
//! same. [`ACKNOWLEDGED_ANNOTATION`] (its value the person's reason) lets it
//! through, recorded in the audit annotations. A plan not judged yet, or
//! judged unreadably, is allowed with a warning: the webhook never blocks
//! for what it does not know.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::wire::{RequestIn, WholeIn};
use super::{Answer, BadReview, Response, encode};
use crate::judge::{ObjectVerdict, Operation};
use crate::policy::Mode;
use crate::text::{self, Cut};

/// The annotation a pre-flight writes on a pending InstallPlan: a
/// [`Judged`] as JSON.
pub const JUDGED_ANNOTATION: &str = "digest-gate.dev/preflight";
/// The annotation that approves a plan despite its findings; its value is
/// the reason, recorded.
pub const ACKNOWLEDGED_ANNOTATION: &str = "digest-gate.dev/approve-despite-findings";
/// The audit annotation an acknowledged approval is recorded under.
pub const ACKNOWLEDGED_AUDIT_KEY: &str = "approved-despite-findings";
/// How many objects and digests a judgement names; the rest are counted.
pub const MAX_NAMED: usize = 10;

/// What a pre-flight found of a pending plan, as it travels on the plan:
/// short, bounded, and the same for every replica and for `kubectl
/// describe installplan`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Judged {
    /// When the judgement was made (RFC 3339).
    pub judged_at: String,
    /// The CSVs approving the plan installs.
    pub targets: Vec<String>,
    #[serde(default)]
    pub stale_after_upgrade: usize,
    #[serde(default)]
    pub already_stale: usize,
    #[serde(default)]
    pub fixed_by_upgrade: usize,
    #[serde(default)]
    pub unpullable_after_upgrade: usize,
    #[serde(default)]
    pub unverifiable: usize,
    /// The objects left stale (`namespace/Kind/name`), then the digests that
    /// will not pull, up to [`MAX_NAMED`].
    #[serde(default)]
    pub named: Vec<String>,
    /// How many more there are than named.
    #[serde(default)]
    pub more: usize,
}

impl Judged {
    /// Whether approving breaks something.
    pub fn blocks(&self) -> bool {
        self.stale_after_upgrade > 0 || self.unpullable_after_upgrade > 0
    }

    /// Names `found` (objects, then digests) up to the bound.
    pub fn name(&mut self, found: impl IntoIterator<Item = String>) {
        for f in found {
            if self.named.len() < MAX_NAMED {
                self.named.push(f);
            } else {
                self.more += 1;
            }
        }
    }

    /// What approving does, in one clause: what it breaks, named.
    pub fn what_it_breaks(&self) -> String {
        match self.named.is_empty() {
            true => self.counted(),
            false => format!("{} ({})", self.counted(), self.named()),
        }
    }

    /// What it names, and how many more there are.
    fn named(&self) -> String {
        let more = match self.more {
            0 => String::new(),
            n => format!(", and {n} more"),
        };
        format!("{}{more}", self.named.join(", "))
    }

    /// What approving breaks, counted.
    fn counted(&self) -> String {
        self.parts().join(" and ")
    }

    /// What approving breaks, each kind counted on its own.
    fn parts(&self) -> Vec<String> {
        let mut parts = Vec::new();
        let n = self.stale_after_upgrade;
        if n > 0 {
            parts.push(format!(
                "leaves {n} object{} on unpromoted images",
                if n == 1 { "" } else { "s" }
            ));
        }
        let n = self.unpullable_after_upgrade;
        if n > 0 {
            parts.push(format!(
                "promotes {n} digest{} that will not pull",
                if n == 1 { "" } else { "s" }
            ));
        }
        parts
    }
}

/// Decodes the review of an InstallPlan and answers it: see the module.
pub fn answer_approval(body: &[u8], mode: Mode) -> Result<Answer, BadReview> {
    let request: RequestIn<WholeIn> = match super::decoded(body) {
        Ok(request) => request,
        Err(answered) => return *answered,
    };
    let old = request.old_object.as_ref().map(|o| &o.0);
    let response = match (old, request.object.as_ref().map(|o| &o.0)) {
        (Some(old), Some(new))
            if Operation::of(&request.operation) == Operation::Update && approves(old, new) =>
        {
            let plan = format!(
                "InstallPlan {}/{}",
                request.namespace.as_deref().unwrap_or_default(),
                request.name.as_deref().unwrap_or_default()
            );
            decide(&plan, judged(old), acknowledged(new), mode)
        }
        // Anything else an InstallPlan goes through is not an approval.
        _ => Response::allow(ObjectVerdict::Allow),
    };
    Ok(encode(&request, response))
}

/// Whether an update flips `spec.approved` to `true`.
fn approves(old: &Value, new: &Value) -> bool {
    let approved = |v: &Value| v.pointer("/spec/approved").and_then(Value::as_bool) == Some(true);
    !approved(old) && approved(new)
}

fn annotation<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object
        .pointer("/metadata/annotations")?
        .get(key)?
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// The judgement on the plan as it was: none, or why it cannot be read.
fn judged(old: &Value) -> Option<Result<Judged, String>> {
    annotation(old, JUDGED_ANNOTATION).map(|text| serde_json::from_str(text).map_err(|e| e.to_string()))
}

/// The reason given for approving despite findings.
fn acknowledged(new: &Value) -> Option<&str> {
    annotation(new, ACKNOWLEDGED_ANNOTATION)
}

fn decide(plan: &str, judged: Option<Result<Judged, String>>, ack: Option<&str>, mode: Mode) -> Response {
    let judged = match judged {
        None => {
            return warned(vec![
                format!("digest-gate has not judged {plan} yet"),
                format!(
                    "see what approving leaves stale: digest-gate preflight --installplan {}",
                    plan.trim_start_matches("InstallPlan ")
                ),
            ]);
        }
        Some(Err(why)) => {
            return warned(vec![
                format!("digest-gate cannot read {plan}'s {JUDGED_ANNOTATION} annotation: not judged"),
                why,
            ]);
        }
        Some(Ok(j)) => j,
    };
    let at = &judged.judged_at;
    if !judged.blocks() {
        return match judged.unverifiable {
            0 => Response::allow(ObjectVerdict::Allow),
            n => warned(vec![format!(
                "digest-gate: no registry answered for {n} digest(s) this upgrade promotes (judged {at})"
            )]),
        };
    }
    // Warnings are cut to a short line each: the count, each name, what to
    // do, one per line.
    let mut lines: Vec<String> = judged
        .parts()
        .iter()
        .enumerate()
        .map(|(i, part)| match i {
            0 => format!("digest-gate: approving {plan} {part}"),
            _ => format!("digest-gate: it also {part}"),
        })
        .collect();
    lines.extend(judged.named.iter().map(|n| format!("digest-gate: {n}")));
    if judged.more > 0 {
        lines.push(format!("digest-gate: and {} more", judged.more));
    }
    match (ack, mode) {
        (Some(reason), _) => {
            lines.push(format!("approved despite these findings (judged {at}): {reason}"));
            let mut out = warned(lines);
            out.audit = BTreeMap::from([(
                ACKNOWLEDGED_AUDIT_KEY.to_owned(),
                text::one_line_owned(
                    format!("{reason}; approving {}; judged {at}", judged.what_it_breaks()),
                    1024,
                    Cut::End,
                ),
            )]);
            out
        }
        (None, Mode::Enforce) => Response::refuse(
            403,
            "Forbidden",
            format!(
                "digest-gate: approving {plan} {} (judged {at}). Update them and wait for the next pre-flight, or approve it anyway with the annotation {ACKNOWLEDGED_ANNOTATION}=\"<your reason>\"",
                judged.what_it_breaks()
            ),
        ),
        (None, Mode::Rewrite | Mode::Audit) => {
            lines.push(format!("judged {at}: update them with the approval"));
            warned(lines)
        }
    }
}

/// Allowed, with these warnings.
fn warned(lines: Vec<String>) -> Response {
    let mut out = Response::allow(ObjectVerdict::Allow);
    out.warnings = lines.into_iter().map(fit).collect();
    out
}

fn fit(warning: String) -> String {
    text::one_line_owned(warning, super::MAX_WARNING_LEN, Cut::End)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const STALE: &str = "pf-models/ServingRuntime/ovms";

    fn judgement(stale: usize, unpullable: usize) -> Judged {
        let mut j = Judged {
            judged_at: "2026-12-07T13:00:00Z".into(),
            targets: vec!["rhods-operator.1.21.0".into()],
            stale_after_upgrade: stale,
            unpullable_after_upgrade: unpullable,
            ..Judged::default()
        };
        j.name((0..stale).map(|_| STALE.to_owned()));
        j
    }

    fn plan(approved: bool, annotations: Value) -> Value {
        json!({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "InstallPlan",
               "metadata": {"name": "install-x", "namespace": "ops", "annotations": annotations},
               "spec": {"approval": "Manual", "approved": approved,
                        "clusterServiceVersionNames": ["rhods-operator.1.21.0"]}})
    }

    fn review(old: Value, new: Value) -> Vec<u8> {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-1", "kind": {"group": "operators.coreos.com", "version": "v1alpha1", "kind": "InstallPlan"},
            "resource": {"group": "operators.coreos.com", "version": "v1alpha1", "resource": "installplans"},
            "name": "install-x", "namespace": "ops", "operation": "UPDATE",
            "userInfo": {"username": "admin"}, "object": new, "oldObject": old}})
        .to_string()
        .into_bytes()
    }

    fn answered(judged: Option<&Judged>, ack: Option<&str>, mode: Mode) -> Value {
        let mut annotations = serde_json::Map::new();
        if let Some(j) = judged {
            annotations.insert(JUDGED_ANNOTATION.into(), serde_json::to_string(j).unwrap().into());
        }
        let old = plan(false, Value::Object(annotations.clone()));
        if let Some(reason) = ack {
            annotations.insert(ACKNOWLEDGED_ANNOTATION.into(), reason.into());
        }
        let new = plan(true, Value::Object(annotations));
        let answer = answer_approval(&review(old, new), mode).unwrap();
        serde_json::from_slice::<Value>(&answer.body).unwrap()["response"].clone()
    }

    #[test]
    fn an_approval_that_breaks_something_is_denied_in_enforce_and_warned_of_otherwise() {
        let j = judgement(2, 1);
        let denied = answered(Some(&j), None, Mode::Enforce);
        assert_eq!(
            (&denied["allowed"], &denied["status"]["code"]),
            (&json!(false), &json!(403))
        );
        let message = denied["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("digest-gate: approving InstallPlan ops/install-x leaves 2 objects on unpromoted images and promotes 1 digest that will not pull (pf-models/ServingRuntime/ovms, pf-models/ServingRuntime/ovms) (judged 2026-12-07T13:00:00Z)"),
            "{message}"
        );
        assert!(
            message.ends_with(&format!("{ACKNOWLEDGED_ANNOTATION}=\"<your reason>\"")),
            "{message}"
        );
        for mode in [Mode::Rewrite, Mode::Audit] {
            let warned = answered(Some(&j), None, mode);
            assert_eq!(warned["allowed"], true);
            let warnings: Vec<&str> = warned["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            assert_eq!(
                warnings,
                [
                    "digest-gate: approving InstallPlan ops/install-x leaves 2 objects on unpromoted images",
                    "digest-gate: it also promotes 1 digest that will not pull",
                    "digest-gate: pf-models/ServingRuntime/ovms",
                    "digest-gate: pf-models/ServingRuntime/ovms",
                    "judged 2026-12-07T13:00:00Z: update them with the approval",
                ]
            );
        }
    }

    #[test]
    fn an_acknowledged_approval_goes_through_and_is_recorded() {
        let j = judgement(1, 0);
        let through = answered(
            Some(&j),
            Some("  the runtime is retired tomorrow "),
            Mode::Enforce,
        );
        assert_eq!(through["allowed"], true);
        let recorded = through["auditAnnotations"][ACKNOWLEDGED_AUDIT_KEY]
            .as_str()
            .unwrap();
        assert!(
            recorded.starts_with(
                "the runtime is retired tomorrow; approving leaves 1 object on unpromoted images (pf-models/"
            ),
            "{recorded}"
        );
        let last = through["warnings"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .as_str()
            .unwrap();
        assert!(
            last.starts_with("approved despite these findings (judged 2026-12-07T13:00:00Z): the runtime"),
            "{last}"
        );
    }

    #[test]
    fn what_is_not_known_never_blocks() {
        let unjudged = answered(None, None, Mode::Enforce);
        assert_eq!(unjudged["allowed"], true);
        assert!(
            unjudged["warnings"][0].as_str().unwrap()
                == "digest-gate has not judged InstallPlan ops/install-x yet"
        );
        // A judgement that breaks nothing: allowed, quietly.
        let fine = answered(Some(&judgement(0, 0)), None, Mode::Enforce);
        assert_eq!((&fine["allowed"], fine.get("warnings")), (&json!(true), None));
        // A garbled annotation is said, not obeyed.
        let mut annotations = serde_json::Map::new();
        annotations.insert(JUDGED_ANNOTATION.into(), "{not json".into());
        let old = plan(false, Value::Object(annotations.clone()));
        let new = plan(true, Value::Object(annotations));
        let answer = answer_approval(&review(old, new), Mode::Enforce).unwrap();
        let response = &serde_json::from_slice::<Value>(&answer.body).unwrap()["response"];
        assert_eq!(response["allowed"], true);
        assert!(
            response["warnings"][0]
                .as_str()
                .unwrap()
                .contains("cannot read InstallPlan ops/install-x's digest-gate.dev/preflight")
        );
    }

    #[test]
    fn only_a_flip_to_approved_is_an_approval() {
        let j = judgement(3, 0);
        let mut annotations = serde_json::Map::new();
        annotations.insert(
            JUDGED_ANNOTATION.into(),
            serde_json::to_string(&j).unwrap().into(),
        );
        let annotated = Value::Object(annotations);
        for (old, new) in [(false, false), (true, true), (true, false)] {
            let body = review(plan(old, annotated.clone()), plan(new, annotated.clone()));
            let answer = answer_approval(&body, Mode::Enforce).unwrap();
            assert!(answer.allowed, "{old} -> {new}");
        }
    }

    #[test]
    fn a_judgement_names_a_bounded_few() {
        let mut j = judgement(0, 0);
        j.name((0..25).map(|i| format!("ns/Pod/p{i}")));
        assert_eq!((j.named.len(), j.more), (MAX_NAMED, 15));
        j.stale_after_upgrade = 25;
        assert!(j.what_it_breaks().ends_with("ns/Pod/p9, and 15 more)"));
        // The annotation reads back as written.
        let text = serde_json::to_string(&j).unwrap();
        assert_eq!(serde_json::from_str::<Judged>(&text).unwrap(), j);
        assert!(text.contains("\"judgedAt\"") && text.contains("\"staleAfterUpgrade\":25"));
    }
}
