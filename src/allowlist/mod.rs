//! The allowlist of promoted digests: which digests of which repository may
//! run, with the tags people know them by, an optional rewrite target, mirror
//! equivalences and exemptions.
//!
//! An [`Allowlist`] is immutable once built; the server swaps whole snapshots.
//! Every lookup is a hash probe per path prefix of the image's repository, so
//! its cost does not grow with the number of entries. Entries are compact
//! (one shared name per repository, digests scanned in place until a
//! repository has many), so a 10,000-repository list stays a few MiB.

mod emit;
mod exempt;
mod load;
mod native;

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::Hasher;
use std::sync::Arc;

pub use emit::to_native_yaml;
pub use exempt::{Exemption, Pattern, PatternError};
pub use load::{
    Format, Lint, LoadError, LoadErrors, Loaded, Source, SourceSummary, lint, load_paths, load_sources,
    load_text, read_sources, source_files,
};

/// Where an entry came from, for conflict messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: Arc<str>,
    pub line: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// One promoted digest of a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promoted {
    /// `algorithm:hex`.
    pub digest: Box<str>,
    /// Tags this digest was published under.
    pub tags: Vec<Box<str>>,
}

/// A repository's promoted digests.
#[derive(Debug, Clone)]
pub struct Repository {
    /// Canonical `registry/path`.
    pub name: Arc<str>,
    /// Promoted digests in the order the allowlist lists them.
    pub digests: Vec<Promoted>,
    /// Hash indexes, built only once a repository has more digests than a
    /// scan handles faster; most have one to three.
    index: Option<Box<RepoIndex>>,
    rewrite_to: Option<usize>,
}

#[derive(Debug, Clone, Default)]
struct RepoIndex {
    by_digest: HashMap<Box<str>, usize>,
    by_tag: HashMap<Box<str>, usize>,
}

/// Digests a repository holds before lookups switch from a scan to a hash.
const SCAN_LIMIT: usize = 8;

// === impl Repository ===

impl Repository {
    fn new(name: Arc<str>) -> Self {
        Self {
            name,
            digests: Vec::new(),
            index: None,
            rewrite_to: None,
        }
    }

    fn find_digest(&self, digest: &str) -> Option<usize> {
        match &self.index {
            Some(ix) => ix.by_digest.get(digest).copied(),
            None => self.digests.iter().position(|p| &*p.digest == digest),
        }
    }

    fn find_tag(&self, tag: &str) -> Option<usize> {
        match &self.index {
            Some(ix) => ix.by_tag.get(tag).copied(),
            None => self
                .digests
                .iter()
                .position(|p| p.tags.iter().any(|t| &**t == tag)),
        }
    }

    fn push_digest(&mut self, digest: &str) -> usize {
        let i = self.digests.len();
        self.digests.push(Promoted {
            digest: digest.into(),
            tags: Vec::new(),
        });
        if let Some(ix) = &mut self.index {
            ix.by_digest.insert(digest.into(), i);
        } else if self.digests.len() > SCAN_LIMIT {
            let mut ix = RepoIndex::default();
            for (j, p) in self.digests.iter().enumerate() {
                ix.by_digest.insert(p.digest.clone(), j);
                for t in &p.tags {
                    ix.by_tag.insert(t.clone(), j);
                }
            }
            self.index = Some(Box::new(ix));
        }
        i
    }

    fn push_tag(&mut self, index: usize, tag: &str) {
        self.digests[index].tags.push(tag.into());
        if let Some(ix) = &mut self.index {
            ix.by_tag.insert(tag.into(), index);
        }
    }

    /// Whether `digest` is promoted here.
    pub fn is_promoted(&self, digest: &str) -> bool {
        self.find_digest(digest).is_some()
    }

    /// The promoted digest published under `tag`.
    pub fn digest_for_tag(&self, tag: &str) -> Option<&Promoted> {
        self.find_tag(tag).map(|i| &self.digests[i])
    }

    /// The explicit rewrite target.
    pub fn rewrite_to(&self) -> Option<&Promoted> {
        self.rewrite_to.map(|i| &self.digests[i])
    }
}

/// A mirror rule: repositories under `mirror` share the promoted digests of
/// the same path under `source` (ImageDigestMirrorSet semantics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorRule {
    pub source: String,
    pub mirrors: Vec<String>,
}

