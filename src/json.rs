//! JSON read a value at a time from a reader, with positions.
//!
//! `kubectl get … -o json` prints one `kind: List` holding the whole
//! answer: parsed whole (with a table of positions) an 85 MB dump took
//! 4.4 GiB. Here a top-level array, and the `items` of a top-level object,
//! are handed out one element at a time as raw bytes with the position
//! where each starts, so a caller parses, judges and drops one object at a
//! time. Concatenated values (`jq -c '.items[]'`, NDJSON) are documents one
//! after the other. Positions inside an element are found on demand
//! ([`Piece::locate`]): only the few an image report names are ever asked
//! for, so nothing is built for the rest.
//!
//! The reader only finds where values begin and end (strings, brackets);
//! `serde_json` checks each element's syntax when the caller parses it, and
//! its errors are moved to the element's place in the input.

use std::io::Read;

use serde_json::Value;

/// A syntax error or an input that ends too soon, with the 1-based line
/// and column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line} column {column}: {message}")]
pub struct JsonError {
    pub line: usize,
    pub column: usize,
    pub message: String,
    /// The input could not be read (rather than read as JSON).
    read: bool,
}

impl JsonError {
    /// Whether the input could not be read, rather than read as JSON.
    pub fn is_read(&self) -> bool {
        self.read
    }
}

/// A place in the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    /// Byte offset from the start of the input.
    pub offset: usize,
    /// 1-based line.
    pub line: usize,
    /// 0-based column, in characters.
    pub col: usize,
}

impl Default for Pos {
    fn default() -> Self {
        Self {
            offset: 0,
            line: 1,
            col: 0,
        }
    }
}

impl Pos {
    /// The position after `bytes`, read from here.
    fn after(mut self, bytes: &[u8]) -> Self {
        self.offset += bytes.len();
        match memchr::memrchr(b'\n', bytes) {
            Some(last) => {
                self.line += memchr::memchr_iter(b'\n', bytes).count();
                self.col = chars(&bytes[last + 1..]);
            }
            None => self.col += chars(bytes),
        }
        self
    }

    /// An error at this position.
    pub fn error(self, message: impl Into<String>) -> JsonError {
        JsonError {
            line: self.line,
            column: self.col + 1,
            message: message.into(),
            read: false,
        }
    }

    fn read_error(self, e: &std::io::Error) -> JsonError {
        JsonError {
            read: true,
            ..self.error(format!("cannot read: {e}"))
        }
    }
}

/// Characters in UTF-8 bytes: every byte that does not continue one.
fn chars(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b & 0xC0 != 0x80).count()
}

/// One value's bytes, as written, and where they start.
#[derive(Debug, Clone)]
pub struct Piece {
    pub bytes: Vec<u8>,
    pub start: Pos,
}

/// Where a value stands: its first position and the byte offset just past
/// it, both in the whole input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: Pos,
    pub end: usize,
}

impl Piece {
    /// The value, or where its syntax breaks (in the whole input).
    pub fn value(&self) -> Result<Value, JsonError> {
        serde_json::from_slice(&self.bytes).map_err(|e| {
            // serde_json counts lines and columns (1-based, in bytes) from
            // the piece's start; a column of 0 is "at the end of the line".
            let line_start = nth_line_start(&self.bytes, e.line());
            let at = (line_start + e.column().saturating_sub(1)).min(self.bytes.len());
            let mut message = e.to_string();
            if let Some(cut) = message.rfind(" at line ") {
                message.truncate(cut);
            }
            self.position(at).error(message)
        })
    }

    /// The position of the byte at `offset` in the piece.
    pub fn position(&self, offset: usize) -> Pos {
        self.start.after(&self.bytes[..offset.min(self.bytes.len())])
    }

