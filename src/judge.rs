//! Judging one object: walk its image sites, decide each against the policy,
//! and return one typed [`Judgement`]: per image its decision, [`ImageVerdict`],
//! reason code and message, and the fix that puts it on its promoted digest
//! ([`Judgement::fix_ops`]); for the object its [`ObjectVerdict`]. Nothing
//! here renders: `admission` words warnings and builds the patch and its
//! record, `check` edits files, `report` writes lines.
//!
//! Applying the fixes and judging the result again yields no further change:
//! every rewrite target is a promoted digest.

use std::borrow::Cow;
use std::collections::HashSet;

use json_patch::jsonptr::{Pointer, PointerBuf};
use json_patch::{PatchOperation, ReplaceOperation};
use serde_json::Value;

use crate::allowlist::Allowlist;
use crate::edit::Edit;
use crate::objects::{self, Embedded, Site, Walk};
use crate::policy::{Decision, Denial, Finding, Mode, Policy, PromotedBy, Reason, Verdict};
use crate::published::Published;
use crate::yaml::{self, Offsets};

vocabulary! {
    "lowercase";
    /// What happens to one image, as reports and the images metric name it:
    /// the admission [`Verdict`], with exemptions told apart from other allows.
    /// The payload (the target, the pattern, the reference to use) stays in the
    /// [`Decision`]. Its names are derived once, for reports, serde and metrics.
    pub enum ImageVerdict {
        Allow,
        Exempt,
        Rewrite,
        Deny,
    }
}

impl ImageVerdict {
    /// The admission verdict: an exemption is an allow.
    pub fn admission(self) -> Verdict {
        match self {
            Self::Allow | Self::Exempt => Verdict::Allow,
            Self::Rewrite => Verdict::Rewrite,
            Self::Deny => Verdict::Deny,
        }
    }
}

vocabulary! {
    "lowercase";
    /// What happens to a whole object.
    #[derive(PartialOrd, Ord)]
    pub enum ObjectVerdict {
        /// A kind digest-gate does not read images of.
        Skipped,
        Allow,
        Rewrite,
        Deny,
    }
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
    pub fn verdict(&self) -> ImageVerdict {
        match (self.decision.verdict, &self.decision.finding) {
            (_, Finding::Exempt { .. }) => ImageVerdict::Exempt,
            (Verdict::Allow, _) => ImageVerdict::Allow,
            (Verdict::Rewrite, _) => ImageVerdict::Rewrite,
            (Verdict::Deny, _) => ImageVerdict::Deny,
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

    /// The reference the workload will run, as a canonical repository and
    /// a digest: the rewrite target for a rewrite (or for the denial of one
    /// whose target cannot be pulled), the image as written when allowed.
    /// `None` for denials and for images pinned by tag only.
    pub fn will_run(&self, allowlist: &Allowlist) -> Option<crate::reference::Pinned> {
        let reference = match &self.decision.finding {
            Finding::Rewrite { to, .. } | Finding::Deny(Denial::PromotedUnpullable { to, .. }) => to.as_str(),
            Finding::Promoted
            | Finding::PromotedPlatform { .. }
            | Finding::Exempt { .. }
            | Finding::UnlistedAllowed { .. } => self.site.image.as_deref().ok()?,
            Finding::Deny(_) => return None,
        };
        let r = crate::reference::parse(reference).ok()?;
        let repository = r.canonical_repository(allowlist.short_name_registry())?;
        Some(crate::reference::Pinned {
            repository: repository.into_owned(),
            digest: r.digest()?.to_owned(),
        })
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
}

/// Judges `object` (with its previous version on UPDATE) by its own kind.
pub fn judge(object: &Value, old: Option<&Value>, policy: &Policy, allowlist: &Allowlist) -> Judgement {
    judge_as(
        Subject::of(object, old),
        Rules {
            policy,
            allowlist,
            published: None,
        },
    )
}

/// What is judged: an object read as `group`/`kind` (an admission request
/// names them; a list item takes its list's), and on UPDATE its previous
/// version.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub object: &'a Value,
    pub old: Option<&'a Value>,
}

impl<'a> Subject<'a> {
    /// `object` read as its own kind (with its previous version on UPDATE).
    pub fn of(object: &'a Value, old: Option<&'a Value>) -> Self {
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
        let group = objects::group_of(object.get("apiVersion").and_then(Value::as_str).unwrap_or(""));
        Self {
            group,
            kind,
            object,
            old,
        }
    }
}

/// What a review of `operation` asks of the judge. The webhook answers by
/// it and `check` reads a saved AdmissionReview by it, so the two cannot
/// judge a review differently.
#[derive(Debug, PartialEq)]
pub enum Asked<'a> {
    /// Judge `object`; on UPDATE with the object before it, so that only
    /// images new or changed are judged.
    Judge {
        object: &'a Value,
        old: Option<&'a Value>,
    },
    /// Allowed without judging.
    Unjudged(Unjudged),
    /// Not a review digest-gate can answer: why.
    Unanswerable(String),
}

/// Why a review is allowed without judging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unjudged {
    /// DELETE and CONNECT carry no image to promote.
    Operation,
    /// The object is being finalized (`deletionTimestamp` set): removing a
    /// finalizer must never be blocked by a revoked digest.
    Finalizing,
}

