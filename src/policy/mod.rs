//! Decisions: what happens to one image, given the allowlist and the mode.
//!
//! [`Policy::decide`] first finds out what the image *is* (promoted, exempt,
//! rewritable to a promoted digest, or not acceptable: a [`Finding`]), then the
//! mode turns that into a [`Verdict`]. Every denial carries what the developer
//! needs to fix it: the promoted reference to use, or the candidates.

mod target;
mod wording;

pub use wording::audit_marker;

use std::collections::HashMap;
use std::sync::Arc;

use crate::allowlist::{Allowlist, Candidates, CatalogOptions, Exemption, Promoted, Provenance};
use crate::published::{Published, State};
use crate::reference::{self, Placeholder, ReferenceError};
pub use target::{default_target, newest_release};
use target::{listed, unpullable};
use wording::{placeholder_suggestions, suggestions};

/// How non-compliant images are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum Mode {
    /// Rewrite to the promoted digest where one is known; deny the rest.
    Rewrite,
    /// Deny everything `rewrite` would rewrite, naming the reference to use.
    Enforce,
    /// Allow everything; report what would have happened.
    Audit,
}

impl Mode {
    /// The mode's name as written on the command line.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What to do with images whose repository the allowlist does not list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Unlisted {
    Deny,
    Allow,
}

vocabulary! {
    "lowercase";
    /// What admission does with an image; the order is severity. Its names
    /// (`allow`, `rewrite`, `deny`) are derived once, for reports, serde and
    /// metrics alike.
    #[derive(PartialOrd, Ord)]
    pub enum Verdict {
        Allow,
        Rewrite,
        Deny,
    }
}

impl Verdict {
    /// Lower-case name, as reports and metrics use it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

vocabulary! {
    "snake_case";
    /// Why an image got its outcome, as a stable code: the `reason` metrics
    /// label and what machine-readable reports carry. A closed set, so a forged
    /// review cannot grow the label space.
    #[derive(PartialOrd, Ord)]
    pub enum Reason {
        Promoted,
        PromotedPlatform,
        Exempt,
        UnlistedAllowed,
        TagOnly,
        DigestNotPromoted,
        Malformed,
        Invalid,
        Placeholder,
        ShortName,
        Unlisted,
        UnknownTag,
        NoTagOrDigest,
        CannotRewrite,
        // Last, so that SARIF's rule indexes of the others stay as they were.
        PromotedUnpullable,
    }
}

impl Reason {
    /// The stable code, e.g. `digest_not_promoted`.
    pub fn label(self) -> &'static str {
        self.into()
    }

    /// Whether an image with this reason needs a change (allowed images'
    /// reasons do not).
    pub fn is_finding(self) -> bool {
        !matches!(
            self,
            Self::Promoted | Self::PromotedPlatform | Self::Exempt | Self::UnlistedAllowed
        )
    }
}

/// Why an image would be rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// It names a tag only; tags move, digests do not.
    TagOnly { tag: String },
    /// Its digest was never promoted.
    UnpromotedDigest { digest: String },
}

/// How the rewrite target was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetRule {
    /// The digest published under the image's tag.
    Tag,
    /// The repository's explicit `rewriteTo`.
    RewriteTo,
    /// The repository's only promoted digest.
    SoleDigest,
    /// The digest of the newest release of the one operator whose releases
    /// promote all of the repository's digests (an upgrade in progress).
    NewestRelease,
}

/// Who promoted a digest: the source object and the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromotedBy {
    pub provenance: Arc<Provenance>,
    pub line: u32,
}

impl PromotedBy {
    /// The newest source promoting `p`, named in messages.
    pub fn of(candidates: &Candidates<'_>, p: Promoted<'_>) -> Option<Self> {
        let (provenance, line) = candidates.newest_promotion(p.digest())?;
        Some(Self {
            provenance: provenance.clone(),
            line,
        })
    }

    /// `ClusterServiceVersion rhods-operator.1.21.0 (allowlists/rhods.yaml:41)`
    pub fn describe(&self) -> String {
        format!(
            "{} ({}:{})",
            self.provenance.origin, self.provenance.source, self.line
        )
    }
}