    /// Where the value at `pointer` (RFC 6901) stands, if it is in the
    /// piece: its start and the offset just past it (what an edit replaces).
    pub fn locate(&self, pointer: &str) -> Option<Span> {
        let at = self.find(pointer)?;
        let end = skip_value(&self.bytes, at)?;
        Some(Span {
            start: self.position(at),
            end: self.start.offset + end,
        })
    }

    /// Where the value at `pointer` starts, if it is in the piece: all a
    /// message needs, found without reading the value itself.
    pub fn start_of(&self, pointer: &str) -> Option<Pos> {
        self.find(pointer).map(|at| self.position(at))
    }

    /// The offset in the piece where the value at `pointer` starts.
    fn find(&self, pointer: &str) -> Option<usize> {
        let b = &self.bytes;
        let mut at = skip_ws(b, 0);
        if !pointer.is_empty() {
            for token in pointer.strip_prefix('/')?.split('/') {
                let token = crate::yaml::decoded(token);
                at = match *b.get(at)? {
                    b'{' => member(b, at, &token)?,
                    b'[' => element(b, at, token.parse().ok()?)?,
                    _ => return None,
                };
            }
        }
        (at < b.len()).then_some(at)
    }

    /// The line of the value at `pointer`, or of the closest enclosing one
    /// (as [`crate::yaml::Document::line_of`] answers for YAML).
    pub fn line_of(&self, pointer: &str) -> usize {
        let mut p = pointer;
        loop {
            if let Some(start) = self.start_of(p) {
                return start.line;
            }
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => return self.start.line,
            }
        }
    }
}

/// The byte offset where 1-based `line` starts.
fn nth_line_start(bytes: &[u8], line: usize) -> usize {
    if line <= 1 {
        return 0;
    }
    bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(line - 2)
        .map_or(bytes.len(), |(i, _)| i + 1)
}

fn skip_ws(b: &[u8], mut at: usize) -> usize {
    while at < b.len() && matches!(b[at], b' ' | b'\t' | b'\n' | b'\r') {
        at += 1;
    }
    at
}

/// The offset just past the value at `at` (structure only: the parser
/// checked the syntax).
fn skip_value(b: &[u8], at: usize) -> Option<usize> {
    let mut scan = Scan::default();
    match scan.feed(b.get(at..)?) {
        Fed::Done(n) => Some(at + n),
        // A scalar at the very end of the piece.
        Fed::More if !scan.nested() && !scan.in_string => Some(b.len()),
        Fed::More => None,
    }
}

/// The start of the value of `key` in the object at `at`.
fn member(b: &[u8], at: usize, key: &str) -> Option<usize> {
    let mut i = skip_ws(b, at + 1);
    while b.get(i) == Some(&b'"') {
        let end = skip_value(b, i)?;
        let name = &b[i..end];
        let matches = if name.contains(&b'\\') {
            serde_json::from_slice::<String>(name).ok()? == key
        } else {
            &name[1..name.len() - 1] == key.as_bytes()
        };
        i = skip_ws(b, end);
        (b.get(i) == Some(&b':')).then_some(())?;
        i = skip_ws(b, i + 1);
        if matches {
            return Some(i);
        }
        i = skip_ws(b, skip_value(b, i)?);
        if b.get(i) != Some(&b',') {
            return None;
        }
        i = skip_ws(b, i + 1);
    }
    None
}

/// The start of element `n` of the array at `at`.
fn element(b: &[u8], at: usize, n: usize) -> Option<usize> {
    let mut i = skip_ws(b, at + 1);
    for _ in 0..n {
        i = skip_ws(b, skip_value(b, i)?);
        if b.get(i) != Some(&b',') {
            return None;
        }
        i = skip_ws(b, i + 1);
    }
    (b.get(i).is_some_and(|&c| c != b']')).then_some(i)
}

/// The state of a scan over one value's bytes, fed in chunks.
#[derive(Debug, Default)]
struct Scan {
    depth: usize,
    in_string: bool,
    escaped: bool,
    started: bool,
}

enum Fed {
    /// The value ended after this many bytes of the chunk.
    Done(usize),
    /// The whole chunk belongs to the value.
    More,
}

