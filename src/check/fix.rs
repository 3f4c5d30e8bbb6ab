//! `--fix`: the edits that rewrite each image where it stands, and the
//! proof that they change nothing else. YAML and JSON share what the file
//! should read as after the edits ([`expected`]): the original's values
//! with the judgement's rewrites applied as JSON Patch operations.

use json_patch::PatchOperation;
use serde_json::Value;

use super::content::Located;
use super::error::FixError;
use crate::edit::{self, Edit, EditError};
use crate::json::Piece;
use crate::judge::{EmbeddedRewrite, Judgement};
use crate::yaml::{self, Document, Offsets};

/// A manifest after `--fix`: its text and the edits that fix it, applied
/// as it is written out ([`Fixed::write_to`]), so a big input is not held
/// twice.
#[derive(Debug, Clone)]
pub struct Fixed {
    pub name: String,
    text: String,
    edits: Vec<Edit>,
    /// Images rewritten in this file.
    pub rewrites: usize,
}

impl Fixed {
    /// Writes the fixed text.
    pub fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let mut at = 0;
        for e in &self.edits {
            out.write_all(&self.text.as_bytes()[at..e.start])?;
            out.write_all(e.text.as_bytes())?;
            at = e.end;
        }
        out.write_all(&self.text.as_bytes()[at..])
    }

    /// The fixed text.
    pub fn text(&self) -> String {
        let mut out = Vec::with_capacity(self.text.len());
        self.write_to(&mut out).expect("writing to memory succeeds");
        String::from_utf8(out).expect("edits keep UTF-8")
    }

    fn ends_with_newline(&self) -> bool {
        match self.edits.last() {
            Some(e) if e.end == self.text.len() => e.text.ends_with('\n'),
            _ => self.text.ends_with('\n'),
        }
    }
}

/// The fixes of one file, gathered object by object. Fixing applies every
/// rewrite the allowlist allows, whatever the mode: a developer running
/// --fix wants manifests that pass in any mode.
#[derive(Default)]
pub(super) struct Fixing {
    edits: Vec<Edit>,
    expected: Vec<Expected>,
    failed: Option<FixError>,
    /// Images rewritten.
    pub(super) rewrites: usize,
}

/// The rewrites of one document (YAML) or of one value read on its own
/// (JSON, with where it stands in the file): each object's operations.
struct Expected {
    document: usize,
    span: Option<(usize, usize)>,
    objects: Vec<(String, Vec<PatchOperation>)>,
}

/// A file `--fix` must leave as it was, and why.
pub(super) struct Unfixed {
    pub(super) fixed: Fixed,
    pub(super) error: FixError,
    /// The rewrites it would have made: still to be made by hand.
    pub(super) rewrites: usize,
}

impl Fixing {
    /// Adds the fixes of the object `at` stands for.
    pub(super) fn add(&mut self, at: &Located<'_>, document: usize, j: &Judgement) {
        match *at {
            Located::Yaml {
                doc,
                prefix,
                text,
                offsets,
            } => self.add_yaml(text, offsets, doc, prefix, j),
            Located::Json {
                piece,
                prefix,
                text: Some(text),
            } => self.add_json(text, piece, document, prefix, j),
            Located::Json { text: None, .. } => {}
        }
    }

    /// Adds the fixes of the object at `prefix` in `doc`.
    fn add_yaml(&mut self, text: &str, offsets: &Offsets, doc: &Document, prefix: &str, j: &Judgement) {
        self.rewrites += j.images.iter().filter(|i| i.fix.is_some()).count();
        for edit in file_edits(text, offsets, doc, prefix, j) {
            match edit {
                Ok(mut e) => self.edits.append(&mut e),
                Err(e) => self.failed = Some(e),
            }
        }
        self.expect(doc.index, None, prefix, j.fix_ops());
    }

