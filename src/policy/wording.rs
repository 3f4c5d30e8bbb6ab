//! The wording of decisions, for people: what an image is and what to use
//! instead, in one sentence each, shortened and kept on one line whatever
//! the input; the candidates a denial lists; the SARIF rules' summaries.

use std::borrow::Cow;

use super::{Decision, Denial, Finding, Mode, PromotedBy, Reason, TargetRule, Trigger, Verdict};
use crate::allowlist::{Allowlist, Candidates, Promoted};
use crate::published::State;
use crate::reference::{self, Placeholder, Reference, short_digest};
use crate::text::{self, Cut};

/// Most candidates a message lists before "and N more".
const MAX_CANDIDATES: usize = 3;

/// Longest image shown whole in a message.
const MAX_SHOWN_IMAGE: usize = 200;
/// Longest message about one image.
const MAX_MESSAGE: usize = 2048;

impl Reason {
    /// What an image with this reason is, in a sentence: the description of
    /// the reason's rule in SARIF reports.
    pub fn summary(self) -> &'static str {
        match self {
            Self::Promoted => "The image is pinned to a promoted digest.",
            Self::PromotedPlatform => {
                "The image is pinned to the image a promoted index lists for one platform, promoted for that platform."
            }
            Self::Exempt => "The image matches an exemption.",
            Self::UnlistedAllowed => {
                "The image's repository is not in the allowlist, and unlisted repositories are allowed."
            }
            Self::TagOnly => "The image names a tag without a digest; tags move, promoted digests do not.",
            Self::DigestNotPromoted => "The image's digest was never promoted for its repository.",
            Self::PromotedUnpullable => {
                "The image would be rewritten to a promoted digest that the registry cannot serve: its Pods would not start."
            }
            Self::Malformed => "The object is malformed where an image should be.",
            Self::Invalid => "The image is not a valid image reference.",
            Self::Placeholder => "The image is a placeholder that was never substituted.",
            Self::ShortName => {
                "The image has no registry domain, so each container runtime resolves it its own way."
            }
            Self::Unlisted => "The image's repository is not in the promoted-digest allowlist.",
            Self::UnknownTag => "The image's tag is not a promoted tag of its repository.",
            Self::NoTagOrDigest => "The image has neither tag nor digest, so it would pull :latest.",
            Self::CannotRewrite => {
                "The image must be rewritten to its promoted digest, but cannot be in place."
            }
        }
    }
}

/// An unlisted repository's denial: why, and what to write, or which
/// promoted repository was probably meant.
fn unlisted(image: &str, repository: &str, suggestions: &[String]) -> String {
    let mut s = format!("image '{image}': repository {repository} is not in the promoted-digest allowlist");
    match suggestions.is_empty() {
        false => s.push_str(&format!("; did you mean {}?", join_candidates(suggestions))),
        true => s.push_str(&format!(
            "; to admit it, promote a digest of it in the allowlist, exempt it (exemptImages: [\"{repository}\"], --exempt-image {repository}), or allow unlisted repositories (unlisted: allow, --unlisted allow)"
        )),
    }
    s
}

/// `audit: would deny`: how audit mode words what it let through.
pub fn audit_marker(verdict: Verdict) -> String {
    format!("audit: would {verdict}")
}

impl Decision {
    /// Why this verdict, for people: names `what` (e.g. `container "ovms"`),
    /// the image, and what to do. Hostile input stays harmless here: long
    /// images are shortened in the middle and control characters escaped, so
    /// neither a denial nor a log line can be flooded or split.
    pub fn message(&self, what: &str, image: &str) -> String {
        tidy(self.message_raw(what, &shown(image)))
    }

    fn message_raw(&self, what: &str, image: &str) -> String {
        let core = self.finding.explain(image);
        match (self.mode, &self.finding) {
            (Mode::Enforce, Finding::Rewrite { .. }) => {
                format!("{what}: {core}; enforce mode does not rewrite it")
            }
            (Mode::Audit, f) if f.verdict() != Verdict::Allow => {
                format!("{what}: {}: {core}", audit_marker(f.verdict()))
            }
            _ => format!("{what}: {core}"),
        }
    }
}