impl Scan {
    fn nested(&self) -> bool {
        self.depth > 0
    }

    fn feed(&mut self, chunk: &[u8]) -> Fed {
        let mut i = 0;
        while i < chunk.len() {
            if self.in_string && !self.escaped {
                // Most of a document is strings: skip to what ends or
                // escapes one.
                match memchr::memchr2(b'"', b'\\', &chunk[i..]) {
                    Some(k) => i += k,
                    None => return Fed::More,
                }
            }
            if !self.in_string && self.depth > 0 {
                // Inside a container only quotes and brackets matter: pass
                // over the rest (indentation, numbers, punctuation) at once.
                match chunk[i..]
                    .iter()
                    .position(|c| matches!(c, b'"' | b'{' | b'}' | b'[' | b']'))
                {
                    Some(k) => i += k,
                    None => return Fed::More,
                }
            }
            let c = chunk[i];
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if c == b'\\' {
                    self.escaped = true;
                } else if c == b'"' {
                    self.in_string = false;
                    if self.depth == 0 {
                        return Fed::Done(i + 1);
                    }
                }
                i += 1;
                continue;
            }
            match c {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' if self.depth > 0 => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        return Fed::Done(i + 1);
                    }
                }
                // A scalar ends at the first delimiter after it.
                b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r' if self.depth == 0 => {
                    return Fed::Done(i);
                }
                _ => {}
            }
            self.started = true;
            i += 1;
        }
        Fed::More
    }
}

/// What the reader hands out.
#[derive(Debug)]
pub enum Part {
    /// A top-level value read whole: an object that is not a list of
    /// items, or anything else.
    Whole { document: usize, piece: Piece },
    /// An element of a top-level array (`list` is `None`), or of the
    /// `items` of a top-level object, `index` counting from 0 in each.
    Item {
        document: usize,
        index: usize,
        piece: Piece,
        list: Option<ListHead>,
    },
    /// The end of a top-level array (`head` is `None`), or of a top-level
    /// object whose `items` were handed out one by one: the rest of it,
    /// `items` left empty.
    End {
        document: usize,
        start: Pos,
        head: Option<Value>,
        items: usize,
    },
}

/// What a list object said of itself before its `items`: an apiserver's
/// own lists (`PodList`) name their items' kind only there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListHead {
    pub kind: Option<String>,
    pub api_version: Option<String>,
}

/// A JSON input read a chunk at a time.
pub struct Source<R> {
    reader: R,
    buf: Box<[u8]>,
    at: usize,
    end: usize,
    pos: Pos,
    /// What was consumed, while it may still be handed to another reader.
    record: Option<Vec<u8>>,
    eof: bool,
}

const CHUNK: usize = 64 * 1024;

impl<R: Read> Source<R> {
    pub fn new(reader: R) -> Self {
        Self {
            reader,
            buf: vec![0; CHUNK].into_boxed_slice(),
            at: 0,
            end: 0,
            pos: Pos::default(),
            record: Some(Vec::new()),
            eof: false,
        }
    }

    /// The first byte that is not blank (after a byte order mark), without
    /// consuming it.
    pub fn first(&mut self) -> Result<Option<u8>, JsonError> {
        if self.peek()? == Some(0xEF) && self.buf[self.at..self.end].starts_with(&[0xEF, 0xBB, 0xBF]) {
            self.consume(3);
        }
        self.blank(None)
    }

    /// Everything not yet consumed, after what was consumed while it was
    /// recorded: the whole input, for another reader.
    pub fn into_rest(mut self) -> Result<Vec<u8>, JsonError> {
        let mut all = self.record.take().unwrap_or_default();
        all.extend_from_slice(&self.buf[self.at..self.end]);
        self.reader
            .read_to_end(&mut all)
            .map_err(|e| self.pos.read_error(&e))?;
        Ok(all)
    }

