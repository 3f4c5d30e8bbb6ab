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
//! through, recorded in the audit annotations, when it is given in the
//! approving change: one set earlier, by anyone, does not count. A plan not
//! judged yet, or judged unreadably, is allowed with a warning: the webhook
//! never blocks for what it does not know.
//!
//! As an approval is answered from the judgement, only its writers (the
//! server's ServiceAccount, and whoever runs `preflight --annotate`:
//! [`Approvals::writers`]) may add, change or remove it; anyone else is
//! denied in enforce mode. What the plan says is read back bounded and
//! escaped ([`Judged::bounded`]): the approver's terminal shows what
//! digest-gate says, never what someone wrote on the plan.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::wire::{PlanIn, RequestIn};
use super::{Answer, BadReview, Response, encode};
use crate::judge::{ObjectVerdict, Operation};
use crate::policy::Mode;
use crate::text::{self, Cut};

/// The API group of InstallPlans (and every OLM kind digest-gate reads).
pub const OLM_GROUP: &str = "operators.coreos.com";
/// The annotation a pre-flight writes on a pending InstallPlan: a
/// [`Judged`] as JSON.
pub const JUDGED_ANNOTATION: &str = "digest-gate.dev/preflight";
/// The annotation that approves a plan despite its findings; its value is
/// the reason, recorded.
pub const ACKNOWLEDGED_ANNOTATION: &str = "digest-gate.dev/approve-despite-findings";
/// The audit annotation an acknowledged approval is recorded under.
pub const ACKNOWLEDGED_AUDIT_KEY: &str = "approved-despite-findings";
/// The audit annotation a judgement written by someone who may not is
/// recorded under, where it is not denied (rewrite and audit modes).
pub const JUDGEMENT_WRITTEN_AUDIT_KEY: &str = "judgement-written-by";
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

    /// The judgement as read from a plan, which anyone who may patch it
    /// could have written: every string on one line and bounded, at most
    /// [`MAX_NAMED`] targets and names (the rest counted), so that a
    /// denial, its warnings and the log line it makes stay short and
    /// cannot drive a terminal.
    pub fn bounded(mut self) -> Self {
        let line = |s: &mut String, max: usize| {
            *s = text::one_line_owned(std::mem::take(s), max, Cut::End);
        };
        line(&mut self.judged_at, 64);
        self.targets.truncate(MAX_NAMED);
        self.targets.iter_mut().for_each(|t| line(t, 256));
        let (named, over) = text::first(std::mem::take(&mut self.named), MAX_NAMED);
        self.named = named;
        self.named.iter_mut().for_each(|n| line(n, 256));
        self.more = self.more.saturating_add(over);
        self
    }

    /// Whether `other` finds what this one does, whenever each was made.
    pub fn finds_as(&self, other: &Judged) -> bool {
        let found = |j: &Judged| Judged {
            judged_at: String::new(),
            ..j.clone()
        };
        found(self) == found(other)
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

/// What an approval is answered by: the mode for InstallPlans, and who
/// may write the judgement.
#[derive(Debug, Clone, Copy)]
pub struct Approvals<'a> {
    pub mode: Mode,
    /// The usernames that may add, change or remove [`JUDGED_ANNOTATION`]
    /// (`--judgement-writers`): the server's own ServiceAccount, and whoever
    /// runs `preflight --annotate`. None: nobody.
    pub writers: &'a [String],
}

/// Decodes the review of an InstallPlan and answers it: see the module.
pub fn answer_approval(body: &[u8], rules: Approvals<'_>) -> Result<Answer, BadReview> {
    let unreadable = |why: String| Some(unreadable(&why, rules.mode));
    let request: RequestIn<PlanIn> = match super::decoded_or(body, unreadable) {
        Ok(request) => request,
        Err(answered) => return *answered,
    };
    let response = match super::misrouted(&request, (OLM_GROUP, "InstallPlan"), "/validate-approval") {
        Some(misrouted) => misrouted,
        None => respond(&request, rules),
    };
    Ok(encode(&request, response))
}

