//! YAML and JSON documents read together with the position of every node.
//!
//! Manifests are turned into `serde_json::Value`s (what the apiserver would
//! see) plus a table from JSON Pointer to source position, so messages can
//! name lines and `check --fix` can rewrite a scalar where it stands instead of
//! re-serialising the user's file. Values follow the YAML 1.2 core schema;
//! anchors, aliases and `<<` merge keys are expanded the way kubectl's YAML
//! reader expands them, so an image hidden behind an alias is still seen.

pub mod de;
pub mod stream;
pub mod tolerant;

use json_patch::jsonptr::Token;
use std::collections::HashMap;
use std::rc::Rc;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span, Tag};
use serde_json::{Map, Number, Value};

/// Nodes an input may create through aliases before it is refused as an alias
/// bomb ("billion laughs").
const ALIAS_EXPANSION_LIMIT: usize = 1_000_000;

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
pub fn documents(text: &str) -> Documents<'_> {
    Documents {
        events: Box::new(Parser::new_from_str(text)),
        current: None,
        original: text,
        builder: Builder::default(),
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
        let shifts = std::mem::take(&mut self.builder.shifts);
        self.builder = Builder {
            count: self.builder.count,
            shifts,
            ..Builder::default()
        };
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

#[derive(Debug)]
enum Frame {
    Seq {
        items: Vec<Value>,
        ptr: String,
        anchor: usize,
        locs_start: usize,
    },
    Map {
        map: Map<String, Value>,
        ptr: String,
        anchor: usize,
        locs_start: usize,
        key: Option<Key>,
        /// Merge sources in precedence order, each with the pointer its
        /// positions were recorded under.
        merges: Vec<(Map<String, Value>, String)>,
    },
}

#[derive(Debug)]
struct Key {
    text: String,
    merge: bool,
}

#[derive(Debug)]
struct Anchored {
    value: Value,
    /// Positions relative to the anchored node ("" is the node itself).
    locs: Vec<(String, Node)>,
    size: usize,
}

#[derive(Debug, Default)]
struct Builder {
    /// The document that just ended, until it is handed out.
    ready: Option<Document>,
    /// Documents ended so far.
    count: usize,
    /// Where the leniencies moved the text, to give positions in the
    /// original.
    shifts: tolerant::Shifts,
    stack: Vec<Frame>,
    locs: Vec<(String, Node)>,
    anchors: HashMap<usize, Anchored>,
    expanded: usize,
    doc_line: usize,
    root: Option<Value>,
}

fn error_at(span: &Span, message: impl Into<String>) -> YamlError {
    YamlError {
        line: span.start.line(),
        column: span.start.col() + 1,
        message: message.into(),
    }
}

// === impl Builder ===

impl Builder {
    /// A node's position in the original text.
    fn node_at(&self, span: &Span, style: Option<ScalarStyle>) -> Node {
        let (start, col) = self
            .shifts
            .original(span.start.index(), span.start.line(), span.start.col());
        let (end, _) = self
            .shifts
            .original(span.end.index(), span.end.line(), span.end.col());
        Node {
            line: span.start.line(),
            col,
            start,
            end,
            style,
        }
    }

    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), YamlError> {
        match event {
            Event::DocumentStart(_) => {
                self.locs.clear();
                self.anchors.clear();
                self.root = None;
                self.doc_line = span.start.line();
            }
            Event::DocumentEnd => {
                let nodes = self.locs.drain(..).collect();
                self.ready = Some(Document {
                    value: self.root.take().unwrap_or(Value::Null),
                    index: self.count,
                    line: self.doc_line,
                    nodes,
                });
                self.count += 1;
            }
            Event::MappingStart(anchor, _) => self.start(&span, anchor, true)?,
            Event::SequenceStart(anchor, _) => self.start(&span, anchor, false)?,
            Event::MappingEnd | Event::SequenceEnd => self.end(&span)?,
            Event::Scalar(text, style, anchor, tag) => {
                if self.wants_key() {
                    let merge = style == ScalarStyle::Plain && tag.is_none() && text == "<<";
                    if anchor != 0 {
                        // An anchored key can be aliased as a key or a value
                        // (`&a a: b` then `*a : c`).
                        let value = resolve(&text, style, tag.as_deref());
                        self.anchors.insert(
                            anchor,
                            Anchored {
                                value,
                                locs: Vec::new(),
                                size: 1,
                            },
                        );
                    }
                    return self.set_key(text.into_owned(), merge, &span);
                }
                let value = resolve(&text, style, tag.as_deref());
                let ptr = self.child_pointer(&span)?;
                let locs_start = self.locs.len();
                self.locs.push((ptr.clone(), self.node_at(&span, Some(style))));
                if anchor != 0 {
                    self.remember(anchor, &value, locs_start, &ptr);
                }
                self.attach(value, &span)?;
            }
            Event::Alias(id) => self.alias(id, &span)?,
            Event::StreamStart | Event::StreamEnd | Event::Nothing => {}
        }
        Ok(())
    }

    /// A mapping or sequence opens.
    fn start(&mut self, span: &Span, anchor: usize, mapping: bool) -> Result<(), YamlError> {
        let ptr = self.child_pointer(span)?;
        let locs_start = self.locs.len();
        self.locs.push((ptr.clone(), self.node_at(span, None)));
        self.stack.push(if mapping {
            Frame::Map {
                map: Map::new(),
                ptr,
                anchor,
                locs_start,
                key: None,
                merges: Vec::new(),
            }
        } else {
            Frame::Seq {
                items: Vec::new(),
                ptr,
                anchor,
                locs_start,
            }
        });
        Ok(())
    }

    /// A mapping or sequence closes: it becomes a value of its parent.
    fn end(&mut self, span: &Span) -> Result<(), YamlError> {
        let (value, anchor, locs_start, ptr) = match self.stack.pop() {
            Some(Frame::Seq {
                items,
                ptr,
                anchor,
                locs_start,
            }) => (Value::Array(items), anchor, locs_start, ptr),
            Some(Frame::Map {
                mut map,
                ptr,
                anchor,
                locs_start,
                merges,
                ..
            }) => {
                if !merges.is_empty() {
                    self.apply_merges(&mut map, &ptr, locs_start, merges);
                }
                (Value::Object(map), anchor, locs_start, ptr)
            }
            None => return Err(error_at(span, "unbalanced collection end")),
        };
        if anchor != 0 {
            self.remember(anchor, &value, locs_start, &ptr);
        }
        self.attach(value, span)
    }

    /// An alias: a copy of the anchored value, its positions included, as
    /// long as the expansion stays under the limit.
    fn alias(&mut self, id: usize, span: &Span) -> Result<(), YamlError> {
        let Some(anchored) = self.anchors.get(&id) else {
            return Err(error_at(span, "alias to an unknown anchor"));
        };
        if self.wants_key() {
            let text = match &anchored.value {
                Value::String(s) => s.clone(),
                Value::Number(_) | Value::Bool(_) | Value::Null => anchored.value.to_string(),
                _ => return Err(error_at(span, "a mapping key must be a scalar")),
            };
            return self.set_key(text, false, span);
        }
        self.expanded += anchored.size;
        if self.expanded > ALIAS_EXPANSION_LIMIT {
            return Err(error_at(
                span,
                "aliases expand to more than a million nodes; refusing an alias bomb",
            ));
        }
        let value = anchored.value.clone();
        let relative = anchored.locs.clone();
        let ptr = self.child_pointer(span)?;
        for (rel, node) in relative {
            self.locs.push((format!("{ptr}{rel}"), node));
        }
        self.attach(value, span)
    }

    fn wants_key(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Map { key: None, .. }))
    }

    fn set_key(&mut self, text: String, merge: bool, span: &Span) -> Result<(), YamlError> {
        let Some(Frame::Map { map, key, ptr, .. }) = self.stack.last_mut() else {
            unreachable!("set_key is only called when a mapping waits for a key");
        };
        if !merge && map.contains_key(&text) {
            let line = self
                .locs
                .iter()
                .rev()
                .find(|(p, _)| {
                    p.strip_prefix(ptr.as_str()).and_then(|r| r.strip_prefix('/'))
                        == Some(Token::new(text.as_str()).encoded())
                })
                .map(|(_, n)| n.line);
            let first = line
                .map(|l| format!(" (first set on line {l})"))
                .unwrap_or_default();
            return Err(error_at(span, format!("duplicate key '{text}'{first}")));
        }
        *key = Some(Key { text, merge });
        Ok(())
    }

    /// The pointer of a node that starts now, from its parent's state.
    fn child_pointer(&self, span: &Span) -> Result<String, YamlError> {
        Ok(match self.stack.last() {
            None => String::new(),
            Some(Frame::Seq { items, ptr, .. }) => format!("{ptr}/{}", items.len()),
            Some(Frame::Map { key: None, .. }) => {
                return Err(error_at(span, "a mapping key must be a scalar"));
            }
            Some(Frame::Map {
                key: Some(key), ptr, ..
            }) => {
                if key.merge {
                    format!("{ptr}/<<")
                } else {
                    format!("{ptr}/{}", Token::new(key.text.as_str()).encoded())
                }
            }
        })
    }

    fn attach(&mut self, value: Value, span: &Span) -> Result<(), YamlError> {
        match self.stack.last_mut() {
            None => self.root = Some(value),
            Some(Frame::Seq { items, .. }) => items.push(value),
            Some(Frame::Map {
                map,
                key,
                merges,
                ptr,
                ..
            }) => {
                let key = key.take().expect("a value follows its key");
                if key.merge {
                    let base = format!("{ptr}/<<");
                    match value {
                        Value::Object(m) => merges.push((m, base)),
                        Value::Array(items) => {
                            for (i, item) in items.into_iter().enumerate() {
                                let Value::Object(m) = item else {
                                    return Err(error_at(span, "a '<<' merge takes mappings"));
                                };
                                merges.push((m, format!("{base}/{i}")));
                            }
                        }
                        _ => return Err(error_at(span, "a '<<' merge takes mappings")),
                    }
                } else {
                    map.insert(key.text, value);
                }
            }
        }
        Ok(())
    }

    /// Keys from `<<` merges fill in what the mapping does not set itself;
    /// earlier merge sources win over later ones. Positions of merged values
    /// move under the keys they now live at.
    fn apply_merges(
        &mut self,
        map: &mut Map<String, Value>,
        ptr: &str,
        locs_start: usize,
        merges: Vec<(Map<String, Value>, String)>,
    ) {
        let mut chosen: HashMap<String, usize> = HashMap::new();
        let bases: Vec<String> = merges.iter().map(|(_, b)| b.clone()).collect();
        for (i, (source, _)) in merges.into_iter().enumerate() {
            for (k, v) in source {
                if !map.contains_key(&k) {
                    chosen.insert(k.clone(), i);
                    map.insert(k, v);
                }
            }
        }
        let merge_root = format!("{ptr}/<<");
        let mut kept = Vec::with_capacity(self.locs.len() - locs_start);
        for (p, node) in self.locs.drain(locs_start..) {
            if !p.starts_with(&merge_root) {
                kept.push((p, node));
                continue;
            }
            // Longest base first, so "/<</1" is not mistaken for "/<<".
            let found = bases
                .iter()
                .enumerate()
                .filter(|(_, b)| p.starts_with(b.as_str()) && p[b.len()..].starts_with('/'))
                .max_by_key(|(_, b)| b.len());
            let Some((i, base)) = found else { continue };
            let rest = &p[base.len() + 1..];
            let key_token = rest.split('/').next().unwrap_or("");
            let key = decoded(key_token);
            if chosen.get(&key) == Some(&i) {
                kept.push((format!("{ptr}/{rest}"), node));
            }
        }
        self.locs.extend(kept);
    }

    fn remember(&mut self, anchor: usize, value: &Value, locs_start: usize, ptr: &str) {
        let locs = self.locs[locs_start..]
            .iter()
            .filter_map(|(p, n)| p.strip_prefix(ptr).map(|rel| (rel.to_owned(), *n)))
            .collect();
        self.anchors.insert(
            anchor,
            Anchored {
                value: value.clone(),
                locs,
                size: count_nodes(value),
            },
        );
    }
}