    fn peek(&mut self) -> Result<Option<u8>, JsonError> {
        if self.at == self.end {
            if self.eof {
                return Ok(None);
            }
            self.end = loop {
                match self.reader.read(&mut self.buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(self.pos.read_error(&e)),
                }
            };
            self.at = 0;
            self.eof = self.end == 0;
        }
        Ok(self.buf.get(self.at).copied().filter(|_| self.at < self.end))
    }

    /// Consumes `n` bytes of the buffer.
    fn consume(&mut self, n: usize) {
        let bytes = &self.buf[self.at..self.at + n];
        self.pos = self.pos.after(bytes);
        if let Some(r) = &mut self.record {
            r.extend_from_slice(bytes);
        }
        self.at += n;
    }

    /// Skips blanks, keeping them in `keep`; the next byte, not consumed.
    fn blank(&mut self, mut keep: Option<&mut Vec<u8>>) -> Result<Option<u8>, JsonError> {
        while let Some(c) = self.peek()? {
            let n = self.buf[self.at..self.end]
                .iter()
                .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
                .count();
            if n == 0 {
                return Ok(Some(c));
            }
            if let Some(k) = keep.as_deref_mut() {
                k.extend_from_slice(&self.buf[self.at..self.at + n]);
            }
            self.consume(n);
        }
        Ok(None)
    }

    /// Consumes one byte, which must be `want`, into `keep`. `context`
    /// words where, for an error only.
    fn expect(
        &mut self,
        want: &[u8],
        keep: Option<&mut Vec<u8>>,
        context: Context<'_>,
    ) -> Result<u8, JsonError> {
        match self.blank(None)? {
            Some(c) if want.contains(&c) => {
                if let Some(k) = keep {
                    k.push(c);
                }
                self.consume(1);
                Ok(c)
            }
            Some(c) => Err(self.pos.error(format!(
                "expected {} {}, found '{}'",
                expected(want),
                context(),
                char::from(c).escape_default()
            ))),
            None => Err(self.pos.error(format!("the input ends {}", context()))),
        }
    }

    /// Appends the next value's bytes to `out`.
    fn value(&mut self, out: &mut Vec<u8>, context: Context<'_>) -> Result<(), JsonError> {
        match self.take(out, context)? {
            true => Ok(()),
            false => Err(self.pos.error(format!("the input ends {}", context()))),
        }
    }

    /// Appends the next value's bytes to `out`; `false` when the input
    /// ends inside it (`out` then holds what there was).
    fn take(&mut self, out: &mut Vec<u8>, context: Context<'_>) -> Result<bool, JsonError> {
        let mut scan = Scan::default();
        loop {
            let Some(_) = self.peek()? else {
                return Ok(scan.started && !scan.nested() && !scan.in_string);
            };
            let chunk = &self.buf[self.at..self.end];
            let (n, done) = match scan.feed(chunk) {
                Fed::Done(n) => (n, true),
                Fed::More => (chunk.len(), false),
            };
            out.extend_from_slice(&chunk[..n]);
            self.consume(n);
            if done {
                if n == 0 && !scan.started {
                    return Err(self.pos.error(format!("expected a value {}", context())));
                }
                return Ok(true);
            }
        }
    }

    /// Stops keeping what is consumed: something was handed out.
    fn handed_out(&mut self) {
        self.record = None;
    }

    /// Whether nothing was handed out yet (what was read can still be
    /// given to another reader).
    pub fn untouched(&self) -> bool {
        self.record.is_some()
    }
}

/// Where the reader is, worded for an error message; only called for one.
type Context<'a> = &'a dyn Fn() -> String;

fn expected(want: &[u8]) -> String {
    let names: Vec<String> = want.iter().map(|c| format!("'{}'", char::from(*c))).collect();
    names.join(" or ")
}

