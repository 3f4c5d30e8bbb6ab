//! Reading YAML straight into serde types, one parser event at a time.
//!
//! A native allowlist can promote tens of thousands of repositories. Building
//! the whole document as a `serde_json::Value` plus a table of positions first
//! costs several times what the compact allowlist does, and loading has a
//! memory bound to keep. This reader gives serde visitors the parser's events
//! as they come: nothing of the document is kept but what a visitor keeps.
//!
//! - Anchored nodes are recorded as events while they are read and replayed
//!   for each alias, under the tree reader's expansion limit.
//! - `<<` merge keys are refused: a merged mapping's keys depend on keys that
//!   may come after the merge, so no key could be handed out before the end.
//! - [`Located`] values carry the line they start on; wrap the reader in
//!   `serde_path_to_error` to name the entry an error is about.
//! - [`Reader::head`] reads a document's `kind` and `apiVersion` ahead
//!   (buffering only the events before them), so a caller can choose between
//!   this reader and the whole-document reader [`Reader::tree`] per document.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::marker::PhantomData;
use std::rc::Rc;

use json_patch::jsonptr::Token;
use saphyr_parser::{Event, Marker, Parser, ScalarStyle, ScanError, Span};
use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use serde_json::Value;

use super::build::{BYTES_PER_NODE, Builder, NODE_FLOOR};
use super::scalar::resolve;
use super::{Document, YamlError};

type Item<'a> = (Event<'a>, Span);

/// What went wrong while deserializing, with the line it stands on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub line: Option<usize>,
    pub message: String,
    pub cause: Cause,
}

/// Why a value was refused, for callers that word it their own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The text is not YAML; nothing after this point can be read.
    Syntax,
    /// A value of the wrong type, an unknown field, an alias to nothing.
    Shape,
    /// A required field of the mapping is not there.
    Missing(&'static str),
    /// A key the mapping already has; the error stands at the second one.
    Duplicate,
}

impl Error {
    fn at(line: usize, message: impl Into<String>) -> Self {
        Self {
            line: Some(line),
            message: message.into(),
            cause: Cause::Shape,
        }
    }

    fn caused(cause: Cause, message: String) -> Self {
        Self {
            line: None,
            message,
            cause,
        }
    }

    /// The innermost position wins: an error raised deep inside a value
    /// already names its own line.
    fn or_line(mut self, line: usize) -> Self {
        self.line.get_or_insert(line);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<YamlError> for Error {
    fn from(e: YamlError) -> Self {
        Self {
            line: Some(e.line),
            message: e.message,
            cause: Cause::Syntax,
        }
    }
}

/// serde's default wording names Rust types ("struct RepositoryEntry",
/// "a sequence"); people editing YAML read mappings and lists.
impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::caused(Cause::Shape, msg.to_string())
    }

    fn invalid_type(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        let found = match unexpected {
            de::Unexpected::Bool(_) => "a boolean".to_owned(),
            de::Unexpected::Unsigned(_) | de::Unexpected::Signed(_) | de::Unexpected::Float(_) => {
                "a number".to_owned()
            }
            de::Unexpected::Str(_) | de::Unexpected::Char(_) => "a string".to_owned(),
            de::Unexpected::Unit | de::Unexpected::Option => "null".to_owned(),
            de::Unexpected::Seq => "a list".to_owned(),
            de::Unexpected::Map => "a mapping".to_owned(),
            other => other.to_string(),
        };
        let expected = expected.to_string();
        let expected = match expected.as_str() {
            "a sequence" => "a list",
            "a map" => "a mapping",
            e if e.starts_with("struct ") => "a mapping",
            e => e,
        };
        de::Error::custom(format_args!("expected {expected}, found {found}"))
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        de::Error::custom(format_args!(
            "unknown field '{field}' (expected one of: {})",
            expected.join(", ")
        ))
    }

    fn missing_field(field: &'static str) -> Self {
        Self::caused(Cause::Missing(field), format!("'{field}' is required"))
    }

    fn duplicate_field(field: &'static str) -> Self {
        Self::caused(Cause::Duplicate, format!("duplicate key '{field}'"))
    }
}

/// A value with the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    pub line: usize,
    pub value: T,
}

/// The newtype name [`Reader`] recognises to hand out a position, the way
/// `serde_spanned` works with toml.
const LOCATED: &str = "$digest_gate::yaml::Located";