fn count_nodes(value: &Value) -> usize {
    match value {
        Value::Array(a) => 1 + a.iter().map(count_nodes).sum::<usize>(),
        Value::Object(m) => 1 + m.values().map(count_nodes).sum::<usize>(),
        _ => 1,
    }
}

/// Resolves a scalar by the YAML 1.2 core schema: only plain scalars can be
/// anything but strings.
fn resolve(text: &str, style: ScalarStyle, tag: Option<&Tag>) -> Value {
    if style != ScalarStyle::Plain {
        return Value::String(text.to_owned());
    }
    // `!` alone is the non-specific tag: the scalar is a string (spec 6.28).
    // saphyr-parser hands it out as handle "!" with no suffix, or as no
    // handle with suffix "!" (`- ! 12`).
    if let Some(tag) = tag
        && (tag.is_yaml_core_schema() && tag.suffix == "str"
            || tag.handle == "!" && tag.suffix.is_empty()
            || tag.handle.is_empty() && tag.suffix == "!")
    {
        return Value::String(text.to_owned());
    }
    resolve_plain(text).unwrap_or_else(|| Value::String(text.to_owned()))
}

fn resolve_plain(text: &str) -> Option<Value> {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Some(Value::Null),
        "true" | "True" | "TRUE" => return Some(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Value::Bool(false)),
        _ => {}
    }
    let first = *text.as_bytes().first()?;
    if !(first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.')) {
        return None;
    }
    if let Some(oct) = text.strip_prefix("0o") {
        return u64::from_str_radix(oct, 8).ok().map(Value::from);
    }
    if let Some(hex) = text.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).ok().map(Value::from);
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        let t = text.strip_prefix('+').unwrap_or(text);
        if let Ok(i) = t.parse::<i64>() {
            return Some(Value::from(i));
        }
        if let Ok(u) = t.parse::<u64>() {
            return Some(Value::from(u));
        }
        return t
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number);
    }
    if is_core_float(digits) {
        return text
            .strip_prefix('+')
            .unwrap_or(text)
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number);
    }
    // .inf and .nan have no JSON form; leaving them strings is what a JSON
    // consumer would get anyway.
    None
}

