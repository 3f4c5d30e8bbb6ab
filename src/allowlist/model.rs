//! The [`Allowlist`]: what it holds, and the queries judging asks of it
//! (a repository's candidates, exemptions, mirrors, "did you mean").

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use hashbrown::HashTable;

use super::*;

/// A mirror rule: repositories under `mirror` share the promoted digests of
/// the same path under `source` (ImageDigestMirrorSet semantics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorRule {
    pub source: String,
    pub mirrors: Vec<String>,
    /// `mirrorSourcePolicy: NeverContactSource`: nodes pull only from the
    /// mirrors (a disconnected cluster). Where images are pulled, not what
    /// is promoted: judging reads only the prefixes.
    pub never_contact_source: bool,
}

impl MirrorRule {
    /// The policy as ImageDigestMirrorSet spells it.
    pub fn source_policy(&self) -> &'static str {
        if self.never_contact_source {
            NEVER_CONTACT_SOURCE
        } else {
            ALLOW_CONTACTING_SOURCE
        }
    }
}

/// `mirrorSourcePolicy` values, as ImageDigestMirrorSet spells them.
pub const ALLOW_CONTACTING_SOURCE: &str = "AllowContactingSource";
pub const NEVER_CONTACT_SOURCE: &str = "NeverContactSource";

/// The promoted-digest allowlist.
///
/// Its strings (repository names, digests, tags) are kept end to end in one
/// text, and its repositories, digests, tags and further sources are rows of
/// four tables that refer to each other by index. A repository costs about
/// 200 bytes beyond its strings' length, in a handful of large allocations
/// rather than a dozen small ones per repository: during a reload the old
/// and the new allowlist are both held, and the large blocks go back to the
/// kernel whole when the old one is dropped.
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    pub(super) text: String,
    /// In first-listed order.
    pub(super) repos: Vec<RepoRow>,
    /// Repository rows, by name.
    pub(super) by_name: HashTable<u32>,
    pub(super) hasher: RandomState,
    pub(super) digests: Vec<DigestRow>,
    pub(super) tags: Vec<TagRow>,
    pub(super) promotions: Vec<PromotionRow>,
    pub(super) children: Vec<ChildRow>,
    /// By repository row, for repositories with many digests.
    pub(super) indexes: HashMap<u32, RepoIndex>,
    /// Mirror prefix → source prefixes.
    pub(super) mirrors: HashMap<Box<str>, Vec<Box<str>>>,
    pub(super) mirror_rules: Vec<MirrorRule>,
    pub(super) exemptions: Vec<Exemption>,
    pub(super) short_name_registry: Option<String>,
    /// The source objects digests were promoted by, by index.
    pub(super) provenances: Vec<Arc<Provenance>>,
    /// (hash of the last path component, loosely compared, repository row),
    /// sorted: the "did you mean" index.
    pub(super) basenames: Vec<(u64, u32)>,
}

// === impl Allowlist ===

impl Allowlist {
    /// The string `span` points at.
    pub(super) fn str(&self, span: Span) -> &str {
        let start = span.start as usize;
        self.text
            .get(start..start + span.len as usize)
            .unwrap_or_default()
    }

    pub(super) fn hash(&self, s: &str) -> u64 {
        self.hasher.hash_one(s)
    }