/// The promoted-digest allowlist.
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    repos: HashMap<Arc<str>, Repository>,
    /// Repository names in first-seen order, for stable output.
    order: Vec<Arc<str>>,
    /// Mirror prefix → source prefixes.
    mirrors: HashMap<Box<str>, Vec<Box<str>>>,
    mirror_rules: Vec<MirrorRule>,
    exemptions: Vec<Exemption>,
    short_name_registry: Option<String>,
    /// (hash of the last path component, loosely compared, index into
    /// `order`), sorted: the "did you mean" index, twelve bytes an entry.
    basenames: Vec<(u64, u32)>,
}

/// A repository name's last component as "did you mean" compares it: case
/// and the separators `-`, `_` and `.` are what people get wrong.
fn loose_basename(name: &str) -> impl Iterator<Item = u8> + '_ {
    let basename = name.rsplit('/').next().unwrap_or(name);
    basename
        .bytes()
        .filter(|b| !matches!(b, b'-' | b'_' | b'.'))
        .map(|b| b.to_ascii_lowercase())
}

fn basename_hash(name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    for b in loose_basename(name) {
        h.write_u8(b);
    }
    h.finish()
}

/// The repositories an image's promoted digests come from: its own entry and
/// the sources it mirrors. The common case (one entry, no mirrors) does not
/// allocate.
#[derive(Debug, Clone, Default)]
pub struct Candidates<'a> {
    direct: Option<&'a Repository>,
    mirrored: Vec<&'a Repository>,
}

impl<'a> Candidates<'a> {
    fn entries(&self) -> impl Iterator<Item = &'a Repository> + '_ {
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
    pub fn digest_for_tag(&self, tag: &str) -> Option<&'a Promoted> {
        self.entries().find_map(|r| r.digest_for_tag(tag))
    }

    /// The rewrite target when no tag decides: an explicit `rewriteTo`, else
    /// the only promoted digest. `None` when that is ambiguous.
    pub fn default_target(&self) -> Option<&'a Promoted> {
        let mut explicit = self.entries().filter_map(|r| r.rewrite_to());
        if let Some(first) = explicit.next() {
            return explicit.all(|p| p.digest == first.digest).then_some(first);
        }
        let mut all = self.entries().flat_map(|r| r.digests.iter());
        let first = all.next()?;
        all.all(|p| p.digest == first.digest).then_some(first)
    }

    /// Every promoted digest, first-listed first, without duplicates.
    pub fn promoted(&self) -> Vec<&'a Promoted> {
        let mut out: Vec<&Promoted> = Vec::new();
        for p in self.entries().flat_map(|r| r.digests.iter()) {
            if !out.iter().any(|q| q.digest == p.digest) {
                out.push(p);
            }
        }
        out
    }
}

// === impl Allowlist ===

impl Allowlist {
    /// The entries for a canonical repository name, following mirror rules.
    pub fn candidates(&self, repository: &str) -> Candidates<'_> {
        let mut c = Candidates {
            direct: self.repos.get(repository),
            mirrored: Vec::new(),
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
                if let Some(r) = self.repos.get(mapped.as_str())
                    && !c.entries().any(|e| std::ptr::eq(e, r))
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
            .map(|(_, i)| &*self.order[*i as usize])
            .filter(|name| loose_basename(name).eq(loose_basename(basename)))
            .collect()
    }

    /// A repository by canonical name, without mirror rules.
    pub fn repository(&self, name: &str) -> Option<&Repository> {
        self.repos.get(name)
    }

    /// Repositories in first-listed order.
    pub fn repositories(&self) -> impl Iterator<Item = &Repository> {
        self.order.iter().map(|n| &self.repos[n])
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

    /// Number of promoted (repository, digest) pairs.
    pub fn digest_count(&self) -> usize {
        self.repos.values().map(|r| r.digests.len()).sum()
    }
}

/// Collects entries from any number of sources and checks they agree.
#[derive(Debug, Default)]
pub struct Builder {
    list: Allowlist,
    tag_origins: HashMap<(Arc<str>, Box<str>), Origin>,
    rewrite_origins: HashMap<Arc<str>, Origin>,
    short_name_origin: Option<Origin>,
}

/// Two sources disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    #[error("tag '{tag}' of {repository} names {digest}, but {first} names {other} for it")]
    Tag {
        repository: String,
        tag: String,
        digest: String,
        other: String,
        first: Origin,
    },
    #[error("rewriteTo of {repository} is {digest}, but {first} sets it to {other}")]
    RewriteTo {
        repository: String,
        digest: String,
        other: String,
        first: Origin,
    },
    #[error("rewriteTo of {repository} is {digest}, which is not one of its promoted digests")]
    RewriteToNotPromoted { repository: String, digest: String },
    #[error("shortNameRegistry is {registry}, but {first} sets it to {other}")]
    ShortNameRegistry {
        registry: String,
        other: String,
        first: Origin,
    },
}

