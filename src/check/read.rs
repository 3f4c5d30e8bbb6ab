//! One file read: as JSON a value at a time when it starts as JSON does, as
//! YAML documents otherwise (and when the JSON reader refused it before
//! handing anything out). Both readers hand each object, and each document
//! that is not one, to the same [`Sink`]; neither judges anything.

use super::content::{self, Content, Located};
use super::error::{ErrorKind, template_line};
use crate::json::{self, JsonError, Part, Piece};
use crate::yaml::{self, Document, Offsets};

/// Where the readers hand what they find.
pub(super) trait Sink {
    /// Whether the file was met in a directory rather than named: a tool's
    /// configuration there is not an object.
    fn in_tree(&self) -> bool;
    /// Something that holds objects was read (a `kind: List`, even empty).
    fn holds_objects(&mut self);
    /// An object, where it stands, in which document.
    fn object(&mut self, found: &content::Found<'_>, at: &Located<'_>, document: usize);
    /// A document that is not an object: its line, where it is, what it is.
    fn other(&mut self, other: content::Other);
}

/// The whole text of a file to be fixed, and whether it was read as JSON.
pub(super) struct Whole {
    pub(super) text: String,
    pub(super) json: bool,
}

/// How reading a file ended.
pub(super) enum Read {
    /// Read to its end (`whole`: its text when it is to be fixed), with
    /// what was read leniently, worded for the author.
    Done {
        whole: Option<Whole>,
        leniencies: Vec<String>,
    },
    /// JSON that broke after something was handed out: that stands.
    Broken { error: JsonError, whole: Option<Whole> },
    /// A Helm template met in a tree (its `{{` on this line): what it
    /// handed out is to be taken back, the file skipped.
    Template(usize),
    /// Not read: nothing more of it stands.
    Failed(ErrorKind),
}

/// Reads the file `reader` reads, keeping its whole text when `fixing`.
pub(super) fn file(reader: Box<dyn std::io::Read>, fixing: bool, sink: &mut impl Sink) -> Read {
    let mut source = json::Source::new(reader);
    let first = match source.first() {
        Ok(first) => first,
        Err(e) => return Read::Failed(ErrorKind::Json(e)),
    };
    let looks_json = matches!(first, Some(b'{' | b'['));
    if looks_json && !fixing {
        match json_values(&mut source, None, sink) {
            Ok(()) => {
                return Read::Done {
                    whole: None,
                    leniencies: Vec::new(),
                };
            }
            Err(error) if !source.untouched() => return Read::Broken { error, whole: None },
            Err(_) => {}
        }
    }
    let text = match source.into_rest() {
        Err(e) => return Read::Failed(ErrorKind::Json(e)),
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => return Read::Failed(ErrorKind::NotUtf8),
        },
    };
    if looks_json && fixing {
        let mut again = json::Source::new(text.as_bytes());
        let read = json_values(&mut again, Some(&text), sink);
        let untouched = again.untouched();
        let whole = |text| Some(Whole { text, json: true });
        match read {
            Ok(()) => {
                return Read::Done {
                    whole: whole(text),
                    leniencies: Vec::new(),
                };
            }
            Err(error) if !untouched => {
                return Read::Broken {
                    error,
                    whole: whole(text),
                };
            }
            Err(_) => {}
        }
    }
    match yaml_documents(&text, sink) {
        Ok(leniencies) => Read::Done {
            whole: fixing.then_some(Whole { text, json: false }),
            leniencies,
        },
        Err(e) => match template_line(&text) {
            Some(line) if sink.in_tree() => Read::Template(line),
            template => Read::Failed(ErrorKind::Unreadable {
                error: e.to_string(),
                template,
            }),
        },
    }
}

