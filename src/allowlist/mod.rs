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

/// Where an entry came from, for conflict messages and provenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: Arc<str>,
    pub line: usize,
    /// The source object it was read from ([`Builder::provenance`]).
    pub provenance: u32,
}

/// The object promoted digests were read from. Each is kept once, however
/// many digests it promotes: digests refer to it by index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// The file read (for a mounted ConfigMap, its key).
    pub source: Arc<str>,
    /// What promoted them: `ClusterServiceVersion rhods-operator.1.21.0`,
    /// `ImageSetConfiguration name`, `Allowlist name`, `plain list`.
    pub origin: String,
    /// The operator release (a CSV's `spec.version`), when known.
    pub version: Option<semver::Version>,
    /// The operator a CSV is a release of: its name before the version, the
    /// same in every release of one package. CSVs linked by `spec.replaces`
    /// share one ([`Builder::build`]), whatever their names.
    pub package: Option<String>,
    /// The CSV's `metadata.name`, which another CSV's `replaces` names.
    pub name: Option<String>,
    /// The CSV this one replaces (`spec.replaces`).
    pub replaces: Option<String>,
}

impl Provenance {
    /// A source object that is not an operator release.
    pub fn of(source: Arc<str>, origin: String) -> Self {
        Self {
            source,
            origin,
            version: None,
            package: None,
            name: None,
            replaces: None,
        }
    }

    /// `rhods-operator 1.21.0`: the release, as short messages name it.
    pub fn release(&self) -> Option<String> {
        Some(format!("{} {}", self.package.as_deref()?, self.version.as_ref()?))
    }
}

/// One source promoting one digest: which object, and the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Promotion {
    pub provenance: u32,
    pub line: u32,
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
    /// Every source that promotes it, in load order.
    pub promotions: Vec<Promotion>,
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