/// Why an image cannot be admitted as it is, and what to use instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// The object is malformed where an image should be.
    Malformed { reason: String },
    /// Not an image reference at all.
    Invalid { error: ReferenceError },
    /// A placeholder never substituted (`$(image)`, `ovms-1:replace`), with
    /// what the allowlist promotes under its name, when it has one.
    Placeholder {
        placeholder: Placeholder,
        suggestions: Vec<String>,
    },
    /// No registry domain (`nginx`, `ovms-1:replace`).
    ShortName { suggestions: Vec<String> },
    /// The repository is not in the allowlist.
    Unlisted {
        repository: String,
        suggestions: Vec<String>,
    },
    /// A tag the allowlist does not know.
    UnknownTag { tag: String, candidates: Vec<String> },
    /// Neither tag nor digest: it would pull `:latest`.
    NoTagOrDigest { candidates: Vec<String> },
    /// An unpromoted digest with no single promoted digest to rewrite to.
    DigestNotPromoted { digest: String, candidates: Vec<String> },
    /// A rewrite was due, but its target is known not to be pullable: a
    /// rewrite would make the incident, so it is denied (never a fallback
    /// to an older promoted digest, which could undo a security fix).
    PromotedUnpullable {
        to: String,
        state: State,
        detail: String,
        by: Option<PromotedBy>,
    },
    /// A rewrite was due but cannot be applied in place.
    CannotRewrite { to: String, why: String },
}

/// What an image is, before the mode says what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    Promoted,
    /// The image of a promoted index for one platform (the index's
    /// `platforms` in the allowlist).
    PromotedPlatform {
        /// The index, as a reference to use instead where one image serves
        /// every platform.
        index: String,
        platform: String,
        by: Option<PromotedBy>,
    },
    Exempt {
        pattern: String,
    },
    UnlistedAllowed {
        repository: String,
    },
    Rewrite {
        to: String,
        trigger: Trigger,
        rule: TargetRule,
        /// The newest source promoting the target.
        by: Option<PromotedBy>,
    },
    Deny(Denial),
}

/// The decision for one image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What the admission does.
    pub verdict: Verdict,
    pub finding: Finding,
    pub mode: Mode,
}

/// An allowlist that promotes no repository, under a policy that would
/// deny every listed image with it: almost always a ConfigMap emptied by
/// mistake or the wrong file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the allowlist promotes no repository, so every image would be denied (with --mode audit or --unlisted allow it is only reported)"
)]
pub struct PromotesNothing;

/// Decision settings: the mode, per-kind overrides, and unlisted handling.
#[derive(Debug, Clone)]
pub struct Policy {
    pub mode: Mode,
    /// Kind (case-insensitive) → mode, e.g. enforce ServingRuntimes managed
    /// by GitOps while rewriting Pods.
    pub kind_modes: HashMap<String, Mode>,
    pub unlisted: Unlisted,
    /// Exemptions from the command line, on top of the allowlist's own.
    pub exemptions: Vec<Exemption>,
    /// The ConfigMaps judged, by name; empty: every one.
    pub configmap_names: Vec<String>,
    /// Which packages of a file-based catalog promote, and which channel
    /// orders their releases (`--catalog-package`, `--catalog-channel`).
    pub catalog: CatalogOptions,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            mode: Mode::Rewrite,
            kind_modes: HashMap::new(),
            unlisted: Unlisted::Deny,
            exemptions: Vec::new(),
            configmap_names: Vec::new(),
            catalog: CatalogOptions::default(),
        }
    }
}

// === impl Policy ===

impl Policy {
    /// The mode for objects of `kind`.
    pub fn mode_for(&self, kind: &str) -> Mode {
        if self.kind_modes.is_empty() {
            return self.mode;
        }
        self.kind_modes
            .get(&kind.to_ascii_lowercase())
            .copied()
            .unwrap_or(self.mode)
    }

    /// Whether the ConfigMap `name` is judged.
    pub fn judges_configmap(&self, name: &str) -> bool {
        self.configmap_names.is_empty() || self.configmap_names.iter().any(|n| n == name)
    }

    /// Whether any kind can be denied (some mode other than audit).
    pub fn can_deny(&self) -> bool {
        self.mode != Mode::Audit || self.kind_modes.values().any(|m| *m != Mode::Audit)
    }

