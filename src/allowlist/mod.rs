//! The allowlist of promoted digests: which digests of which repository may
//! run, with the tags people know them by, an optional rewrite target, mirror
//! equivalences and exemptions.
//!
//! An [`Allowlist`] is immutable once built; the server swaps whole snapshots.
//! Every lookup is a hash probe per path prefix of the image's repository, so
//! its cost does not grow with the number of entries. Entries are compact
//! (one shared name per repository, digests scanned in place until a
//! repository has many), so a 10,000-repository list stays a few MiB.

mod catalog;
mod csv;
mod emit;
mod error;
mod exempt;
mod fbc;
mod imageset;
mod input;
mod lint;
mod load;
mod native;
mod plain;

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::Arc;

use hashbrown::HashTable;

pub use emit::{Found, to_native_yaml, to_native_yaml_with};
pub use error::{LoadError, LoadErrors};
pub use exempt::{Exemption, Pattern, PatternError};
pub use fbc::{CatalogOptions, ChannelSummary, PackageSummary};
pub use input::{
    INSTALLED_PREFIX, Input, OpenFile, Source, SourceKind, configmap_sources, inputs, open_files,
    source_files,
};
pub use lint::{Lint, lint};
pub use load::{
    Format, Loaded, SourceSummary, load_paths, load_paths_with, load_sources, load_sources_with, load_text,
    load_with_installed,
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
    /// A catalog bundle's place in its package's ordering channel: greater
    /// is nearer the channel's head along `replaces`/`skips`. It orders
    /// releases before their versions do ([`Provenance::recency`]).
    pub rank: Option<u32>,
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
            rank: None,
        }
    }

    /// How recent a release is, to compare releases of one package: a
    /// catalog's upgrade graph first (a bundle on the ordering channel is
    /// more recent than one off it, and nearer the head more recent still),
    /// then the version. What is not a release compares least.
    pub fn recency(&self) -> (Option<u32>, Option<&semver::Version>) {
        (self.rank, self.version.as_ref())
    }

    /// Whether it orders among releases: a package, and a version or a
    /// place in a catalog's graph.
    fn is_release(&self) -> bool {
        self.package.is_some() && (self.version.is_some() || self.rank.is_some())
    }

    /// Which release of its package this one is when it is the newest by
    /// [`Provenance::recency`], as messages say it: a catalog's graph
    /// ordered it, or its version did.
    pub fn newest_as(&self) -> &'static str {
        if self.rank.is_some() {
            "the release nearest its channel's head"
        } else {
            "the newest release"
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

/// Where a string sits in [`Allowlist`]'s text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    len: u32,
}

impl Span {
    /// The string it points at in `text`; empty if it does not fit, which
    /// only a bug could cause.
    fn of(self, text: &str) -> &str {
        let start = self.start as usize;
        text.get(start..start + self.len as usize).unwrap_or_default()
    }
}

/// No row: the end of a chain, or no rewrite target.
const NONE: u32 = u32::MAX;

/// A repository. Its digests chain from `first` by [`DigestRow::next`], in
/// the order listed.
#[derive(Debug, Clone)]
struct RepoRow {
    name: Span,
    first: u32,
    last: u32,
    count: u32,
    rewrite_to: u32,
}

/// A promoted digest of a repository.
#[derive(Debug, Clone)]
struct DigestRow {
    /// `algorithm:hex`.
    digest: Span,
    /// The repository's next digest.
    next: u32,
    /// Its first tag in the tag rows.
    tags: u32,
    /// The first source promoting it: most digests have one, so it is kept
    /// here and only further ones take a row.
    promotion: Promotion,
    /// Further sources, chained in the promotion rows.
    more: u32,
    /// Its first platform image, if it is an index whose images are listed.
    children: u32,
}

/// The image of a promoted index for one platform (`platforms` in the
/// native format, as `allowlist verify --write-platforms` writes it): a
/// reference to it is promoted for that platform.
#[derive(Debug, Clone)]
struct ChildRow {
    digest: Span,
    /// `os/architecture[/variant]`.
    platform: Span,
    next: u32,
}

/// A tag a digest was published under.
#[derive(Debug, Clone)]
struct TagRow {
    tag: Span,
    next: u32,
    /// The source that named it, for the message when another names it too.
    by: Promotion,
}