/// `(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`
fn is_core_float(s: &str) -> bool {
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (!int.is_empty() || !frac.is_empty())
                && int.bytes().all(|b| b.is_ascii_digit())
                && frac.bytes().all(|b| b.is_ascii_digit())
                && !(int.is_empty() && frac.is_empty())
        }
        None => !mantissa.is_empty() && mantissa.bytes().all(|b| b.is_ascii_digit()),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
    });
    mantissa_ok && exponent_ok
}

// === text edits ===

/// A replacement of `start..end` (byte offsets) in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub start: usize,
    pub end: usize,
    pub text: String,
}

/// Why a scalar could not be rewritten in place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error("line {line}: the value spans several lines; edit it by hand")]
    MultiLine { line: usize },
    #[error("two different rewrites target the same text on line {line} (an anchor used in several places?)")]
    Conflict { line: usize },
    #[error("line {line}: the value is not a plain string scalar")]
    NotScalar { line: usize },
}

/// Maps the parser's character offsets to byte offsets.
pub struct Offsets {
    /// Byte offset of every character, when the text is not pure ASCII.
    chars: Option<Vec<usize>>,
    len: usize,
}

impl Offsets {
    /// Indexes `text`.
    pub fn new(text: &str) -> Self {
        let chars = (!text.is_ascii()).then(|| text.char_indices().map(|(b, _)| b).collect());
        Self {
            chars,
            len: text.len(),
        }
    }