    /// Whether `allowlist` can be judged by: one that promotes no
    /// repository is refused where it would deny every listed image (the
    /// same words in `check`, `audit` and `serve`), and elsewhere (audit
    /// mode, `--unlisted allow`) worth a warning, returned. `Ok(None)`:
    /// it promotes something.
    pub fn judges_by(&self, allowlist: &Allowlist) -> Result<Option<&'static str>, PromotesNothing> {
        if allowlist.repository_count() > 0 {
            return Ok(None);
        }
        match (self.unlisted, self.can_deny()) {
            (Unlisted::Deny, true) => Err(PromotesNothing),
            (Unlisted::Deny, false) => Ok(Some(
                "the allowlist promotes no repository: every image is reported as unlisted (audit mode denies nothing)",
            )),
            (Unlisted::Allow, _) => Ok(Some(
                "the allowlist promotes no repository: every image is allowed as unlisted (--unlisted allow)",
            )),
        }
    }

    /// Sets the mode of `kind`.
    pub fn set_kind_mode(&mut self, kind: &str, mode: Mode) {
        self.kind_modes.insert(kind.to_ascii_lowercase(), mode);
    }

    /// Decides one image of an object of `kind`.
    pub fn decide(&self, kind: &str, image: &str, allowlist: &Allowlist) -> Decision {
        self.decide_with(kind, image, allowlist, None)
    }

    /// [`Self::decide`], knowing what registries said of promoted digests:
    /// a rewrite to one that cannot be pulled is denied instead.
    pub fn decide_with(
        &self,
        kind: &str,
        image: &str,
        allowlist: &Allowlist,
        published: Option<&Published>,
    ) -> Decision {
        Decision::new(self.mode_for(kind), self.find_with(image, allowlist, published))
    }

    /// What the image is, independent of the mode.
    pub fn find(&self, image: &str, allowlist: &Allowlist) -> Finding {
        self.find_with(image, allowlist, None)
    }

    /// [`Self::find`], knowing what registries said of promoted digests.
    pub fn find_with(&self, image: &str, allowlist: &Allowlist, published: Option<&Published>) -> Finding {
        let r = match reference::parse(image) {
            Ok(r) => r,
            Err(ReferenceError::Placeholder(placeholder)) => {
                return Finding::Deny(Denial::Placeholder {
                    placeholder,
                    suggestions: placeholder_suggestions(image, placeholder, allowlist),
                });
            }
            Err(error) => return Finding::Deny(Denial::Invalid { error }),
        };
        let Some(repository) = r.canonical_repository(allowlist.short_name_registry()) else {
            // The same path on a listed registry (or Docker Hub's
            // `library/`) is what the author meant to pull.
            let path = r.name();
            return Finding::Deny(Denial::ShortName {
                suggestions: suggestions(&r, allowlist, |listed| {
                    listed
                        .split_once('/')
                        .is_some_and(|(_, p)| p == path || p.strip_prefix("library/") == Some(path))
                }),
            });
        };
        if allowlist.has_exemptions() || !self.exemptions.is_empty() {
            let exempt = allowlist.exemption(&repository, r.tag(), r.digest()).or_else(|| {
                self.exemptions
                    .iter()
                    .find(|e| e.pattern.matches(&repository, r.tag(), r.digest()))
            });
            if let Some(e) = exempt {
                return Finding::Exempt {
                    pattern: e.pattern.to_string(),
                };
            }
        }
        let candidates = allowlist.candidates(&repository);
        if candidates.is_empty() {
            return match self.unlisted {
                Unlisted::Allow => Finding::UnlistedAllowed {
                    repository: repository.into_owned(),
                },
                Unlisted::Deny => {
                    // Only a near spelling in the same registry and
                    // organisation: `quay.io/modh/vllm` is another image
                    // than `quay.io/opendatahub/vllm`, not a typo of it.
                    let parent = repository.rsplit_once('/').map(|(p, _)| p);
                    let suggestions = suggestions(&r, allowlist, |listed| {
                        listed != repository && listed.rsplit_once('/').map(|(p, _)| p) == parent
                    });
                    Finding::Deny(Denial::Unlisted {
                        repository: repository.into_owned(),
                        suggestions,
                    })
                }
            };
        }
        let finding = listed(&r, &candidates);
        let known = match (&finding, published) {
            (Finding::Rewrite { to, .. }, Some(published)) => unpullable(published, &repository, to),
            _ => None,
        };
        match (finding, known) {
            (Finding::Rewrite { to, by, .. }, Some(known)) => Finding::Deny(Denial::PromotedUnpullable {
                to,
                state: known.state,
                detail: known.detail.clone(),
                by,
            }),
            (finding, _) => finding,
        }
    }
}

// === impl Decision ===

impl Decision {
    /// Applies `mode` to a finding.
    pub fn new(mode: Mode, finding: Finding) -> Self {
        let natural = finding.verdict();
        let verdict = match (mode, natural) {
            (Mode::Audit, _) => Verdict::Allow,
            (Mode::Enforce, Verdict::Rewrite) => Verdict::Deny,
            (_, v) => v,
        };
        Self {
            verdict,
            finding,
            mode,
        }
    }

    /// A decision for a malformed site.
    pub fn malformed(mode: Mode, reason: String) -> Self {
        Self::new(mode, Finding::Deny(Denial::Malformed { reason }))
    }

    /// The verdict rewrite mode would reach; what audit mode reports.
    pub fn would_be(&self) -> Verdict {
        self.finding.verdict()
    }

