//! The native `Allowlist` document as serde types, read from the YAML events
//! straight into the allowlist [`Builder`].
//!
//! Repositories are judged one at a time as the reader reaches them, so
//! loading holds the text, the allowlist being built and one repository entry:
//! never the document as a tree. serde checks the shape (unknown fields,
//! types, required fields) and stops at the first such error in a document;
//! the checks of meaning (digest syntax, registry hosts, conflicts) are made
//! here and every one of them is reported.

use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::error::LoadError;
use super::{Builder, Exemption, Origin, Pattern};
use crate::published::Platform;
use crate::reference;
use crate::yaml::de::{Cause, Error, Located, Reader};

/// The `apiVersion` of the native document.
pub const API_VERSION: &str = "digest-gate.dev/v1alpha1";

/// `spec.repositories[]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RepositoryEntry {
    name: Located<String>,
    digests: Option<Located<Vec<Located<DigestEntry>>>>,
    rewrite_to: Option<Located<String>>,
}

/// `digests[]`: a digest, or a digest with the tags it was published under.
#[derive(Debug)]
enum DigestEntry {
    Digest(String),
    Tagged(TaggedDigest),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaggedDigest {
    digest: String,
    tags: Option<Vec<Located<String>>>,
    /// An index's images by platform: each is promoted for its platform.
    platforms: Option<Vec<Located<PlatformEntry>>>,
}

/// `digests[].platforms[]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlatformEntry {
    platform: Located<String>,
    digest: Located<String>,
}

impl<'de> Deserialize<'de> for DigestEntry {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntryVisitor;

        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = DigestEntry;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a digest or a mapping with 'digest', 'tags' and 'platforms'")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<DigestEntry, E> {
                Ok(DigestEntry::Digest(v.to_owned()))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<DigestEntry, E> {
                Ok(DigestEntry::Digest(v))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<DigestEntry, A::Error> {
                TaggedDigest::deserialize(de::value::MapAccessDeserializer::new(map)).map(DigestEntry::Tagged)
            }
        }

        d.deserialize_any(EntryVisitor)
    }
}

/// `spec.mirrors[]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
struct MirrorEntry {
    source: Located<String>,
    mirrors: Option<Located<Vec<Located<String>>>>,
    /// As in ImageDigestMirrorSet; absent means AllowContactingSource.
    mirror_source_policy: Option<Located<String>>,
}

/// The part of `metadata` provenance names.
#[derive(Deserialize)]
struct Metadata {
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum DocumentField {
    ApiVersion,
    Kind,
    Metadata,
    Spec,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum SpecField {
    Repositories,
    Mirrors,
    ExemptImages,
    ShortNameRegistry,
}

/// Where entries go, and where their problems are written down.
pub(super) struct Sink<'l> {
    pub builder: &'l mut Builder,
    pub errors: &'l mut Vec<LoadError>,
    pub file: &'l str,
    /// Shared by every entry's origin, so origins cost no allocation.
    pub shared: Arc<str>,
    /// The document's place in its file (`items[2]` in a List), or empty.
    pub base: String,
    /// Promoted images read.
    pub entries: usize,
    /// The document's provenance, named when its `metadata` is read.
    pub provenance: u32,
}

/// A structural error: where it is, and what.
pub(super) struct Refused {
    pub error: Error,
    /// The entry, e.g. `spec.repositories[2].digests[0]`.
    pub entry: Option<String>,
}

/// Reads one native document (after its `kind` and `apiVersion` were
/// checked) into `sink`.
pub(super) fn read(reader: &mut Reader<'_>, sink: &mut Sink<'_>) -> Result<(), Refused> {
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(&mut *reader, &mut track);
    DocumentSeed(sink).deserialize(de).map_err(|mut error| {
        let mut path = track.path().to_string();
        // A key that could not be read has no name in the path.
        if let Some(known) = path.strip_suffix(".?") {
            path = known.to_owned();
        }
        // "spec.repositories[0].name: is required" points at what to add.
        if let Cause::Missing(field) = error.cause {
            path = if path == "." {
                field.to_owned()
            } else {
                format!("{path}.{field}")
            };
            error.message = "is required".into();
        }
        let entry = match (sink.base.is_empty(), path == ".") {
            (true, true) => None,
            (true, false) => Some(path),
            (false, true) => Some(sink.base.clone()),
            (false, false) => Some(format!("{}.{path}", sink.base)),
        };
        Refused { error, entry }
    })
}

struct DocumentSeed<'s, 'l>(&'s mut Sink<'l>);

impl<'de> DeserializeSeed<'de> for DocumentSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DocumentSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut spec_seen = false;
        while let Some(field) = map.next_key::<DocumentField>()? {
            match field {
                DocumentField::ApiVersion | DocumentField::Kind => {
                    map.next_value::<IgnoredAny>()?;
                }
                DocumentField::Metadata => {
                    let metadata = map.next_value::<Metadata>()?;
                    if let Some(name) = metadata.name {
                        let sink = &mut *self.0;
                        sink.builder
                            .name_provenance(sink.provenance, format!("Allowlist {name}"));
                    }
                }
                DocumentField::Spec if spec_seen => return Err(de::Error::duplicate_field("spec")),
                DocumentField::Spec => {
                    spec_seen = true;
                    map.next_value_seed(SpecSeed(&mut *self.0))?;
                }
            }
        }
        Ok(())
    }
}