    /// Adds the fixes of the object at `prefix` in `piece`: each rewritten
    /// string replaced whole (embedded documents too: a JSON string has no
    /// lines to keep).
    fn add_json(&mut self, text: &str, piece: &Piece, document: usize, prefix: &str, j: &Judgement) {
        self.rewrites += j.images.iter().filter(|i| i.fix.is_some()).count();
        let plain = j
            .images
            .iter()
            .filter(|i| i.site.embedded.is_none())
            .filter_map(|i| Some((i.site.pointer.to_string(), i.fix.clone()?)));
        let embedded = j
            .embedded
            .iter()
            .map(|e| (e.pointer.to_string(), e.rewritten.clone()));
        for (pointer, to) in plain.chain(embedded) {
            let at = format!("{prefix}{pointer}");
            match piece.locate(&at) {
                Some(span) if text.as_bytes().get(span.start.offset) == Some(&b'"') => {
                    self.edits.push(Edit {
                        start: span.start.offset,
                        end: span.end,
                        text: serde_json::to_string(&to).expect("strings serialise"),
                    })
                }
                Some(_) => self.failed = Some(FixError::NotAString(at)),
                None => self.failed = Some(FixError::Unplaced(at)),
            }
        }
        let start = piece.start.offset;
        self.expect(
            document,
            Some((start, start + piece.bytes.len())),
            prefix,
            j.fix_ops(),
        );
    }

    /// Records what the object at `prefix` should read as after the edits.
    fn expect(
        &mut self,
        document: usize,
        span: Option<(usize, usize)>,
        prefix: &str,
        ops: Vec<PatchOperation>,
    ) {
        if ops.is_empty() {
            return;
        }
        match self.expected.last_mut() {
            Some(last) if last.document == document && last.span == span => {
                last.objects.push((prefix.to_owned(), ops))
            }
            _ => self.expected.push(Expected {
                document,
                span,
                objects: vec![(prefix.to_owned(), ops)],
            }),
        }
    }

    /// Proves the edits change nothing but the images: the file, JSON with
    /// its edits, to be applied as it is written out; YAML fixed (its proof
    /// reads the whole result).
    pub(super) fn finish(mut self, name: &str, original: String, json: bool) -> Result<Fixed, Box<Unfixed>> {
        self.edits.sort_by_key(|e| (e.start, e.end));
        self.edits.dedup();
        let checked = if let Some(e) = self.failed {
            Err(e)
        } else if self.edits.is_empty() {
            Ok(None)
        } else if json {
            verify_json(&original, &self.edits, &self.expected).map(|()| None)
        } else {
            edit::apply(&original, self.edits.clone())
                .map_err(FixError::from)
                .and_then(|t| verify(&t, &original, &self.expected).map(|()| Some(t)))
        };
        let fixed = |text, edits| Fixed {
            name: name.to_owned(),
            text,
            edits,
            rewrites: self.rewrites,
        };
        match checked {
            Ok(None) => Ok(fixed(original, self.edits)),
            Ok(Some(text)) => Ok(fixed(text, Vec::new())),
            Err(error) => Err(Box::new(Unfixed {
                fixed: Fixed {
                    rewrites: 0,
                    ..fixed(original, Vec::new())
                },
                error,
                rewrites: self.rewrites,
            })),
        }
    }
}

/// The file edits for the judgement's fixes of the object at `prefix` in
/// `doc`.
fn file_edits(
    text: &str,
    offsets: &Offsets,
    doc: &Document,
    prefix: &str,
    j: &Judgement,
) -> Vec<Result<Vec<Edit>, FixError>> {
    let images = j.images.iter().filter(|i| i.site.embedded.is_none());
    let mut out: Vec<_> = images
        .filter_map(|i| {
            let to = i.fix.as_deref()?;
            let at = format!("{prefix}{}", i.site.pointer);
            Some(match doc.node(&at) {
                None => Err(FixError::Unplaced(at)),
                Some(n) => yaml::scalar_edit(text, offsets, &n, to)
                    .map(|e| vec![e])
                    .map_err(|error| FixError::Edit { at, error }),
            })
        })
        .collect();
    for e in &j.embedded {
        let at = format!("{prefix}{}", e.pointer);
        out.push(embedded_edits(text, offsets, doc, at, e));
    }
    out
}