impl Finding {
    /// One sentence on what the image is and, when it is wrong, what to use.
    pub fn explain(&self, image: &str) -> String {
        match self {
            Self::Promoted => format!("'{image}' is a promoted digest"),
            Self::PromotedPlatform { index, platform, by } => match by {
                Some(by) => format!(
                    "'{image}' is the {platform} image of promoted index '{index}' (promoted by {})",
                    by.describe()
                ),
                None => format!("'{image}' is the {platform} image of promoted index '{index}'"),
            },
            Self::Exempt { pattern } => format!("'{image}' is exempt (pattern {pattern})"),
            Self::UnlistedAllowed { repository } => {
                format!(
                    "'{image}': {repository} is not in the allowlist; allowed because unlisted repositories are allowed"
                )
            }
            Self::Rewrite {
                to,
                trigger,
                rule,
                by,
            } => {
                let why = match trigger {
                    Trigger::TagOnly { tag } => format!("tag '{tag}' is not pinned by digest"),
                    Trigger::UnpromotedDigest { digest } => {
                        format!("digest {} was never promoted", short_digest(digest))
                    }
                };
                let release = by
                    .as_ref()
                    .and_then(|b| Some((b.provenance.newest_as(), b.provenance.release()?)));
                let how = match (rule, release) {
                    (TargetRule::Tag, _) => "the promoted digest of that tag".to_owned(),
                    (TargetRule::RewriteTo, _) => "the repository's rewriteTo digest".to_owned(),
                    (TargetRule::SoleDigest, _) => "the repository's promoted digest".to_owned(),
                    (TargetRule::NewestRelease, Some((newest, release))) => {
                        format!("the digest of {newest} promoting it, {release}")
                    }
                    (TargetRule::NewestRelease, None) => "the newest release's digest".to_owned(),
                };
                match by {
                    Some(by) => format!(
                        "'{image}': {why}; use '{to}' ({how}; promoted by {})",
                        by.describe()
                    ),
                    None => format!("'{image}': {why}; use '{to}' ({how})"),
                }
            }
            Self::Deny(denial) => denial.explain(image),
        }
    }
}

impl Denial {
    /// A few words on what is wrong, for warnings that must stay short.
    pub fn short(&self) -> &'static str {
        match self {
            Self::Malformed { .. } => "the object is malformed here",
            Self::Placeholder { .. } => "an unsubstituted placeholder",
            Self::Invalid { .. } => "not a valid image reference",
            Self::ShortName { .. } => "no registry domain",
            Self::Unlisted { .. } => "repository not in the allowlist",
            Self::UnknownTag { .. } => "tag not promoted",
            Self::NoTagOrDigest { .. } => "no tag or digest",
            Self::DigestNotPromoted { .. } => "digest not promoted",
            Self::PromotedUnpullable { .. } => "its promoted digest cannot be pulled",
            Self::CannotRewrite { .. } => "cannot be rewritten in place",
        }
    }

    fn explain(&self, image: &str) -> String {
        match self {
            Self::Malformed { reason } => reason.clone(),
            Self::Placeholder {
                placeholder,
                suggestions,
            } => {
                let mut s = format!(
                    "image '{image}' is an unsubstituted placeholder ({}); substitute it before applying",
                    placeholder.describe()
                );
                if suggestions.is_empty() {
                    s.push_str(": a promoted image, registry/repository@sha256:...");
                } else {
                    s.push_str(&format!("; promoted: {}", join_candidates(suggestions)));
                }
                s
            }
            Self::Invalid { error } => {
                format!("image '{image}' is not a valid image reference: {error}")
            }
            Self::ShortName { suggestions } => {
                // Docker and containerd complete a short name with Docker
                // Hub; CRI-O asks its search registries, or refuses.
                let Ok(r) = reference::parse(image) else {
                    return format!("image '{image}' has no registry domain");
                };
                let mut s = format!(
                    "image '{image}' has no registry domain: {}; write the registry",
                    r.short_name_reading()
                );
                if suggestions.is_empty() {
                    let digest = r.digest().unwrap_or("sha256:...");
                    s.push_str(&format!(", e.g. {}@{digest}", r.docker_hub_repository()));
                } else {
                    s.push_str(&format!("; promoted: {}", join_candidates(suggestions)));
                }
                s
            }
            Self::Unlisted {
                repository,
                suggestions,
            } => unlisted(image, repository, suggestions),
            Self::UnknownTag { tag, candidates } => format!(
                "image '{image}': tag '{tag}' is not a promoted tag; use {}",
                join_candidates(candidates)
            ),
            Self::NoTagOrDigest { candidates } => format!(
                "image '{image}' has no tag or digest (it would pull :latest); use {}",
                join_candidates(candidates)
            ),
            Self::DigestNotPromoted { digest, candidates } => format!(
                "image '{image}': digest {} was never promoted and the repository has several promoted digests; use {}",
                short_digest(digest),
                join_candidates(candidates)
            ),
            Self::PromotedUnpullable {
                to,
                state,
                detail,
                by,
            } => unpullable_message(image, to, *state, detail, by.as_ref()),
            Self::CannotRewrite { to, why } => {
                format!(
                    "image '{image}' must be '{to}', but it cannot be rewritten in place ({why}); change it"
                )
            }
        }
    }
}

