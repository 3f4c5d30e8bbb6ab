//! YAML and JSON documents read together with the position of every node.
//!
//! Manifests are turned into `serde_json::Value`s (what the apiserver would
//! see) plus a table from JSON Pointer to source position, so messages can
//! name lines and `check --fix` can rewrite a scalar where it stands instead of
//! re-serialising the user's file. Values follow the YAML 1.2 core schema;
//! anchors, aliases and `<<` merge keys are expanded the way kubectl's YAML
//! reader expands them, so an image hidden behind an alias is still seen.

mod build;
pub mod de;
pub mod edit;
mod scalar;
pub mod stream;
pub mod tolerant;

pub use edit::{Offsets, map_literal_edits, scalar_edit, value_range};
pub use scalar::is_plain_safe;

use build::Builder;
pub use build::{BYTES_PER_NODE, NODE_FLOOR};

use json_patch::jsonptr::Token;
use std::collections::HashMap;
use std::rc::Rc;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span};
use serde_json::Value;

/// A syntax or structure error, with the 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line} column {column}: {message}")]
pub struct YamlError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

// === impl YamlError ===

impl YamlError {
    /// The scanner's error, placed on the character at fault in the
    /// original text. Some of saphyr's errors carry the mark where the
    /// token began instead: a tab met in a plain scalar's continuation is
    /// reported at the scalar's first character, lines before the tab.
    fn scanned(text: &str, error: &ScanError, shifts: &tolerant::Shifts) -> Self {
        let m = error.marker();
        let (mut index, mut line, mut col) = (m.index(), m.line(), m.col());
        if error.info().contains("found a tab")
            && let Some(tab) = next_tab(text, index, line, col)
        {
            (index, line, col) = tab;
        }
        let (_, col) = shifts.original(index, line, col);
        Self {
            line,
            column: col + 1,
            message: error.info().to_owned(),
        }
    }
}

/// The first tab at or after the character `index` (at `line`, `col`):
/// its character index, 1-based line and 0-based column.
fn next_tab(text: &str, index: usize, mut line: usize, mut col: usize) -> Option<(usize, usize, usize)> {
    for (i, c) in text.chars().enumerate().skip(index) {
        match c {
            '\t' => return Some((i, line, col)),
            '\n' => (line, col) = (line + 1, 0),
            _ => col += 1,
        }
    }
    None
}

/// Where a node stands in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// 1-based line.
    pub line: usize,
    /// 0-based column, in characters.
    pub col: usize,
    start: usize,
    end: usize,
    style: Option<ScalarStyle>,
}

impl Node {
    /// Whether this is a literal block scalar (`|`), whose content lines are
    /// the lines of the string.
    pub fn is_literal_block(&self) -> bool {
        self.style == Some(ScalarStyle::Literal)
    }
}

/// One document of a stream.
#[derive(Debug, Clone)]
pub struct Document {
    /// The document as JSON.
    pub value: Value,
    /// Position of the document in the stream (0-based).
    pub index: usize,
    /// Line where the document's content starts.
    pub line: usize,
    nodes: HashMap<String, Node>,
}

impl Document {
    /// A document read without positions (e.g. by a JSON parser).
    pub fn from_value(value: Value) -> Self {
        Self {
            value,
            index: 0,
            line: 1,
            nodes: HashMap::new(),
        }
    }

    /// Position of the node at `pointer` (RFC 6901), if it came from the text.
    pub fn node(&self, pointer: &str) -> Option<Node> {
        self.nodes.get(pointer).copied()
    }

    /// Line of the node at `pointer`, or of the closest enclosing node.
    pub fn line_of(&self, pointer: &str) -> usize {
        let mut p = pointer;
        loop {
            if let Some(node) = self.nodes.get(p) {
                return node.line;
            }
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => return self.line,
            }
        }
    }
}

/// Parses every document of a YAML (or JSON) stream. Empty documents are kept
/// as `Value::Null` so document indexes match what the user counts.
pub fn parse_stream(text: &str) -> Result<Vec<Document>, YamlError> {
    documents(text).collect()
}

