//! What kubectl reads and saphyr-parser refuses.
//!
//! kubectl, Helm and controller-gen read YAML with go-yaml, a port of
//! libyaml. Two things they accept stop saphyr-parser's scanner, and both are
//! written in real manifests:
//!
//! - **a tab right after `:`** (`name:<TAB>value`). YAML 1.2 allows tabs as
//!   separation inside a line (s-separate-in-line); saphyr-parser 0.3.4
//!   refuses a tab there when a letter or `-` follows. The tab is read as the
//!   space it stands for: the same length, so no position moves.
//! - **a quoted scalar continued on lines indented less than its key**:
//!   ```yaml
//!   - name: X
//!     value: 'a long value that goes on
//!     and continues here'
//!   ```
//!   YAML 1.2 requires the continuation lines to be indented more than the
//!   enclosing block; libyaml and go-yaml never check, and kserve and
//!   odh-model-controller ship files written so. Folding strips a
//!   continuation line's leading blanks, so spaces added there change no
//!   value: the lines are indented past the opening quote and read again,
//!   and [`Shifts`] maps positions back to the original text.
//!
//! Each is applied only where the scanner stopped, so nothing the scanner
//! reads is reinterpreted, and a quoted scalar that runs into a document
//! marker (`---` at column 0) stays an error as it is for libyaml.

use std::rc::Rc;

use saphyr_parser::ScanError;

/// How often one text may be patched and read again: each reread costs a
/// pass over the text, so a file built to need thousands cannot make the
/// read quadratic.
pub const MAX_PATCHES: usize = 256;

/// Bytes all rereads of one text may cover together. The webhook reads
/// the YAML embedded in ConfigMaps (up to 1 MiB) within the apiserver's
/// timeout: a value built to need many patches gets a few, then the
/// scanner's error, never seconds of rereading.
pub const REREAD_BUDGET: usize = 16 << 20;

/// Whether a text of `len` bytes may be read once more after
/// `patches` patches.
pub fn may_reread(patches: usize, len: usize) -> bool {
    patches < MAX_PATCHES && (patches + 1).saturating_mul(len) <= REREAD_BUDGET
}

/// Where and how a text was read more leniently than YAML 1.2 allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leniency {
    /// A tab after `:` read as a space (valid YAML that saphyr-parser
    /// refuses); 1-based line.
    TabAfterColon { line: usize },
    /// A quoted scalar whose continuation lines are indented less than its
    /// key (invalid YAML that kubectl reads); the line of its opening quote.
    UnderIndentedQuoted { line: usize },
}

impl Leniency {
    /// What to tell the author, or `None` when the text is valid YAML and
    /// only our parser needed help.
    pub fn advice(&self) -> Option<String> {
        match self {
            Self::TabAfterColon { .. } => None,
            Self::UnderIndentedQuoted { line } => Some(format!(
                "line {line}: the quoted value continues on lines indented less than its key; \
                 kubectl reads it, but it is not valid YAML and stricter tools refuse it: \
                 indent the continuation lines past the key"
            )),
        }
    }
}

/// Characters inserted into a text, to map positions in the patched text
/// back to the original.
#[derive(Debug, Clone, Default)]
pub struct Shifts {
    /// (character index in the patched text where the insertion starts,
    /// characters inserted, 1-based line), in text order.
    inserted: Vec<(usize, usize, usize)>,
}

impl Shifts {
    /// The original character index and column of a position in the
    /// patched text. Insertions are at line starts, before any node.
    pub fn original(&self, index: usize, line: usize, col: usize) -> (usize, usize) {
        let mut index_out = index;
        let mut col_out = col;
        for &(at, len, on) in &self.inserted {
            if at + len > index {
                break;
            }
            index_out -= len;
            if on == line {
                col_out = col_out.saturating_sub(len);
            }
        }
        (index_out, col_out)
    }

    /// Records insertions made by one patch, given at their positions in
    /// the text after it; earlier insertions behind them move along.
    fn add(&mut self, new: &[(usize, usize, usize)]) {
        let mut before_patch = Vec::with_capacity(new.len());
        let mut added = 0;
        for &(at, len, _) in new {
            before_patch.push(at - added);
            added += len;
        }
        for old in &mut self.inserted {
            let moved: usize = new
                .iter()
                .zip(&before_patch)
                .filter(|&(_, &pre)| pre <= old.0)
                .map(|(n, _)| n.1)
                .sum();
            old.0 += moved;
        }
        self.inserted.extend_from_slice(new);
        self.inserted.sort_unstable();
    }
}