/// What a review asks to do, as the apiserver names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation<'a> {
    Create,
    Update,
    Delete,
    Connect,
    /// A name the contract does not have.
    Unknown(&'a str),
}

impl<'a> Operation<'a> {
    /// The operation `wire` names (`CREATE`, `UPDATE`, …).
    pub fn of(wire: &'a str) -> Self {
        match wire {
            "CREATE" => Self::Create,
            "UPDATE" => Self::Update,
            "DELETE" => Self::Delete,
            "CONNECT" => Self::Connect,
            other => Self::Unknown(other),
        }
    }

    /// Its wire name.
    pub fn as_str(self) -> &'a str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
            Self::Unknown(other) => other,
        }
    }
}

/// What a review of `operation` on `object` (and `old`) asks.
pub fn asked<'a>(operation: Operation<'_>, object: Option<&'a Value>, old: Option<&'a Value>) -> Asked<'a> {
    use Operation::{Connect, Create, Delete, Unknown, Update};
    match (operation, object) {
        (Create | Update, Some(Value::Object(o)))
            if o.get("metadata")
                .and_then(|m| m.get("deletionTimestamp"))
                .is_some_and(|t| !t.is_null()) =>
        {
            Asked::Unjudged(Unjudged::Finalizing)
        }
        (Create | Update, Some(object @ Value::Object(_))) => Asked::Judge {
            object,
            old: old.filter(|_| operation == Update),
        },
        (Create | Update, Some(other)) => Asked::Unanswerable(format!(
            "request.object must be a JSON object, found {}",
            crate::yaml::type_name(other)
        )),
        (Create | Update, None) => Asked::Unanswerable(format!(
            "a {} review must carry request.object",
            operation.as_str()
        )),
        (Delete | Connect, _) => Asked::Unjudged(Unjudged::Operation),
        (Unknown(other), _) => Asked::Unanswerable(format!(
            "operation '{other}' is not one digest-gate knows (CREATE, UPDATE, DELETE, CONNECT)"
        )),
    }
}

/// What it is judged by.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub policy: &'a Policy,
    pub allowlist: &'a Allowlist,
    /// What registries said of promoted digests, when known (`check
    /// --registry`): a rewrite to one that cannot be pulled is denied.
    pub published: Option<&'a Published>,
}

/// Judges `subject` by `rules`: each image decided, the fixes found.
/// Nothing is rendered: the admission words warnings and patches, the
/// report its lines.
pub fn judge_as(subject: Subject<'_>, rules: Rules<'_>) -> Judgement {
    let Subject {
        group,
        kind,
        object,
        old,
    } = subject;
    let Rules {
        policy,
        allowlist,
        published,
    } = rules;
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
        ..
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
                Ok(image) => policy.decide_with(kind, image, allowlist, published),
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
    Judgement {
        kind: kind.to_owned(),
        mode,
        images,
        verdict,
        embedded,
    }
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
        match crate::edit::apply(&source.text, edits.clone()) {
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
}

fn replace(pointer: &Pointer, value: String) -> PatchOperation {
    PatchOperation::Replace(ReplaceOperation {
        path: pointer.to_buf(),
        value: Value::String(value),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::testing::{BAD, REPO};

    fn allowlist() -> Allowlist {
        crate::testing::incident_allowlist()
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
    fn malformed_sites_deny_with_their_reason() {
        let sr = json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime", "spec": {"containers": {"name": "x"}}});
        let r = judge(&sr, None, &Policy::default(), &allowlist());
        assert_eq!(r.verdict, ObjectVerdict::Deny);
        assert_eq!(
            r.images[0].message(),
            "at /spec/containers: spec.containers must be a list of containers, found a mapping"
        );
    }
}