fn unpullable_message(image: &str, to: &str, state: State, detail: &str, by: Option<&PromotedBy>) -> String {
    let by = by
        .map(|b| format!(" (promoted by {})", b.describe()))
        .unwrap_or_default();
    format!(
        "image '{image}' would be rewritten to '{to}'{by}, but it is {state}: {detail}: its Pods would not start; publish that digest, or promote one that is published"
    )
}

/// Promoted references for this repository as the user wrote it, tags and
/// the source promoting each shown: when several are promoted and none can
/// be chosen, where each comes from tells which is current.
pub(super) fn listing(r: &Reference<'_>, candidates: &Candidates<'_>) -> Vec<String> {
    let promoted = candidates.promoted();
    let several = promoted.len() > 1;
    promoted
        .into_iter()
        .map(|p| {
            let mut s = describe(r.name(), p);
            if several && let Some(by) = PromotedBy::of(candidates, p) {
                s.push_str(&format!(" from {}", by.describe()));
            }
            s
        })
        .collect()
}

fn describe(name: &str, p: Promoted<'_>) -> String {
    let mut s = format!("{name}@{}", p.digest());
    let tags: Vec<&str> = p.tags().collect();
    if !tags.is_empty() {
        s.push_str(&format!(" (tag {})", tags.join(", ")));
    }
    s
}

/// Listed repositories with the same last path component, as promoted
/// references: the likely intended image when a name is short or unknown.
pub(super) fn suggestions(
    r: &Reference<'_>,
    allowlist: &Allowlist,
    meant: impl Fn(&str) -> bool,
) -> Vec<String> {
    let name = r.name();
    let basename = name.rsplit('/').next().unwrap_or(name);
    let mut out = Vec::new();
    for repo in allowlist.similar(basename).into_iter().filter(|repo| meant(repo)) {
        let c = allowlist.candidates(repo);
        let pick = r
            .tag()
            .and_then(|t| c.digest_for_tag(t))
            .or_else(|| super::default_target(&c));
        match pick {
            Some(p) => out.push(describe(repo, p)),
            None => out.extend(c.promoted().into_iter().map(|p| describe(repo, p))),
        }
    }
    out
}

/// For `name:replace`, what the build would have put there: the promoted
/// images whose repository is named `name`, in any organisation.
pub(super) fn placeholder_suggestions(
    image: &str,
    placeholder: Placeholder,
    allowlist: &Allowlist,
) -> Vec<String> {
    let Some(name) = image
        .strip_suffix(":replace")
        .filter(|_| placeholder == Placeholder::ReplaceTag)
    else {
        return Vec::new();
    };
    match reference::parse(name) {
        Ok(r) => suggestions(&r, allowlist, |_| true),
        Err(_) => Vec::new(),
    }
}

/// An image as messages show it: shortened in the middle when very long
/// (the digest at the end is what tells images apart), on one line.
fn shown(image: &str) -> Cow<'_, str> {
    text::one_line(image, MAX_SHOWN_IMAGE, Cut::Middle { head: 120, tail: 40 })
}

/// Caps a message and keeps it on one line (container names and reference
/// errors echo input too).
fn tidy(message: String) -> String {
    text::one_line_owned(message, MAX_MESSAGE, Cut::End)
}

fn join_candidates(c: &[String]) -> String {
    let (listed, more) = text::first(c.iter().map(String::as_str).collect(), MAX_CANDIDATES);
    let mut s = listed.join(" or ");
    if more > 0 {
        s.push_str(&format!(" (and {more} more)"));
    }
    s
}
