//! [`Candidates`]: the repositories an image's promoted digests come from
//! (its own entry and the sources it mirrors), and what they promote.

use std::sync::Arc;

use super::*;

/// The repositories an image's promoted digests come from: its own entry and
/// the sources it mirrors. The common case (one entry, no mirrors) does not
/// allocate.
#[derive(Debug, Clone, Default)]
pub struct Candidates<'a> {
    pub(super) direct: Option<Repository<'a>>,
    pub(super) mirrored: Vec<Repository<'a>>,
    pub(super) provenances: &'a [Arc<Provenance>],
}

impl<'a> Candidates<'a> {
    /// Its repositories: its own entry, then the ones it mirrors.
    pub fn entries(&self) -> impl Iterator<Item = Repository<'a>> + '_ {
        self.direct.into_iter().chain(self.mirrored.iter().copied())
    }

    /// Whether the repository is listed at all.
    pub fn is_empty(&self) -> bool {
        self.direct.is_none() && self.mirrored.is_empty()
    }

    /// Whether `digest` is promoted for the repository.
    pub fn is_promoted(&self, digest: &str) -> bool {
        self.entries().any(|r| r.is_promoted(digest))
    }

    /// The digest published under `tag`.
    pub fn digest_for_tag(&self, tag: &str) -> Option<Promoted<'a>> {
        self.entries().find_map(|r| r.digest_for_tag(tag))
    }

    /// The promoted index `digest` is the image of, and for which platform.
    /// Asked only of a digest that is not promoted itself, so the scan of
    /// every index's images is off the path of a promoted image.
    pub fn platform_image(&self, digest: &str) -> Option<(Promoted<'a>, &'a str)> {
        self.entries().flat_map(|r| r.digests()).find_map(|index| {
            index
                .platforms()
                .find(|(_, d)| *d == digest)
                .map(|(p, _)| (index, p))
        })
    }

    /// Every source promoting `digest` (across the repository and the ones
    /// it mirrors), newest release first, then in load order.
    pub fn promotions(&self, digest: &str) -> Vec<(&'a Arc<Provenance>, u32)> {
        let mut out: Vec<(&Arc<Provenance>, u32)> = Vec::new();
        for (provenance, line) in self.sources(digest) {
            if !out.iter().any(|(q, l)| Arc::ptr_eq(q, provenance) && *l == line) {
                out.push((provenance, line));
            }
        }
        // Stable: sources without a release keep their load order, after
        // the releases.
        out.sort_by(|a, b| b.0.recency().cmp(&a.0.recency()));
        out
    }

    /// The newest source promoting `digest` (the newest release, else the
    /// first loaded), without gathering them all: what a rewrite names.
    pub fn newest_promotion(&self, digest: &str) -> Option<(&'a Arc<Provenance>, u32)> {
        self.sources(digest).reduce(|best, next| {
            if next.0.recency() > best.0.recency() {
                next
            } else {
                best
            }
        })
    }

    /// Every (source, line) promoting `digest`, across the repository and
    /// the ones it mirrors, in load order.
    pub(super) fn sources<'s>(
        &'s self,
        digest: &'s str,
    ) -> impl Iterator<Item = (&'a Arc<Provenance>, u32)> + 's {
        self.entries()
            .flat_map(|r| r.digests())
            .filter(move |p| p.digest() == digest)
            .flat_map(|p| self.sources_of(p))
    }

    /// The sources promoting one digest entry.
    pub fn sources_of(&self, p: Promoted<'a>) -> impl Iterator<Item = (&'a Arc<Provenance>, u32)> + use<'a> {
        let provenances = self.provenances;
        p.promotions().filter_map(move |promotion| {
            let provenance = provenances.get(promotion.provenance as usize)?;
            Some((provenance, promotion.line))
        })
    }

    /// Every promoted digest, first-listed first, without duplicates.
    pub fn promoted(&self) -> Vec<Promoted<'a>> {
        let mut out: Vec<Promoted<'a>> = Vec::new();
        for p in self.entries().flat_map(|r| r.digests()) {
            if !out.iter().any(|q| q.digest() == p.digest()) {
                out.push(p);
            }
        }
        out
    }
}
