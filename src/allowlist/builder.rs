//! The [`Builder`] every format's reader adds entries to, and the
//! [`Conflict`]s it refuses.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use super::provenance::link_replaces;
use super::*;

/// Collects entries from any number of sources and checks they agree.
#[derive(Debug, Default)]
pub struct Builder {
    pub(super) list: Allowlist,
    /// By repository row.
    pub(super) rewrite_origins: HashMap<u32, Origin>,
    pub(super) short_name_origin: Option<Origin>,
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
    pub(super) fn intern(&mut self, s: &str) -> Result<Span, Box<Conflict>> {
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
    pub(super) fn repository_row(&mut self, repository: &str) -> Result<u32, Box<Conflict>> {
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
    pub(super) fn push_digest(
        &mut self,
        repo: u32,
        digest: &str,
        promotion: Promotion,
    ) -> Result<u32, Box<Conflict>> {
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

    pub(super) fn index_digest(&mut self, repo: u32, d: u32) {
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

    pub(super) fn index_tag(&mut self, repo: u32, t: u32, d: u32) {
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
    pub(super) fn add_promotion(&mut self, d: u32, promotion: Promotion) -> Result<(), Box<Conflict>> {
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
    pub(super) fn push_tag(
        &mut self,
        repo: u32,
        d: u32,
        tag: &str,
        by: Promotion,
    ) -> Result<(), Box<Conflict>> {
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
    pub(super) fn origin_of(&self, promotion: Promotion) -> Origin {
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