thread_local! {
    /// Set by the reader right before it calls a [`Located`] visitor, which
    /// takes it before reading anything else: serde offers no other way to
    /// pass a position through `serde_path_to_error`'s wrappers unchanged.
    static STARTS_AT: Cell<usize> = const { Cell::new(0) };
}

impl<'de, T: de::Deserialize<'de>> de::Deserialize<'de> for Located<T> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct LocatedVisitor<T>(PhantomData<T>);

        impl<'de, T: de::Deserialize<'de>> Visitor<'de> for LocatedVisitor<T> {
            type Value = Located<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value")
            }

            fn visit_newtype_struct<D: de::Deserializer<'de>>(self, d: D) -> Result<Located<T>, D::Error> {
                let line = STARTS_AT.replace(0);
                Ok(Located {
                    line,
                    value: T::deserialize(d)?,
                })
            }
        }

        d.deserialize_newtype_struct(LOCATED, LocatedVisitor(PhantomData))
    }
}

/// A document's `kind` and `apiVersion`, read ahead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Head {
    /// Each with the line of its value.
    pub kind: Option<(String, usize)>,
    pub api_version: Option<(String, usize)>,
    /// Line the document's top mapping starts on.
    pub line: usize,
}

/// An event source that deserializes documents as serde values.
pub struct Reader<'a> {
    /// saphyr's parser over characters read as they are needed; boxed so
    /// the reader's type does not name where they come from.
    parser: Option<Events<'a>>,
    /// Events read ahead (a document's head) or made up (`from_value`).
    queue: VecDeque<Item<'a>>,
    /// One event given back after a look at it; already recorded.
    pushed: Option<Item<'a>>,
    /// Aliases being replayed, innermost last: events and next index.
    replay: Vec<(Rc<[Item<'a>]>, usize)>,
    anchors: HashMap<usize, Rc<[Item<'a>]>>,
    /// Anchored nodes still being read.
    recording: Vec<Recording<'a>>,
    /// Events replayed for aliases in this document: at most what the
    /// tree reader lets a document of its bytes make.
    expanded: usize,
    /// Where the document starts and where the source has been read to,
    /// in characters.
    doc_start: usize,
    at: usize,
    /// Line of the last event taken from the source, for an unexpected end.
    line: usize,
}

type Events<'a> = Box<dyn Iterator<Item = Result<Item<'a>, ScanError>> + 'a>;

struct Recording<'a> {
    anchor: usize,
    depth: usize,
    events: Vec<Item<'a>>,
}

fn span_at(line: usize) -> Span {
    let m = Marker::new(0, line, 0);
    Span::new(m, m)
}

fn scalar(text: String, style: ScalarStyle) -> Event<'static> {
    Event::Scalar(Cow::Owned(text), style, 0, None)
}

/// Events that read back as `value`, each at the line `doc` recorded for it.
fn push_value(queue: &mut VecDeque<Item<'static>>, value: &Value, doc: &Document, ptr: &str) {
    let span = span_at(doc.line_of(ptr));
    match value {
        Value::Object(map) => {
            queue.push_back((Event::MappingStart(0, None), span));
            for (k, v) in map {
                let child = format!("{ptr}/{}", Token::new(k.as_str()).encoded());
                let key_span = span_at(doc.line_of(&child));
                queue.push_back((scalar(k.clone(), ScalarStyle::SingleQuoted), key_span));
                push_value(queue, v, doc, &child);
            }
            queue.push_back((Event::MappingEnd, span));
        }
        Value::Array(items) => {
            queue.push_back((Event::SequenceStart(0, None), span));
            for (i, v) in items.iter().enumerate() {
                push_value(queue, v, doc, &format!("{ptr}/{i}"));
            }
            queue.push_back((Event::SequenceEnd, span));
        }
        Value::String(s) => queue.push_back((scalar(s.clone(), ScalarStyle::SingleQuoted), span)),
        Value::Null => queue.push_back((scalar("null".into(), ScalarStyle::Plain), span)),
        other => queue.push_back((scalar(other.to_string(), ScalarStyle::Plain), span)),
    }
}

fn is_null(text: &str, style: ScalarStyle, tag: Option<&saphyr_parser::Tag>) -> bool {
    style == ScalarStyle::Plain && resolve(text, style, tag).is_null()
}