/// The text with the leniency that gets past `error`, or `None` when none
/// applies (the error stands).
pub fn patch(text: &str, error: &ScanError, shifts: &mut Shifts) -> Option<(String, Leniency)> {
    let marker = error.marker();
    let at = byte_of(text, marker.index())?;
    match error.info() {
        "':' must be followed by a valid YAML whitespace" => {
            tab_as_space(text, at).map(|t| (t, Leniency::TabAfterColon { line: marker.line() }))
        }
        "invalid indentation in quoted scalar" => {
            let (patched, inserted) =
                indent_continuations(text, at, marker.index(), marker.col(), marker.line())?;
            shifts.add(&inserted);
            Some((patched, Leniency::UnderIndentedQuoted { line: marker.line() }))
        }
        _ => None,
    }
}

fn byte_of(text: &str, char_index: usize) -> Option<usize> {
    if text.is_ascii() {
        return (char_index <= text.len()).then_some(char_index);
    }
    text.char_indices()
        .map(|(b, _)| b)
        .chain(std::iter::once(text.len()))
        .nth(char_index)
}

/// The scanner stops after the blanks that follow the `:`; the tabs among
/// them become spaces.
fn tab_as_space(text: &str, at: usize) -> Option<String> {
    let blanks = text[..at].len() - text[..at].trim_end_matches([' ', '\t']).len();
    let colon = at - blanks;
    if blanks == 0 || !text[..colon].ends_with(':') || !text[colon..at].contains('\t') {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..colon]);
    out.push_str(&text[colon..at].replace('\t', " "));
    out.push_str(&text[at..]);
    Some(out)
}

/// Indents every continuation line of the quoted scalar opening at byte
/// `at` (character `index`, column `col`, line `line`) past its opening
/// quote. Returns the text and the insertions, by position in the result.
#[allow(clippy::type_complexity)]
fn indent_continuations(
    text: &str,
    at: usize,
    index: usize,
    col: usize,
    line: usize,
) -> Option<(String, Vec<(usize, usize, usize)>)> {
    let end = super::edit::closing_quote(text, at)?;
    let want = col + 1;
    let mut out = String::with_capacity(text.len() + 256);
    out.push_str(&text[..at]);
    let mut position = index;
    let mut inserted = Vec::new();
    for (k, segment) in text[at..end].split('\n').enumerate() {
        if k > 0 {
            out.push('\n');
            position += 1;
            let rest = segment.trim_start_matches([' ', '\t']);
            let indent = segment.len() - rest.len();
            if indent == 0 && is_document_marker(rest) {
                return None;
            }
            if !rest.trim().is_empty() && indent < want {
                let pad = want - indent;
                out.extend(std::iter::repeat_n(' ', pad));
                inserted.push((position, pad, line + k));
                position += pad;
            }
        }
        out.push_str(segment);
        position += segment.chars().count();
    }
    out.push_str(&text[end..]);
    (!inserted.is_empty()).then_some((out, inserted))
}

fn is_document_marker(line: &str) -> bool {
    (line.starts_with("---") || line.starts_with("..."))
        && line[3..].chars().next().is_none_or(|c| c.is_whitespace())
}

/// The characters of a shared text, for a parser that reads a patched copy
/// while the patcher keeps it to patch again.
pub struct SharedChars {
    text: Rc<str>,
    at: usize,
}

impl SharedChars {
    pub fn new(text: Rc<str>) -> Self {
        Self { text, at: 0 }
    }
}

impl Iterator for SharedChars {
    type Item = char;

    fn next(&mut self) -> Option<char> {
        let c = self.text[self.at..].chars().next()?;
        self.at += c.len_utf8();
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Offsets, documents, parse_stream, scalar_edit};
    use super::Leniency;
    use crate::edit::apply as apply_edits;
    use serde_json::json;