    /// Whether `image` is exempt.
    pub fn is_exempt(&self) -> bool {
        matches!(self.finding, Finding::Exempt { .. })
    }

    /// Why: the finding's stable code (whatever the mode made of it).
    pub fn reason(&self) -> Reason {
        match &self.finding {
            Finding::Promoted => Reason::Promoted,
            Finding::PromotedPlatform { .. } => Reason::PromotedPlatform,
            Finding::Exempt { .. } => Reason::Exempt,
            Finding::UnlistedAllowed { .. } => Reason::UnlistedAllowed,
            Finding::Rewrite {
                trigger: Trigger::TagOnly { .. },
                ..
            } => Reason::TagOnly,
            Finding::Rewrite { .. } => Reason::DigestNotPromoted,
            Finding::Deny(d) => d.reason(),
        }
    }

    /// The promoted reference this image should be, when one is known.
    pub fn rewrite_to(&self) -> Option<&str> {
        self.finding.rewrite_to()
    }
}

// === impl Finding ===

impl Finding {
    /// The promoted reference rewrite mode would write, when one is known.
    pub fn rewrite_to(&self) -> Option<&str> {
        match self {
            Self::Rewrite { to, .. } => Some(to),
            _ => None,
        }
    }

    /// The verdict in rewrite mode.
    pub fn verdict(&self) -> Verdict {
        match self {
            Self::Promoted
            | Self::PromotedPlatform { .. }
            | Self::Exempt { .. }
            | Self::UnlistedAllowed { .. } => Verdict::Allow,
            Self::Rewrite { .. } => Verdict::Rewrite,
            Self::Deny(_) => Verdict::Deny,
        }
    }
}

// === impl Denial ===

