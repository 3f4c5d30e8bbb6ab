//! Exemptions: image patterns that are always allowed (debug images, the
//! platform's own sidecars).
//!
//! A pattern is `repository[:tag][@digest]`. The repository part is matched
//! against the canonical repository name and may use `*` (any characters but
//! `/`), `**` (anything) and `?` (one character but `/`); the tag part may use
//! `*` and `?`; a digest must match exactly. A pattern without tag or digest
//! exempts every tag and digest of the repositories it names.

use std::fmt;

use crate::reference;

/// An exemption pattern with where it was declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exemption {
    pub pattern: Pattern,
    /// `file:line` of the declaration.
    pub origin: String,
}

/// A parsed exemption pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    repository: String,
    tag: Option<String>,
    digest: Option<String>,
}

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("the pattern is empty")]
    Empty,
    #[error("'{0}' does not start with a registry host (e.g. quay.io/org/*)")]
    NoRegistry(String),
    #[error("invalid digest: {0}")]
    Digest(reference::ReferenceError),
    #[error("'{0}' has characters an image reference cannot contain")]
    Characters(String),
}

// === impl Pattern ===

impl Pattern {
    /// Parses a pattern.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || "._-/:@*?[]".contains(c);
        if !text.chars().all(allowed) {
            return Err(PatternError::Characters(text.to_owned()));
        }
        let (name_tag, digest) = match text.split_once('@') {
            Some((n, d)) => {
                reference::validate_digest_str(d).map_err(PatternError::Digest)?;
                (n, Some(d.to_owned()))
            }
            None => (text, None),
        };
        let last_slash = name_tag.rfind('/');
        let (repository, tag) = match name_tag.rfind(':') {
            Some(c) if last_slash.is_some_and(|s| c > s) => {
                (&name_tag[..c], Some(name_tag[c + 1..].to_owned()))
            }
            _ => (name_tag, None),
        };
        let (host, path) = repository
            .split_once('/')
            .ok_or_else(|| PatternError::NoRegistry(repository.to_owned()))?;
        if !reference::looks_like_host(host) || host.contains(['*', '?']) {
            return Err(PatternError::NoRegistry(repository.to_owned()));
        }
        let host = reference::canonical_host(host);
        // `docker.io/*` matches every Hub namespace; only a plain name is
        // under library/.
        let path = if reference::in_hub_library(&host, path) && !path.contains('*') {
            format!("library/{path}")
        } else {
            path.to_owned()
        };
        Ok(Self {
            text: text.to_owned(),
            repository: format!("{host}/{path}"),
            tag,
            digest,
        })
    }

    /// Whether an image (canonical repository, tag, digest) matches.
    pub fn matches(&self, repository: &str, tag: Option<&str>, digest: Option<&str>) -> bool {
        if let Some(want) = &self.digest
            && digest != Some(want.as_str())
        {
            return false;
        }
        if let Some(want) = &self.tag {
            match tag {
                Some(t) if glob(want.as_bytes(), t.as_bytes()) => {}
                _ => return false,
            }
        }
        glob(self.repository.as_bytes(), repository.as_bytes())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Glob match by dynamic programming over (pattern, text) positions, so no
/// pattern can make it exponential.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    // reachable[j]: the pattern prefix consumed so far can end at text[..j].
    let mut reachable = vec![false; text.len() + 1];
    reachable[0] = true;
    let mut p = 0;
    while p < pattern.len() {
        let mut next = vec![false; text.len() + 1];
        let step = match pattern[p] {
            b'*' if pattern.get(p + 1) == Some(&b'*') => {
                let mut on = false;
                for j in 0..=text.len() {
                    on |= reachable[j];
                    next[j] = on;
                }
                2
            }
            b'*' => {
                let mut on = false;
                for j in 0..=text.len() {
                    if j > 0 && text[j - 1] == b'/' {
                        on = false;
                    }
                    on |= reachable[j];
                    next[j] = on;
                }
                1
            }
            c => {
                for j in 0..text.len() {
                    let hit = if c == b'?' { text[j] != b'/' } else { text[j] == c };
                    next[j + 1] = reachable[j] && hit;
                }
                1
            }
        };
        reachable = next;
        p += step;
    }
    reachable[text.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_respect_path_separators() {
        assert!(glob(b"quay.io/org/*", b"quay.io/org/debug"));
        assert!(!glob(b"quay.io/org/*", b"quay.io/org/a/b"));
        assert!(glob(b"quay.io/org/**", b"quay.io/org/a/b"));
        assert!(glob(b"quay.io/*/debug-?", b"quay.io/x/debug-1"));
        assert!(!glob(b"quay.io/*/debug-?", b"quay.io/x/debug-12"));
        assert!(glob(b"a**b", b"a/x/y/b"));
        assert!(!glob(b"abc", b"abcd"));
    }

    /// A backtracking matcher takes about 2^60 steps here; this one takes
    /// 120 × 60. The bound is a hang guard far above any machine's time for
    /// the quadratic work (microseconds), not a performance figure: those are
    /// in the benchmarks.
    #[test]
    fn pathological_patterns_stay_fast() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let pattern = "*a".repeat(60);
            let _ = done.send(glob(pattern.as_bytes(), "a".repeat(59).as_bytes()));
        });
        let matched = finished
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("a pathological pattern must not take exponential time");
        assert!(!matched);
    }

    #[test]
    fn patterns_match_repository_tag_and_digest() {
        let p = Pattern::parse("quay.io/platform/debug-*").unwrap();
        assert!(p.matches("quay.io/platform/debug-tools", Some("v1"), None));
        assert!(!p.matches("quay.io/platform/tools", None, None));
        let p = Pattern::parse("quay.io/platform/tools:dev-*").unwrap();
        assert!(p.matches("quay.io/platform/tools", Some("dev-3"), None));
        assert!(!p.matches("quay.io/platform/tools", Some("v3"), None));
        assert!(!p.matches("quay.io/platform/tools", None, None));
        let p = Pattern::parse("Docker.io/busybox").unwrap();
        assert!(p.matches("docker.io/library/busybox", Some("1"), None));
    }

    #[test]
    fn patterns_need_a_registry() {
        assert!(matches!(
            Pattern::parse("busybox"),
            Err(PatternError::NoRegistry(_))
        ));
        assert!(matches!(Pattern::parse("*/x"), Err(PatternError::NoRegistry(_))));
        assert!(matches!(
            Pattern::parse("quay.io/x y"),
            Err(PatternError::Characters(_))
        ));
    }
}