/// Reads the JSON values of `source` (`text`: its whole text, kept for
/// `--fix`).
fn json_values<R: std::io::Read>(
    source: &mut json::Source<R>,
    text: Option<&str>,
    sink: &mut impl Sink,
) -> Result<(), JsonError> {
    // The next item's number, and the document it is in.
    let mut numbered = (0, 0);
    json::read(source, |part| {
        match part {
            Part::Whole { document, piece } => {
                let mut value = piece.value()?;
                content::complete_lists(&mut value);
                match content::content(&value, sink.in_tree()) {
                    Content::Objects(found) => {
                        sink.holds_objects();
                        for f in &found {
                            json_object(sink, &piece, f, document, text);
                        }
                    }
                    Content::Other(what) => {
                        sink.other((piece.start.line, format!("document {document}"), what))
                    }
                }
            }
            Part::Item {
                document,
                index,
                piece,
                list,
            } => {
                let mut value = piece.value()?;
                // A List's items are judged whatever they hold, of the
                // kind the List names when they name none; a bare
                // array's must be objects.
                match &list {
                    Some(head) => {
                        content::complete(&mut value, head.kind.as_deref(), head.api_version.as_deref())
                    }
                    None => {
                        if let Content::Other(what) = content::content(&value, sink.in_tree()) {
                            let at = format!("item {index} of document {document}");
                            sink.other((piece.start.line, at, what));
                            return Ok(());
                        }
                    }
                }
                content::complete_lists(&mut value);
                let mut found = Vec::new();
                if numbered.1 != document {
                    numbered = (0, document);
                }
                content::items_of(&value, String::new(), &mut numbered.0, 1, &mut found);
                sink.holds_objects();
                for f in &found {
                    json_object(sink, &piece, f, document, text);
                }
            }
            Part::End {
                document,
                start,
                head,
                items,
            } => list_end(sink, document, start.line, head.as_ref(), items),
        }
        Ok(())
    })
}

fn json_object(
    sink: &mut impl Sink,
    piece: &Piece,
    f: &content::Found<'_>,
    document: usize,
    text: Option<&str>,
) {
    let at = Located::Json {
        piece,
        prefix: &f.prefix,
        text,
    };
    sink.object(f, &at, document);
}

/// The end of a list read an item at a time: a `kind: List` (even empty),
/// a bare array of objects, or something else whose items were taken for a
/// List's.
fn list_end(
    sink: &mut impl Sink,
    document: usize,
    line: usize,
    head: Option<&serde_json::Value>,
    items: usize,
) {
    let what = match head {
        None if items == 0 => Some("an empty list".to_owned()),
        None => None,
        Some(head) => match content::content(head, sink.in_tree()) {
            Content::Other(what) => Some(what),
            Content::Objects(_) if head["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
                sink.holds_objects();
                None
            }
            Content::Objects(_) => Some(format!(
                "a {} with a top-level items list, read as a List's items",
                head["kind"].as_str().unwrap_or_default()
            )),
        },
    };
    if let Some(what) = what {
        sink.other((line, format!("document {document}"), what));
    }
}

/// Reads the YAML documents of `text`; what was read leniently, worded.
fn yaml_documents(text: &str, sink: &mut impl Sink) -> Result<Vec<String>, yaml::YamlError> {
    let offsets = Offsets::new(text);
    let mut docs = yaml::documents(text);
    for doc in docs.by_ref() {
        let mut doc = doc?;
        content::complete_lists(&mut doc.value);
        yaml_document(sink, &doc, text, &offsets);
    }
    Ok(docs.leniencies().iter().filter_map(|l| l.advice()).collect())
}

fn yaml_document(sink: &mut impl Sink, doc: &Document, text: &str, offsets: &Offsets) {
    if doc.value.is_null() {
        return;
    }
    let found = match content::content(&doc.value, sink.in_tree()) {
        Content::Objects(found) => found,
        Content::Other(what) => return sink.other((doc.line, format!("document {}", doc.index), what)),
    };
    sink.holds_objects();
    for f in &found {
        let at = Located::Yaml {
            doc,
            prefix: &f.prefix,
            text,
            offsets,
        };
        sink.object(f, &at, doc.index);
    }
}