    fn byte(&self, char_index: usize) -> usize {
        match &self.chars {
            None => char_index.min(self.len),
            Some(v) => v.get(char_index).copied().unwrap_or(self.len),
        }
    }

    /// The byte range a node covers.
    pub fn range(&self, node: &Node) -> (usize, usize) {
        (self.byte(node.start), self.byte(node.end))
    }
}

/// The edit that makes the scalar at `node` read `new_value`, keeping its
/// quoting style, any tag or anchor written before it, and everything around.
pub fn scalar_edit(text: &str, offsets: &Offsets, node: &Node, new_value: &str) -> Result<Edit, EditError> {
    let style = node.style.ok_or(EditError::NotScalar { line: node.line })?;
    let (start, end) = value_range(text, offsets, node);
    let replacement = match style {
        ScalarStyle::Plain if is_plain_safe(new_value) => new_value.to_owned(),
        // Line breaks fold inside single quotes; only double quotes keep them.
        ScalarStyle::SingleQuoted if !new_value.contains(|c: char| c.is_control()) => {
            format!("'{}'", new_value.replace('\'', "''"))
        }
        ScalarStyle::Plain | ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => {
            double_quoted(new_value)
        }
        ScalarStyle::Literal | ScalarStyle::Folded => {
            let body = &text[start..end];
            let first_break = body.find('\n').unwrap_or(body.len());
            if !body[first_break..].trim().is_empty() || new_value.contains('\n') {
                return Err(EditError::MultiLine { line: node.line });
            }
            return Ok(Edit {
                start,
                end: start + first_break,
                text: new_value.to_owned(),
            });
        }
    };
    Ok(Edit {
        start,
        end,
        text: replacement,
    })
}