#[derive(Debug, Clone)]
struct PromotionRow {
    promotion: Promotion,
    next: u32,
}

/// Hash lookups for one repository, built only once it has more digests
/// than a scan handles faster; most have one to three.
#[derive(Debug, Clone, Default)]
struct RepoIndex {
    /// Digest rows, by their digest.
    by_digest: HashTable<u32>,
    /// (tag row, digest row), by the tag.
    by_tag: HashTable<(u32, u32)>,
}

/// Digests a repository holds before lookups switch from a scan to a hash.
const SCAN_LIMIT: u32 = 8;

/// The rows of one chain, from `first` on.
fn chain<T>(rows: &[T], first: u32, next: fn(&T) -> u32) -> impl Iterator<Item = (u32, &T)> + Clone {
    let mut at = first;
    std::iter::from_fn(move || {
        let row = rows.get(at as usize)?;
        let id = at;
        at = next(row);
        Some((id, row))
    })
}

/// A repository's promoted digests: a view into its [`Allowlist`].
#[derive(Clone, Copy)]
pub struct Repository<'a> {
    list: &'a Allowlist,
    id: u32,
    row: &'a RepoRow,
}

/// One promoted digest of a repository: a view into its [`Allowlist`].
#[derive(Clone, Copy)]
pub struct Promoted<'a> {
    list: &'a Allowlist,
    row: &'a DigestRow,
}

impl fmt::Debug for Repository<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Repository")
            .field("name", &self.name())
            .field("digests", &self.digests().collect::<Vec<_>>())
            .finish()
    }
}

impl fmt::Debug for Promoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Promoted")
            .field("digest", &self.digest())
            .field("tags", &self.tags().collect::<Vec<_>>())
            .field("promotions", &self.promotions().collect::<Vec<_>>())
            .finish()
    }
}

// === impl Repository ===

impl<'a> Repository<'a> {
    /// Canonical `registry/path`.
    pub fn name(&self) -> &'a str {
        self.list.str(self.row.name)
    }

    /// Promoted digests in the order the allowlist lists them.
    pub fn digests(&self) -> impl Iterator<Item = Promoted<'a>> + Clone + use<'a> {
        let list = self.list;
        chain(&list.digests, self.row.first, |d| d.next).map(move |(_, row)| Promoted { list, row })
    }

    /// How many digests are promoted.
    pub fn digest_count(&self) -> usize {
        self.row.count as usize
    }

    /// Whether `digest` is promoted here.
    pub fn is_promoted(&self, digest: &str) -> bool {
        self.list.find_digest(self.id, digest).is_some()
    }

    /// The promoted digest published under `tag`.
    pub fn digest_for_tag(&self, tag: &str) -> Option<Promoted<'a>> {
        let (d, _) = self.list.find_tag(self.id, tag)?;
        self.list.promoted(d)
    }

    /// The explicit rewrite target.
    pub fn rewrite_to(&self) -> Option<Promoted<'a>> {
        self.list.promoted(self.row.rewrite_to)
    }
}

// === impl Promoted ===

impl<'a> Promoted<'a> {
    /// `algorithm:hex`.
    pub fn digest(&self) -> &'a str {
        self.list.str(self.row.digest)
    }

    /// Tags this digest was published under.
    pub fn tags(&self) -> impl Iterator<Item = &'a str> + Clone + use<'a> {
        let list = self.list;
        chain(&list.tags, self.row.tags, |t| t.next).map(move |(_, t)| list.str(t.tag))
    }

    /// The images of this index by platform (`os/arch[/variant]`,
    /// digest), in the order listed.
    pub fn platforms(&self) -> impl Iterator<Item = (&'a str, &'a str)> + Clone + use<'a> {
        let list = self.list;
        chain(&list.children, self.row.children, |c| c.next)
            .map(move |(_, c)| (list.str(c.platform), list.str(c.digest)))
    }

    /// Every source that promotes it, in load order.
    pub fn promotions(&self) -> impl Iterator<Item = Promotion> + Clone + use<'a> {
        let more = chain(&self.list.promotions, self.row.more, |p| p.next).map(|(_, p)| p.promotion);
        std::iter::once(self.row.promotion).chain(more)
    }
}

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
    text: String,
    /// In first-listed order.
    repos: Vec<RepoRow>,
    /// Repository rows, by name.
    by_name: HashTable<u32>,
    hasher: RandomState,
    digests: Vec<DigestRow>,
    tags: Vec<TagRow>,
    promotions: Vec<PromotionRow>,
    children: Vec<ChildRow>,
    /// By repository row, for repositories with many digests.
    indexes: HashMap<u32, RepoIndex>,
    /// Mirror prefix → source prefixes.
    mirrors: HashMap<Box<str>, Vec<Box<str>>>,
    mirror_rules: Vec<MirrorRule>,
    exemptions: Vec<Exemption>,
    short_name_registry: Option<String>,
    /// The source objects digests were promoted by, by index.
    provenances: Vec<Arc<Provenance>>,
    /// (hash of the last path component, loosely compared, repository row),
    /// sorted: the "did you mean" index.
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
    direct: Option<Repository<'a>>,
    mirrored: Vec<Repository<'a>>,
    provenances: &'a [Arc<Provenance>],
}