// === impl Reader ===

impl<'a> Reader<'a> {
    /// Reads a YAML (or JSON) stream given a character at a time (see
    /// [`super::stream::Chars`]): the text is never held whole.
    pub fn from_chars(chars: impl Iterator<Item = char> + 'a) -> Self {
        Self::with(Some(Box::new(Parser::new_from_iter(chars))), VecDeque::new())
    }

    fn with(parser: Option<Events<'a>>, queue: VecDeque<Item<'a>>) -> Self {
        Self {
            parser,
            queue,
            pushed: None,
            replay: Vec::new(),
            anchors: HashMap::new(),
            recording: Vec::new(),
            expanded: 0,
            doc_start: 0,
            at: 0,
            line: 1,
        }
    }

    /// Moves to the next document, giving its start; `None` at the end of
    /// the stream.
    pub fn next_document(&mut self) -> Result<Option<Span>, YamlError> {
        self.pushed = None;
        self.replay.clear();
        self.anchors.clear();
        self.recording.clear();
        self.expanded = 0;
        loop {
            match self.raw()? {
                (Event::DocumentStart(_), span) => {
                    self.doc_start = span.start.index();
                    return Ok(Some(span));
                }
                (Event::StreamEnd, _) => return Ok(None),
                _ => {}
            }
        }
    }

    /// Reads the current document's top-level `kind` and `apiVersion`
    /// without consuming anything: the events read for them are given back.
    pub fn head(&mut self) -> Result<Head, YamlError> {
        let mut head = Head::default();
        let mut ahead = Vec::new();
        let first = self.raw()?;
        head.line = first.1.start.line();
        let is_mapping = matches!(first.0, Event::MappingStart(..));
        ahead.push(first);
        let mut depth = 1;
        let mut key: Option<String> = None;
        while is_mapping && (head.kind.is_none() || head.api_version.is_none()) {
            let item = self.raw()?;
            let line = item.1.start.line();
            let stop = match &item.0 {
                Event::MappingStart(..) | Event::SequenceStart(..) => {
                    depth += 1;
                    // A complex key: nothing the head could name.
                    depth == 2 && key.is_none()
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    depth -= 1;
                    if depth == 1 {
                        key = None;
                    }
                    depth == 0
                }
                Event::Scalar(text, ..) if depth == 1 => {
                    match key.take() {
                        None => key = Some(text.to_string()),
                        Some(k) if k == "kind" => head.kind = Some((text.to_string(), line)),
                        Some(k) if k == "apiVersion" => head.api_version = Some((text.to_string(), line)),
                        Some(_) => {}
                    }
                    false
                }
                Event::Alias(_) if depth == 1 => key.take().is_none(),
                Event::DocumentEnd | Event::StreamEnd => true,
                _ => false,
            };
            ahead.push(item);
            if stop {
                break;
            }
        }
        for item in ahead.into_iter().rev() {
            self.queue.push_front(item);
        }
        Ok(head)
    }

    /// Reads the rest of the current document as a whole tree, with the
    /// position of every node (see [`super::parse_stream`]).
    pub fn tree(&mut self, start: Span, index: usize) -> Result<Document, YamlError> {
        let mut builder = Builder::default();
        builder.event(Event::DocumentStart(false), start)?;
        loop {
            let (event, span) = self.raw()?;
            let end = matches!(event, Event::DocumentEnd);
            builder.event(event, span)?;
            if end {
                break;
            }
        }
        let mut doc = builder
            .ready
            .take()
            .unwrap_or_else(|| Document::from_value(Value::Null));
        doc.index = index;
        Ok(doc)
    }

    /// Skips what is left of the current document, e.g. after an error.
    pub fn finish_document(&mut self) -> Result<(), YamlError> {
        self.pushed = None;
        self.replay.clear();
        self.recording.clear();
        loop {
            if let (Event::DocumentEnd, _) = self.raw()? {
                return Ok(());
            }
        }
    }