/// The documents of a YAML (or JSON) stream one at a time, so a caller that
/// judges and drops each one holds a single document's tree, however long
/// the stream. After an error the iterator ends.
///
/// What kubectl's reader (go-yaml) accepts and saphyr-parser refuses is read
/// the way go-yaml reads it; see [`tolerant`] for the two cases and
/// `src/yaml/conformance.md` for the test suite's figures.
///
/// Each document may make as many nodes as its bytes allow
/// ([`NODE_FLOOR`], then one per [`BYTES_PER_NODE`] bytes): a refusal, not
/// the memory, is what an alias bomb or a long flow list of numbers gets.
pub fn documents(text: &str) -> Documents<'_> {
    documents_with(text, Builder::default())
}

/// [`documents`] with at most `cap` nodes in the whole stream: for a text
/// whose memory has a bound of its own (a runtime a review embeds).
pub fn documents_capped(text: &str, cap: usize) -> Documents<'_> {
    documents_with(text, Builder::capped(cap))
}

fn documents_with(text: &str, builder: Builder) -> Documents<'_> {
    Documents {
        events: Box::new(Parser::new_from_str(text)),
        current: None,
        original: text,
        builder,
        skip: 0,
        patches: 0,
        leniencies: Vec::new(),
        done: false,
    }
}

type Events<'a> = Box<dyn Iterator<Item = Result<(Event<'a>, Span), ScanError>> + 'a>;

/// See [`documents`].
pub struct Documents<'a> {
    events: Events<'a>,
    /// The text with the leniencies applied so far, once one was needed.
    current: Option<Rc<str>>,
    original: &'a str,
    builder: Builder,
    /// Documents to pass over after a restart: they were handed out already.
    skip: usize,
    patches: usize,
    leniencies: Vec<tolerant::Leniency>,
    done: bool,
}

impl Documents<'_> {
    /// Nodes made so far (aliases expanded), for a caller that shares one
    /// cap among several texts.
    pub fn nodes(&self) -> usize {
        self.builder.made()
    }

    /// The documents without their nodes' positions ([`Document::node`]
    /// finds none, [`Document::line_of`] gives the document's line): a
    /// third of the memory, for a caller that names no line. Before the
    /// first document is read.
    pub fn values_only(mut self) -> Self {
        self.builder.values_only = true;
        self
    }

    /// Whether the error that ended the stream refused it for the nodes it
    /// would make (its size), not for its syntax.
    pub fn too_large(&self) -> bool {
        self.builder.over
    }

    /// Where the stream was read more leniently than YAML 1.2 allows, so a
    /// caller can tell the author.
    pub fn leniencies(&self) -> &[tolerant::Leniency] {
        &self.leniencies
    }

    /// After a scanner error the leniencies may apply: the text is patched
    /// and read again from the start, passing over the documents already
    /// handed out. Each restart rereads the text, so their number and the
    /// text they reread together are capped.
    fn restart(&mut self, error: &ScanError) -> bool {
        let text = self.current.as_deref().unwrap_or(self.original);
        if !tolerant::may_reread(self.patches, text.len()) {
            return false;
        }
        let Some((patched, leniency)) = tolerant::patch(text, error, &mut self.builder.shifts) else {
            return false;
        };
        self.patches += 1;
        self.leniencies.push(leniency);
        let patched: Rc<str> = patched.into();
        self.current = Some(Rc::clone(&patched));
        self.events = Box::new(Parser::new_from_iter(tolerant::SharedChars::new(patched)));
        self.skip = self.builder.count;
        self.builder.restart();
        true
    }
}

