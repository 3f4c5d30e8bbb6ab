//! What a document holds: objects (a `kind: List`'s items, completed with
//! the kind the List names; an AdmissionReview's `request.object`, read as
//! the webhook reads it) or something else, and where each object and
//! image stands in the file.

use serde_json::Value;

use crate::json::Piece;
use crate::judge::{self, ImageJudgement};
use crate::report::Position;
use crate::yaml::{self, Document, Offsets};

/// What a document holds.
pub(super) enum Content<'d> {
    /// Objects, each with its pointer prefix in the document; a `kind: List`
    /// gives its items, possibly none.
    Objects(Vec<Found<'d>>),
    /// Not a Kubernetes object: what it is instead.
    Other(String),
}

/// An object found in a document, with its pointer prefix in the document.
pub(super) struct Found<'d> {
    pub(super) object: &'d Value,
    pub(super) prefix: String,
    pub(super) item: Option<usize>,
    /// Wrapped in an AdmissionReview: judged as the webhook would.
    pub(super) review: Option<Review<'d>>,
}

/// What an AdmissionReview says of the object it wraps: the kind the
/// apiserver names (which the webhook judges by), and on UPDATE the object
/// before, so only images new or changed are judged.
pub(super) struct Review<'d> {
    pub(super) group: &'d str,
    pub(super) kind: &'d str,
    pub(super) operation: &'d str,
    pub(super) old: Option<&'d Value>,
}

/// A string value, or "" for anything else.
fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

/// The object an `admission.k8s.io` AdmissionReview carries, at
/// `/request/object`, read by the webhook's own rule ([`judge::asked`]):
/// a review the webhook would allow unjudged (a DELETE, an object being
/// finalized), or could not answer, is not an object to check, and says
/// why.
fn review(value: &Value) -> Content<'_> {
    let request = &value["request"];
    let operation = str_of(&request["operation"]);
    let (object, old) = match judge::asked(
        judge::Operation::of(operation),
        request.get("object"),
        request.get("oldObject"),
    ) {
        judge::Asked::Judge { object, old } => (object, old),
        judge::Asked::Unjudged(judge::Unjudged::Operation) => {
            return Content::Other(format!(
                "an AdmissionReview of a {operation}, which the webhook allows without judging"
            ));
        }
        judge::Asked::Unjudged(judge::Unjudged::Finalizing) => {
            return Content::Other(
                "an AdmissionReview of an object being deleted (deletionTimestamp set), which the webhook allows without judging"
                    .to_owned(),
            );
        }
        judge::Asked::Unanswerable(why) => {
            return Content::Other(format!("an AdmissionReview the webhook cannot answer: {why}"));
        }
    };
    let kind = str_of(&request["kind"]["kind"]);
    let (group, kind) = match kind {
        // A review written by hand may leave request.kind out: the
        // object's own kind stands for it.
        "" => {
            let subject = judge::Subject::of(object, None);
            (subject.group, subject.kind)
        }
        kind => (str_of(&request["kind"]["group"]), kind),
    };
    Content::Objects(vec![Found {
        object,
        prefix: "/request/object".to_owned(),
        item: None,
        review: Some(Review {
            group,
            kind,
            operation,
            old: old.filter(|o| o.is_object()),
        }),
    }])
}

/// API groups of configuration files that sit beside manifests but are
/// read by a tool, never applied: kustomize's `kustomization.yaml`.
const TOOL_GROUPS: &[&str] = &["kustomize.config.k8s.io/"];

/// Lists nested deeper than this are judged as objects, not opened.
const MAX_LIST_DEPTH: usize = 8;

pub(super) fn content(value: &Value, found: bool) -> Content<'_> {
    let Some(obj) = value.as_object() else {
        return Content::Other(format!("found {}", yaml::type_name(value)));
    };
    let text = |k: &str| obj.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let (Some(api_version), Some(kind)) = (text("apiVersion"), text("kind")) else {
        return Content::Other("a mapping without apiVersion and kind".to_owned());
    };
    if found && TOOL_GROUPS.iter().any(|g| api_version.starts_with(g)) {
        return Content::Other(format!("a {kind} for {api_version}, read by a tool, not applied"));
    }
    if kind == "AdmissionReview" && api_version.starts_with("admission.k8s.io/") {
        return review(value);
    }
    let mut objects = Vec::new();
    items_of(value, String::new(), &mut 0, 0, &mut objects);
    Content::Objects(objects)
}

