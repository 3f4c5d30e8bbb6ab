//! The rewrite-target rule: for an image of a listed repository, what it
//! is from its digest, else its tag, and which promoted digest a rewrite
//! goes to (the tag's, else `rewriteTo`, else the only one, else the
//! newest release's); and whether a registry said that target cannot be
//! pulled. The allowlist answers what is promoted and by which release;
//! which of those a rewrite goes to is decided here, and only here
//! (`allowlist lint` and `convert` ask the same two functions).

use super::wording::listing;
use super::{Denial, Finding, PromotedBy, TargetRule, Trigger};
use std::sync::Arc;

use crate::allowlist::{Candidates, Promoted, Provenance};
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
    let Some(p) = default_target(candidates) else {
        return newest_release(candidates).map(|(p, _)| (p, TargetRule::NewestRelease));
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

/// The rewrite target when no tag decides: an explicit `rewriteTo`, else
/// the only promoted digest. `None` when that is ambiguous.
pub fn default_target<'a>(candidates: &Candidates<'a>) -> Option<Promoted<'a>> {
    let mut explicit = candidates.entries().filter_map(|r| r.rewrite_to());
    if let Some(first) = explicit.next() {
        return explicit.all(|p| p.digest() == first.digest()).then_some(first);
    }
    let mut all = candidates.entries().flat_map(|r| r.digests());
    let first = all.next()?;
    all.all(|p| p.digest() == first.digest()).then_some(first)
}

