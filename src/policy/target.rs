//! The rewrite-target rule: for an image of a listed repository, what it
//! is from its digest, else its tag, and which promoted digest a rewrite
//! goes to (the tag's, else `rewriteTo`, else the only one, else the
//! newest release's); and whether a registry said that target cannot be
//! pulled.

use super::wording::listing;
use super::{Denial, Finding, PromotedBy, TargetRule, Trigger};
use crate::allowlist::{Candidates, Promoted};
use crate::published::{Known, Published};
use crate::reference::Reference;

/// The finding for an image of a listed repository, from its digest, or
/// else its tag.
pub(super) fn listed(r: &Reference<'_>, candidates: &Candidates<'_>) -> Finding {
    match (r.digest(), r.tag()) {
        (Some(digest), _) if candidates.is_promoted(digest) => Finding::Promoted,
        (Some(digest), tag) => {
            // Asked only here, off the path of a promoted digest.
            if let Some((index, platform)) = candidates.platform_image(digest) {
                return Finding::PromotedPlatform {
                    index: r.pinned(index.digest()),
                    platform: platform.to_owned(),
                    by: PromotedBy::of(candidates, index),
                };
            }
            match target(candidates, tag) {
                Some((p, rule)) => Finding::Rewrite {
                    to: r.pinned(p.digest()),
                    trigger: Trigger::UnpromotedDigest {
                        digest: digest.to_owned(),
                    },
                    rule,
                    by: PromotedBy::of(candidates, p),
                },
                None => Finding::Deny(Denial::DigestNotPromoted {
                    digest: digest.to_owned(),
                    candidates: listing(r, candidates),
                }),
            }
        }
        (None, Some(tag)) => match candidates.digest_for_tag(tag) {
            Some(p) => Finding::Rewrite {
                to: r.pinned(p.digest()),
                trigger: Trigger::TagOnly { tag: tag.to_owned() },
                rule: TargetRule::Tag,
                by: PromotedBy::of(candidates, p),
            },
            None => Finding::Deny(Denial::UnknownTag {
                tag: tag.to_owned(),
                candidates: listing(r, candidates),
            }),
        },
        (None, None) => Finding::Deny(Denial::NoTagOrDigest {
            candidates: listing(r, candidates),
        }),
    }
}

/// The rewrite target for an unpromoted digest: the digest published under
/// the image's tag, else `rewriteTo`, else the only promoted digest.
fn target<'a>(candidates: &Candidates<'a>, tag: Option<&str>) -> Option<(Promoted<'a>, TargetRule)> {
    if let Some(p) = tag.and_then(|t| candidates.digest_for_tag(t)) {
        return Some((p, TargetRule::Tag));
    }
    let Some(p) = candidates.default_target() else {
        return candidates
            .newest_release()
            .map(|(p, _)| (p, TargetRule::NewestRelease));
    };
    let explicit = candidates.promoted().len() > 1;
    Some((
        p,
        if explicit {
            TargetRule::RewriteTo
        } else {
            TargetRule::SoleDigest
        },
    ))
}

/// What a registry said of rewrite target `to` of `repository`, when it
/// said that it cannot be pulled.
pub(super) fn unpullable<'p>(published: &'p Published, repository: &str, to: &str) -> Option<&'p Known> {
    let digest = to.rsplit_once('@').map(|(_, d)| d)?;
    published.get(repository, digest).filter(|k| k.state.fails())
}