/// Edits of the file for a rewritten embedded document: in a literal block
/// each line maps to a file line; any other style is replaced whole.
fn embedded_edits(
    text: &str,
    offsets: &Offsets,
    doc: &Document,
    at: String,
    e: &EmbeddedRewrite,
) -> Result<Vec<Edit>, FixError> {
    let Some(node) = doc.node(&at) else {
        return Err(FixError::Unplaced(at));
    };
    if let Ok(mapped) = yaml::map_literal_edits(text, offsets, &node, &e.original, &e.edits) {
        return Ok(mapped);
    }
    yaml::scalar_edit(text, offsets, &node, &e.rewritten)
        .map(|edit| vec![edit])
        .map_err(|error| FixError::Edit { at, error })
}

/// What `before` should read as after the edits: each object's rewrites
/// applied to it. YAML's proof and JSON's both compare the result with it.
fn expected(before: &Value, objects: &[(String, Vec<PatchOperation>)]) -> Result<Value, FixError> {
    let mut want = before.clone();
    for (prefix, ops) in objects {
        let object = want
            .pointer_mut(prefix)
            .ok_or_else(|| FixError::NotInDocument(prefix.clone()))?;
        json_patch::patch(object, ops)?;
    }
    Ok(want)
}

/// Proves fixed JSON: each value that was fixed, with its edits applied,
/// must read as [`expected`]. The edits replace whole string tokens with
/// JSON strings inside those values (sorted, none overlapping), so
/// everything else is the original's, and the result is JSON wherever the
/// original was.
fn verify_json(original: &str, edits: &[Edit], expected_values: &[Expected]) -> Result<(), FixError> {
    if let Some(pair) = edits.windows(2).find(|p| p[1].start < p[0].end) {
        let line = original[..pair[1].start].matches('\n').count() + 1;
        return Err(EditError::Conflict { line }.into());
    }
    let mut covered = 0;
    for want in expected_values {
        let Some((start, end)) = want.span else {
            return Err(FixError::Misaligned);
        };
        let inside: Vec<Edit> = edits
            .iter()
            .filter(|e| e.start >= start && e.end <= end)
            .map(|e| Edit {
                start: e.start - start,
                end: e.end - start,
                text: e.text.clone(),
            })
            .collect();
        covered += inside.len();
        let before = &original[start..end];
        let after = edit::apply(before, inside)?;
        let value: Value = serde_json::from_str(before).map_err(|e| FixError::Original(e.to_string()))?;
        let value = expected(&value, &want.objects)?;
        let fixed: Value = serde_json::from_str(&after).map_err(|e| FixError::Result(e.to_string()))?;
        if fixed != value {
            return Err(FixError::Beyond(want.document));
        }
    }
    if covered != edits.len() {
        return Err(FixError::Misaligned);
    }
    Ok(())
}

/// Re-reads the fixed text beside the original, document by document: it
/// must hold exactly the original documents with the rewrites applied, and
/// every byte outside the rewritten values (comments, quoting, layout) must
/// be as it was, or nothing is written. Values alone would let a lost
/// comment through.
fn verify(text: &str, original: &str, expected_docs: &[Expected]) -> Result<(), FixError> {
    let offsets = (Offsets::new(original), Offsets::new(text));
    let mut values = (Vec::new(), Vec::new());
    let mut fixed = yaml::documents(text);
    for before in yaml::documents(original) {
        let before = before.map_err(|e| FixError::Original(e.to_string()))?;
        let after = fixed
            .next()
            .ok_or(FixError::FewerDocuments)?
            .map_err(|e| FixError::Result(e.to_string()))?;
        let objects = expected_docs
            .iter()
            .filter(|e| e.document == before.index)
            .flat_map(|e| e.objects.iter().cloned())
            .collect::<Vec<_>>();
        let want = expected(&before.value, &objects)?;
        for (prefix, ops) in &objects {
            for op in ops {
                let at = format!("{prefix}{}", op.path());
                let (Some(b), Some(a)) = (before.node(&at), after.node(&at)) else {
                    return Err(FixError::Unmatched(at));
                };
                values.0.push(yaml::value_range(original, &offsets.0, &b));
                values.1.push(yaml::value_range(text, &offsets.1, &a));
            }
        }
        if want != after.value {
            return Err(FixError::Beyond(before.index));
        }
    }
    if fixed.next().is_some() {
        return Err(FixError::MoreDocuments);
    }
    same_outside(original, values.0, text, values.1)
}