/// The newest operator release of one package among the candidates'
/// sources, when every promoted digest comes from a release of that
/// package and the newest release promotes exactly one of them: during
/// an operator upgrade both CSVs are loaded, and the new one is current.
pub fn newest_release<'a>(candidates: &Candidates<'a>) -> Option<(Promoted<'a>, &'a Arc<Provenance>)> {
    let digests = candidates.promoted();
    let mut package: Option<&str> = None;
    let mut best: Option<(Promoted<'a>, &Arc<Provenance>)> = None;
    let mut tied = false;
    for &p in &digests {
        let mut newest: Option<&Arc<Provenance>> = None;
        for (provenance, _) in candidates.sources_of(p) {
            let Some(pkg) = provenance.package.as_deref().filter(|_| provenance.is_release()) else {
                continue;
            };
            if *package.get_or_insert(pkg) != pkg {
                return None;
            }
            if newest.is_none_or(|n| provenance.recency() > n.recency()) {
                newest = Some(provenance);
            }
        }
        // A digest no release of the package promotes: no order.
        let newest = newest?;
        match best {
            Some((_, b)) if b.recency() == newest.recency() => tied = true,
            Some((_, b)) if b.recency() > newest.recency() => {}
            _ => {
                best = Some((p, newest));
                tied = false;
            }
        }
    }
    if tied || digests.len() < 2 {
        return None;
    }
    best
}

/// What a registry said of rewrite target `to` of `repository`, when it
/// said that it cannot be pulled.
pub(super) fn unpullable<'p>(published: &'p Published, repository: &str, to: &str) -> Option<&'p Known> {
    let digest = to.rsplit_once('@').map(|(_, d)| d)?;
    published.get(repository, digest).filter(|k| k.state.fails())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allowlist::{Builder, Origin};
    use crate::testing::{digest as d, origin};

    #[test]
    fn rewrite_to_decides_between_two_digests() {
        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(1)).unwrap();
        b.promote("quay.io/x/y", &d('b'), &["v2"], &origin(2)).unwrap();
        // Two digests and no rewriteTo: nothing decides.
        assert!(default_target(&b.build().candidates("quay.io/x/y")).is_none());

        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &[], &origin(1)).unwrap();
        b.promote("quay.io/x/y", &d('b'), &[], &origin(2)).unwrap();
        b.rewrite_to("quay.io/x/y", &d('b'), &origin(3)).unwrap();
        let list = b.build();
        assert_eq!(
            default_target(&list.candidates("quay.io/x/y")).unwrap().digest(),
            d('b')
        );
    }

    fn release(b: &mut Builder, package: &str, version: &str) -> Origin {
        let provenance = b.provenance(Provenance {
            package: Some(package.into()),
            version: Some(semver::Version::parse(version).unwrap()),
            ..Provenance::of(
                "csv.yaml".into(),
                format!("ClusterServiceVersion {package}.{version}"),
            )
        });
        Origin {
            provenance,
            ..origin(1)
        }
    }

    #[test]
    fn the_newest_release_of_one_operator_is_the_target() {
        let mut b = Builder::default();
        let old = release(&mut b, "op", "1.9.0");
        let new = release(&mut b, "op", "1.10.0");
        b.promote("quay.io/x/y", &d('a'), &[], &old).unwrap();
        b.promote("quay.io/x/y", &d('b'), &[], &new).unwrap();
        let list = b.build();
        let c = list.candidates("quay.io/x/y");
        // Versions compare as semver: 1.10.0 is newer than 1.9.0.
        let (p, by) = newest_release(&c).unwrap();
        assert_eq!(
            (p.digest(), by.release().as_deref()),
            (d('b').as_str(), Some("op 1.10.0"))
        );
        assert_eq!(
            c.promotions(&d('b'))[0].0.origin,
            "ClusterServiceVersion op.1.10.0"
        );
    }

    #[test]
    fn releases_linked_by_replaces_are_one_operator() {
        // Names that do not end in their version: only `replaces` links them.
        let mut b = Builder::default();
        let csv = |b: &mut Builder, name: &str, version: &str, replaces: Option<&str>| {
            let provenance = b.provenance(Provenance {
                version: Some(semver::Version::parse(version).unwrap()),
                name: Some(name.into()),
                replaces: replaces.map(Into::into),
                rank: None,
                ..Provenance::of("csv.yaml".into(), format!("ClusterServiceVersion {name}"))
            });
            Origin {
                provenance,
                ..origin(1)
            }
        };
        let old = csv(&mut b, "serving-stable", "1.20.1", None);
        let new = csv(&mut b, "serving-fast", "1.21.0", Some("serving-stable"));
        let other = csv(&mut b, "unrelated", "9.0.0", None);
        b.promote("quay.io/x/y", &d('a'), &[], &old).unwrap();
        b.promote("quay.io/x/y", &d('b'), &[], &new).unwrap();
        b.promote("quay.io/x/z", &d('c'), &[], &other).unwrap();
        let list = b.build();
        let (p, by) = newest_release(&list.candidates("quay.io/x/y")).unwrap();
        assert_eq!(
            (p.digest(), by.release().as_deref()),
            (d('b').as_str(), Some("serving-fast 1.21.0"))
        );
        // An unlinked CSV whose name has no version keeps no package.
        assert_eq!(list.provenances()[other.provenance as usize].package, None);

        // Without the link there is no order.
        let mut b = Builder::default();
        let old = csv(&mut b, "serving-stable", "1.20.1", None);
        let new = csv(&mut b, "serving-fast", "1.21.0", Some("something-else"));
        b.promote("quay.io/x/y", &d('a'), &[], &old).unwrap();
        b.promote("quay.io/x/y", &d('b'), &[], &new).unwrap();
        assert!(newest_release(&b.build().candidates("quay.io/x/y")).is_none());
    }

    #[rstest::rstest]
    #[case::another_operator(("op", "1.0.0"), Some(("other", "2.0.0")))]
    #[case::one_release_promotes_both(("op", "1.0.0"), Some(("op", "1.0.0")))]
    #[case::a_source_without_releases(("op", "1.0.0"), None)]
    fn without_an_order_there_is_no_newest(
        #[case] first: (&str, &str),
        #[case] second: Option<(&str, &str)>,
    ) {
        let mut b = Builder::default();
        let one = release(&mut b, first.0, first.1);
        b.promote("quay.io/x/y", &d('a'), &[], &one).unwrap();
        let two = match second {
            Some((p, v)) => release(&mut b, p, v),
            None => Origin {
                provenance: b.provenance(Provenance::of("list.txt".into(), "plain list".into())),
                ..origin(2)
            },
        };
        b.promote("quay.io/x/y", &d('b'), &[], &two).unwrap();
        assert!(newest_release(&b.build().candidates("quay.io/x/y")).is_none());
    }
}