impl Denial {
    /// The stable code of this denial.
    pub fn reason(&self) -> Reason {
        match self {
            Self::Malformed { .. } => Reason::Malformed,
            Self::Invalid { .. } => Reason::Invalid,
            Self::Placeholder { .. } => Reason::Placeholder,
            Self::ShortName { .. } => Reason::ShortName,
            Self::Unlisted { .. } => Reason::Unlisted,
            Self::UnknownTag { .. } => Reason::UnknownTag,
            Self::NoTagOrDigest { .. } => Reason::NoTagOrDigest,
            Self::DigestNotPromoted { .. } => Reason::DigestNotPromoted,
            Self::PromotedUnpullable { .. } => Reason::PromotedUnpullable,
            Self::CannotRewrite { .. } => Reason::CannotRewrite,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allowlist::load_text;

    use crate::testing::{BAD, GOOD, REPO};
    const OTHER: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn allowlist() -> Allowlist {
        let text = format!(
            r#"apiVersion: digest-gate.dev/v1alpha1
kind: Allowlist
spec:
  repositories:
    - name: {REPO}
      digests:
        - digest: {GOOD}
          tags: ["v1.21.0-15"]
    - name: quay.io/modh/multi
      digests:
        - digest: {GOOD}
          tags: ["2.0"]
        - digest: {OTHER}
          tags: ["1.0"]
    - name: quay.io/modh/pinned
      digests: [{GOOD}, {OTHER}]
      rewriteTo: {OTHER}
    - name: quay.io/opendatahub/ovms-1
      digests: [{GOOD}]
  mirrors:
    - source: registry.redhat.io/rhods
      mirrors: [quay.io/rhods-mirror]
  exemptImages: ["quay.io/platform/debug-*"]
"#
        );
        load_text("test.yaml", &text).unwrap().allowlist
    }

    fn find(image: &str) -> Finding {
        Policy::default().find(image, &allowlist())
    }

    #[rstest::rstest]
    #[case::promoted_digest(format!("{REPO}@{GOOD}"), Verdict::Allow)]
    #[case::promoted_digest_with_any_tag(format!("{REPO}:whatever@{GOOD}"), Verdict::Allow)]
    #[case::unpromoted_digest_sole_digest(format!("{REPO}@{BAD}"), Verdict::Rewrite)]
    #[case::listed_tag(format!("{REPO}:v1.21.0-15"), Verdict::Rewrite)]
    #[case::unknown_tag(format!("{REPO}:latest"), Verdict::Deny)]
    #[case::bare_repository(REPO.to_owned(), Verdict::Deny)]
    #[case::unlisted_repository(format!("quay.io/other/x@{GOOD}"), Verdict::Deny)]
    #[case::short_name("ovms-1:2".to_owned(), Verdict::Deny)]
    #[case::placeholder("ovms-1:replace".to_owned(), Verdict::Deny)]
    #[case::invalid("<openvino_image>".to_owned(), Verdict::Deny)]
    #[case::exempt("quay.io/platform/debug-shell:latest".to_owned(), Verdict::Allow)]
    #[case::mirror_of_a_promoted_digest(format!("quay.io/rhods-mirror/odh-openvino-servingruntime-rhel8@{GOOD}"), Verdict::Allow)]
    #[case::unpromoted_digest_several_digests_tag_decides(format!("quay.io/modh/multi:1.0@{BAD}"), Verdict::Rewrite)]
    #[case::unpromoted_digest_several_digests_nothing_decides(format!("quay.io/modh/multi@{BAD}"), Verdict::Deny)]
    #[case::unpromoted_digest_rewriteto_decides(format!("quay.io/modh/pinned@{BAD}"), Verdict::Rewrite)]
    fn the_decision_table(#[case] image: String, #[case] want: Verdict) {
        let d = Policy::default().decide("Pod", &image, &allowlist());
        assert_eq!(d.verdict, want, "{image}: {:?}", d.finding);
    }

    #[test]
    fn the_incident_digest_is_rewritten_to_the_promoted_one() {
        let Finding::Rewrite {
            to, trigger, rule, ..
        } = find(&format!("{REPO}@{BAD}"))
        else {
            panic!("expected a rewrite")
        };
        assert_eq!(to, format!("{REPO}@{GOOD}"));
        assert_eq!(trigger, Trigger::UnpromotedDigest { digest: BAD.into() });
        assert_eq!(rule, TargetRule::SoleDigest);
    }

    #[test]
    fn rewrites_keep_the_written_repository_and_tag() {
        let Finding::Rewrite { to, rule, .. } = find(&format!(
            "quay.io/rhods-mirror/odh-openvino-servingruntime-rhel8:v1.21.0-15@{BAD}"
        )) else {
            panic!("expected a rewrite")
        };
        assert_eq!(
            to,
            format!("quay.io/rhods-mirror/odh-openvino-servingruntime-rhel8:v1.21.0-15@{GOOD}")
        );
        assert_eq!(rule, TargetRule::Tag);
        let Finding::Rewrite { to, rule, .. } = find(&format!("quay.io/modh/pinned@{BAD}")) else {
            panic!()
        };
        assert_eq!(
            (to.as_str(), rule),
            (
                format!("quay.io/modh/pinned@{OTHER}").as_str(),
                TargetRule::RewriteTo
            )
        );
    }

    #[test]
    fn rewritten_images_decide_as_allowed() {
        let list = allowlist();
        let p = Policy::default();
        for image in [
            format!("{REPO}@{BAD}"),
            format!("{REPO}:v1.21.0-15"),
            format!("quay.io/modh/pinned@{BAD}"),
        ] {
            let to = p.decide("Pod", &image, &list).rewrite_to().unwrap().to_owned();
            assert_eq!(
                p.decide("Pod", &to, &list).verdict,
                Verdict::Allow,
                "{image} -> {to}"
            );
        }
    }

    #[test]
    fn modes_change_verdicts_not_findings() {
        let list = allowlist();
        let mut p = Policy::default();
        p.set_kind_mode("ServingRuntime", Mode::Enforce);
        p.set_kind_mode("ConfigMap", Mode::Audit);
        let image = format!("{REPO}@{BAD}");
        assert_eq!(p.decide("Pod", &image, &list).verdict, Verdict::Rewrite);
        let enforced = p.decide("servingruntime", &image, &list);
        assert_eq!(enforced.verdict, Verdict::Deny);
        let msg = enforced.message("container \"ovms\"", &image);
        assert!(msg.contains(&format!("use '{REPO}@{GOOD}'")), "{msg}");
        let audited = p.decide("ConfigMap", "nginx", &list);
        assert_eq!(
            (audited.verdict, audited.would_be()),
            (Verdict::Allow, Verdict::Deny)
        );
        assert!(
            audited
                .message("container \"x\"", "nginx")
                .contains("audit: would deny")
        );
    }

    /// Audit mode (ConfigMaps here) allows, and the reason still says what
    /// was found.
    #[rstest::rstest]
    #[case::promoted("Pod", format!("{REPO}@{GOOD}"), Verdict::Allow, Reason::Promoted)]
    #[case::unpromoted_digest("Pod", format!("{REPO}@{BAD}"), Verdict::Rewrite, Reason::DigestNotPromoted)]
    #[case::tag_only("Pod", format!("{REPO}:v1.21.0-15"), Verdict::Rewrite, Reason::TagOnly)]
    #[case::exempt("Pod", "quay.io/platform/debug-shell:1".into(), Verdict::Allow, Reason::Exempt)]
    #[case::invalid("Pod", "quay.io/UPPER/x:1".into(), Verdict::Deny, Reason::Invalid)]
    #[case::short_name("Pod", "nginx:1".into(), Verdict::Deny, Reason::ShortName)]
    #[case::unlisted("Pod", "quay.io/other/x:1".into(), Verdict::Deny, Reason::Unlisted)]
    #[case::audit_mode_keeps_the_reason("ConfigMap", format!("{REPO}@{BAD}"), Verdict::Allow, Reason::DigestNotPromoted)]
    fn verdicts_and_reason_codes(
        #[case] kind: &str,
        #[case] image: String,
        #[case] verdict: Verdict,
        #[case] reason: Reason,
    ) {
        let mut policy = Policy::default();
        policy.set_kind_mode("ConfigMap", Mode::Audit);
        let d = policy.decide(kind, &image, &allowlist());
        assert_eq!((d.verdict, d.reason()), (verdict, reason), "{image}");
    }

    #[test]
    fn unlisted_repositories_can_be_allowed() {
        let p = Policy {
            unlisted: Unlisted::Allow,
            ..Policy::default()
        };
        let list = allowlist();
        assert_eq!(
            p.decide("Pod", "quay.io/other/x:1", &list).verdict,
            Verdict::Allow
        );
        // Listed repositories are still held to their promoted digests.
        assert_eq!(
            p.decide("Pod", &format!("{REPO}:latest"), &list).verdict,
            Verdict::Deny
        );
        // Short names are still not fully qualified.
        assert_eq!(p.decide("Pod", "nginx:1", &list).verdict, Verdict::Deny);
    }

    #[test]
    fn denials_name_the_fix() {
        let list = allowlist();
        let p = Policy::default();
        let msg = |image: &str| p.decide("Pod", image, &list).message("container \"ovms\"", image);

        let m = msg(&format!("{REPO}:latest"));
        assert!(m.contains("tag 'latest' is not a promoted tag"), "{m}");
        assert!(m.contains(&format!("use {REPO}@{GOOD} (tag v1.21.0-15)")), "{m}");

        // With no order between them, each candidate says where it is from.
        let m = msg(&format!("quay.io/modh/multi@{BAD}"));
        assert!(
            m.contains(&format!(
                "quay.io/modh/multi@{GOOD} (tag 2.0) from Allowlist (test.yaml:11) or quay.io/modh/multi@{OTHER} (tag 1.0) from Allowlist (test.yaml:13)"
            )),
            "{m}"
        );

        let m = msg(&format!("quay.io/opendatahub/ovms_1@{GOOD}"));
        assert!(
            m.contains("is not in the promoted-digest allowlist; did you mean quay.io/opendatahub/ovms-1@"),
            "{m}"
        );
    }

    /// Each message names what the image is and a fix that reads back as
    /// written: (image, reason code, what the message must say, what it
    /// must not).
    #[rstest::rstest]
    #[case::short_name_read_from_docker_hub(
        "kserve/llmisvc-controller:latest", Reason::ShortName,
        &["has no registry domain: Docker and containerd pull it from docker.io/kserve/llmisvc-controller, CRI-O from its configured search registries", "e.g. docker.io/kserve/llmisvc-controller@sha256:..."],
        &["quay.io/org"])]
    #[case::official_image("nginx", Reason::ShortName, &["docker.io/library/nginx@sha256:..."], &["quay.io/org"])]
    #[case::short_name_listed_elsewhere(
        "opendatahub/ovms-1:2", Reason::ShortName,
        &["pull it from docker.io/opendatahub/ovms-1", "promoted: quay.io/opendatahub/ovms-1@"], &["e.g."])]
    #[case::replace_tag(
        "ovms-1:replace", Reason::Placeholder,
        &["is an unsubstituted placeholder (the tag ':replace', which a build step replaces)", "promoted: quay.io/opendatahub/ovms-1@"],
        &["registry domain"])]
    #[case::kustomize_variable("$(vllm-cuda-image)", Reason::Placeholder, &["a kustomize or Tekton variable"], &["upper-case"])]
    #[case::shell_variable("${OVMS_IMAGE}", Reason::Placeholder, &["a shell, envsubst or OpenShift Template parameter"], &["upper-case"])]
    #[case::helm_template("{{ .Values.image }}", Reason::Placeholder, &["a Go or Helm template"], &[])]
    #[case::sed_target("<openvino_image>", Reason::Placeholder, &["a name in angle brackets"], &[])]
    #[case::ko("ko://github.com/kserve/kserve/cmd/manager", Reason::Placeholder, &["a ko import path"], &["path component"])]
    #[case::upper_case_name("REPLACE_IMAGE", Reason::Placeholder, &["an upper-case name that a script replaces"], &["lower-case"])]
    #[case::image_id(
        "7ef272bc7be866257b8126620e139d6e915ee962304d3eceba9c9d50d4e79767", Reason::Invalid,
        &["is a bare digest or image ID"], &["registry domain", "quay.io/org"])]
    #[case::bare_digest(
        "sha256:7ef272bc7be866257b8126620e139d6e915ee962304d3eceba9c9d50d4e79767", Reason::Invalid,
        &["is a bare digest or image ID"], &["registry domain"])]
    #[case::unlisted_says_what_to_write("quay.io/team/app:1", Reason::Unlisted, &["promote a digest of it", "exemptImages: [\"quay.io/team/app\"]", "--unlisted allow"], &["did you mean"])]
    #[case::another_organisation("quay.io/elsewhere/ovms-1:2", Reason::Unlisted, &["repository quay.io/elsewhere/ovms-1 is not"], &["did you mean"])]
    #[case::upper_case_host("Foo/bar:1", Reason::Unlisted, &["repository Foo/bar is not"], &["foo/bar"])]
    fn messages_point_the_right_way(
        #[case] image: &str,
        #[case] code: Reason,
        #[case] says: &[&str],
        #[case] never: &[&str],
    ) {
        let d = Policy::default().decide("Pod", image, &allowlist());
        let m = d.message("container \"c\"", image);
        assert_eq!(d.reason(), code, "{m}");
        for s in says {
            assert!(m.contains(s), "{image}: missing {s:?} in {m}");
        }
        for s in never {
            assert!(!m.contains(s), "{image}: {s:?} in {m}");
        }
    }

    #[test]
    fn upper_case_single_label_hosts_match_as_written() {
        // A host only by its upper case: `foo/bar` would be a short name.
        let text = format!("Foo/bar@{GOOD}\n");
        let list = load_text("a.txt", &text).unwrap().allowlist;
        let p = Policy::default();
        assert_eq!(
            p.decide("Pod", &format!("Foo/bar@{GOOD}"), &list).verdict,
            Verdict::Allow
        );
        let d = p.decide("Pod", &format!("foo/bar@{BAD}"), &list);
        assert_eq!(d.reason(), Reason::ShortName);
        assert!(!d.message("c", "foo/bar").contains("promoted: foo/bar"), "{d:?}");
    }

    #[test]
    fn command_line_exemptions_apply_too() {
        use crate::allowlist::Pattern;
        let p = Policy {
            exemptions: vec![Exemption {
                pattern: Pattern::parse("quay.io/platform/**").unwrap(),
                origin: "--exempt-image".into(),
            }],
            ..Policy::default()
        };
        let d = p.decide("Pod", "quay.io/platform/tools/shell:1", &allowlist());
        assert_eq!(d.verdict, Verdict::Allow);
        assert!(d.is_exempt());
        assert_eq!(
            Policy::default()
                .decide("Pod", "quay.io/platform/tools/shell:1", &allowlist())
                .verdict,
            Verdict::Deny
        );
    }

    #[test]
    fn hostile_images_make_short_single_line_messages() {
        let list = allowlist();
        let p = Policy::default();
        let long = format!("quay.io/{}", "a".repeat(100_000));
        let m = p.decide("Pod", &long, &list).message("container \"c\"", &long);
        assert!(m.len() < 3000, "{}", m.len());
        assert!(m.contains("(100008 bytes)"), "{m}");
        let evil = "quay.io/x:1\n{\"level\":\"forged\"}\u{1b}[2J";
        let m = p
            .decide("Pod", evil, &list)
            .message("container \"c\ninjected\"", evil);
        assert!(!m.contains(|c: char| c.is_control()), "{m:?}");
        assert!(m.contains("\\n"), "{m}");
    }

    #[test]
    fn short_names_resolve_when_the_allowlist_opts_in() {
        let text = format!(
            "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nspec:\n  shortNameRegistry: docker.io\n  repositories:\n    - name: docker.io/kserve/sklearnserver\n      digests: [{{digest: {GOOD}, tags: [v0.14.0]}}]\n"
        );
        let list = load_text("a.yaml", &text).unwrap().allowlist;
        let d = Policy::default().decide("Pod", "kserve/sklearnserver:v0.14.0", &list);
        assert_eq!(
            d.rewrite_to(),
            Some(format!("kserve/sklearnserver:v0.14.0@{GOOD}").as_str())
        );
    }
}