// === impl Builder ===

impl Builder {
    /// Promotes `digest` of the canonical `repository`, known by `tags`.
    pub fn promote(
        &mut self,
        repository: &str,
        digest: &str,
        tags: &[&str],
        origin: &Origin,
    ) -> Result<(), Box<Conflict>> {
        if !self.list.repos.contains_key(repository) {
            let name: Arc<str> = repository.into();
            self.list.order.push(name.clone());
            self.list.repos.insert(name.clone(), Repository::new(name));
        }
        let repo = self.list.repos.get_mut(repository).expect("inserted above");
        let index = match repo.find_digest(digest) {
            Some(i) => i,
            None => repo.push_digest(digest),
        };
        for &tag in tags {
            match repo.find_tag(tag) {
                Some(i) if i == index => {}
                Some(i) => {
                    let first = self.tag_origins[&(repo.name.clone(), tag.into())].clone();
                    return Err(Box::new(Conflict::Tag {
                        repository: repository.to_owned(),
                        tag: tag.to_owned(),
                        digest: digest.to_owned(),
                        other: repo.digests[i].digest.to_string(),
                        first,
                    }));
                }
                None => {
                    repo.push_tag(index, tag);
                    self.tag_origins
                        .insert((repo.name.clone(), tag.into()), origin.clone());
                }
            }
        }
        Ok(())
    }

    /// Sets the explicit rewrite target of `repository`. Checked against its
    /// digests when the allowlist is built.
    pub fn rewrite_to(
        &mut self,
        repository: &str,
        digest: &str,
        origin: &Origin,
    ) -> Result<(), Box<Conflict>> {
        if let Some(first) = self.rewrite_origins.get(repository) {
            let current = self.list.repos.get(repository).and_then(|r| r.rewrite_to());
            let other = current.map_or_else(String::new, |p| p.digest.to_string());
            if other != digest {
                return Err(Box::new(Conflict::RewriteTo {
                    repository: repository.to_owned(),
                    digest: digest.to_owned(),
                    other,
                    first: first.clone(),
                }));
            }
            return Ok(());
        }
        let repo = self.list.repos.get_mut(repository);
        let Some(index) = repo.as_ref().and_then(|r| r.find_digest(digest)) else {
            return Err(Box::new(Conflict::RewriteToNotPromoted {
                repository: repository.to_owned(),
                digest: digest.to_owned(),
            }));
        };
        let repo = repo.expect("checked above");
        repo.rewrite_to = Some(index);
        let name = repo.name.clone();
        self.rewrite_origins.insert(name, origin.clone());
        Ok(())
    }

    /// Adds a mirror rule (prefixes already canonical).
    pub fn mirror(&mut self, source: &str, mirrors: &[String]) {
        for m in mirrors {
            let sources = self.list.mirrors.entry(m.as_str().into()).or_default();
            if !sources.iter().any(|s| &**s == source) {
                sources.push(source.into());
            }
        }
        match self.list.mirror_rules.iter_mut().find(|r| r.source == source) {
            Some(rule) => {
                for m in mirrors {
                    if !rule.mirrors.contains(m) {
                        rule.mirrors.push(m.clone());
                    }
                }
            }
            None => self.list.mirror_rules.push(MirrorRule {
                source: source.to_owned(),
                mirrors: mirrors.to_vec(),
            }),
        }
    }

    /// Adds an exemption.
    pub fn exempt(&mut self, exemption: Exemption) {
        if !self
            .list
            .exemptions
            .iter()
            .any(|e| e.pattern == exemption.pattern)
        {
            self.list.exemptions.push(exemption);
        }
    }

    /// Opts short names into resolution against `registry`.
    pub fn short_name_registry(&mut self, registry: &str, origin: &Origin) -> Result<(), Box<Conflict>> {
        match (&self.list.short_name_registry, &self.short_name_origin) {
            (Some(current), Some(first)) if current != registry => {
                Err(Box::new(Conflict::ShortNameRegistry {
                    registry: registry.to_owned(),
                    other: current.clone(),
                    first: first.clone(),
                }))
            }
            _ => {
                self.list.short_name_registry = Some(registry.to_owned());
                self.short_name_origin = Some(origin.clone());
                Ok(())
            }
        }
    }