/// Reads every top-level value of `source`, handing each to `each` (the
/// elements of arrays and of `items` one at a time). `Err` where the input
/// breaks; what was handed out before stands.
pub fn read<R: Read>(
    source: &mut Source<R>,
    mut each: impl FnMut(Part) -> Result<(), JsonError>,
) -> Result<(), JsonError> {
    let mut document = 0;
    while let Some(c) = source.first()? {
        let start = source.pos;
        match c {
            b'[' => {
                source.consume(1);
                let items = elements(source, document, None, &mut each)?;
                each(Part::End {
                    document,
                    start,
                    head: None,
                    items,
                })?;
            }
            b'{' => object(source, document, start, &mut each)?,
            _ => {
                let mut bytes = Vec::new();
                source.value(&mut bytes, &|| format!("in document {document}"))?;
                // JSON documents may stand in a YAML stream, between its
                // markers: one `kubectl get -o json` output after another,
                // joined with `---`.
                if bytes == b"---" || bytes == b"..." {
                    continue;
                }
                source.handed_out();
                each(Part::Whole {
                    document,
                    piece: Piece { bytes, start },
                })?;
            }
        }
        source.handed_out();
        document += 1;
    }
    Ok(())
}

/// Hands every top-level value of `source` to `each` whole (none is taken
/// apart: for a reader of concatenated objects, such as a file-based
/// catalog), with the position it starts at. A value the input cuts short
/// is handed out as it is, its parse to say where it broke. `each` may stop
/// the reading.
pub fn values<R: Read>(
    source: &mut Source<R>,
    mut each: impl FnMut(Piece) -> std::ops::ControlFlow<()>,
) -> Result<(), JsonError> {
    source.handed_out();
    let mut document = 0;
    while source.first()?.is_some() {
        let start = source.pos;
        let mut bytes = Vec::new();
        source.take(&mut bytes, &|| format!("in document {document}"))?;
        if each(Piece { bytes, start }).is_break() {
            break;
        }
        document += 1;
    }
    Ok(())
}

/// Hands out the elements of the array whose `[` was just consumed; their
/// number.
fn elements<R: Read>(
    source: &mut Source<R>,
    document: usize,
    list: Option<&ListHead>,
    each: &mut impl FnMut(Part) -> Result<(), JsonError>,
) -> Result<usize, JsonError> {
    let mut index = 0;
    if source.blank(None)? == Some(b']') {
        source.consume(1);
        return Ok(0);
    }
    loop {
        source.blank(None)?;
        let start = source.pos;
        let context = || {
            format!(
                "in item {index} of document {document} (it starts on line {})",
                start.line
            )
        };
        let mut bytes = Vec::new();
        source.value(&mut bytes, &context)?;
        source.handed_out();
        each(Part::Item {
            document,
            index,
            piece: Piece { bytes, start },
            list: list.cloned(),
        })?;
        index += 1;
        let after = || format!("after item {} of document {document}", index - 1);
        if source.expect(b",]", None, &after)? == b']' {
            return Ok(index);
        }
    }
}