#[cfg(test)]
mod platform_tests {
    use super::*;
    use crate::allowlist::load_text;
    use crate::testing::{BAD, GOOD, REPO};

    const ARM64: &str = "sha256:a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a";
    const AMD64: &str = "sha256:0a640a640a640a640a640a640a640a640a640a640a640a640a640a640a640a64";

    fn allowlist() -> Allowlist {
        let text = format!(
            "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nmetadata: {{name: rel}}\nspec:\n  repositories:\n    - name: {REPO}\n      digests:\n        - digest: {GOOD}\n          platforms:\n            - {{platform: linux/amd64, digest: {AMD64}}}\n            - {{platform: linux/arm64/v8, digest: {ARM64}}}\n    - name: quay.io/other/x\n      digests: [{BAD}]\n"
        );
        load_text("p.yaml", &text).unwrap().allowlist
    }

    #[test]
    fn the_image_of_a_promoted_index_is_promoted_for_its_platform() {
        let list = allowlist();
        let d = Policy::default().decide("Pod", &format!("{REPO}@{ARM64}"), &list);
        assert_eq!(
            (d.verdict, d.reason()),
            (Verdict::Allow, Reason::PromotedPlatform)
        );
        assert_eq!(
            d.message("container \"c\"", &format!("{REPO}@{ARM64}")),
            format!(
                "container \"c\": '{REPO}@{ARM64}' is the linux/arm64/v8 image of promoted index '{REPO}@{GOOD}' (promoted by Allowlist rel (p.yaml:8))"
            )
        );
        assert!(!d.reason().is_finding());
        // Enforce and audit allow it too; nothing to fix.
        for mode in [Mode::Enforce, Mode::Audit] {
            let policy = Policy {
                mode,
                ..Policy::default()
            };
            let d = policy.decide("Pod", &format!("{REPO}@{AMD64}"), &list);
            assert_eq!((d.verdict, d.rewrite_to()), (Verdict::Allow, None));
        }
        // The index itself stays the promoted digest and the rewrite target.
        let d = Policy::default().decide("Pod", &format!("{REPO}@{BAD}"), &list);
        assert_eq!(d.rewrite_to(), Some(format!("{REPO}@{GOOD}").as_str()));
        // Another repository's digest, or an index's image under another
        // repository, is not promoted.
        let d = Policy::default().decide("Pod", &format!("quay.io/other/x@{ARM64}"), &list);
        assert_eq!(d.verdict, Verdict::Rewrite);
    }
}

