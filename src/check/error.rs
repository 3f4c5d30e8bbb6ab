//! What can go wrong with one input of `check`, typed: the file, the line
//! when one is known, and what. A report lists them by their words
//! ([`CheckError`]'s `Display`), which are the ones users have always read.

use crate::edit::EditError;
use crate::json::JsonError;

/// One input that could not be used, or not wholly.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {kind}", line.map_or(String::new(), |l| format!(":{l}")))]
pub struct CheckError {
    /// The manifest as named (`-` for standard input).
    pub file: String,
    pub line: Option<usize>,
    pub kind: ErrorKind,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ErrorKind {
    #[error("cannot read: {0}")]
    Open(std::io::Error),
    #[error("cannot keep standard input: {0}")]
    KeepStdin(std::io::Error),
    #[error("cannot read standard input: {0}")]
    ReadStdin(std::io::Error),
    #[error("cannot read standard input again: {0}")]
    RereadStdin(std::io::Error),
    /// The bytes could not be read, or not as JSON once judging began.
    #[error("{0}")]
    Json(JsonError),
    #[error("is not UTF-8 text")]
    NotUtf8,
    /// JSON that broke after something was judged: what was read stands.
    #[error("{0}; the objects before it were checked, nothing after it")]
    Broken(JsonError),
    /// Neither YAML nor JSON; `template`: the line of a Helm template's
    /// first `{{`, the usual reason.
    #[error("not valid YAML or JSON: {error}{}", template.map_or(String::new(), |l| format!("; {}", template_advice(l))))]
    Unreadable { error: String, template: Option<usize> },
    /// A document (`at`: `document 3`, `item 2 of document 0`) that is not
    /// a Kubernetes object, and what it is instead.
    #[error("{at} is not a Kubernetes object ({what})")]
    NotAnObject { at: String, what: String },
    #[error(
        "--fix cannot edit an AdmissionReview, which is what the apiserver sends, not a manifest: fix the manifest its request.object came from"
    )]
    FixReview,
    #[error("cannot rewrite in place ({0}); apply the rewrites above by hand")]
    Unfixable(FixError),
}

/// Why `--fix` leaves a file as it was: its edits could not be made, or
/// would change more than the image values.
#[derive(Debug, thiserror::Error)]
pub enum FixError {
    #[error("{at}: {error}")]
    Edit { at: String, error: EditError },
    #[error(transparent)]
    Edits(#[from] EditError),
    #[error("{0}: positions unknown")]
    Unplaced(String),
    #[error("{0}: position unknown")]
    Unmatched(String),
    #[error("{0}: not a string")]
    NotAString(String),
    #[error("{0}: not in the document")]
    NotInDocument(String),
    #[error("{0}")]
    Patch(#[from] json_patch::PatchError),
    #[error("the original no longer parses: {0}")]
    Original(String),
    #[error("the result does not parse: {0}")]
    Result(String),
    #[error("the result has fewer documents")]
    FewerDocuments,
    #[error("the result has more documents")]
    MoreDocuments,
    #[error("document {0} would change beyond its images")]
    Beyond(usize),
    #[error("the rewritten values do not line up")]
    Misaligned,
    #[error("line {0}: text outside the image values would change")]
    Outside(usize),
}

/// What to run instead of checking a Helm template.
pub(super) fn template_advice(line: usize) -> String {
    format!(
        "it looks like a Helm template ('{{{{' on line {line}): render it and check the result, \
         e.g. helm template RELEASE CHART | digest-gate check --allowlist ... -f -"
    )
}

/// The line of the first `{{`, if any.
pub(super) fn template_line(text: &str) -> Option<usize> {
    let at = text.find("{{")?;
    Some(text[..at].matches('\n').count() + 1)
}