/// The bytes a scalar's value is written in: without the properties
/// (`!!str`, `&anchor`) before it, and for a quoted scalar up to its closing
/// quote (saphyr-parser's span runs on over the blanks and a comment after
/// it). Anything else a node covers is returned whole.
pub fn value_range(text: &str, offsets: &Offsets, node: &Node) -> (usize, usize) {
    let (mut start, mut end) = offsets.range(node);
    let Some(style) = node.style else {
        return (start, end);
    };
    loop {
        let rest = &text[start..end];
        if !(rest.starts_with('!') || rest.starts_with('&')) {
            break;
        }
        let token = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let spaces = rest[token..].len() - rest[token..].trim_start().len();
        start += token + spaces;
    }
    if let Some(quote) = quoted_end(text, start, style).filter(|&q| q <= end) {
        end = quote;
    }
    (start, end)
}

/// The byte after the closing quote of the quoted scalar that opens at
/// `start`; `None` for other styles or an unclosed quote.
fn quoted_end(text: &str, start: usize, style: ScalarStyle) -> Option<usize> {
    let quote = match style {
        ScalarStyle::DoubleQuoted => '"',
        ScalarStyle::SingleQuoted => '\'',
        _ => return None,
    };
    text.get(start..)?
        .starts_with(quote)
        .then(|| closing_quote(text, start))
        .flatten()
}

/// The byte after the quote that closes the one at `start` (`'` or `"`).
fn closing_quote(text: &str, start: usize) -> Option<usize> {
    let mut chars = text.get(start..)?.char_indices().peekable();
    let quote = chars.next()?.1;
    // Inside single quotes the only escape is a doubled quote.
    let doubled_escapes = match quote {
        '"' => false,
        '\'' => true,
        _ => return None,
    };
    while let Some((i, c)) = chars.next() {
        if c == '\\' && !doubled_escapes {
            chars.next();
        } else if c == quote {
            if doubled_escapes && chars.peek().is_some_and(|&(_, n)| n == quote) {
                chars.next();
            } else {
                return Some(start + i + c.len_utf8());
            }
        }
    }
    None
}