    /// The finished allowlist.
    pub fn build(self) -> Allowlist {
        let mut list = self.list;
        let mut basenames: Vec<(u64, u32)> = list
            .order
            .iter()
            .enumerate()
            .map(|(i, name)| (basename_hash(name), u32::try_from(i).unwrap_or(u32::MAX)))
            .collect();
        basenames.sort_unstable();
        list.basenames = basenames;
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    fn origin(line: usize) -> Origin {
        Origin {
            file: "a.yaml".into(),
            line,
        }
    }

    #[test]
    fn tags_and_rewrite_targets_resolve() {
        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(1)).unwrap();
        b.promote("quay.io/x/y", &d('b'), &["v2"], &origin(2)).unwrap();
        let list = b.build();
        let c = list.candidates("quay.io/x/y");
        assert!(c.is_promoted(&d('a')));
        assert_eq!(&*c.digest_for_tag("v2").unwrap().digest, d('b'));
        // Two digests and no rewriteTo: nothing decides.
        assert!(c.default_target().is_none());

        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &[], &origin(1)).unwrap();
        b.promote("quay.io/x/y", &d('b'), &[], &origin(2)).unwrap();
        b.rewrite_to("quay.io/x/y", &d('b'), &origin(3)).unwrap();
        let list = b.build();
        assert_eq!(
            &*list.candidates("quay.io/x/y").default_target().unwrap().digest,
            d('b')
        );
    }

    #[test]
    fn lookups_agree_before_and_after_the_hash_index() {
        let mut b = Builder::default();
        let digests: Vec<String> = (0..20).map(|i| format!("sha256:{i:064x}")).collect();
        for (i, d) in digests.iter().enumerate() {
            let tag = format!("v{i}");
            b.promote("quay.io/x/y", d, &[&tag], &origin(i)).unwrap();
            // Re-promoting is idempotent, with the index or without.
            b.promote("quay.io/x/y", d, &[&tag], &origin(i)).unwrap();
        }
        let list = b.build();
        let repo = list.repository("quay.io/x/y").unwrap();
        assert!(repo.index.is_some());
        assert_eq!(repo.digests.len(), 20);
        for (i, d) in digests.iter().enumerate() {
            assert!(repo.is_promoted(d));
            assert_eq!(
                &*repo.digest_for_tag(&format!("v{i}")).unwrap().digest,
                d.as_str()
            );
        }
        assert!(!repo.is_promoted(&format!("sha256:{:064x}", 99)));
    }

    #[test]
    fn a_tag_naming_two_digests_is_a_conflict() {
        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(1)).unwrap();
        let err = b
            .promote("quay.io/x/y", &d('b'), &["v1"], &origin(7))
            .unwrap_err();
        assert!(
            matches!(*err, Conflict::Tag { ref first, .. } if first.line == 1),
            "{err}"
        );
    }

    #[test]
    fn two_rewrite_targets_are_a_conflict() {
        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &[], &origin(1)).unwrap();
        b.promote("quay.io/x/y", &d('b'), &[], &origin(1)).unwrap();
        b.rewrite_to("quay.io/x/y", &d('a'), &origin(2)).unwrap();
        b.rewrite_to("quay.io/x/y", &d('a'), &origin(5)).unwrap();
        let err = b.rewrite_to("quay.io/x/y", &d('b'), &origin(9)).unwrap_err();
        assert!(matches!(*err, Conflict::RewriteTo { .. }), "{err}");
        let err = b.rewrite_to("quay.io/x/z", &d('b'), &origin(9)).unwrap_err();
        assert!(matches!(*err, Conflict::RewriteToNotPromoted { .. }), "{err}");
    }

    #[test]
    fn mirrors_share_their_sources_digests() {
        let mut b = Builder::default();
        b.promote("registry.redhat.io/rhods/ovms", &d('a'), &["v1"], &origin(1))
            .unwrap();
        b.mirror("registry.redhat.io/rhods", &["quay.io/modh".to_owned()]);
        let list = b.build();
        assert!(list.candidates("quay.io/modh/ovms").is_promoted(&d('a')));
        assert!(list.candidates("quay.io/modh/other").is_empty());
        assert!(list.candidates("quay.io/modhx/ovms").is_empty());
        assert!(list.candidates("quay.io/other/ovms").is_empty());
    }

    #[test]
    fn similar_names_are_found_by_basename() {
        let mut b = Builder::default();
        b.promote("quay.io/opendatahub/ovms-1", &d('a'), &[], &origin(1))
            .unwrap();
        let list = b.build();
        assert_eq!(list.similar("ovms-1"), ["quay.io/opendatahub/ovms-1"]);
        assert_eq!(list.similar("OVMS_1"), ["quay.io/opendatahub/ovms-1"]);
        assert!(list.similar("ovms").is_empty());
    }
}