/// The objects `value` stands for: itself, or the items of a List (and
/// of the Lists in it, numbered in reading order from `next`).
pub(super) fn items_of<'d>(
    value: &'d Value,
    prefix: String,
    next: &mut usize,
    depth: usize,
    out: &mut Vec<Found<'d>>,
) {
    let list = value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"));
    if let (true, Some(Value::Array(items)), true) = (list, value.get("items"), depth < MAX_LIST_DEPTH) {
        for (i, item) in items.iter().enumerate() {
            items_of(item, format!("{prefix}/items/{i}"), next, depth + 1, out);
        }
        return;
    }
    let item = (depth > 0).then(|| {
        *next += 1;
        *next - 1
    });
    out.push(Found {
        object: value,
        prefix,
        item,
        review: None,
    });
}

/// Gives each item of a List (and of the Lists in it) the kind and
/// apiVersion the List names when the item names none: an apiserver's own
/// lists (`PodList`, `v1`) say them once, for all their items, and an item
/// without a kind would be skipped, unjudged.
pub(super) fn complete_lists(value: &mut Value) {
    let Some(obj) = value.as_object_mut() else {
        return;
    };
    let text = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_owned);
    let (kind, api_version) = (text("kind"), text("apiVersion"));
    if !kind.as_deref().is_some_and(|k| k.ends_with("List")) {
        return;
    }
    if let Some(Value::Array(items)) = obj.get_mut("items") {
        for item in items {
            complete(item, kind.as_deref(), api_version.as_deref());
            complete_lists(item);
        }
    }
}

/// Gives `item` the kind a `<Kind>List` names, and its apiVersion, where
/// it names none.
pub(super) fn complete(item: &mut Value, list_kind: Option<&str>, api_version: Option<&str>) {
    let Some(obj) = item.as_object_mut() else {
        return;
    };
    let named = |obj: &serde_json::Map<String, Value>, k: &str| {
        obj.get(k).and_then(Value::as_str).is_some_and(|s| !s.is_empty())
    };
    let kind = list_kind
        .and_then(|k| k.strip_suffix("List"))
        .filter(|k| !k.is_empty());
    if let (false, Some(kind)) = (named(obj, "kind"), kind) {
        obj.insert("kind".into(), kind.into());
        if let (false, Some(v)) = (named(obj, "apiVersion"), api_version) {
            obj.insert("apiVersion".into(), v.into());
        }
    }
}

/// A document that is not a Kubernetes object: its line, where it is
/// (`document 3`, `item 2 of document 0`), and what it is instead.
pub(super) type Other = (usize, String, String);

/// Where an object stands in its file, with the file's text where
/// `--fix` edits it.
pub(super) enum Located<'d> {
    /// In a YAML (or JSON) document read whole, at `prefix`.
    Yaml {
        doc: &'d Document,
        prefix: &'d str,
        text: &'d str,
        offsets: &'d Offsets,
    },
    /// In a JSON value read on its own, at `prefix` in it; `text`: the
    /// whole file's, kept when it is to be fixed.
    Json {
        piece: &'d Piece,
        prefix: &'d str,
        text: Option<&'d str>,
    },
}

impl Located<'_> {
    /// The object's first line.
    pub(super) fn line(&self) -> usize {
        match self {
            Self::Yaml { doc, prefix, .. } => doc.line_of(prefix),
            Self::Json { piece, prefix, .. } => piece.line_of(prefix),
        }
    }

    /// Where an image stands. Inside an embedded literal block the line is
    /// the block's first line plus the image's line in the embedded text
    /// (the column is not tracked there).
    pub(super) fn position(&self, image: &ImageJudgement) -> Position {
        match self {
            Self::Yaml { doc, prefix, .. } => {
                position_of_site(doc, &format!("{prefix}{}", image.site.path()), image)
            }
            Self::Json { piece, prefix, .. } => {
                let at = format!("{prefix}{}", image.site.path());
                if let Some(start) = piece.start_of(&at) {
                    return Position {
                        line: start.line,
                        column: Some(start.col + 1),
                    };
                }
                // Embedded text is in a JSON string: one line.
                let outer = at.split('#').next().unwrap_or(&at);
                Position {
                    line: piece.line_of(outer),
                    column: None,
                }
            }
        }
    }
}

/// Where an image stands in a YAML document.
fn position_of_site(doc: &Document, at: &str, image: &ImageJudgement) -> Position {
    if let Some(n) = doc.node(at) {
        return Position {
            line: n.line,
            column: Some(n.col + 1),
        };
    }
    let outer = at.split('#').next().unwrap_or(at);
    let line = match (doc.node(outer), &image.site.embedded) {
        (Some(n), Some(e)) if n.is_literal_block() => n.line + e.line - 1,
        _ => doc.line_of(outer),
    };
    Position { line, column: None }
}