impl Iterator for Documents<'_> {
    type Item = Result<Document, YamlError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            if let Some(doc) = self.builder.ready.take() {
                return Some(Ok(doc));
            }
            let (event, span) = match self.events.next() {
                None => {
                    self.done = true;
                    break;
                }
                Some(Ok(item)) => item,
                Some(Err(e)) => {
                    if self.restart(&e) {
                        continue;
                    }
                    self.done = true;
                    let text = self.current.as_deref().unwrap_or(self.original);
                    return Some(Err(YamlError::scanned(text, &e, &self.builder.shifts)));
                }
            };
            if self.skip > 0 {
                // Only document boundaries matter in what was handed out.
                if matches!(event, Event::DocumentEnd) {
                    self.skip -= 1;
                }
                continue;
            }
            if let Err(e) = self.builder.event(event, span) {
                self.done = true;
                return Some(Err(e));
            }
        }
        self.builder.ready.take().map(Ok)
    }
}

/// How messages name a JSON value's type ("found a list").
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// A JSON Pointer reference token decoded (RFC 6901: `~1` is `/`, `~0` is
/// `~`); one that is not validly encoded is taken as written.
pub fn decoded(token: &str) -> String {
    Token::from_encoded(token).map_or_else(|_| token.to_owned(), |t| t.decoded().into_owned())
}

