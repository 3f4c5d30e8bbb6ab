//! What goes wrong loading an allowlist: a leaf the loaders of every
//! format share, so none of them imports another.

use std::fmt;

/// A problem in an allowlist source, located as precisely as the source
/// allows: file, line, and the entry's path in the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub file: String,
    pub line: Option<usize>,
    /// The entry, e.g. `spec.repositories[2].digests[0]`.
    pub entry: Option<String>,
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(entry) = &self.entry {
            write!(f, ": {entry}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every problem found while loading; loading fails if there is any.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct LoadErrors(pub Vec<LoadError>);

impl fmt::Display for LoadErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// A problem with a whole source (it cannot be read, or is not text).
pub(super) fn file_error(file: &str, message: impl Into<String>) -> LoadError {
    LoadError {
        file: file.to_owned(),
        line: None,
        entry: None,
        message: message.into(),
    }
}