    pub(super) fn view(&self, id: u32) -> Option<Repository<'_>> {
        let row = self.repos.get(id as usize)?;
        Some(Repository { list: self, id, row })
    }

    pub(super) fn promoted(&self, id: u32) -> Option<Promoted<'_>> {
        let row = self.digests.get(id as usize)?;
        Some(Promoted { list: self, row })
    }

    pub(super) fn find_repo(&self, name: &str) -> Option<u32> {
        self.by_name
            .find(self.hash(name), |&r| {
                self.str(self.repos[r as usize].name) == name
            })
            .copied()
    }

    /// The digest row of `digest` in repository `repo`.
    pub(super) fn find_digest(&self, repo: u32, digest: &str) -> Option<u32> {
        if let Some(ix) = self.indexes.get(&repo) {
            return ix
                .by_digest
                .find(self.hash(digest), |&d| {
                    self.str(self.digests[d as usize].digest) == digest
                })
                .copied();
        }
        let first = self.repos.get(repo as usize)?.first;
        chain(&self.digests, first, |d| d.next)
            .find(|(_, d)| self.str(d.digest) == digest)
            .map(|(id, _)| id)
    }

    /// (digest row, tag row) of `tag` in repository `repo`.
    pub(super) fn find_tag(&self, repo: u32, tag: &str) -> Option<(u32, u32)> {
        if let Some(ix) = self.indexes.get(&repo) {
            return ix
                .by_tag
                .find(self.hash(tag), |&(t, _)| {
                    self.str(self.tags[t as usize].tag) == tag
                })
                .map(|&(t, d)| (d, t));
        }
        let first = self.repos.get(repo as usize)?.first;
        chain(&self.digests, first, |d| d.next).find_map(|(d, row)| {
            chain(&self.tags, row.tags, |t| t.next)
                .find(|(_, t)| self.str(t.tag) == tag)
                .map(|(t, _)| (d, t))
        })
    }

    /// The entries for a canonical repository name, following mirror rules.
    pub fn candidates(&self, repository: &str) -> Candidates<'_> {
        let mut c = Candidates {
            direct: self.repository(repository),
            mirrored: Vec::new(),
            provenances: &self.provenances,
        };
        if self.mirrors.is_empty() {
            return c;
        }
        let prefixes = repository
            .match_indices('/')
            .map(|(i, _)| i)
            .chain(std::iter::once(repository.len()));
        for end in prefixes {
            let Some(sources) = self.mirrors.get(&repository[..end]) else {
                continue;
            };
            for source in sources {
                let mapped = format!("{source}{}", &repository[end..]);
                if let Some(r) = self.repository(&mapped)
                    && !c.entries().any(|e| e.id == r.id)
                {
                    c.mirrored.push(r);
                }
            }
        }
        c
    }

    /// The first exemption that matches the image.
    pub fn exemption(&self, repository: &str, tag: Option<&str>, digest: Option<&str>) -> Option<&Exemption> {
        self.exemptions
            .iter()
            .find(|e| e.pattern.matches(repository, tag, digest))
    }

    /// Whether any exemptions are configured.
    pub fn has_exemptions(&self) -> bool {
        !self.exemptions.is_empty()
    }

    /// The registry short names resolve to, if the allowlist opts into it.
    pub fn short_name_registry(&self) -> Option<&str> {
        self.short_name_registry.as_deref()
    }

    /// Listed repositories whose last path component is `basename`, but for
    /// case and the separators `-`, `_` and `.`.
    pub fn similar(&self, basename: &str) -> Vec<&str> {
        let h = basename_hash(basename);
        let start = self.basenames.partition_point(|(k, _)| *k < h);
        self.basenames[start..]
            .iter()
            .take_while(|(k, _)| *k == h)
            .filter_map(|(_, i)| Some(self.str(self.repos.get(*i as usize)?.name)))
            .filter(|name| loose_basename(name).eq(loose_basename(basename)))
            .collect()
    }

    /// A repository by canonical name, without mirror rules.
    pub fn repository(&self, name: &str) -> Option<Repository<'_>> {
        self.view(self.find_repo(name)?)
    }

    /// Repositories in first-listed order.
    pub fn repositories(&self) -> impl Iterator<Item = Repository<'_>> {
        self.repos
            .iter()
            .zip(0..)
            .map(|(row, id)| Repository { list: self, id, row })
    }

    /// Mirror rules as listed.
    pub fn mirror_rules(&self) -> &[MirrorRule] {
        &self.mirror_rules
    }

    /// Exemptions as listed.
    pub fn exemptions(&self) -> &[Exemption] {
        &self.exemptions
    }

    /// Number of repositories.
    pub fn repository_count(&self) -> usize {
        self.repos.len()
    }

    /// The source object of index `id`.
    pub fn provenance(&self, id: u32) -> Option<&Arc<Provenance>> {
        self.provenances.get(id as usize)
    }

    /// Every source object, by index.
    pub fn provenances(&self) -> &[Arc<Provenance>] {
        &self.provenances
    }

    /// Number of promoted (repository, digest) pairs.
    pub fn digest_count(&self) -> usize {
        self.digests.len()
    }
}