/// Pushes `item`, allocating room for exactly one when `v` has none: most
/// repositories have one digest, with one tag and one source, where a plain
/// push would allocate four (three wasted slots per repository, 2.4 MiB at
/// 10,000 repositories).
fn push_first_exact<T>(v: &mut Vec<T>, item: T) {
    if v.capacity() == 0 {
        v.reserve_exact(1);
    }
    v.push(item);
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
        push_first_exact(
            &mut self.digests,
            Promoted {
                digest: digest.into(),
                tags: Vec::new(),
                promotions: Vec::new(),
            },
        );
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
        push_first_exact(&mut self.digests[index].tags, tag.into());
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
    /// The source objects digests were promoted by, by index.
    provenances: Vec<Arc<Provenance>>,
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
    provenances: &'a [Arc<Provenance>],
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
        out.sort_by(|a, b| b.0.version.cmp(&a.0.version));
        out
    }

    /// The newest source promoting `digest` (the newest release, else the
    /// first loaded), without gathering them all: what a rewrite names.
    pub fn newest_promotion(&self, digest: &str) -> Option<(&'a Arc<Provenance>, u32)> {
        self.sources(digest).reduce(|best, next| {
            if next.0.version > best.0.version {
                next
            } else {
                best
            }
        })
    }

    /// Every (source, line) promoting `digest`, across the repository and
    /// the ones it mirrors, in load order.
    fn sources<'s>(&'s self, digest: &'s str) -> impl Iterator<Item = (&'a Arc<Provenance>, u32)> + 's {
        self.entries()
            .flat_map(|r| r.digests.iter())
            .filter(move |p| &*p.digest == digest)
            .flat_map(|p| self.sources_of(p))
    }

    /// The sources promoting one digest entry.
    fn sources_of(&self, p: &'a Promoted) -> impl Iterator<Item = (&'a Arc<Provenance>, u32)> + use<'a> {
        let provenances = self.provenances;
        p.promotions.iter().filter_map(move |promotion| {
            let provenance = provenances.get(promotion.provenance as usize)?;
            Some((provenance, promotion.line))
        })
    }

    /// The newest operator release of one package among the candidates'
    /// sources, when every promoted digest comes from a release of that
    /// package and the newest release promotes exactly one of them: during
    /// an operator upgrade both CSVs are loaded, and the new one is current.
    pub fn newest_release(&self) -> Option<(&'a Promoted, &'a Arc<Provenance>)> {
        let digests = self.promoted();
        let mut package: Option<&str> = None;
        let mut best: Option<(&Promoted, &Arc<Provenance>)> = None;
        let mut tied = false;
        for p in &digests {
            let mut newest: Option<&Arc<Provenance>> = None;
            for (provenance, _) in self.sources_of(p) {
                let (Some(pkg), Some(version)) = (provenance.package.as_deref(), &provenance.version) else {
                    continue;
                };
                if *package.get_or_insert(pkg) != pkg {
                    return None;
                }
                if newest.is_none_or(|n| n.version.as_ref().is_some_and(|v| version > v)) {
                    newest = Some(provenance);
                }
            }
            // A digest no release of the package promotes: no order.
            let newest = newest?;
            match best {
                Some((_, b)) if b.version == newest.version => tied = true,
                Some((_, b)) if b.version > newest.version => {}
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
    /// Registers a source object; the entries read from it name it by the
    /// index returned, in their [`Origin`].
    pub fn provenance(&mut self, provenance: Provenance) -> u32 {
        let list = &mut self.list.provenances;
        list.push(Arc::new(provenance));
        u32::try_from(list.len() - 1).unwrap_or(u32::MAX)
    }

    /// Names a source object once its name is read (a native document's
    /// `metadata` may follow its `spec`).
    pub fn name_provenance(&mut self, id: u32, origin: String) {
        if let Some(p) = self.list.provenances.get_mut(id as usize) {
            Arc::make_mut(p).origin = origin;
        }
    }

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
        let promotion = Promotion {
            provenance: origin.provenance,
            line: u32::try_from(origin.line).unwrap_or(u32::MAX),
        };
        let promotions = &mut repo.digests[index].promotions;
        if !promotions.contains(&promotion) {
            push_first_exact(promotions, promotion);
        }
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
        link_replaces(&mut list.provenances);
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

/// Gives CSVs linked by `spec.replaces` one package, so the newest-release
/// rule orders an upgrade whose CSV names do not end in their version (or
/// that renamed the operator). The package is the newest linked release's,
/// else the name it would have had; a release without a version stays out of
/// any order.
fn link_replaces(provenances: &mut [Arc<Provenance>]) {
    if provenances.iter().all(|p| p.replaces.is_none()) {
        return;
    }
    // Union-find over provenance indexes; roots are the smallest index.
    let mut parent: Vec<usize> = (0..provenances.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let by_name: HashMap<&str, usize> = provenances
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((p.name.as_deref()?, i)))
        .collect();
    for (i, p) in provenances.iter().enumerate() {
        let Some(&j) = p.replaces.as_deref().and_then(|r| by_name.get(r)) else {
            continue;
        };
        let (a, b) = (root(&mut parent, i), root(&mut parent, j));
        parent[a.max(b)] = a.min(b);
    }
    let groups: Vec<usize> = (0..provenances.len()).map(|i| root(&mut parent, i)).collect();
    let mut sizes: HashMap<usize, usize> = HashMap::new();
    for &g in &groups {
        *sizes.entry(g).or_default() += 1;
    }
    // The newest release's package per linked group.
    let mut packages: HashMap<usize, (Option<&semver::Version>, String)> = HashMap::new();
    for (p, &group) in provenances.iter().zip(&groups) {
        let Some(package) = p.package.as_ref().or(p.name.as_ref()) else {
            continue;
        };
        if sizes[&group] < 2 {
            continue;
        }
        let entry = packages.entry(group).or_insert((None, String::new()));
        if entry.1.is_empty() || p.version.as_ref() > entry.0 {
            *entry = (p.version.as_ref(), package.clone());
        }
    }
    let packages: HashMap<usize, String> = packages.into_iter().map(|(g, (_, name))| (g, name)).collect();
    for (p, group) in provenances.iter_mut().zip(groups) {
        if let Some(package) = packages.get(&group)
            && p.package.as_ref() != Some(package)
        {
            Arc::make_mut(p).package = Some(package.clone());
        }
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
            provenance: 0,
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
        let (p, by) = c.newest_release().unwrap();
        assert_eq!(
            (&*p.digest, by.release().as_deref()),
            (d('b').as_str(), Some("op 1.10.0"))
        );
        assert_eq!(
            c.promotions(&d('b'))[0].0.origin,
            "ClusterServiceVersion op.1.10.0"
        );
    }

    #[test]
    fn a_repository_with_one_digest_holds_room_for_one() {
        // The 10,000-repository list's memory: three wasted slots each of
        // digests, tags and sources were 2.4 MiB.
        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(1)).unwrap();
        let list = b.build();
        let repo = list.repositories().next().unwrap();
        let p = &repo.digests[0];
        assert_eq!(
            (
                repo.digests.capacity(),
                p.tags.capacity(),
                p.promotions.capacity()
            ),
            (1, 1, 1)
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
        let (p, by) = list.candidates("quay.io/x/y").newest_release().unwrap();
        assert_eq!(
            (&*p.digest, by.release().as_deref()),
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
        assert!(b.build().candidates("quay.io/x/y").newest_release().is_none());
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
        assert!(b.build().candidates("quay.io/x/y").newest_release().is_none());
    }
}