#[cfg(test)]
mod unpullable_tests {
    use super::*;
    use crate::published::Known;
    use crate::testing::{BAD, GOOD, REPO, incident_allowlist};

    fn known(state: State) -> Published {
        let mut p = Published::default();
        let detail = "registry.redhat.io does not have this manifest (MANIFEST_UNKNOWN)".to_owned();
        let checked_at = std::time::SystemTime::UNIX_EPOCH;
        p.insert(
            REPO,
            GOOD,
            Known {
                state,
                detail,
                checked_at,
            },
        );
        p
    }

    #[test]
    fn a_rewrite_to_a_digest_the_registry_cannot_serve_is_denied_not_redirected() {
        let list = incident_allowlist();
        let image = format!("{REPO}@{BAD}");
        let missing = known(State::Missing);
        let d = Policy::default().decide_with("ServingRuntime", &image, &list, Some(&missing));
        assert_eq!(
            (d.verdict, d.reason()),
            (Verdict::Deny, Reason::PromotedUnpullable)
        );
        assert_eq!(d.rewrite_to(), None);
        let message = d.message("container \"ovms\"", &image);
        assert!(
            message.contains(&format!(
                "would be rewritten to '{REPO}@{GOOD}' (promoted by"
            )) && message.contains(
                "but it is missing: registry.redhat.io does not have this manifest (MANIFEST_UNKNOWN): its Pods would not start"
            ),
            "{message}"
        );
        // Unverifiable, ok or unknown: the allowlist decides, as without it.
        for p in [known(State::Unverifiable), known(State::Ok), Published::default()] {
            let d = Policy::default().decide_with("ServingRuntime", &image, &list, Some(&p));
            assert_eq!(d.verdict, Verdict::Rewrite);
        }
        // The promoted image as written is judged as before: allowed.
        let promoted = format!("{REPO}@{GOOD}");
        let d = Policy::default().decide_with("ServingRuntime", &promoted, &list, Some(&missing));
        assert_eq!(d.verdict, Verdict::Allow);
        // Audit mode reports it would deny.
        let audit = Policy {
            mode: Mode::Audit,
            ..Policy::default()
        };
        let d = audit.decide_with("ServingRuntime", &image, &list, Some(&missing));
        assert_eq!((d.verdict, d.would_be()), (Verdict::Allow, Verdict::Deny));
    }
}