/// `spec`, which may be empty.
struct SpecSeed<'s, 'l>(&'s mut Sink<'l>);

impl<'de> DeserializeSeed<'de> for SpecSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for SpecSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping")
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let sink = self.0;
        let mut seen = [false; 4];
        while let Some(field) = map.next_key::<SpecField>()? {
            let (i, name) = match field {
                SpecField::Repositories => (0, "repositories"),
                SpecField::Mirrors => (1, "mirrors"),
                SpecField::ExemptImages => (2, "exemptImages"),
                SpecField::ShortNameRegistry => (3, "shortNameRegistry"),
            };
            if std::mem::replace(&mut seen[i], true) {
                return Err(de::Error::duplicate_field(name));
            }
            match field {
                SpecField::Repositories => map.next_value_seed(RepositoriesSeed(&mut *sink))?,
                SpecField::Mirrors => {
                    let rules: Option<Vec<Located<MirrorEntry>>> = map.next_value()?;
                    for (i, rule) in rules.unwrap_or_default().into_iter().enumerate() {
                        sink.mirror(rule, i);
                    }
                }
                SpecField::ExemptImages => {
                    let patterns: Option<Vec<Located<String>>> = map.next_value()?;
                    for (i, pattern) in patterns.unwrap_or_default().into_iter().enumerate() {
                        sink.exempt(pattern, i);
                    }
                }
                SpecField::ShortNameRegistry => {
                    if let Some(registry) = map.next_value::<Option<Located<String>>>()? {
                        sink.short_name_registry(registry);
                    }
                }
            }
        }
        Ok(())
    }
}

/// `spec.repositories`: each entry goes to the builder as soon as it is read.
struct RepositoriesSeed<'s, 'l>(&'s mut Sink<'l>);

impl<'de> DeserializeSeed<'de> for RepositoriesSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for RepositoriesSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while let Some(entry) = seq.next_element::<Located<RepositoryEntry>>()? {
            self.0.repository(entry, i);
            i += 1;
        }
        Ok(())
    }
}

// === impl Sink ===

