//! Where images live: every image site of the kinds digest-gate knows, each
//! with its JSON Pointer and the container (or volume) it belongs to.
//!
//! Walkers are defensive: KServe's minimal CRD does not validate `spec`, so a
//! `containers` that is not a list or an image that is not a string becomes a
//! site with a reason, never a panic. Kinds without images are not errors.
//!
//! [`kinds`] is the table of kinds (where each keeps its images), `walk` the
//! walkers that follow it, [`prune`] the decoder that keeps only what they read.

use std::borrow::Cow;

use json_patch::jsonptr::{Pointer, PointerBuf};
use serde_json::Value;

use crate::yaml::Document;

pub mod kinds;
pub mod prune;
mod walk;

pub use kinds::{KINDS, Kind, Layout, kind_label};
pub use prune::{LISTED, OBJECT, Pruned, Shape};
use walk::visit;

/// What an image site belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Container,
    InitContainer,
    EphemeralContainer,
    /// A container of a multi-node runtime's `workerSpec`.
    WorkerContainer,
    /// An image volume (`volumes[].image.reference`).
    Volume,
    /// An InferenceService predictor's model or framework image.
    Predictor,
    /// The explainer's image.
    Explainer,
    /// Structure around images that is malformed.
    Structure,
}

/// One place an image is (or should be) written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// JSON Pointer in the object; for an image inside an embedded document,
    /// the pointer of the string that holds the document (see [`Site::path`]).
    pub pointer: PointerBuf,
    pub role: Role,
    /// Container or volume name (or framework, for InferenceService).
    pub name: Option<String>,
    /// The image, or why there is no usable one here.
    pub image: Result<String, String>,
    /// For embedded documents: which one, and the pointer inside it.
    pub embedded: Option<EmbeddedSite>,
    /// Inside a Template: which of its objects (`objects[1] ServingRuntime
    /// ovms`), so two objects' containers of one name are told apart.
    pub within: Option<String>,
    /// The Template parameter the image is the default of: the object says
    /// `${NAME}` and [`Site::pointer`] is the parameter's `value`.
    pub parameter: Option<String>,
}

/// Where an embedded site lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedSite {
    /// Index into [`Walk::embedded`].
    pub source: usize,
    /// Document index within the embedded text.
    pub document: usize,
    /// Pointer inside that document.
    pub pointer: PointerBuf,
    /// Line of the image inside the embedded text.
    pub line: usize,
}

/// A YAML text inside an object (a ConfigMap value) that holds runtimes.
#[derive(Debug, Clone)]
pub struct Embedded {
    /// Pointer of the string in the object, e.g. `/data/default-config`.
    pub pointer: PointerBuf,
    pub text: String,
    pub documents: Vec<Document>,
}

/// The image sites of one object.
#[derive(Debug, Clone, Default)]
pub struct Walk {
    /// Whether the kind is one digest-gate knows how to read.
    pub known: bool,
    pub sites: Vec<Site>,
    pub embedded: Vec<Embedded>,
    /// What the embedded runtime documents read so far took: bytes of text
    /// and nodes, against [`walk::EMBEDDED_BYTES`] and [`walk::EMBEDDED_NODES`].
    spent: (usize, usize),
}

// === impl Site ===

impl Site {
    /// Where the site is, as reports and audit records name it: its JSON
    /// Pointer, or for an embedded document `/data/<key>#<pointer in the
    /// document>`, the document's index (from the second on) before the
    /// inner pointer: `/data/<key>#1/spec/containers/0/image`.
    pub fn path(&self) -> Cow<'_, str> {
        match &self.embedded {
            None => Cow::Borrowed(self.pointer.as_str()),
            Some(e) if e.document == 0 => Cow::Owned(format!("{}#{}", self.pointer, e.pointer)),
            Some(e) => Cow::Owned(format!("{}#{}{}", self.pointer, e.document, e.pointer)),
        }
    }

    /// How messages refer to this site, e.g. `container "ovms"`.
    pub fn describe(&self) -> String {
        let what = match self.role {
            Role::Container => "container",
            Role::InitContainer => "init container",
            Role::EphemeralContainer => "ephemeral container",
            Role::WorkerContainer => "worker container",
            Role::Volume => "image volume",
            Role::Predictor => "predictor",
            Role::Explainer => "explainer",
            Role::Structure => {
                return match &self.within {
                    Some(within) => format!("{within}: at {}", self.path()),
                    None => format!("at {}", self.path()),
                };
            }
        };
        let mut out = match &self.within {
            Some(within) => format!("{within}: {what}"),
            None => what.to_owned(),
        };
        match &self.name {
            Some(name) => out.push_str(&format!(" \"{name}\"")),
            None => out.push_str(&format!(" at {}", self.path())),
        }
        if let Some(parameter) = &self.parameter {
            out.push_str(&format!(" (parameter {parameter})"));
        }
        out
    }
}

/// Finds the image sites of `object` by its own `apiVersion` and `kind`.
pub fn walk(object: &Value) -> Walk {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    walk_as(group_of(api_version), kind, object)
}

/// The API group of an `apiVersion` (`apps/v1` → `apps`, `v1` → ``).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Finds the image sites of `object`, read as `group`/`kind` (the webhook
/// knows the kind from the request even when the object omits it).
pub fn walk_as(group: &str, kind: &str, object: &Value) -> Walk {
    let mut walk = Walk::default();
    walk.known = visit(group, kind, object, Pointer::root(), &mut walk, 0);
    if walk.sites.len() > MAX_SITES {
        let found = walk.sites.len();
        let first_unjudged = walk.sites.swap_remove(MAX_SITES).pointer;
        walk.sites.truncate(MAX_SITES);
        walk.sites.push(walk::structure(
            &first_unjudged,
            format!("{found} images in one object, more than the {MAX_SITES} digest-gate judges; refusing to judge it"),
        ));
    }
    walk
}

/// The most image sites one object may have. Each judged image costs about
/// 5 KB until the answer is sent (its decision, message, warning, patch
/// operation and record), so 66,000 containers in one 8 MiB review took
/// 256 MB; a Pod has a handful, an OpenShift Template of many objects a
/// few hundred.
pub const MAX_SITES: usize = 4096;