impl<'a> Candidates<'a> {
    fn entries(&self) -> impl Iterator<Item = Repository<'a>> + '_ {
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

    /// The rewrite target when no tag decides: an explicit `rewriteTo`, else
    /// the only promoted digest. `None` when that is ambiguous.
    pub fn default_target(&self) -> Option<Promoted<'a>> {
        let mut explicit = self.entries().filter_map(|r| r.rewrite_to());
        if let Some(first) = explicit.next() {
            return explicit.all(|p| p.digest() == first.digest()).then_some(first);
        }
        let mut all = self.entries().flat_map(|r| r.digests());
        let first = all.next()?;
        all.all(|p| p.digest() == first.digest()).then_some(first)
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
    fn sources<'s>(&'s self, digest: &'s str) -> impl Iterator<Item = (&'a Arc<Provenance>, u32)> + 's {
        self.entries()
            .flat_map(|r| r.digests())
            .filter(move |p| p.digest() == digest)
            .flat_map(|p| self.sources_of(p))
    }

    /// The sources promoting one digest entry.
    fn sources_of(&self, p: Promoted<'a>) -> impl Iterator<Item = (&'a Arc<Provenance>, u32)> + use<'a> {
        let provenances = self.provenances;
        p.promotions().filter_map(move |promotion| {
            let provenance = provenances.get(promotion.provenance as usize)?;
            Some((provenance, promotion.line))
        })
    }

    /// The newest operator release of one package among the candidates'
    /// sources, when every promoted digest comes from a release of that
    /// package and the newest release promotes exactly one of them: during
    /// an operator upgrade both CSVs are loaded, and the new one is current.
    pub fn newest_release(&self) -> Option<(Promoted<'a>, &'a Arc<Provenance>)> {
        let digests = self.promoted();
        let mut package: Option<&str> = None;
        let mut best: Option<(Promoted<'a>, &Arc<Provenance>)> = None;
        let mut tied = false;
        for &p in &digests {
            let mut newest: Option<&Arc<Provenance>> = None;
            for (provenance, _) in self.sources_of(p) {
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

// === impl Allowlist ===

impl Allowlist {
    /// The string `span` points at.
    fn str(&self, span: Span) -> &str {
        let start = span.start as usize;
        self.text
            .get(start..start + span.len as usize)
            .unwrap_or_default()
    }

    fn hash(&self, s: &str) -> u64 {
        self.hasher.hash_one(s)
    }

    fn view(&self, id: u32) -> Option<Repository<'_>> {
        let row = self.repos.get(id as usize)?;
        Some(Repository { list: self, id, row })
    }

    fn promoted(&self, id: u32) -> Option<Promoted<'_>> {
        let row = self.digests.get(id as usize)?;
        Some(Promoted { list: self, row })
    }

    fn find_repo(&self, name: &str) -> Option<u32> {
        self.by_name
            .find(self.hash(name), |&r| {
                self.str(self.repos[r as usize].name) == name
            })
            .copied()
    }

    /// The digest row of `digest` in repository `repo`.
    fn find_digest(&self, repo: u32, digest: &str) -> Option<u32> {
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
    fn find_tag(&self, repo: u32, tag: &str) -> Option<(u32, u32)> {
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

/// Collects entries from any number of sources and checks they agree.
#[derive(Debug, Default)]
pub struct Builder {
    list: Allowlist,
    /// By repository row.
    rewrite_origins: HashMap<u32, Origin>,
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
    #[error("the {platform} image of {repository}@{index} is {digest}, but {first} names {other} for it")]
    Platform {
        repository: String,
        index: String,
        platform: String,
        digest: String,
        other: String,
        first: Origin,
    },
    #[error("the allowlist holds more than 4 GiB of names, digests and tags")]
    TooLarge,
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

    /// Appends `s` to the text.
    fn intern(&mut self, s: &str) -> Result<Span, Box<Conflict>> {
        let text = &mut self.list.text;
        let start = u32::try_from(text.len()).ok();
        let len = u32::try_from(s.len()).ok();
        match (start, len) {
            (Some(start), Some(len)) if start.checked_add(len).is_some() => {
                text.push_str(s);
                Ok(Span { start, len })
            }
            _ => Err(Box::new(Conflict::TooLarge)),
        }
    }

    /// The row of `repository`, added if new.
    fn repository_row(&mut self, repository: &str) -> Result<u32, Box<Conflict>> {
        if let Some(id) = self.list.find_repo(repository) {
            return Ok(id);
        }
        let name = self.intern(repository)?;
        let id = row_id(self.list.repos.len())?;
        self.list.repos.push(RepoRow {
            name,
            first: NONE,
            last: NONE,
            count: 0,
            rewrite_to: NONE,
        });
        let Allowlist {
            text,
            repos,
            by_name,
            hasher,
            ..
        } = &mut self.list;
        let name_of = |r: &u32| -> u64 { hasher.hash_one(repos[*r as usize].name.of(text)) };
        by_name.insert_unique(name_of(&id), id, name_of);
        Ok(id)
    }

    /// Adds `digest` to repository `repo`, first promoted by `promotion`.
    fn push_digest(&mut self, repo: u32, digest: &str, promotion: Promotion) -> Result<u32, Box<Conflict>> {
        let span = self.intern(digest)?;
        let id = row_id(self.list.digests.len())?;
        self.list.digests.push(DigestRow {
            digest: span,
            next: NONE,
            tags: NONE,
            promotion,
            more: NONE,
            children: NONE,
        });
        let row = &mut self.list.repos[repo as usize];
        match row.last {
            NONE => row.first = id,
            last => self.list.digests[last as usize].next = id,
        }
        row.last = id;
        row.count += 1;
        let (count, first) = (row.count, row.first);
        if self.list.indexes.contains_key(&repo) {
            self.index_digest(repo, id);
        } else if count > SCAN_LIMIT {
            self.list.indexes.entry(repo).or_default();
            let digests: Vec<u32> = chain(&self.list.digests, first, |d| d.next)
                .map(|(d, _)| d)
                .collect();
            for d in digests {
                self.index_digest(repo, d);
                let tags: Vec<u32> = chain(&self.list.tags, self.list.digests[d as usize].tags, |t| t.next)
                    .map(|(t, _)| t)
                    .collect();
                for t in tags {
                    self.index_tag(repo, t, d);
                }
            }
        }
        Ok(id)
    }

    fn index_digest(&mut self, repo: u32, d: u32) {
        let Allowlist {
            text,
            digests,
            indexes,
            hasher,
            ..
        } = &mut self.list;
        let Some(ix) = indexes.get_mut(&repo) else { return };
        let digest_of = |d: &u32| -> u64 { hasher.hash_one(digests[*d as usize].digest.of(text)) };
        ix.by_digest.insert_unique(digest_of(&d), d, digest_of);
    }

    fn index_tag(&mut self, repo: u32, t: u32, d: u32) {
        let Allowlist {
            text,
            tags,
            indexes,
            hasher,
            ..
        } = &mut self.list;
        let Some(ix) = indexes.get_mut(&repo) else { return };
        let tag_of = |(t, _): &(u32, u32)| -> u64 { hasher.hash_one(tags[*t as usize].tag.of(text)) };
        ix.by_tag.insert_unique(tag_of(&(t, d)), (t, d), tag_of);
    }

    /// Records that `promotion` promotes digest row `d` too.
    fn add_promotion(&mut self, d: u32, promotion: Promotion) -> Result<(), Box<Conflict>> {
        let list = &mut self.list;
        let row = &list.digests[d as usize];
        let mut last = None;
        if row.promotion == promotion {
            return Ok(());
        }
        for (id, p) in chain(&list.promotions, row.more, |p| p.next) {
            if p.promotion == promotion {
                return Ok(());
            }
            last = Some(id);
        }
        let id = row_id(list.promotions.len())?;
        list.promotions.push(PromotionRow {
            promotion,
            next: NONE,
        });
        match last {
            None => list.digests[d as usize].more = id,
            Some(last) => list.promotions[last as usize].next = id,
        }
        Ok(())
    }

    /// Adds `tag` to digest row `d` of repository `repo`.
    fn push_tag(&mut self, repo: u32, d: u32, tag: &str, by: Promotion) -> Result<(), Box<Conflict>> {
        let span = self.intern(tag)?;
        let id = row_id(self.list.tags.len())?;
        self.list.tags.push(TagRow {
            tag: span,
            next: NONE,
            by,
        });
        let last = chain(&self.list.tags, self.list.digests[d as usize].tags, |t| t.next).last();
        match last {
            None => self.list.digests[d as usize].tags = id,
            Some((last, _)) => self.list.tags[last as usize].next = id,
        }
        self.index_tag(repo, id, d);
        Ok(())
    }

    /// Where `promotion` was read, as conflict messages name it.
    fn origin_of(&self, promotion: Promotion) -> Origin {
        Origin {
            file: self
                .list
                .provenances
                .get(promotion.provenance as usize)
                .map_or_else(|| Arc::from(""), |p| p.source.clone()),
            line: promotion.line as usize,
            provenance: promotion.provenance,
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
        let repo = self.repository_row(repository)?;
        let promotion = Promotion {
            provenance: origin.provenance,
            line: u32::try_from(origin.line).unwrap_or(u32::MAX),
        };
        let d = match self.list.find_digest(repo, digest) {
            Some(d) => {
                self.add_promotion(d, promotion)?;
                d
            }
            None => self.push_digest(repo, digest, promotion)?,
        };
        for &tag in tags {
            match self.list.find_tag(repo, tag) {
                Some((other, _)) if other == d => {}
                Some((other, t)) => {
                    return Err(Box::new(Conflict::Tag {
                        repository: repository.to_owned(),
                        tag: tag.to_owned(),
                        digest: digest.to_owned(),
                        other: self.list.str(self.list.digests[other as usize].digest).to_owned(),
                        first: self.origin_of(self.list.tags[t as usize].by),
                    }));
                }
                None => self.push_tag(repo, d, tag, promotion)?,
            }
        }
        Ok(())
    }

    /// Names the image of promoted index `index` (already promoted) for
    /// `platform`. The same platform named twice must name one image.
    pub fn platform(
        &mut self,
        repository: &str,
        index: &str,
        platform: &str,
        digest: &str,
    ) -> Result<(), Box<Conflict>> {
        let repo = self.repository_row(repository)?;
        let Some(d) = self.list.find_digest(repo, index) else {
            return Ok(());
        };
        let row = &self.list.digests[d as usize];
        let listed = chain(&self.list.children, row.children, |c| c.next)
            .find(|(_, c)| self.list.str(c.platform) == platform)
            .map(|(_, c)| self.list.str(c.digest).to_owned());
        match listed {
            Some(other) if other == digest => return Ok(()),
            Some(other) => {
                return Err(Box::new(Conflict::Platform {
                    repository: repository.to_owned(),
                    index: index.to_owned(),
                    platform: platform.to_owned(),
                    digest: digest.to_owned(),
                    other,
                    first: self.origin_of(row.promotion),
                }));
            }
            None => {}
        }
        let child = ChildRow {
            digest: self.intern(digest)?,
            platform: self.intern(platform)?,
            next: NONE,
        };
        let id = row_id(self.list.children.len())?;
        self.list.children.push(child);
        // Appended, to keep the order listed.
        let last = chain(&self.list.children, self.list.digests[d as usize].children, |c| {
            c.next
        })
        .last()
        .map(|(i, _)| i);
        match last {
            Some(i) if i != id => self.list.children[i as usize].next = id,
            _ => self.list.digests[d as usize].children = id,
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
        let repo = self.list.find_repo(repository);
        if let Some(first) = repo.and_then(|r| self.rewrite_origins.get(&r)) {
            let current = repo.and_then(|r| self.list.view(r)).and_then(|r| r.rewrite_to());
            let other = current.map_or_else(String::new, |p| p.digest().to_owned());
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
        let Some((repo, d)) = repo.and_then(|r| Some((r, self.list.find_digest(r, digest)?))) else {
            return Err(Box::new(Conflict::RewriteToNotPromoted {
                repository: repository.to_owned(),
                digest: digest.to_owned(),
            }));
        };
        self.list.repos[repo as usize].rewrite_to = d;
        self.rewrite_origins.insert(repo, origin.clone());
        Ok(())
    }

    /// Adds a mirror rule (prefixes already canonical). Rules for one
    /// source merge, as the machine-config operator merges them: mirrors in
    /// order, and never contacting the source if any rule says so.
    pub fn mirror(&mut self, source: &str, mirrors: &[String], never_contact_source: bool) {
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
                rule.never_contact_source |= never_contact_source;
            }
            None => self.list.mirror_rules.push(MirrorRule {
                source: source.to_owned(),
                mirrors: mirrors.to_vec(),
                never_contact_source,
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
            .repos
            .iter()
            .zip(0..)
            .map(|(r, id)| (basename_hash(list.str(r.name)), id))
            .collect();
        basenames.sort_unstable();
        list.basenames = basenames;
        // What growth left spare: the tables are held as long as the list.
        list.text.shrink_to_fit();
        list.repos.shrink_to_fit();
        list.digests.shrink_to_fit();
        list.tags.shrink_to_fit();
        list.promotions.shrink_to_fit();
        list
    }
}

/// The index a new row of a table of `len` rows gets.
fn row_id(len: usize) -> Result<u32, Box<Conflict>> {
    u32::try_from(len)
        .ok()
        .filter(|&id| id != NONE)
        .ok_or_else(|| Box::new(Conflict::TooLarge))
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
        assert_eq!(c.digest_for_tag("v2").unwrap().digest(), d('b'));
        // Two digests and no rewriteTo: nothing decides.
        assert!(c.default_target().is_none());

        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &[], &origin(1)).unwrap();
        b.promote("quay.io/x/y", &d('b'), &[], &origin(2)).unwrap();
        b.rewrite_to("quay.io/x/y", &d('b'), &origin(3)).unwrap();
        let list = b.build();
        assert_eq!(
            list.candidates("quay.io/x/y").default_target().unwrap().digest(),
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
        assert!(list.indexes.contains_key(&repo.id));
        assert_eq!(repo.digest_count(), 20);
        assert_eq!(repo.digests().count(), 20);
        for (i, d) in digests.iter().enumerate() {
            assert!(repo.is_promoted(d));
            assert_eq!(
                repo.digest_for_tag(&format!("v{i}")).unwrap().digest(),
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
        b.mirror("registry.redhat.io/rhods", &["quay.io/modh".to_owned()], false);
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
            (p.digest(), by.release().as_deref()),
            (d('b').as_str(), Some("op 1.10.0"))
        );
        assert_eq!(
            c.promotions(&d('b'))[0].0.origin,
            "ClusterServiceVersion op.1.10.0"
        );
    }

    #[test]
    fn a_repository_costs_its_rows_and_its_strings() {
        // The memory of a reload under load (the old and the new list held
        // at once): a repository with one digest, one tag and one source is
        // one row of each of three tables and its strings, with no spare
        // room; the single source is held in the digest's row.
        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(1)).unwrap();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(1)).unwrap();
        let list = b.build();
        assert_eq!(
            (
                list.repos.len(),
                list.digests.len(),
                list.tags.len(),
                list.promotions.len()
            ),
            (1, 1, 1, 0)
        );
        assert_eq!(list.text, format!("quay.io/x/y{}v1", d('a')));
        assert_eq!(
            (
                list.text.capacity(),
                list.repos.capacity(),
                list.digests.capacity(),
                list.tags.capacity()
            ),
            (list.text.len(), 1, 1, 1)
        );
        // A second source promoting the same digest takes a row of its own.
        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(1)).unwrap();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(2)).unwrap();
        let list = b.build();
        let lines: Vec<u32> = list
            .repositories()
            .flat_map(|r| r.digests())
            .flat_map(|p| p.promotions())
            .map(|p| p.line)
            .collect();
        assert_eq!(lines, [1, 2]);
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
        let (p, by) = list.candidates("quay.io/x/y").newest_release().unwrap();
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