impl Sink<'_> {
    fn error(&mut self, line: usize, entry: impl fmt::Display, message: impl Into<String>) {
        let entry = if self.base.is_empty() {
            entry.to_string()
        } else {
            format!("{}.{entry}", self.base)
        };
        self.errors.push(LoadError {
            file: self.file.to_owned(),
            line: Some(line),
            entry: Some(entry),
            message: message.into(),
        });
    }

    fn origin(&self, line: usize) -> Origin {
        Origin {
            file: self.shared.clone(),
            line,
            provenance: self.provenance,
        }
    }

    fn short_name_registry(&mut self, registry: Located<String>) {
        match reference::canonical_prefix(&registry.value) {
            Ok(r) if !r.contains('/') => {
                if let Err(c) = self.builder.short_name_registry(&r, &self.origin(registry.line)) {
                    self.error(registry.line, "spec.shortNameRegistry", c.to_string());
                }
            }
            _ => self.error(
                registry.line,
                "spec.shortNameRegistry",
                format!("'{}' is not a registry host name", registry.value),
            ),
        }
    }

    fn repository(&mut self, entry: Located<RepositoryEntry>, i: usize) {
        let RepositoryEntry {
            name,
            digests,
            rewrite_to,
        } = entry.value;
        let Some(canonical) = self.repository_name(&name, i) else {
            return;
        };
        let (digests_line, digests) = digests.map_or((entry.line, Vec::new()), |d| (d.line, d.value));
        if digests.is_empty() {
            self.error(
                digests_line,
                format_args!("spec.repositories[{i}].digests"),
                format!("{} lists no promoted digests", name.value),
            );
        }
        for (j, d) in digests.into_iter().enumerate() {
            self.promote(&canonical, d, i, j);
        }
        if let Some(target) = rewrite_to
            && let Err(c) = self
                .builder
                .rewrite_to(&canonical, &target.value, &self.origin(target.line))
        {
            self.error(
                target.line,
                format_args!("spec.repositories[{i}].rewriteTo"),
                c.to_string(),
            );
        }
    }

    /// A repository's name, canonical; `None` once the error is recorded.
    fn repository_name(&mut self, name: &Located<String>, i: usize) -> Option<String> {
        let text = &name.value;
        let problem = match reference::parse(text) {
            Err(e) => format!("'{text}' is not a repository name: {e}"),
            Ok(r) if r.tag().is_some() || r.digest().is_some() => {
                format!(
                    "'{text}' must be a repository name without tag or digest; list digests under 'digests'"
                )
            }
            Ok(r) => match r.canonical_repository(None) {
                Some(c) => return Some(c.into_owned()),
                None => format!(
                    "'{text}' has no registry host: {}; write the registry, e.g. {}",
                    r.short_name_reading(),
                    r.docker_hub_repository()
                ),
            },
        };
        self.error(name.line, format_args!("spec.repositories[{i}].name"), problem);
        None
    }

    fn promote(&mut self, repository: &str, entry: Located<DigestEntry>, i: usize, j: usize) {
        let line = entry.line;
        let (digest, tags, platforms) = match entry.value {
            DigestEntry::Digest(d) => (d, Vec::new(), Vec::new()),
            DigestEntry::Tagged(t) => (
                t.digest,
                t.tags.unwrap_or_default(),
                t.platforms.unwrap_or_default(),
            ),
        };
        let mut valid_tags = Vec::with_capacity(tags.len());
        for (k, tag) in tags.iter().enumerate() {
            match reference::validate_tag_str(&tag.value) {
                Ok(()) => valid_tags.push(tag.value.as_str()),
                Err(e) => self.error(
                    tag.line,
                    format_args!("spec.repositories[{i}].digests[{j}].tags[{k}]"),
                    e.to_string(),
                ),
            }
        }
        if let Err(e) = reference::validate_digest_str(&digest) {
            self.error(
                line,
                format_args!("spec.repositories[{i}].digests[{j}]"),
                format!("'{digest}' is not a valid digest: {e}"),
            );
            return;
        }
        match self
            .builder
            .promote(repository, &digest, &valid_tags, &self.origin(line))
        {
            Ok(()) => self.entries += 1,
            Err(c) => self.error(
                line,
                format_args!("spec.repositories[{i}].digests[{j}]"),
                c.to_string(),
            ),
        }
        for (k, p) in platforms.into_iter().enumerate() {
            self.platform(repository, &digest, p, (i, j, k));
        }
    }

    /// One `platforms[]` entry of promoted index `index`.
    fn platform(
        &mut self,
        repository: &str,
        index: &str,
        entry: Located<PlatformEntry>,
        (i, j, k): (usize, usize, usize),
    ) {
        let PlatformEntry { platform, digest } = entry.value;
        let at = || format!("spec.repositories[{i}].digests[{j}].platforms[{k}]");
        let parsed = match platform.value.parse::<Platform>() {
            Ok(p) => p,
            Err(e) => {
                self.error(platform.line, format_args!("{}.platform", at()), e.to_string());
                return;
            }
        };
        if let Err(e) = reference::validate_digest_str(&digest.value) {
            let message = format!("'{}' is not a valid digest: {e}", digest.value);
            self.error(digest.line, format_args!("{}.digest", at()), message);
            return;
        }
        let platform = parsed.to_string();
        if let Err(c) = self.builder.platform(repository, index, &platform, &digest.value) {
            self.error(entry.line, format_args!("{}", at()), c.to_string());
        }
    }

    fn mirror(&mut self, rule: Located<MirrorEntry>, i: usize) {
        let MirrorEntry {
            source,
            mirrors,
            mirror_source_policy,
        } = rule.value;
        let never_contact_source = match mirror_source_policy {
            None => false,
            Some(p) if p.value == super::ALLOW_CONTACTING_SOURCE => false,
            Some(p) if p.value == super::NEVER_CONTACT_SOURCE => true,
            Some(p) => {
                let message = format!(
                    "'{}' is not a mirror source policy: write {} or {}",
                    p.value,
                    super::ALLOW_CONTACTING_SOURCE,
                    super::NEVER_CONTACT_SOURCE
                );
                self.error(
                    p.line,
                    format_args!("spec.mirrors[{i}].mirrorSourcePolicy"),
                    message,
                );
                false
            }
        };
        let source = match reference::canonical_prefix(&source.value) {
            Ok(s) => s,
            Err(e) => {
                let message = format!("'{}' is not a registry or repository prefix: {e}", source.value);
                self.error(source.line, format_args!("spec.mirrors[{i}].source"), message);
                return;
            }
        };
        let (mirrors_line, listed) = mirrors.map_or((rule.line, Vec::new()), |m| (m.line, m.value));
        let mut canonical = Vec::with_capacity(listed.len());
        for (j, m) in listed.iter().enumerate() {
            match reference::canonical_prefix(&m.value) {
                Ok(c) => canonical.push(c),
                Err(e) => self.error(
                    m.line,
                    format_args!("spec.mirrors[{i}].mirrors[{j}]"),
                    format!("'{}' is not a registry or repository prefix: {e}", m.value),
                ),
            }
        }
        if canonical.is_empty() {
            self.error(
                mirrors_line,
                format_args!("spec.mirrors[{i}].mirrors"),
                "lists no mirrors",
            );
        }
        self.builder.mirror(&source, &canonical, never_contact_source);
    }

    fn exempt(&mut self, pattern: Located<String>, i: usize) {
        match Pattern::parse(&pattern.value) {
            Ok(p) => self.builder.exempt(Exemption {
                pattern: p,
                origin: self.origin(pattern.line).to_string(),
            }),
            Err(e) => self.error(
                pattern.line,
                format_args!("spec.exemptImages[{i}]"),
                e.to_string(),
            ),
        }
    }
}