/// Whether `before` and `after` are the same text outside the given byte
/// ranges of each, taken in order.
fn same_outside(
    before: &str,
    mut in_before: Vec<(usize, usize)>,
    after: &str,
    mut in_after: Vec<(usize, usize)>,
) -> Result<(), FixError> {
    for ranges in [&mut in_before, &mut in_after] {
        // An anchored value reached through aliases is one range.
        ranges.sort_unstable();
        ranges.dedup();
    }
    if in_before.len() != in_after.len() {
        return Err(FixError::Misaligned);
    }
    let (mut b, mut a) = (0, 0);
    for (&(bs, be), &(as_, ae)) in in_before.iter().zip(&in_after).chain(std::iter::once((
        &(before.len(), before.len()),
        &(after.len(), after.len()),
    ))) {
        if bs < b || as_ < a || before[b..bs] != after[a..as_] {
            let line = before[..b.min(before.len())].matches('\n').count() + 1;
            return Err(FixError::Outside(line));
        }
        (b, a) = (be, ae);
    }
    Ok(())
}

/// Writes the fixed manifests for stdout: one input as it is; several in a
/// single stream, each behind a `# Source:` comment.
pub fn write_fixed(fixed: &[Fixed], out: &mut impl std::io::Write) -> std::io::Result<()> {
    if let [one] = fixed {
        return one.write_to(out);
    }
    for (i, f) in fixed.iter().enumerate() {
        if i > 0 {
            out.write_all(b"---\n")?;
        }
        writeln!(out, "# Source: {}", f.name)?;
        f.write_to(out)?;
        if !f.ends_with_newline() {
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_comment_is_caught_where_values_agree() {
        let before = "image: \"quay.io/a/b@sha256:1\"   # stale!\nargs: [x]\n";
        let good = "image: \"quay.io/a/b@sha256:2\"   # stale!\nargs: [x]\n";
        let lost = "image: \"quay.io/a/b@sha256:2\"\nargs: [x]\n";
        let value = vec![(7, 29)];
        assert!(same_outside(before, value.clone(), good, value.clone()).is_ok());
        assert_eq!(
            same_outside(before, value.clone(), lost, value).map_err(|e| e.to_string()),
            Err("line 1: text outside the image values would change".to_owned())
        );
    }

    #[test]
    fn a_json_fix_is_proved_value_by_value() {
        let original = "[{\"a\": \"x\", \"b\": \"y\"}]";
        let op = |path: &str| -> Vec<PatchOperation> {
            serde_json::from_value(serde_json::json!([{"op": "replace", "path": path, "value": "z"}]))
                .unwrap()
        };
        let expected = |path: &str| Expected {
            document: 0,
            span: Some((1, original.len() - 1)),
            objects: vec![(String::new(), op(path))],
        };
        let edit = |start: usize| Edit {
            start,
            end: start + 3,
            text: "\"z\"".into(),
        };
        // "x" stands at byte 7, "y" at byte 17.
        assert!(verify_json(original, &[edit(7)], &[expected("/a")]).is_ok());
        assert_eq!(
            verify_json(original, &[edit(17)], &[expected("/a")]).map_err(|e| e.to_string()),
            Err("document 0 would change beyond its images".into())
        );
        assert!(verify_json(original, &[edit(7), edit(8)], &[expected("/a")]).is_err());
        assert_eq!(
            verify_json(original, &[edit(7)], &[]).map_err(|e| e.to_string()),
            Err("the rewritten values do not line up".into())
        );
    }
}
