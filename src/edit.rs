//! Edits of a text by byte range, the machinery `check --fix` shares
//! between YAML and JSON: what an edit is, and applying a set of them,
//! refused when two overlap.

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

/// Applies non-overlapping edits. Identical duplicates (an anchored scalar
/// reached through several aliases) collapse into one.
pub fn apply(text: &str, mut edits: Vec<Edit>) -> Result<String, EditError> {
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
            apply("0123456789", edits),
            Err(EditError::Conflict { .. })
        ));
    }
}
