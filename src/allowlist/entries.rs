//! What every format's reader writes to: [`Entries`] (the builder and the
//! problems found), [`Ctx`] (where in a structured document an entry is),
//! [`promotable`], the one rule for an image a list may promote, and what a
//! reader says it read ([`Format`], [`SourceSummary`]).

use std::sync::Arc;

use serde_json::Value;

use super::error::LoadError;
use super::input::SourceKind;
use super::{Builder, Origin};
use crate::reference;
use crate::yaml::{self, Document};

/// What kind of source a file was, as `lint` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
pub enum Format {
    #[strum(serialize = "Allowlist")]
    Native,
    ClusterServiceVersion,
    ImageSetConfiguration,
    #[strum(serialize = "plain list")]
    PlainList,
    /// An OLM file-based catalog (`olm.package`, `olm.channel`, `olm.bundle`).
    #[strum(serialize = "file-based catalog")]
    Catalog,
    /// A YAML stream holding documents of several of the above.
    #[strum(serialize = "mixed documents")]
    Mixed,
}

/// What one source contributed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSummary {
    pub file: String,
    pub format: Format,
    /// Promoted images read from it.
    pub entries: usize,
}

/// Where in a structured document an entry is.
pub(super) struct Ctx<'a> {
    pub(super) file: &'a str,
    /// Shared by every entry's origin, so origins cost no allocation.
    pub(super) shared: Arc<str>,
    pub(super) doc: &'a Document,
}

impl Ctx<'_> {
    pub(super) fn error(&self, pointer: &str, message: impl Into<String>) -> LoadError {
        LoadError {
            file: self.file.to_owned(),
            line: Some(self.doc.line_of(pointer)),
            entry: (!pointer.is_empty()).then(|| dotted(pointer)),
            message: message.into(),
        }
    }

    pub(super) fn origin(&self, pointer: &str, provenance: u32) -> Origin {
        Origin {
            file: self.shared.clone(),
            line: self.doc.line_of(pointer),
            provenance,
        }
    }
}

/// `/spec/repositories/2/name` → `spec.repositories[2].name`
pub(super) fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for token in pointer.split('/').skip(1) {
        if !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) {
            out.push('[');
            out.push_str(token);
            out.push(']');
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&yaml::decoded(token));
        }
    }
    out
}

/// Where a format's reader puts what it reads: the builder, and the
/// problems it finds. All a reader sees of loading (the dispatcher, the
/// catalog's state, the summaries stay the [`Loader`]'s).
pub(super) struct Entries<'l> {
    pub(super) builder: &'l mut Builder,
    pub(super) errors: &'l mut Vec<LoadError>,
    pub(super) warnings: &'l mut Vec<LoadError>,
    /// What the source being read is.
    pub(super) kind: &'l SourceKind,
}

impl Entries<'_> {
    pub(super) fn string<'v>(
        &mut self,
        ctx: &Ctx<'_>,
        value: Option<&'v Value>,
        ptr: &str,
    ) -> Option<&'v str> {
        match value {
            Some(Value::String(s)) => Some(s),
            None | Some(Value::Null) => {
                self.errors.push(ctx.error(ptr, "is required"));
                None
            }
            Some(other) => {
                self.errors.push(ctx.error(
                    ptr,
                    format!("expected a string, found {}", yaml::type_name(other)),
                ));
                None
            }
        }
    }

    /// Promotes the image named at `key` of each item of the list at
    /// `list` in `doc` (at `ptr` in its file): how CSVs and
    /// ImageSetConfigurations list their images.
    pub(super) fn promote_list(
        &mut self,
        ctx: &Ctx<'_>,
        doc: &Value,
        ptr: &str,
        list: &str,
        key: &str,
        provenance: u32,
    ) -> usize {
        let Some(Value::Array(items)) = doc.pointer(list) else {
            return 0;
        };
        let mut entries = 0;
        for (i, item) in items.iter().enumerate() {
            let p = format!("{ptr}{list}/{i}/{key}");
            if let Some(image) = self.string(ctx, item.get(key), &p) {
                entries += self.promote_image(ctx, image, &p, provenance);
            }
        }
        entries
    }

    /// Promotes an image listed by a CSV or ImageSetConfiguration. Those also
    /// list images pinned only by tag, which cannot be promoted: skip them
    /// with a warning rather than refuse the operator's whole list.
    pub(super) fn promote_image(&mut self, ctx: &Ctx<'_>, image: &str, ptr: &str, provenance: u32) -> usize {
        self.promote_at(image, &ctx.origin(ptr, provenance), |message| {
            ctx.error(ptr, message)
        })
    }

    /// [`Entries::promote_image`] at `origin`, problems located by `error`.
    pub(super) fn promote_at(
        &mut self,
        image: &str,
        origin: &Origin,
        error: impl Fn(String) -> LoadError,
    ) -> usize {
        match promotable(image) {
            Ok((repo, digest, tag)) => {
                let tags: Vec<&str> = tag.into_iter().collect();
                match self.builder.promote(&repo, digest, &tags, origin) {
                    Ok(()) => 1,
                    Err(c) => {
                        self.errors.push(error(c.to_string()));
                        0
                    }
                }
            }
            Err(message) if reference::parse(image).is_ok() => {
                self.warnings.push(error(format!("{message}; skipped")));
                0
            }
            Err(message) => {
                self.errors.push(error(message));
                0
            }
        }
    }
}

/// Splits a promoted image into (canonical repository, digest, tag), or says
/// why it cannot be promoted.
pub(super) fn promotable(image: &str) -> Result<(String, &str, Option<&str>), String> {
    let r = reference::parse(image).map_err(|e| format!("'{image}' is not a valid image reference: {e}"))?;
    let Some(digest) = r.digest() else {
        return Err(format!(
            "'{image}' is not pinned by digest; a promoted list needs repo[:tag]@sha256:..."
        ));
    };
    let Some(repo) = r.canonical_repository(None) else {
        return Err(format!(
            "'{image}' has no registry host: {}; write the registry, e.g. {}@{digest}",
            r.short_name_reading(),
            r.docker_hub_repository()
        ));
    };
    Ok((repo.into_owned(), digest, r.tag()))
}
