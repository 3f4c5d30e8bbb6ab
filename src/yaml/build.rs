//! The builder that turns the parser's events into documents: values by
//! the core schema, every node's position by JSON Pointer, anchors and
//! aliases expanded (`<<` merges too), the nodes a document makes bounded
//! by the bytes it takes (see [`NODE_FLOOR`]).

use std::collections::HashMap;

use json_patch::jsonptr::Token;
use saphyr_parser::{Event, ScalarStyle, Span};
use serde_json::{Map, Value};

use super::scalar::resolve;
use super::{Document, Node, YamlError, decoded, tolerant};

/// Nodes any document may make, aliases expanded, before its size counts.
///
/// Past it a document may make one node per [`BYTES_PER_NODE`] bytes of its
/// own text. A node costs about 270 bytes here (its value, its pointer and
/// its position), so a flat limit would let a small text cost far more than
/// its size: a 1.4 KB "billion laughs" reached the old limit of a million
/// nodes at 180 MB, a 6 MB `[0,0,…]` (two bytes a node) cost 685 MB. Tied to
/// the bytes, a document costs at most ~70 bytes per byte of its text past
/// the first 2.7 MB, and a refusal comes before the nodes are made.
pub const NODE_FLOOR: usize = 10_000;
/// See [`NODE_FLOOR`]. Kubernetes YAML takes 8-15 bytes a node (`name: x`,
/// a list item, a short mapping); a long flow list of numbers 2.
pub const BYTES_PER_NODE: usize = 4;

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
pub(super) struct Builder {
    /// The document that just ended, until it is handed out.
    pub(super) ready: Option<Document>,
    /// Documents ended so far.
    pub(super) count: usize,
    /// Where the leniencies moved the text, to give positions in the
    /// original.
    pub(super) shifts: tolerant::Shifts,
    stack: Vec<Frame>,
    locs: Vec<(String, Node)>,
    anchors: HashMap<usize, Anchored>,
    /// Nodes of the document being read, aliases expanded.
    nodes: usize,
    /// Nodes of the stream so far, and of the documents handed out.
    total: usize,
    handed_out: usize,
    /// The most nodes the whole stream may make (`None`: as many as the
    /// documents' bytes allow).
    cap: Option<usize>,
    /// Whether the stream was refused for the nodes it would make.
    pub(super) over: bool,
    /// Values without positions: for a caller that names no line, at
    /// about a third of the memory a node costs.
    pub(super) values_only: bool,
    /// Where the document being read starts, in characters.
    doc_start: usize,
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
    /// Starts over for a reread of the patched text, keeping the count of
    /// documents handed out and where the leniencies moved the text.
    pub(super) fn restart(&mut self) {
        *self = Self {
            count: self.count,
            shifts: std::mem::take(&mut self.shifts),
            total: self.handed_out,
            handed_out: self.handed_out,
            cap: self.cap,
            values_only: self.values_only,
            ..Self::default()
        };
    }

    /// A builder whose stream may make at most `cap` nodes.
    pub(super) fn capped(cap: usize) -> Self {
        Self {
            cap: Some(cap),
            ..Self::default()
        }
    }

    /// Nodes the stream made so far.
    pub(super) fn made(&self) -> usize {
        self.total
    }

    /// `n` more nodes at `span`, or the refusal: past the stream's cap, or
    /// past what the document's bytes so far allow.
    fn count(&mut self, n: usize, span: &Span, alias: bool) -> Result<(), YamlError> {
        self.nodes += n;
        self.total += n;
        let read = span.end.index().saturating_sub(self.doc_start);
        let allowed = NODE_FLOOR + read / BYTES_PER_NODE;
        let message = if let Some(cap) = self.cap.filter(|&c| self.total > c) {
            format!("more than {cap} nodes; refusing a text this large")
        } else if self.nodes <= allowed {
            return Ok(());
        } else if alias {
            format!(
                "aliases expand to more than {allowed} nodes in {read} characters; refusing an alias bomb"
            )
        } else {
            format!(
                "more than {allowed} nodes in {read} characters (at most one per {BYTES_PER_NODE} past the first {NODE_FLOOR}); refusing a document this dense"
            )
        };
        self.over = true;
        Err(error_at(span, message))
    }

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

    pub(super) fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), YamlError> {
        match event {
            Event::DocumentStart(_) => {
                self.locs.clear();
                self.anchors.clear();
                self.root = None;
                self.doc_line = span.start.line();
                self.doc_start = span.start.index();
                self.nodes = 0;
            }
            Event::DocumentEnd => {
                self.handed_out = self.total;
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
                self.count(1, &span, false)?;
                let value = resolve(&text, style, tag.as_deref());
                let ptr = self.child_pointer(&span)?;
                let locs_start = self.locs.len();
                if !self.values_only {
                    self.locs.push((ptr.clone(), self.node_at(&span, Some(style))));
                }
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
        self.count(1, span, false)?;
        let ptr = self.child_pointer(span)?;
        let locs_start = self.locs.len();
        if !self.values_only {
            self.locs.push((ptr.clone(), self.node_at(span, None)));
        }
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
        let size = anchored.size;
        self.count(size, span, true)?;
        let anchored = &self.anchors[&id];
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