/// Text for a YAML comment: one line, whatever file names it holds.
pub fn one_line_comment(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// A JSON string literal, which is also a valid YAML double-quoted scalar.
pub fn double_quoted(value: &str) -> String {
    serde_json::to_string(value).expect("strings always serialise")
}

/// Whether `value` can stand as a plain scalar and still read as this string
/// in both block and flow context. Deliberately narrow: image references.
pub fn is_plain_safe(value: &str) -> bool {
    let b = value.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b'/' | b':' | b'@'))
        && resolve_plain(value).is_none()
}

/// For a literal block scalar (`|`) holding an embedded document, maps edits
/// of the embedded text to edits of the outer text: each content line of the
/// block is the embedded line behind a fixed indentation.
pub fn map_literal_edits(
    outer: &str,
    outer_offsets: &Offsets,
    node: &Node,
    inner: &str,
    inner_edits: &[Edit],
) -> Result<Vec<Edit>, EditError> {
    if node.style != Some(ScalarStyle::Literal) {
        return Err(EditError::NotScalar { line: node.line });
    }
    let (block_start, _) = outer_offsets.range(node);
    let indent = node.col;
    // Byte offset in `outer` of each line start, from the block's first line.
    let line_starts: Vec<usize> = std::iter::once(block_start - indent)
        .chain(
            outer[block_start..]
                .match_indices('\n')
                .map(|(i, _)| block_start + i + 1),
        )
        .collect();
    inner_edits
        .iter()
        .map(|e| {
            let line = inner[..e.start].matches('\n').count();
            let line_start = inner[..e.start].rfind('\n').map_or(0, |i| i + 1);
            let outer_line = *line_starts
                .get(line)
                .ok_or(EditError::MultiLine { line: node.line })?;
            let start = outer_line + indent + (e.start - line_start);
            let end = start + (e.end - e.start);
            if inner[e.start..e.end].contains('\n') || outer.get(start..end) != inner.get(e.start..e.end) {
                return Err(EditError::MultiLine {
                    line: node.line + line,
                });
            }
            Ok(Edit {
                start,
                end,
                text: e.text.clone(),
            })
        })
        .collect()
}