fn respond(request: &RequestIn<PlanIn>, rules: Approvals<'_>) -> Response {
    // Named only when said: before 1.28 every InstallPlan update comes here.
    let plan = || {
        let plan = format!(
            "InstallPlan {}/{}",
            request.namespace.as_deref().unwrap_or_default(),
            request.name.as_deref().unwrap_or_default()
        );
        text::one_line_owned(plan, 320, Cut::End)
    };
    let operation = Operation::of(&request.operation);
    let old = request.old_object.as_ref().map(|o| &o.0);
    let new = request.object.as_ref().map(|o| &o.0);
    let user = &request.user_info.username;
    if let Some(change) = Written::of(operation, old, new)
        && !rules.writers.iter().any(|w| w == user)
    {
        return written(&plan(), change, user, rules.mode);
    }
    match (old, new) {
        (Some(old), Some(new)) if operation == Operation::Update && approves(old, new) => {
            decide(&plan(), judged(old), Acknowledged::of(old, new), rules.mode)
        }
        // Anything else an InstallPlan goes through is not an approval.
        _ => Response::allow(ObjectVerdict::Allow),
    }
}

/// A review whose InstallPlan cannot be read: in enforce mode denied, as
/// it may be an approval nobody can judge; warned of otherwise.
fn unreadable(why: &str, mode: Mode) -> Response {
    let why = text::one_line(why, 300, Cut::End);
    let message =
        format!("digest-gate cannot read this InstallPlan review, so cannot tell what it approves: {why}");
    match mode {
        Mode::Enforce => Response::refuse(403, "Forbidden", message),
        Mode::Rewrite | Mode::Audit => warned(vec![message]),
    }
}

/// How a change touches [`JUDGED_ANNOTATION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
enum Written {
    Add,
    Change,
    Remove,
}

impl Written {
    /// What a CREATE or an UPDATE does to the judgement, if anything.
    fn of(operation: Operation, old: Option<&Value>, new: Option<&Value>) -> Option<Self> {
        fn raw(o: Option<&Value>) -> Option<&Value> {
            o?.pointer("/metadata/annotations")?.get(JUDGED_ANNOTATION)
        }
        match (operation, raw(old), raw(new)) {
            (Operation::Create, _, Some(_)) => Some(Self::Add),
            (Operation::Update, None, Some(_)) => Some(Self::Add),
            (Operation::Update, Some(_), None) => Some(Self::Remove),
            (Operation::Update, Some(a), Some(b)) if a != b => Some(Self::Change),
            _ => None,
        }
    }
}

