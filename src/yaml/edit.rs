//! Edits of YAML text where a value stands: a scalar rewritten in its own
//! quoting style, a literal block's embedded document edited line by line.
//! What an edit is, and applying edits, is [`crate::edit`]'s.

use saphyr_parser::ScalarStyle;

use super::Node;
use super::double_quoted;
use super::scalar::is_plain_safe;
use crate::edit::{Edit, EditError};

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
pub(super) fn closing_quote(text: &str, start: usize) -> Option<usize> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edit::apply as apply_edits;
    use crate::yaml::{Document, parse_stream};

    fn one(text: &str) -> Document {
        let mut docs = parse_stream(text).unwrap();
        assert_eq!(docs.len(), 1);
        docs.remove(0)
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
}