    /// The value of `pointer` in the only document, and the document.
    fn read(text: &str) -> super::super::Document {
        let mut docs = parse_stream(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(docs.len(), 1);
        docs.remove(0)
    }

    /// The leniencies reading all of `text` needed.
    fn leniencies(text: &str) -> Vec<Leniency> {
        let mut docs = documents(text);
        docs.by_ref().for_each(drop);
        docs.leniencies().to_vec()
    }

    /// Rewrites the scalar at `pointer` the way `check --fix` does.
    fn fix(text: &str, pointer: &str, to: &str) -> String {
        let doc = read(text);
        let node = doc.node(pointer).unwrap_or_else(|| panic!("no {pointer}"));
        let edit = scalar_edit(text, &Offsets::new(text), &node, to).unwrap();
        apply_edits(text, vec![edit]).unwrap()
    }

    #[test]
    fn a_tab_after_a_colon_is_a_separator() {
        let text = "metadata:\n  name:\tp\nspec:\n  image:\tquay.io/a/b:1   # pinned\n";
        let doc = read(text);
        assert_eq!(
            doc.value,
            json!({"metadata": {"name": "p"}, "spec": {"image": "quay.io/a/b:1"}})
        );
        let found = leniencies(text);
        assert_eq!(
            found,
            [
                Leniency::TabAfterColon { line: 2 },
                Leniency::TabAfterColon { line: 4 }
            ]
        );
        assert!(
            found.iter().all(|l| l.advice().is_none()),
            "valid YAML: nothing to tell"
        );
        // The tab stays: only the value changes.
        assert_eq!(
            fix(text, "/spec/image", "quay.io/a/b@sha256:00"),
            "metadata:\n  name:\tp\nspec:\n  image:\tquay.io/a/b@sha256:00   # pinned\n"
        );
    }

    #[test]
    fn quoted_values_continued_under_their_key_are_read_as_kubectl_reads_them() {
        // The shape kserve and odh-model-controller ship.
        let text = "env:\n- name: X\n  value: 'a long value that goes on\n  and continues here'\nflow:\n  - {name: \"Y\", value: \"one\ntwo\", image: quay.io/a/b:1}\n";
        let doc = read(text);
        assert_eq!(
            doc.value,
            json!({
                "env": [{"name": "X", "value": "a long value that goes on and continues here"}],
                "flow": [{"name": "Y", "value": "one two", "image": "quay.io/a/b:1"}]
            })
        );
        // Positions are the original text's, also behind the padded lines.
        let image = doc.node("/flow/0/image").unwrap();
        assert_eq!((image.line, image.col), (7, 13));
        assert_eq!(
            fix(text, "/flow/0/image", "quay.io/a/b@sha256:00"),
            text.replace("quay.io/a/b:1", "quay.io/a/b@sha256:00")
        );
        let found = leniencies(text);
        assert_eq!(
            found,
            [
                Leniency::UnderIndentedQuoted { line: 3 },
                Leniency::UnderIndentedQuoted { line: 6 }
            ]
        );
        assert!(
            found[0]
                .advice()
                .unwrap()
                .starts_with("line 3: the quoted value continues")
        );
    }

    #[test]
    fn documents_already_read_are_not_read_twice_after_a_patch() {
        let text = "a: 1\n---\nb: 'x\ny'\n---\nc: 3\n";
        let values: Vec<_> = documents(text).map(|d| d.unwrap().value).collect();
        assert_eq!(values, [json!({"a": 1}), json!({"b": "x y"}), json!({"c": 3})]);
    }

    #[test]
    fn what_libyaml_refuses_stays_an_error() {
        // A document marker inside a quoted scalar ends the document.
        let err = parse_stream("a: 'x\n---\ny'\n").unwrap_err();
        assert!(err.message.contains("document indicator"), "{err}");
        // Tabs elsewhere are not touched: as indentation they are refused.
        assert!(parse_stream("a:\n\tb: 1\n").is_err());
    }

    #[test]
    fn rereads_are_bounded_by_count_and_by_size() {
        assert!(super::may_reread(0, 1 << 20));
        assert!(super::may_reread(15, 1 << 20));
        assert!(
            !super::may_reread(16, 1 << 20),
            "a 1 MiB ConfigMap value gets 16 rereads"
        );
        assert!(!super::may_reread(super::MAX_PATCHES, 100));
    }

    #[test]
    fn patches_are_capped() {
        let entry = "  - 'x\n y'\n";
        let ok = format!("k:\n{}", entry.repeat(super::MAX_PATCHES));
        assert_eq!(read(&ok).value["k"].as_array().unwrap().len(), super::MAX_PATCHES);
        let err = parse_stream(&format!("k:\n{}", entry.repeat(super::MAX_PATCHES + 1))).unwrap_err();
        assert_eq!(err.message, "invalid indentation in quoted scalar");
    }
}