/// Text for a YAML comment: one line, whatever file names it holds.
pub fn one_line_comment(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// A JSON string literal, which is also a valid YAML double-quoted scalar.
pub fn double_quoted(value: &str) -> String {
    serde_json::to_string(value).expect("strings always serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 41: a tab indenting a line under a plain scalar was reported
    /// at the scalar's first character, on the line before.
    #[test]
    fn a_tab_error_points_at_the_tab() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n\timage: i\n";
        let error = documents(text)
            .find_map(Result::err)
            .expect("a tab as indentation is refused");
        assert_eq!((error.line, error.column), (8, 1), "{error}");
        // Past an under-indented quoted value read leniently: the column
        // is the original text's, not the patched one's.
        let text = "a:\n  - b: 'x\n  y'\n    c: d\n\te: f\n";
        let error = documents(text).find_map(Result::err).expect("refused");
        assert_eq!(error.line, 5, "{error}");
        assert_eq!(
            text.lines()
                .nth(error.line - 1)
                .unwrap()
                .chars()
                .nth(error.column - 1),
            Some('\t'),
            "{error}"
        );
    }
    use serde_json::json;

    #[test]
    fn pointer_tokens_decode_and_keys_with_slashes_are_found() {
        assert_eq!(decoded("a~1b~0c"), "a/b~c");
        assert_eq!(decoded("x~2"), "x~2", "not validly encoded: as written");
        let docs = parse_stream("data:\n  a/b~c: |\n    text\n").unwrap();
        let node = docs[0].node("/data/a~1b~0c").expect("escaped key found");
        assert!(node.is_literal_block());
    }

    fn one(text: &str) -> Document {
        let mut docs = parse_stream(text).unwrap();
        assert_eq!(docs.len(), 1);
        docs.remove(0)
    }

    #[test]
    fn scalars_follow_the_core_schema() {
        let d = one(
            "a: 1\nb: '1'\nc: 1.5\nd: true\ne: ~\nf: yes\ng: 0x1f\nh: 1e3\ni: .inf\nj: !!str 12\nk: -7\n",
        );
        assert_eq!(
            d.value,
            json!({"a": 1, "b": "1", "c": 1.5, "d": true, "e": null, "f": "yes", "g": 31, "h": 1000.0, "i": ".inf", "j": "12", "k": -7})
        );
    }

    #[test]
    fn records_positions_by_pointer() {
        let d = one("spec:\n  containers:\n    - name: a\n      image: quay.io/x:1\n");
        let n = d.node("/spec/containers/0/image").unwrap();
        assert_eq!((n.line, n.col), (4, 13));
        assert_eq!(d.line_of("/spec/containers/0/missing"), 3);
    }

    #[test]
    fn json_is_read_as_yaml() {
        let d = one("{\"kind\": \"Pod\", \"spec\": {\"containers\": [{\"image\": \"a.io/b\"}]}}");
        assert_eq!(d.value["spec"]["containers"][0]["image"], "a.io/b");
        assert!(d.node("/spec/containers/0/image").is_some());
    }

    #[test]
    fn multi_document_streams_keep_empty_documents() {
        let docs = parse_stream("a: 1\n---\n---\nb: 2\n").unwrap();
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[1].value, Value::Null);
        assert_eq!(docs[2].index, 2);
        assert_eq!(docs[2].value, json!({"b": 2}));
    }

    #[test]
    fn duplicate_keys_are_errors() {
        let err = parse_stream("image: a.io/x\nimage: b.io/y\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.message.contains("duplicate key 'image'"), "{err}");
        assert!(err.message.contains("line 1"), "{err}");
    }

    #[test]
    fn aliases_and_merges_expand_with_positions() {
        let text = "base: &c\n  name: x\n  image: a.io/x:1\nspec:\n  containers:\n    - <<: *c\n      name: y\n    - *c\n";
        let d = one(text);
        assert_eq!(
            d.value["spec"]["containers"][0],
            json!({"name": "y", "image": "a.io/x:1"})
        );
        assert_eq!(
            d.value["spec"]["containers"][1],
            json!({"name": "x", "image": "a.io/x:1"})
        );
        // The merged image points at the anchored scalar, so a fix edits it there.
        assert_eq!(d.node("/spec/containers/0/image").unwrap().line, 3);
        assert_eq!(d.node("/spec/containers/1/image").unwrap().line, 3);
        assert_eq!(d.node("/spec/containers/0/name").unwrap().line, 7);
        assert!(d.node("/spec/containers/0/<<").is_none());
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let err = parse_stream(&text).unwrap_err();
        assert!(err.message.contains("alias bomb"), "{err}");
    }

    /// Issue 57: what a document may make follows its bytes, so a refusal
    /// comes before the memory is spent, and ordinary documents of any
    /// length are read whole.
    #[test]
    fn the_nodes_a_document_makes_are_bounded_by_its_bytes() {
        let zeros = format!("spec: [0{}]\n", ",0".repeat(200_000));
        let err = parse_stream(&zeros).unwrap_err();
        assert!(err.message.contains("refusing a document this dense"), "{err}");
        assert_eq!(err.line, 1);
        // Refused at the allowance, not at the end of the list.
        assert!(err.column < 2 * (NODE_FLOOR + 20_000), "{err}");
        // 30,000 containers as kubectl prints them: 15 bytes a node.
        let mut long = String::from("kind: Pod\nspec:\n  containers:\n");
        for i in 0..30_000 {
            long.push_str(&format!("  - name: c{i}\n    image: q.io/a:{i}\n"));
        }
        assert_eq!(one(&long).value["spec"]["containers"][29_999]["name"], "c29999");
        // Each document of a stream has an allowance of its own.
        let stream = format!(
            "a: [0{}]\n---\nb: [0{}]\n",
            ",0".repeat(9_000),
            ",0".repeat(9_000)
        );
        assert_eq!(parse_stream(&stream).unwrap().len(), 2);
        // A cap is on the whole stream.
        let err = documents_capped(&stream, 10_000).find_map(Result::err).unwrap();
        assert!(err.message.contains("more than 10000 nodes"), "{err}");
        let mut refused = documents_capped(&stream, 10_000);
        assert!(refused.by_ref().any(|d| d.is_err()) && refused.too_large());
        let mut syntax = documents("a: [\n");
        assert!(syntax.by_ref().any(|d| d.is_err()) && !syntax.too_large());
        let mut within = documents_capped(&long, 100_000);
        assert!(within.next().unwrap().is_ok());
        assert_eq!(within.nodes(), 1 + 1 + 1 + 1 + 30_000 * 3);
    }

    #[test]
    fn syntax_errors_carry_a_line() {
        let err = parse_stream("a: 1\nb: [1, 2\nc: 3\n").unwrap_err();
        assert!(err.line >= 2, "{err}");
    }
}