/// The judgement written by someone who may not: denied in enforce mode
/// (an approval is answered from it), warned of and recorded otherwise.
fn written(plan: &str, change: Written, user: &str, mode: Mode) -> Response {
    let user = text::one_line(user, 256, Cut::End);
    let user = if user.is_empty() {
        "an unnamed user".into()
    } else {
        user
    };
    let verb: &'static str = change.into();
    let what = format!(
        "only digest-gate writes {plan}'s {JUDGED_ANNOTATION} annotation, the judgement its approval is answered from; {user} may not {verb} it"
    );
    match mode {
        Mode::Enforce => Response::refuse(
            403,
            "Forbidden",
            format!(
                "digest-gate: {what}. Leave it as it is: the next pre-flight writes it (a person who runs `digest-gate preflight --annotate` is named in the chart's audit.preflight.judgementWriters)"
            ),
        ),
        Mode::Rewrite | Mode::Audit => {
            let mut out = warned(vec![format!("digest-gate: {what} (denied in enforce mode)")]);
            out.audit = BTreeMap::from([(
                JUDGEMENT_WRITTEN_AUDIT_KEY.to_owned(),
                format!("{verb} by {user}"),
            )]);
            out
        }
    }
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

/// The judgement on the plan as it was, bounded (see [`Judged::bounded`]):
/// none, or why it cannot be read.
fn judged(old: &Value) -> Option<Result<Judged, String>> {
    annotation(old, JUDGED_ANNOTATION).map(|text| {
        serde_json::from_str::<Judged>(text)
            .map(Judged::bounded)
            // serde's messages quote what they could not read.
            .map_err(|e| text::one_line_owned(e.to_string(), 200, Cut::End))
    })
}

/// The reason given for approving despite findings, and whether it was
/// given with the approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acknowledged<'a> {
    None,
    /// Added or changed by the approving update: what counts.
    Given(&'a str),
    /// On the plan before the approval, unchanged: set by anyone, at any
    /// time, for whatever judgement stood then; it does not count.
    Earlier,
}

impl<'a> Acknowledged<'a> {
    fn of(old: &Value, new: &'a Value) -> Self {
        match (
            annotation(new, ACKNOWLEDGED_ANNOTATION),
            annotation(old, ACKNOWLEDGED_ANNOTATION),
        ) {
            (None, _) => Self::None,
            (Some(now), Some(before)) if now == before => Self::Earlier,
            (Some(now), _) => Self::Given(now),
        }
    }
}

fn decide(plan: &str, judged: Option<Result<Judged, String>>, ack: Acknowledged<'_>, mode: Mode) -> Response {
    let judged = match judged {
        Some(Ok(j)) => j,
        unknown => return not_judged(plan, unknown.and_then(Result::err)),
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
    let earlier = ack == Acknowledged::Earlier;
    match (ack, mode) {
        (Acknowledged::Given(reason), _) => {
            let reason = text::one_line(reason, 1024, Cut::End);
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
        (_, Mode::Enforce) => Response::refuse(
            403,
            "Forbidden",
            format!(
                "digest-gate: approving {plan} {} (judged {at}). Update them and wait for the next pre-flight, or approve it anyway with the annotation {ACKNOWLEDGED_ANNOTATION}=\"<your reason>\" in the same change{}",
                judged.what_it_breaks(),
                if earlier {
                    format!(" ({EARLIER})")
                } else {
                    String::new()
                }
            ),
        ),
        (_, Mode::Rewrite | Mode::Audit) => {
            lines.push(format!("judged {at}: update them with the approval"));
            if earlier {
                lines.push(format!("digest-gate: {EARLIER}"));
            }
            warned(lines)
        }
    }
}

/// An approval of a plan without a judgement (`None`), or with one that
/// cannot be read (why): allowed, said.
fn not_judged(plan: &str, unreadable: Option<String>) -> Response {
    match unreadable {
        None => warned(vec![
            format!("digest-gate has not judged {plan} yet"),
            format!(
                "see what approving leaves stale: digest-gate preflight --installplan {}",
                plan.trim_start_matches("InstallPlan ")
            ),
        ]),
        Some(why) => warned(vec![
            format!("digest-gate cannot read {plan}'s {JUDGED_ANNOTATION} annotation: not judged"),
            why,
        ]),
    }
}

/// Said of an acknowledgement set before the approval.
const EARLIER: &str =
    "the acknowledgement on the plan was set before this approval: it counts only when given with it";

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

    const WRITER: &str = "system:serviceaccount:digest-gate:digest-gate";

    fn rules(mode: Mode) -> Approvals<'static> {
        static WRITERS: std::sync::LazyLock<Vec<String>> =
            std::sync::LazyLock::new(|| vec![WRITER.to_owned()]);
        Approvals {
            mode,
            writers: &WRITERS,
        }
    }

    fn review(old: Value, new: Value) -> Vec<u8> {
        review_by("admin", "UPDATE", old, new)
    }

    fn review_by(user: &str, operation: &str, old: Value, new: Value) -> Vec<u8> {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-1", "kind": {"group": "operators.coreos.com", "version": "v1alpha1", "kind": "InstallPlan"},
            "resource": {"group": "operators.coreos.com", "version": "v1alpha1", "resource": "installplans"},
            "name": "install-x", "namespace": "ops", "operation": operation,
            "userInfo": {"username": user}, "object": new, "oldObject": old}})
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
        let answer = answer_approval(&review(old, new), rules(mode)).unwrap();
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
            message.ends_with(&format!(
                "{ACKNOWLEDGED_ANNOTATION}=\"<your reason>\" in the same change"
            )),
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
        let answer = answer_approval(&review(old, new), rules(Mode::Enforce)).unwrap();
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
            let answer = answer_approval(&body, rules(Mode::Enforce)).unwrap();
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

    fn response(body: &[u8], mode: Mode) -> Value {
        let answer = answer_approval(body, rules(mode)).unwrap();
        serde_json::from_slice::<Value>(&answer.body).unwrap()["response"].clone()
    }

    fn annotated(pairs: &[(&str, &str)]) -> Value {
        Value::Object(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).into()))
                .collect(),
        )
    }

    #[test]
    fn only_the_writers_add_change_or_remove_the_judgement() {
        let blocking = serde_json::to_string(&judgement(1, 0)).unwrap();
        let clean = serde_json::to_string(&judgement(0, 0)).unwrap();
        let with = |j: &str| plan(false, annotated(&[(JUDGED_ANNOTATION, j)]));
        let without = plan(false, json!({}));
        let cases = [
            ("UPDATE", with(&blocking), with(&clean), "change"),
            ("UPDATE", with(&blocking), without.clone(), "remove"),
            ("UPDATE", without.clone(), with(&clean), "add"),
            ("CREATE", Value::Null, with(&clean), "add"),
        ];
        for (operation, old, new, verb) in cases {
            let by_admin = review_by("admin", operation, old.clone(), new.clone());
            let denied = response(&by_admin, Mode::Enforce);
            assert_eq!(denied["allowed"], false, "{operation} {verb}");
            let message = denied["status"]["message"].as_str().unwrap();
            assert!(
                message.starts_with(&format!(
                    "digest-gate: only digest-gate writes InstallPlan ops/install-x's {JUDGED_ANNOTATION} annotation, the judgement its approval is answered from; admin may not {verb} it."
                )),
                "{message}"
            );
            // Warned of and recorded where nothing is denied.
            let warned = response(&by_admin, Mode::Audit);
            assert_eq!(warned["allowed"], true);
            assert_eq!(
                warned["auditAnnotations"][JUDGEMENT_WRITTEN_AUDIT_KEY],
                format!("{verb} by admin")
            );
            // The server's own account writes it.
            let by_writer = review_by(WRITER, operation, old, new);
            assert_eq!(
                response(&by_writer, Mode::Enforce)["allowed"],
                true,
                "{operation} {verb}"
            );
        }
        // Anything else about the plan is anyone's to change.
        let relabelled = plan(false, annotated(&[(JUDGED_ANNOTATION, &blocking), ("team", "b")]));
        let body = review_by("admin", "UPDATE", with(&blocking), relabelled);
        assert_eq!(response(&body, Mode::Enforce)["allowed"], true);
    }

    #[test]
    fn an_acknowledgement_counts_only_in_the_approving_change() {
        let j = serde_json::to_string(&judgement(1, 0)).unwrap();
        let before = annotated(&[(JUDGED_ANNOTATION, &j), (ACKNOWLEDGED_ANNOTATION, "old reason")]);
        let body = review(plan(false, before.clone()), plan(true, before));
        let denied = response(&body, Mode::Enforce);
        assert_eq!(denied["allowed"], false);
        let message = denied["status"]["message"].as_str().unwrap();
        assert!(
            message.ends_with(&format!("in the same change ({EARLIER})")),
            "{message}"
        );
        let warned = response(&body, Mode::Rewrite);
        assert_eq!(warned["allowed"], true);
        assert_eq!(warned.get("auditAnnotations"), None);
        assert_eq!(
            warned["warnings"].as_array().unwrap().last().unwrap(),
            &json!(text::one_line_owned(
                format!("digest-gate: {EARLIER}"),
                crate::admission::MAX_WARNING_LEN,
                Cut::End
            ))
        );
        // A new reason given with the approval is the one recorded.
        let old = plan(
            false,
            annotated(&[(JUDGED_ANNOTATION, &j), (ACKNOWLEDGED_ANNOTATION, "old reason")]),
        );
        let new = plan(
            true,
            annotated(&[
                (JUDGED_ANNOTATION, &j),
                (ACKNOWLEDGED_ANNOTATION, "retired today"),
            ]),
        );
        let through = response(&review(old, new), Mode::Enforce);
        assert_eq!(through["allowed"], true);
        assert!(
            through["auditAnnotations"][ACKNOWLEDGED_AUDIT_KEY]
                .as_str()
                .unwrap()
                .starts_with("retired today;")
        );
    }

    #[test]
    fn what_the_plan_says_is_escaped_and_bounded() {
        // A judgement as anyone who may patch the plan could have written it
        // before the guard: terminal escapes, 25,000 names.
        let mut j = judgement(25_000, 0);
        j.judged_at = "\u{1b}[2K\r\u{1b}[32minstallplan patched\u{1b}[0m".into();
        (j.named, j.more) = ((0..25_000).map(|i| format!("ns/Pod/p{i}\u{7}")).collect(), 0);
        let text = serde_json::to_string(&j).unwrap();
        let on = annotated(&[(JUDGED_ANNOTATION, &text)]);
        let body = review(plan(false, on.clone()), plan(true, on));
        let denied = response(&body, Mode::Enforce);
        let message = denied["status"]["message"].as_str().unwrap();
        assert!(!message.contains(char::is_control), "{message:?}");
        assert!(message.contains("(judged \\u{1b}[2K\\r"), "{message}");
        assert!(
            message.contains(&format!(", and {} more)", 25_000 - MAX_NAMED)),
            "{message}"
        );
        assert!(message.len() < 4096, "{}", message.len());
        let warned = response(&body, Mode::Rewrite);
        let warnings = warned["warnings"].as_array().unwrap();
        assert!(warnings.len() <= MAX_NAMED + 4, "{}", warnings.len());
        assert!(
            warnings
                .iter()
                .all(|w| !w.as_str().unwrap().contains(char::is_control))
        );
    }

    #[test]
    fn what_is_not_an_approval_review_is_still_answered() {
        // managedFields nested past serde_json's depth: skipped, not read.
        let mut deep = json!("leaf");
        for _ in 0..200 {
            deep = json!({"f:x": deep});
        }
        let j = serde_json::to_string(&judgement(1, 0)).unwrap();
        let on = annotated(&[(JUDGED_ANNOTATION, &j)]);
        let mut new = plan(true, on.clone());
        new["metadata"]["managedFields"] = json!([{"manager": "kubectl", "fieldsV1": deep.clone()}]);
        // Denied by its uid: what the apiserver matches an answer by.
        let denied_message = |body: &[u8]| {
            let denied = response(body, Mode::Enforce);
            assert_eq!(
                (&denied["allowed"], &denied["uid"]),
                (&json!(false), &json!("u-1"))
            );
            denied["status"]["message"].as_str().unwrap().to_owned()
        };
        let message = denied_message(&review(plan(false, on.clone()), new));
        assert!(message.contains("leaves 1 object"), "{message}");
        // Nesting in what is read cannot be read: denied in enforce mode,
        // with why; never a 400 an Ignore entry admits.
        let mut garbled = plan(true, on.clone());
        garbled["metadata"]["annotations"]["x"] = deep;
        let body = review(plan(false, on), garbled);
        let message = denied_message(&body);
        assert!(
            message.starts_with("digest-gate cannot read this InstallPlan review"),
            "{message}"
        );
        assert_eq!(response(&body, Mode::Audit)["allowed"], true);
        // Another kind is not judged as if it were a plan.
        let mut pod: Value = serde_json::from_slice(&review(json!({}), json!({"kind": "Pod"}))).unwrap();
        pod["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
        let answered = response(pod.to_string().as_bytes(), Mode::Enforce);
        assert_eq!(answered["allowed"], true);
        assert_eq!(
            answered["warnings"][0],
            "digest-gate: /validate-approval judges InstallPlans only; this Pod was not judged: fix the webhook configuration"
        );
    }
}