/// Applies non-overlapping edits. Identical duplicates (an anchored scalar
/// reached through several aliases) collapse into one.
pub fn apply_edits(text: &str, mut edits: Vec<Edit>) -> Result<String, EditError> {
    edits.sort_by_key(|e| (e.start, e.end));
    edits.dedup();
    for pair in edits.windows(2) {
        if pair[1].start < pair[0].end {
            let line = text[..pair[1].start].matches('\n').count() + 1;
            return Err(EditError::Conflict { line });
        }
    }
    let mut out = String::with_capacity(text.len() + 64 * edits.len());
    let mut at = 0;
    for e in &edits {
        out.push_str(&text[at..e.start]);
        out.push_str(&e.text);
        at = e.end;
    }
    out.push_str(&text[at..]);
    Ok(out)
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

    #[test]
    fn syntax_errors_carry_a_line() {
        let err = parse_stream("a: 1\nb: [1, 2\nc: 3\n").unwrap_err();
        assert!(err.line >= 2, "{err}");
    }

    fn fix(text: &str, pointer: &str, new: &str) -> String {
        let d = one(text);
        let offsets = Offsets::new(text);
        let edit = scalar_edit(text, &offsets, &d.node(pointer).unwrap(), new).unwrap();
        let out = apply_edits(text, vec![edit]).unwrap();
        assert_eq!(one(&out).value.pointer(pointer).unwrap(), new, "{out}");
        out
    }

    #[rstest::rstest]
    #[case::plain_keeps_its_comment(
        "image: a.io/x:1 # pinned\n",
        "/image",
        "a.io/x@sha256:1",
        "image: a.io/x@sha256:1 # pinned\n"
    )]
    #[case::single_quoted("image: 'a.io/x:1'\n", "/image", "a.io/x:2", "image: 'a.io/x:2'\n")]
    #[case::double_quoted("image: \"a.io/x:1\"\n", "/image", "a.io/x:2", "image: \"a.io/x:2\"\n")]
    #[case::folded(
        "image: >-\n  a.io/x:1\nnext: 1\n",
        "/image",
        "a.io/x:2",
        "image: >-\n  a.io/x:2\nnext: 1\n"
    )]
    #[case::tag_and_anchor_stay(
        "image: !!str &i a.io/x:1\n",
        "/image",
        "a.io/x:2",
        "image: !!str &i a.io/x:2\n"
    )]
    #[case::json(
        "{\"image\": \"a.io/x:1\"}",
        "/image",
        "a.io/x:2",
        "{\"image\": \"a.io/x:2\"}"
    )]
    #[case::after_multibyte_text("[é, image]\n", "/1", "a.io/x:2", "[é, a.io/x:2]\n")]
    // A comment after a quoted scalar is not part of it (the parser's span of
    // a quoted scalar runs on over it).
    #[case::double_quoted_keeps_its_comment(
        "image: \"a.io/x:1\"   # stale!\nnext: 1\n",
        "/image",
        "a.io/x:2",
        "image: \"a.io/x:2\"   # stale!\nnext: 1\n"
    )]
    #[case::single_quoted_with_escapes_keeps_its_comment(
        "image: 'a.io/''x:1'  # it''s\n",
        "/image",
        "a.io/x:2",
        "image: 'a.io/x:2'  # it''s\n"
    )]
    #[case::double_quoted_with_escapes_keeps_its_comment(
        "image: \"a.io/\\\"x:1\" # c\n",
        "/image",
        "a.io/x:2",
        "image: \"a.io/x:2\" # c\n"
    )]
    #[case::in_a_flow_sequence("[\"a.io/x:1\" , 2] # c\n", "/0", "a.io/x:2", "[\"a.io/x:2\" , 2] # c\n")]
    // A plain scalar that would not stay a plain string gets quoted.
    #[case::plain_that_needs_quotes(
        "image: a.io/x:1\n",
        "/image",
        "[::1]:5000/x",
        "image: \"[::1]:5000/x\"\n"
    )]
    fn edits_keep_each_quoting_style(
        #[case] text: &str,
        #[case] pointer: &str,
        #[case] new: &str,
        #[case] expected: &str,
    ) {
        assert_eq!(fix(text, pointer, new), expected);
    }

    #[test]
    fn literal_block_edits_map_to_the_outer_text() {
        let outer = "data:\n  cfg: |\n    kind: X\n    image: a.io/x:1   # c\n";
        let d = one(outer);
        let inner = d.value["data"]["cfg"].as_str().unwrap();
        let inner_doc = one(inner);
        let inner_offsets = Offsets::new(inner);
        let e = scalar_edit(
            inner,
            &inner_offsets,
            &inner_doc.node("/image").unwrap(),
            "a.io/x:2",
        )
        .unwrap();
        let mapped = map_literal_edits(
            outer,
            &Offsets::new(outer),
            &d.node("/data/cfg").unwrap(),
            inner,
            &[e],
        )
        .unwrap();
        let out = apply_edits(outer, mapped).unwrap();
        assert_eq!(out, "data:\n  cfg: |\n    kind: X\n    image: a.io/x:2   # c\n");
    }

    #[test]
    fn overlapping_edits_conflict() {
        let edits = vec![
            Edit {
                start: 0,
                end: 4,
                text: "a".into(),
            },
            Edit {
                start: 2,
                end: 6,
                text: "b".into(),
            },
        ];
        assert!(matches!(
            apply_edits("0123456789", edits),
            Err(EditError::Conflict { .. })
        ));
    }
}