    /// The next event of the source, aliases not expanded.
    fn raw(&mut self) -> Result<Item<'a>, YamlError> {
        if let Some(item) = self.queue.pop_front() {
            self.line = item.1.start.line();
            self.at = self.at.max(item.1.end.index());
            return Ok(item);
        }
        match self.parser.as_mut().and_then(Iterator::next) {
            Some(Ok(item)) => {
                self.line = item.1.start.line();
                self.at = self.at.max(item.1.end.index());
                Ok(item)
            }
            Some(Err(e)) => Err(YamlError {
                line: e.marker().line(),
                column: e.marker().col() + 1,
                message: e.info().to_owned(),
            }),
            None => Err(YamlError {
                line: self.line,
                column: 1,
                message: "the document ends unexpectedly".into(),
            }),
        }
    }

    /// The next event for a visitor: aliases are replaced by what their
    /// anchor recorded.
    fn next(&mut self) -> Result<Item<'a>, Error> {
        if let Some(item) = self.pushed.take() {
            return Ok(item);
        }
        loop {
            let item = match self.replay.last_mut() {
                Some((events, i)) if *i < events.len() => {
                    let item = events[*i].clone();
                    *i += 1;
                    self.expanded += 1;
                    let read = self.at.saturating_sub(self.doc_start);
                    let allowed = NODE_FLOOR + read / BYTES_PER_NODE;
                    if self.expanded > allowed {
                        return Err(Error::at(
                            self.line,
                            format!(
                                "aliases expand to more than {allowed} nodes in {read} characters; refusing an alias bomb"
                            ),
                        ));
                    }
                    item
                }
                Some(_) => {
                    self.replay.pop();
                    continue;
                }
                None => {
                    let item = self.raw()?;
                    self.record(&item);
                    item
                }
            };
            if let (Event::Alias(id), span) = &item {
                let Some(events) = self.anchors.get(id).cloned() else {
                    return Err(Error::at(span.start.line(), "alias to an unknown anchor"));
                };
                self.replay.push((events, 0));
                continue;
            }
            return Ok(item);
        }
    }

    /// Keeps the events of anchored nodes for the aliases that follow.
    fn record(&mut self, item: &Item<'a>) {
        let (opens, closes, anchor) = match &item.0 {
            Event::MappingStart(a, _) | Event::SequenceStart(a, _) => (true, false, *a),
            Event::MappingEnd | Event::SequenceEnd => (false, true, 0),
            Event::Scalar(_, _, a, _) => (false, false, *a),
            _ => (false, false, 0),
        };
        if anchor != 0 {
            self.recording.push(Recording {
                anchor,
                depth: 0,
                events: Vec::new(),
            });
        }
        let mut i = 0;
        while i < self.recording.len() {
            let r = &mut self.recording[i];
            r.events.push(item.clone());
            if opens {
                r.depth += 1;
            } else if closes {
                r.depth -= 1;
            }
            if r.depth == 0 {
                let done = self.recording.remove(i);
                self.anchors.insert(done.anchor, done.events.into());
            } else {
                i += 1;
            }
        }
    }

    /// Skips one node without resolving its scalars.
    fn skip(&mut self) -> Result<(), Error> {
        let mut depth = 0usize;
        loop {
            match self.next()?.0 {
                Event::MappingStart(..) | Event::SequenceStart(..) => depth += 1,
                Event::MappingEnd | Event::SequenceEnd => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth == 0 {
                return Ok(());
            }
        }
    }
}

impl Reader<'static> {
    /// Events for a value already read as a tree, each at the line `doc`
    /// recorded for it: one deserializer serves both readers.
    pub fn from_value(value: &Value, doc: &Document, pointer: &str) -> Self {
        let mut queue = VecDeque::new();
        push_value(&mut queue, value, doc, pointer);
        Self::with(None, queue)
    }
}