/// Reads the object at `start`: whole, or its `items` one at a time when
/// they are met before a `kind` that is not a list's.
fn object<R: Read>(
    source: &mut Source<R>,
    document: usize,
    start: Pos,
    each: &mut impl FnMut(Part) -> Result<(), JsonError>,
) -> Result<(), JsonError> {
    let context = || format!("in document {document}");
    // The object as written, but for the items handed out (`[]` instead).
    let mut raw = Vec::new();
    let mut head = ListHead::default();
    let mut streamed = None;
    source.expect(b"{", Some(&mut raw), &context)?;
    if source.blank(Some(&mut raw))? != Some(b'}') {
        loop {
            source.blank(Some(&mut raw))?;
            let key_at = raw.len();
            source.value(&mut raw, &context)?;
            let key: Option<String> = serde_json::from_slice(&raw[key_at..]).ok();
            let Some(key) = key else {
                return Err(source.pos.error(format!("expected a member name {}", context())));
            };
            source.blank(Some(&mut raw))?;
            source.expect(b":", Some(&mut raw), &context)?;
            let next = source.blank(Some(&mut raw))?;
            let listing = head.kind.as_deref().is_none_or(|k| k.ends_with("List"));
            if key == "items" && next == Some(b'[') && listing && streamed.is_none() {
                source.consume(1);
                raw.extend_from_slice(b"[]");
                streamed = Some(elements(source, document, Some(&head), each)?);
            } else {
                let at = raw.len();
                source.value(&mut raw, &context)?;
                match key.as_str() {
                    "kind" => head.kind = serde_json::from_slice(&raw[at..]).ok(),
                    "apiVersion" => head.api_version = serde_json::from_slice(&raw[at..]).ok(),
                    _ => {}
                }
            }
            source.blank(Some(&mut raw))?;
            if source.expect(b",}", Some(&mut raw), &context)? == b'}' {
                break;
            }
        }
    } else {
        source.expect(b"}", Some(&mut raw), &context)?;
    }
    let piece = Piece { bytes: raw, start };
    source.handed_out();
    each(match streamed {
        None => Part::Whole { document, piece },
        Some(items) => Part::End {
            document,
            start,
            head: Some(piece.value()?),
            items,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(text: &str) -> (Vec<String>, Result<(), JsonError>) {
        let mut source = Source::new(text.as_bytes());
        let mut seen = Vec::new();
        let r = read(&mut source, |p| {
            seen.push(match p {
                Part::Whole { document, piece } => format!(
                    "whole {document} {}:{} {}",
                    piece.start.line,
                    piece.start.col,
                    piece.value().unwrap()
                ),
                Part::Item {
                    document,
                    index,
                    piece,
                    ..
                } => format!(
                    "item {document}/{index} {}:{} {}",
                    piece.start.line,
                    piece.start.col,
                    piece.value().unwrap()
                ),
                Part::End {
                    document,
                    head,
                    items,
                    ..
                } => {
                    format!(
                        "end {document} {items} {}",
                        head.map_or("-".into(), |h| h.to_string())
                    )
                }
            });
            Ok(())
        });
        (seen, r)
    }

    #[test]
    fn list_items_come_one_at_a_time_whatever_the_order_of_members() {
        let text = "{\"apiVersion\": \"v1\", \"items\": [\n  {\"a\": 1},\n  {\"b\": \"é\"}\n], \"kind\": \"List\"}\n";
        let (seen, r) = parts(text);
        assert_eq!(r, Ok(()));
        assert_eq!(
            seen,
            [
                "item 0/0 2:2 {\"a\":1}",
                "item 0/1 3:2 {\"b\":\"é\"}",
                "end 0 2 {\"apiVersion\":\"v1\",\"items\":[],\"kind\":\"List\"}"
            ]
        );
    }

    #[test]
    fn arrays_and_concatenated_values_are_read_too() {
        let (seen, r) = parts("[{\"a\":1}, 2]\n{\"kind\":\"Pod\",\"items\":[1]}\n\"x\"");
        assert_eq!(r, Ok(()));
        assert_eq!(
            seen,
            [
                "item 0/0 1:1 {\"a\":1}",
                "item 0/1 1:10 2",
                "end 0 2 -",
                "whole 1 2:0 {\"items\":[1],\"kind\":\"Pod\"}",
                "whole 2 3:0 \"x\""
            ]
        );
    }

    #[test]
    fn yaml_document_markers_between_values_are_passed_over() {
        let (seen, r) = parts("{\"a\": 1}\n---\n{\"b\": 2}\n...\n---\n[3]\n");
        assert_eq!(r, Ok(()));
        assert_eq!(
            seen,
            [
                "whole 0 1:0 {\"a\":1}",
                "whole 1 3:0 {\"b\":2}",
                "item 2/0 6:1 3",
                "end 2 1 -"
            ]
        );
    }

    #[test]
    fn a_truncated_list_says_where_it_broke() {
        let (seen, r) = parts("{\"kind\": \"List\", \"items\": [\n {\"a\": 1},\n {\"b\": [1, 2");
        assert_eq!(seen.len(), 1);
        assert_eq!(
            r.unwrap_err().to_string(),
            "line 3 column 13: the input ends in item 1 of document 0 (it starts on line 3)"
        );
        let (_, r) = parts("[{\"a\": 1} {\"b\": 2}]");
        assert_eq!(
            r.unwrap_err().to_string(),
            "line 1 column 11: expected ',' or ']' after item 0 of document 0, found '{'"
        );
    }

    #[test]
    fn syntax_errors_are_placed_in_the_whole_input() {
        let mut source = Source::new(&b"[\n  {\"a\": 1},\n  {\"b\": tru}\n]"[..]);
        let mut errors = Vec::new();
        read(&mut source, |p| {
            if let Part::Item { piece, .. } = p
                && let Err(e) = piece.value()
            {
                errors.push(e.to_string());
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(errors, ["line 3 column 12: expected ident"]);
    }

    #[test]
    fn pointers_are_located_in_the_bytes() {
        let piece = Piece {
            bytes: b"{\"x\": {\"a~/b\": 1},\n \"spec\": {\"containers\": [\n  {\"image\": \"q\"},\n  {\"name\": \"c\", \"image\": \"\\u00e9\"}]}}".to_vec(),
            start: Pos {
                offset: 100,
                line: 7,
                col: 4,
            },
        };
        let span = piece.locate("/spec/containers/1/image").unwrap();
        assert_eq!((span.start.line, span.start.col), (10, 25));
        assert_eq!(span.end - span.start.offset, "\"\\u00e9\"".len());
        assert_eq!(piece.locate("/x/a~0~1b").map(|s| s.start.col), Some(19));
        assert_eq!(
            piece.locate("").map(|s| (s.start.line, s.start.col)),
            Some((7, 4))
        );
        assert!(piece.locate("/spec/containers/2").is_none());
        assert_eq!(piece.start_of("/spec/containers/1/image"), Some(span.start));
        assert!(piece.locate("/spec/missing").is_none());
    }

    /// A reader that hands out at most `n` bytes a call, to put chunk
    /// boundaries everywhere.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn values_are_split_off_whole_with_their_lines_in_any_chunks() {
        // Brackets and quotes inside strings, escapes, values on one line,
        // a top-level scalar, an `items` left whole, a value cut short at
        // the end.
        let text = "\n{\"a\": \"}{\\\"[\"}\n{\"b\":\n [1, {\"c\": \"\\\\\"}]}{\"d\":1}\n\n  7\n{\"items\": [1]}\n{\"e\": \"x";
        let want: Vec<(usize, &str)> = vec![
            (2, "{\"a\": \"}{\\\"[\"}"),
            (3, "{\"b\":\n [1, {\"c\": \"\\\\\"}]}"),
            (4, "{\"d\":1}"),
            (6, "7"),
            (7, "{\"items\": [1]}"),
            (8, "{\"e\": \"x"),
        ];
        for chunk in 1..9 {
            let mut source = Source::new(Trickle(text.as_bytes(), chunk));
            let mut got = Vec::new();
            values(&mut source, |p| {
                got.push((p.start.line, String::from_utf8(p.bytes).unwrap()));
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
            let got: Vec<(usize, &str)> = got.iter().map(|(l, b)| (*l, b.as_str())).collect();
            assert_eq!(got, want, "chunks of {chunk}");
        }
    }

    #[test]
    fn what_is_not_json_is_given_back_whole() {
        let text = "{apiVersion: v1, kind: Pod}\n---\nkind: x\n";
        let mut source = Source::new(text.as_bytes());
        assert!(read(&mut source, |_| panic!("nothing handed out")).is_err());
        assert!(source.untouched());
        assert_eq!(source.into_rest().unwrap(), text.as_bytes());
    }
}
