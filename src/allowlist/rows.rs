//! The row tables an [`Allowlist`] is made of (repositories, digests, tags,
//! promotions, platform children), their shared text, and the views over
//! one row ([`Repository`], [`Promoted`]).

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::Hasher;

use hashbrown::HashTable;

use super::*;

/// Where a string sits in [`Allowlist`]'s text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) start: u32,
    pub(super) len: u32,
}

impl Span {
    /// The string it points at in `text`; empty if it does not fit, which
    /// only a bug could cause.
    pub(super) fn of(self, text: &str) -> &str {
        let start = self.start as usize;
        text.get(start..start + self.len as usize).unwrap_or_default()
    }
}

/// No row: the end of a chain, or no rewrite target.
pub(super) const NONE: u32 = u32::MAX;

/// A repository. Its digests chain from `first` by [`DigestRow::next`], in
/// the order listed.
#[derive(Debug, Clone)]
pub(super) struct RepoRow {
    pub(super) name: Span,
    pub(super) first: u32,
    pub(super) last: u32,
    pub(super) count: u32,
    pub(super) rewrite_to: u32,
}

/// A promoted digest of a repository.
#[derive(Debug, Clone)]
pub(super) struct DigestRow {
    /// `algorithm:hex`.
    pub(super) digest: Span,
    /// The repository's next digest.
    pub(super) next: u32,
    /// Its first tag in the tag rows.
    pub(super) tags: u32,
    /// The first source promoting it: most digests have one, so it is kept
    /// here and only further ones take a row.
    pub(super) promotion: Promotion,
    /// Further sources, chained in the promotion rows.
    pub(super) more: u32,
    /// Its first platform image, if it is an index whose images are listed.
    pub(super) children: u32,
}

/// The image of a promoted index for one platform (`platforms` in the
/// native format, as `allowlist verify --write-platforms` writes it): a
/// reference to it is promoted for that platform.
#[derive(Debug, Clone)]
pub(super) struct ChildRow {
    pub(super) digest: Span,
    /// `os/architecture[/variant]`.
    pub(super) platform: Span,
    pub(super) next: u32,
}

/// A tag a digest was published under.
#[derive(Debug, Clone)]
pub(super) struct TagRow {
    pub(super) tag: Span,
    pub(super) next: u32,
    /// The source that named it, for the message when another names it too.
    pub(super) by: Promotion,
}

#[derive(Debug, Clone)]
pub(super) struct PromotionRow {
    pub(super) promotion: Promotion,
    pub(super) next: u32,
}

/// Hash lookups for one repository, built only once it has more digests
/// than a scan handles faster; most have one to three.
#[derive(Debug, Clone, Default)]
pub(super) struct RepoIndex {
    /// Digest rows, by their digest.
    pub(super) by_digest: HashTable<u32>,
    /// (tag row, digest row), by the tag.
    pub(super) by_tag: HashTable<(u32, u32)>,
}

/// Digests a repository holds before lookups switch from a scan to a hash.
pub(super) const SCAN_LIMIT: u32 = 8;

/// The rows of one chain, from `first` on.
pub(super) fn chain<T>(
    rows: &[T],
    first: u32,
    next: fn(&T) -> u32,
) -> impl Iterator<Item = (u32, &T)> + Clone {
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
    pub(super) list: &'a Allowlist,
    pub(super) id: u32,
    pub(super) row: &'a RepoRow,
}

/// One promoted digest of a repository: a view into its [`Allowlist`].
#[derive(Clone, Copy)]
pub struct Promoted<'a> {
    pub(super) list: &'a Allowlist,
    pub(super) row: &'a DigestRow,
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

/// A repository name's last component as "did you mean" compares it: case
/// and the separators `-`, `_` and `.` are what people get wrong.
pub(super) fn loose_basename(name: &str) -> impl Iterator<Item = u8> + '_ {
    let basename = name.rsplit('/').next().unwrap_or(name);
    basename
        .bytes()
        .filter(|b| !matches!(b, b'-' | b'_' | b'.'))
        .map(|b| b.to_ascii_lowercase())
}

pub(super) fn basename_hash(name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    for b in loose_basename(name) {
        h.write_u8(b);
    }
    h.finish()
}

/// The index a new row of a table of `len` rows gets.
pub(super) fn row_id(len: usize) -> Result<u32, Box<Conflict>> {
    u32::try_from(len)
        .ok()
        .filter(|&id| id != NONE)
        .ok_or_else(|| Box::new(Conflict::TooLarge))
}