impl<'de> de::Deserializer<'de> for &mut Reader<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let (event, span) = self.next()?;
        let line = span.start.line();
        let result = match event {
            Event::Scalar(text, style, _, tag) => match resolve(&text, style, tag.as_deref()) {
                Value::Null => visitor.visit_unit(),
                Value::Bool(b) => visitor.visit_bool(b),
                Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                    (Some(u), _) => visitor.visit_u64(u),
                    (None, Some(i)) => visitor.visit_i64(i),
                    _ => visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN)),
                },
                Value::String(s) => visitor.visit_string(s),
                _ => Err(Error::at(line, "a scalar resolved to a collection")),
            },
            Event::SequenceStart(..) => {
                let mut seq = Collection {
                    reader: &mut *self,
                    done: false,
                    key_line: line,
                };
                let value = visitor.visit_seq(&mut seq);
                value.and_then(|v| seq.finish().map(|()| v))
            }
            Event::MappingStart(..) => {
                let mut map = Collection {
                    reader: &mut *self,
                    done: false,
                    key_line: line,
                };
                let value = visitor.visit_map(&mut map);
                let key_line = map.key_line;
                value
                    .and_then(|v| map.finish().map(|()| v))
                    .map_err(|e| match e.cause {
                        Cause::Duplicate => e.or_line(key_line),
                        _ => e,
                    })
            }
            other => Err(Error::at(line, format!("unexpected {other:?}"))),
        };
        result.map_err(|e| e.or_line(line))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let item = self.next()?;
        let line = item.1.start.line();
        if let Event::Scalar(text, style, _, tag) = &item.0
            && is_null(text, *style, tag.as_deref())
        {
            return visitor.visit_none().map_err(|e: Error| e.or_line(line));
        }
        self.pushed = Some(item);
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        if name == LOCATED {
            let item = self.next()?;
            STARTS_AT.set(item.1.start.line());
            self.pushed = Some(item);
        }
        visitor.visit_newtype_struct(self)
    }

    /// serde's derived structs also take a list of their fields in order;
    /// in a YAML file that is a mistake, not a shorthand.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let item = self.next()?;
        if let Event::SequenceStart(..) = item.0 {
            let line = item.1.start.line();
            return Err(<Error as de::Error>::invalid_type(de::Unexpected::Seq, &visitor).or_line(line));
        }
        self.pushed = Some(item);
        self.deserialize_any(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.skip()?;
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map enum identifier
    }
}

/// The entries of a sequence or mapping being read.
struct Collection<'r, 'a> {
    reader: &'r mut Reader<'a>,
    done: bool,
    /// Line of the last key read, where a duplicate is reported.
    key_line: usize,
}

impl Collection<'_, '_> {
    /// Reads what a visitor left unread, so the reader stands after the
    /// collection's end.
    fn finish(&mut self) -> Result<(), Error> {
        while !self.done {
            match self.reader.next()? {
                (Event::MappingEnd | Event::SequenceEnd, _) => self.done = true,
                item => {
                    self.reader.pushed = Some(item);
                    self.reader.skip()?;
                }
            }
        }
        Ok(())
    }
}

impl<'de> de::SeqAccess<'de> for Collection<'_, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        if self.done {
            return Ok(None);
        }
        match self.reader.next()? {
            (Event::SequenceEnd, _) => {
                self.done = true;
                Ok(None)
            }
            item => {
                self.reader.pushed = Some(item);
                seed.deserialize(&mut *self.reader).map(Some)
            }
        }
    }
}

impl<'de> de::MapAccess<'de> for Collection<'_, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        if self.done {
            return Ok(None);
        }
        let (event, span) = self.reader.next()?;
        let line = span.start.line();
        self.key_line = line;
        match event {
            Event::MappingEnd => {
                self.done = true;
                Ok(None)
            }
            Event::Scalar(text, style, _, tag) => {
                if style == ScalarStyle::Plain && tag.is_none() && text == "<<" {
                    return Err(Error::at(
                        line,
                        "'<<' merge keys are not supported here; write the merged keys out",
                    ));
                }
                // Keys are text, as in JSON: `1: x` names the key "1".
                let key: de::value::StringDeserializer<Error> = text.into_owned().into_deserializer();
                seed.deserialize(key).map(Some).map_err(|e| e.or_line(line))
            }
            _ => Err(Error::at(line, "a mapping key must be a scalar")),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(&mut *self.reader)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Entry {
        name: Located<String>,
        #[serde(default)]
        tags: Option<Vec<Located<String>>>,
    }

    fn read<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, (String, Error)> {
        let mut reader = Reader::from_chars(text.chars());
        reader.next_document().unwrap().expect("a document");
        let mut track = serde_path_to_error::Track::new();
        let de = serde_path_to_error::Deserializer::new(&mut reader, &mut track);
        T::deserialize(de).map_err(|e| (track.path().to_string(), e))
    }

    #[test]
    fn values_carry_their_lines() {
        let got: Vec<Entry> = read("- name: a\n  tags:\n    - x\n    - 'y'\n-\n  name: b\n").unwrap();
        assert_eq!(
            got[0].name,
            Located {
                line: 1,
                value: "a".into()
            }
        );
        let tags = got[0].tags.as_ref().unwrap();
        assert_eq!((tags[0].line, tags[1].line), (3, 4));
        assert_eq!(got[1].name.line, 6);
        assert_eq!(got[1].tags, None);
    }

    #[test]
    fn errors_name_entry_and_line_in_yaml_words() {
        let (path, e) = read::<Vec<Entry>>("- name: a\n- name: b\n  tags: [x, 3]\n").unwrap_err();
        assert_eq!(path, "[1].tags[1]");
        assert_eq!(
            (e.line, e.message.as_str()),
            (Some(3), "expected a string, found a number")
        );

        let (path, e) = read::<Vec<Entry>>("- name: a\n  nmae: b\n").unwrap_err();
        assert_eq!(path, "[0].nmae");
        assert_eq!(e.line, Some(2));
        assert_eq!(e.message, "unknown field 'nmae' (expected one of: name, tags)");

        let (_, e) = read::<Vec<Entry>>("- tags: []\n").unwrap_err();
        assert_eq!((e.line, e.cause), (Some(1), Cause::Missing("name")));

        let (_, e) = read::<Vec<Entry>>("- name: a\n  name: b\n").unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (Some(2), "duplicate key 'name'"));

        let (_, e) = read::<Vec<Entry>>("- [name]\n").unwrap_err();
        assert_eq!(e.message, "expected a mapping, found a list");
    }

    #[test]
    fn aliases_replay_their_anchors() {
        let got: Vec<Entry> = read("- name: &n a\n  tags: &t [x, y]\n- name: *n\n  tags: *t\n").unwrap();
        assert_eq!(got[1].name.value, "a");
        assert_eq!(got[1].tags.as_ref().unwrap().len(), 2);
        // The parser itself refuses an alias to nothing.
        let (_, e) = read::<Vec<Entry>>("- name: *nowhere\n").unwrap_err();
        assert!(
            e.cause == Cause::Syntax && e.message.contains("unknown anchor"),
            "{e:?}"
        );
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (i, prev) in ["b", "c", "d", "e", "f", "g"]
            .iter()
            .zip(["a", "b", "c", "d", "e", "f"])
        {
            text.push_str(&format!("{i}: &{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        let (_, e) = read::<de::IgnoredAny>(&text).unwrap_err();
        assert!(e.message.contains("alias bomb"), "{e:?}");
    }

    #[test]
    fn merge_keys_and_complex_keys_are_refused_with_a_line() {
        let (_, e) = read::<Vec<Entry>>("- &base {name: a}\n- <<: *base\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("'<<' merge keys"), "{e:?}");
        let (_, e) = read::<Value>("? [a]\n: b\n").unwrap_err();
        assert_eq!(e.message, "a mapping key must be a scalar");
    }

    #[test]
    fn syntax_errors_are_marked_as_such() {
        let (_, e) = read::<Vec<Entry>>("- name: a\n  tags: [x, \n").unwrap_err();
        assert_eq!(e.cause, Cause::Syntax, "{e:?}");
        assert!(e.line.is_some());
    }

    #[test]
    fn heads_are_read_ahead_and_given_back() {
        let text = "metadata: {name: x}\nkind: Allowlist\nspec: {a: 1}\napiVersion: v9\n";
        let mut reader = Reader::from_chars(text.chars());
        reader.next_document().unwrap();
        let head = reader.head().unwrap();
        assert_eq!(head.kind, Some(("Allowlist".into(), 2)));
        assert_eq!(head.api_version, Some(("v9".into(), 4)));
        let all: Value = de::Deserialize::deserialize(&mut reader).unwrap();
        assert_eq!(all["spec"]["a"], 1);
        assert_eq!(all["metadata"]["name"], "x");
    }

    #[test]
    fn tree_values_replay_with_their_lines() {
        let docs = super::super::parse_stream("items:\n  - name: a\n    tags: [x]\n").unwrap();
        let item = &docs[0].value["items"][0];
        let mut reader = Reader::from_value(item, &docs[0], "/items/0");
        let entry = Entry::deserialize(&mut reader).unwrap();
        let tags: Vec<Located<String>> = entry.tags.unwrap();
        assert_eq!((entry.name.line, tags[0].line), (2, 3));
    }
}
