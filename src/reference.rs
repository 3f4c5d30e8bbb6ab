//! Container image references: the distribution reference grammar
//! (`name[:tag][@digest]`), and the normalised repository name that
//! digest-gate matches allowlist entries on.
//!
//! The parser borrows the input: deciding an image must not allocate just to
//! look at it.

use std::borrow::Cow;
use std::fmt;

/// Longest repository name (domain included) the distribution grammar accepts.
pub const NAME_MAX_LEN: usize = 255;
/// Longest tag the grammar accepts.
pub const TAG_MAX_LEN: usize = 128;

/// Why a string is not a usable image reference. Messages are written for the
/// developer who typed the image; the caller adds which image and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("the image is empty")]
    Empty,
    #[error("it contains white space or a control character (check for a stray space or line break)")]
    Whitespace,
    #[error("it is {}, a placeholder that was never substituted", .0.describe())]
    Placeholder(Placeholder),
    #[error(
        "it is a bare digest or image ID, not an image reference; write the repository before it: registry/repository@sha256:..."
    )]
    BareDigest,
    #[error("it has no repository name before ':' or '@'")]
    MissingName,
    #[error("the repository name has an empty path component (a doubled or trailing '/')")]
    EmptyComponent,
    #[error("'{component}' contains upper-case letters; repository names must be lower-case")]
    Uppercase { component: String },
    #[error(
        "'{component}' is not a valid repository path component (use lower-case letters and digits, joined by '.', '_', '__' or dashes)"
    )]
    InvalidComponent { component: String },
    #[error("the repository name is {len} characters long; the limit is {NAME_MAX_LEN}")]
    NameTooLong { len: usize },
    #[error(
        "tag '{tag}' is not valid (letters, digits, '_', '.' and '-', starting with a letter, digit or '_', at most {TAG_MAX_LEN} characters)"
    )]
    InvalidTag { tag: String },
    #[error("digest '{digest}' is not of the form algorithm:hex")]
    InvalidDigest { digest: String },
    #[error("digest algorithm '{algorithm}' is not supported; use sha256 or sha512")]
    UnsupportedDigest { algorithm: String },
    #[error("a {algorithm} digest has {expected} hex characters, this one has {found}")]
    DigestLength {
        algorithm: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("the digest must be lower-case hex")]
    DigestCase,
}

impl ReferenceError {
    /// A stable label for metrics and machine-readable reports.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::Whitespace => "whitespace",
            Self::Placeholder(_) => "placeholder",
            Self::BareDigest => "bare_digest",
            Self::Uppercase { .. } => "uppercase",
            Self::NameTooLong { .. } => "name_too_long",
            Self::UnsupportedDigest { .. } => "digest_unsupported",
            // The grammar itself wants at least 32 hex characters; anything
            // shorter is a format error there, not a length mismatch.
            Self::DigestLength { found, .. } if *found < 32 => "digest_format",
            Self::DigestLength { .. } => "digest_length",
            Self::DigestCase | Self::InvalidDigest { .. } => "digest_format",
            Self::MissingName
            | Self::EmptyComponent
            | Self::InvalidComponent { .. }
            | Self::InvalidTag { .. } => "invalid_format",
        }
    }
}

/// How manifests mark an image to be filled in before they are applied: the
/// conventions seen in real model-serving repositories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    /// `$(vllm-image)`: kustomize vars, Tekton parameters.
    Variable,
    /// `${OVMS_IMAGE}`: shell, envsubst, OpenShift Template parameters.
    ShellVariable,
    /// `{{ .Values.image }}`: Go and Helm templates.
    Template,
    /// `<openvino_image>`: a name a script replaces with sed.
    AngleBrackets,
    /// `ko://github.com/org/cmd`: an import path `ko resolve` builds.
    Ko,
    /// `ovms-1:replace`: a tag a build step replaces.
    ReplaceTag,
    /// `REPLACE_IMAGE`: an upper-case name a script replaces.
    UpperCaseName,
}

impl Placeholder {
    /// The convention `image` follows, if any.
    pub fn of(image: &str) -> Option<Self> {
        Some(if image.contains("$(") {
            Self::Variable
        } else if image.contains("${") {
            Self::ShellVariable
        } else if image.contains("{{") {
            Self::Template
        } else if image.starts_with('<') && image.ends_with('>') {
            Self::AngleBrackets
        } else if image.starts_with("ko://") {
            Self::Ko
        } else if image.ends_with(":replace") {
            Self::ReplaceTag
        } else if image.starts_with(|c: char| c.is_ascii_uppercase())
            && image
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            Self::UpperCaseName
        } else {
            return None;
        })
    }

    /// What it is, for a message.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Variable => "a kustomize or Tekton variable, $(...)",
            Self::ShellVariable => "a shell, envsubst or OpenShift Template parameter, ${...}",
            Self::Template => "a Go or Helm template, {{ ... }}",
            Self::AngleBrackets => "a name in angle brackets that a script replaces",
            Self::Ko => "a ko import path, which ko resolve builds and replaces",
            Self::ReplaceTag => "the tag ':replace', which a build step replaces",
            Self::UpperCaseName => "an upper-case name that a script replaces",
        }
    }
}

/// Digest algorithms digest-gate accepts: the two the OCI image spec registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Sha256,
    Sha512,
}

impl Algorithm {
    /// The algorithm's name as written in a digest.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "sha256",
            Self::Sha512 => "sha512",
        }
    }

    fn hex_len(self) -> usize {
        match self {
            Self::Sha256 => 64,
            Self::Sha512 => 128,
        }
    }
}

/// A parsed image reference borrowing its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reference<'a> {
    raw: &'a str,
    /// End of the repository name in `raw`.
    name_end: usize,
    /// End of the grammar's domain inside the name (0 when there is none).
    domain_end: usize,
    tag: Option<&'a str>,
    digest: Option<&'a str>,
}

/// Parses `input` exactly as the distribution reference grammar does.
pub fn parse(input: &str) -> Result<Reference<'_>, ReferenceError> {
    if input.is_empty() {
        return Err(ReferenceError::Empty);
    }
    // The grammar's validators reject every character most placeholders or
    // stray white space bring, so those friendlier diagnoses are worked out
    // on the error path and a valid reference is read in one pass; only the
    // two that are valid names are looked for on success, without a scan.
    let r = parse_grammar(input).map_err(|e| {
        if let Some(p) = Placeholder::of(input) {
            ReferenceError::Placeholder(p)
        } else if input.chars().any(|c| c.is_whitespace() || c.is_control()) {
            ReferenceError::Whitespace
        } else {
            e
        }
    })?;
    if r.tag == Some("replace") {
        return Err(ReferenceError::Placeholder(Placeholder::ReplaceTag));
    }
    if r.domain_end == 0 && r.is_bare_digest() {
        return Err(ReferenceError::BareDigest);
    }
    Ok(r)
}

fn parse_grammar(input: &str) -> Result<Reference<'_>, ReferenceError> {
    // A byte scan: `str::find(char)` goes through the generic char searcher.
    let (name_tag, digest) = match input.bytes().position(|b| b == b'@') {
        Some(at) => {
            let digest = &input[at + 1..];
            validate_digest(digest)?;
            (&input[..at], Some(digest))
        }
        None => (input, None),
    };

    // Path components never hold ':' and a port is always followed by '/', so a
    // ':' after the last '/' can only start the tag.
    let last_slash = name_tag.rfind('/');
    let (name, tag) = match name_tag.rfind(':') {
        Some(colon) if last_slash.is_none_or(|slash| colon > slash) => {
            let tag = &name_tag[colon + 1..];
            validate_tag(tag)?;
            (&name_tag[..colon], Some(tag))
        }
        _ => (name_tag, None),
    };
    if name.is_empty() {
        return Err(ReferenceError::MissingName);
    }
    let domain_end = validate_name(name)?;
    if name.len() > NAME_MAX_LEN {
        return Err(ReferenceError::NameTooLong { len: name.len() });
    }
    Ok(Reference {
        raw: input,
        name_end: name.len(),
        domain_end,
        tag,
        digest,
    })
}

fn validate_digest(digest: &str) -> Result<(), ReferenceError> {
    let invalid = || ReferenceError::InvalidDigest {
        digest: digest.to_owned(),
    };
    let (algorithm, hex) = digest.split_once(':').ok_or_else(invalid)?;
    if !is_digest_algorithm(algorithm) || hex.is_empty() {
        return Err(invalid());
    }
    let mut upper = false;
    for b in hex.bytes() {
        match b {
            b'0'..=b'9' | b'a'..=b'f' => {}
            b'A'..=b'F' => upper = true,
            _ => return Err(invalid()),
        }
    }
    let algorithm = match algorithm {
        "sha256" => Algorithm::Sha256,
        "sha512" => Algorithm::Sha512,
        other => {
            return Err(ReferenceError::UnsupportedDigest {
                algorithm: other.to_owned(),
            });
        }
    };
    if hex.len() != algorithm.hex_len() {
        return Err(ReferenceError::DigestLength {
            algorithm: algorithm.name(),
            expected: algorithm.hex_len(),
            found: hex.len(),
        });
    }
    if upper {
        return Err(ReferenceError::DigestCase);
    }
    Ok(())
}

/// `[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*`
fn is_digest_algorithm(s: &str) -> bool {
    let mut expect_start = true;
    for b in s.bytes() {
        if expect_start {
            if !b.is_ascii_alphabetic() {
                return false;
            }
            expect_start = false;
        } else if matches!(b, b'-' | b'_' | b'+' | b'.') {
            expect_start = true;
        } else if !b.is_ascii_alphanumeric() {
            return false;
        }
    }
    !s.is_empty() && !expect_start
}

/// `sha256:` and the first 12 hex characters: enough to tell digests apart
/// by eye in a message.
pub fn short_digest(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

/// Validates a standalone digest (`algorithm:hex`), as allowlists write them.
pub fn validate_digest_str(digest: &str) -> Result<(), ReferenceError> {
    validate_digest(digest)
}

/// `[\w][\w.-]{0,127}`
fn validate_tag(tag: &str) -> Result<(), ReferenceError> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = tag.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= TAG_MAX_LEN
        && word(bytes[0])
        && bytes[1..].iter().all(|&b| word(b) || b == b'.' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ReferenceError::InvalidTag { tag: tag.to_owned() })
    }
}

/// Validates a tag as allowlists write them.
pub fn validate_tag_str(tag: &str) -> Result<(), ReferenceError> {
    validate_tag(tag)
}

/// Validates `[domain/]component(/component)*` and returns where the grammar's
/// domain ends (0 if there is none).
fn validate_name(name: &str) -> Result<usize, ReferenceError> {
    let (domain_end, path) = match name.split_once('/') {
        Some((first, rest)) if is_domain(first) => (first.len(), rest),
        _ => (0, name),
    };
    for component in path.split('/') {
        validate_component(component)?;
    }
    Ok(domain_end)
}

fn validate_component(component: &str) -> Result<(), ReferenceError> {
    if component.is_empty() {
        return Err(ReferenceError::EmptyComponent);
    }
    if is_path_component(component.as_bytes()) {
        return Ok(());
    }
    if component.bytes().any(|b| b.is_ascii_uppercase())
        && is_path_component(component.to_ascii_lowercase().as_bytes())
    {
        return Err(ReferenceError::Uppercase {
            component: component.to_owned(),
        });
    }
    Err(ReferenceError::InvalidComponent {
        component: component.to_owned(),
    })
}

/// `[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*`
fn is_path_component(b: &[u8]) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let mut i = 0;
    loop {
        if i >= b.len() || !alnum(b[i]) {
            return false;
        }
        while i < b.len() && alnum(b[i]) {
            i += 1;
        }
        if i == b.len() {
            return true;
        }
        match b[i] {
            b'.' => i += 1,
            b'_' => {
                i += 1;
                if i < b.len() && b[i] == b'_' {
                    i += 1;
                }
            }
            b'-' => {
                while i < b.len() && b[i] == b'-' {
                    i += 1;
                }
            }
            _ => return false,
        }
    }
}

/// `host(:port)?` where host is a DNS name (upper case allowed) or a bracketed
/// IPv6 address (hex digits and colons only: no zone, no embedded IPv4).
fn is_domain(s: &str) -> bool {
    let (host_ok, rest) = if let Some(inner) = s.strip_prefix('[') {
        let Some(close) = inner.find(']') else {
            return false;
        };
        let addr = &inner[..close];
        let ok = !addr.is_empty() && addr.bytes().all(|b| b.is_ascii_hexdigit() || b == b':');
        (ok, &inner[close + 1..])
    } else {
        let end = s.find(':').unwrap_or(s.len());
        (s[..end].split('.').all(is_domain_label), &s[end..])
    };
    let port_ok = rest.is_empty()
        || rest
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    host_ok && port_ok
}

/// `[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]`
fn is_domain_label(label: &str) -> bool {
    let b = label.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'-')
}

// === impl Reference ===

impl<'a> Reference<'a> {
    /// The reference exactly as written.
    pub fn as_str(&self) -> &'a str {
        self.raw
    }

    /// The repository name as written (domain included, no tag or digest).
    pub fn name(&self) -> &'a str {
        &self.raw[..self.name_end]
    }

    /// The domain as the grammar reads it: any leading component that parses
    /// as `host[:port]` and is followed by a path. `foo/bar` has domain `foo`
    /// here, although a container runtime treats `foo/bar` as a short name;
    /// see [`Reference::registry`].
    pub fn grammar_domain(&self) -> Option<&'a str> {
        (self.domain_end > 0).then(|| &self.raw[..self.domain_end])
    }

    /// The tag, if one is written.
    pub fn tag(&self) -> Option<&'a str> {
        self.tag
    }

    /// The digest (`algorithm:hex`), if one is written.
    pub fn digest(&self) -> Option<&'a str> {
        self.digest
    }

    /// A 64-hex name, which Docker reads as an image ID, or `sha256:<hex>`,
    /// which the grammar reads as repository `sha256` with a tag: a digest
    /// pasted without its repository either way.
    fn is_bare_digest(&self) -> bool {
        let name = self.name();
        is_hex_of(name, 64)
            || self.digest.is_none()
                && self.tag.is_some_and(|t| {
                    name == "sha256" && is_hex_of(t, 64) || name == "sha512" && is_hex_of(t, 128)
                })
    }

    /// The repository Docker and containerd read a short name as:
    /// `nginx` is `docker.io/library/nginx`.
    pub fn docker_hub_repository(&self) -> String {
        let name = self.name();
        if in_hub_library("docker.io", name) {
            format!("docker.io/library/{name}")
        } else {
            format!("docker.io/{name}")
        }
    }

    /// How container runtimes read this short name, for messages: the same
    /// words wherever one is refused.
    pub fn short_name_reading(&self) -> String {
        format!(
            "Docker and containerd pull it from {}, CRI-O from its configured search registries",
            self.docker_hub_repository()
        )
    }

    /// The registry and the path within it, split the way container runtimes
    /// do: the first component names a registry only if it contains '.' or
    /// ':', is `localhost`, or has upper-case letters. `None` means a short
    /// name (`nginx`, `kserve/sklearnserver`), which CRI-O resolves through
    /// registries.conf search lists rather than a fixed registry.
    pub fn registry(&self) -> Option<(&'a str, &'a str)> {
        let name = self.name();
        let (first, rest) = name.split_once('/')?;
        // Upper case marks a host only in references (distribution's rule):
        // path components cannot have it, so the first one must be a host.
        let host = looks_like_host(first) || first.bytes().any(|b| b.is_ascii_uppercase());
        (host && self.domain_end == first.len()).then_some((first, rest))
    }

    /// The normalised `registry/path` used for matching, or `None` for a short
    /// name when no short-name registry is configured. `index.docker.io` is
    /// `docker.io`, Docker Hub's one-component names gain `library/`, and
    /// registry host names compare case-insensitively.
    pub fn canonical_repository(&self, short_name_registry: Option<&str>) -> Option<Cow<'a, str>> {
        match self.registry() {
            Some((registry, path)) => Some(canonical(registry, path, self.name())),
            None => {
                let registry = short_name_registry?;
                Some(Cow::Owned(canonical(registry, self.name(), "").into_owned()))
            }
        }
    }

    /// This reference's repository (as written) pinned to `digest`, keeping the
    /// tag so people can still read which version it is.
    pub fn pinned(&self, digest: &str) -> String {
        let mut out =
            String::with_capacity(self.name_end + digest.len() + 2 + self.tag.map_or(0, |t| t.len() + 1));
        out.push_str(self.name());
        if let Some(tag) = self.tag {
            out.push(':');
            out.push_str(tag);
        }
        out.push('@');
        out.push_str(digest);
        out
    }
}

impl fmt::Display for Reference<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.raw)
    }
}

fn is_hex_of(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether a name's first component is a registry host rather than a
/// namespace: it has a '.' or a ':' (a port), or is `localhost`. Shared by
/// references, mirror prefixes and exemption patterns so all three split
/// `quay.io/x` and `kserve/x` alike.
pub fn looks_like_host(first: &str) -> bool {
    first.contains(['.', ':']) || first == "localhost"
}

/// A registry host as matching compares it: lower case, and Docker Hub's
/// `index.docker.io` as `docker.io`. Borrowed when already canonical. A
/// single-label host (`Foo`) is a host only because of its upper case, so it
/// keeps it: lowered, `foo/bar` would read as a Docker Hub short name
/// wherever the name is shown and pasted back.
pub fn canonical_host(host: &str) -> Cow<'_, str> {
    let host = if host.bytes().any(|b| b.is_ascii_uppercase()) && looks_like_host(host) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    };
    if host == "index.docker.io" {
        Cow::Borrowed("docker.io")
    } else {
        host
    }
}

/// Docker Hub keeps one-component names under `library/` (`docker.io/nginx`
/// is `docker.io/library/nginx`); `host` is canonical.
pub fn in_hub_library(host: &str, path: &str) -> bool {
    host == "docker.io" && !path.contains('/')
}

/// Builds the canonical `registry/path`; `as_written` is returned borrowed when
/// it already is canonical, which is the common case.
fn canonical<'a>(registry: &str, path: &str, as_written: &'a str) -> Cow<'a, str> {
    let registry = canonical_host(registry);
    let registry = &*registry;
    let library = in_hub_library(registry, path);
    let unchanged = !library
        && as_written.len() == registry.len() + 1 + path.len()
        && as_written.starts_with(registry)
        && as_written.as_bytes()[registry.len()] == b'/';
    if unchanged {
        return Cow::Borrowed(as_written);
    }
    let mut out = String::with_capacity(registry.len() + path.len() + 9);
    out.push_str(registry);
    out.push('/');
    if library {
        out.push_str("library/");
    }
    out.push_str(path);
    Cow::Owned(out)
}

/// Normalises a mirror-rule prefix (a registry host, a namespace or a whole
/// repository) for prefix matching against canonical repositories.
pub fn canonical_prefix(prefix: &str) -> Result<String, ReferenceError> {
    let trimmed = prefix.trim_end_matches('/');
    let (host, path) = trimmed.split_once('/').unwrap_or((trimmed, ""));
    if !is_domain(host) || !looks_like_host(host) {
        return Err(ReferenceError::InvalidComponent {
            component: host.to_owned(),
        });
    }
    if !path.is_empty() {
        for component in path.split('/') {
            validate_component(component)?;
        }
    }
    let host = canonical_host(host);
    Ok(if path.is_empty() {
        host.into_owned()
    } else {
        format!("{host}/{path}")
    })
}

/// A repository and the digest that pins an image of it: what a workload
/// will run, what a registry is asked about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pinned {
    /// Canonical (`docker.io/library/nginx`, not `nginx`).
    pub repository: String,
    pub digest: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::testing::GOOD as D256;

    #[test]
    fn splits_name_tag_and_digest() {
        let input = format!("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8:v1.21.0-15@{D256}");
        let r = parse(&input).unwrap();
        assert_eq!(
            r.name(),
            "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8"
        );
        assert_eq!(r.tag(), Some("v1.21.0-15"));
        assert_eq!(r.digest(), Some(D256));
        assert_eq!(
            r.registry(),
            Some(("registry.redhat.io", "rhods/odh-openvino-servingruntime-rhel8"))
        );
        assert_eq!(r.to_string(), input);
    }

    #[test]
    fn short_names_have_no_registry() {
        for short in ["nginx", "ovms-1:2", "kserve/sklearnserver:latest", "foo/bar/baz"] {
            let r = parse(short).unwrap();
            assert_eq!(r.registry(), None, "{short}");
            assert_eq!(r.canonical_repository(None), None, "{short}");
        }
    }

    #[rstest::rstest]
    #[case::official_image("nginx", "docker.io/library/nginx")]
    #[case::organisation_image("kserve/sklearnserver:v1", "docker.io/kserve/sklearnserver")]
    #[case::explicit_docker_io("docker.io/nginx", "docker.io/library/nginx")]
    #[case::index_host("index.docker.io/library/nginx", "docker.io/library/nginx")]
    #[case::index_host_upper_case("Index.Docker.IO/foo/bar", "docker.io/foo/bar")]
    #[case::other_registry("quay.io/modh/x", "quay.io/modh/x")]
    #[case::other_registry_upper_case("Quay.io/modh/x", "quay.io/modh/x")]
    fn docker_hub_names_normalise(#[case] input: &str, #[case] want: &str) {
        let r = parse(input).unwrap();
        assert_eq!(
            r.canonical_repository(Some("docker.io")).as_deref(),
            Some(want),
            "{input}"
        );
    }

    #[test]
    fn canonical_name_is_borrowed_when_already_canonical() {
        let r = parse("quay.io/modh/x:1").unwrap();
        assert!(matches!(
            r.canonical_repository(None),
            Some(Cow::Borrowed("quay.io/modh/x"))
        ));
    }

    #[test]
    fn placeholders_get_their_own_error() {
        for p in [
            "$(vllm-cuda-image)",
            "<openvino_image>",
            "quay.io/x:${TAG}",
            "{{ .Values.image }}",
        ] {
            assert!(matches!(parse(p), Err(ReferenceError::Placeholder(_))), "{p}");
        }
        // Valid names, but placeholders all the same.
        assert_eq!(
            parse("ovms-1:replace"),
            Err(ReferenceError::Placeholder(Placeholder::ReplaceTag))
        );
        assert_eq!(parse("quay.io/x:replaced").map(|r| r.tag()), Ok(Some("replaced")));
    }

    #[test]
    fn bare_digests_are_not_names() {
        let hex = &D256["sha256:".len()..];
        assert_eq!(parse(hex), Err(ReferenceError::BareDigest));
        assert_eq!(parse(D256), Err(ReferenceError::BareDigest));
        // With a registry it is a (strange) repository name.
        assert!(parse(&format!("quay.io/{hex}")).is_ok());
    }

    #[test]
    fn upper_case_single_label_hosts_keep_their_case() {
        let r = parse("Foo/bar:1").unwrap();
        assert_eq!(r.registry(), Some(("Foo", "bar")));
        assert_eq!(r.canonical_repository(None).as_deref(), Some("Foo/bar"));
        assert_eq!(
            parse("Quay.IO/x").unwrap().canonical_repository(None).as_deref(),
            Some("quay.io/x")
        );
    }

    #[test]
    fn whitespace_is_called_out() {
        assert_eq!(parse("quay.io/x:1 "), Err(ReferenceError::Whitespace));
        assert_eq!(parse("quay.io/x\n"), Err(ReferenceError::Whitespace));
    }

    #[test]
    fn digest_errors_are_specific() {
        assert_eq!(
            parse("quay.io/x@sha256:abc"),
            Err(ReferenceError::DigestLength {
                algorithm: "sha256",
                expected: 64,
                found: 3
            })
        );
        assert_eq!(
            parse(&format!("quay.io/x@sha384:{}", "a".repeat(96))),
            Err(ReferenceError::UnsupportedDigest {
                algorithm: "sha384".into()
            })
        );
        assert_eq!(
            parse(&format!("quay.io/x@sha256:{}", "A".repeat(64))),
            Err(ReferenceError::DigestCase)
        );
        assert_eq!(
            parse("quay.io/x@latest"),
            Err(ReferenceError::InvalidDigest {
                digest: "latest".into()
            })
        );
    }

    #[test]
    fn pinned_keeps_repository_and_tag() {
        let r = parse("quay.io/modh/x:v1").unwrap();
        assert_eq!(r.pinned(D256), format!("quay.io/modh/x:v1@{D256}"));
        let digested = format!("quay.io/modh/x@{D256}");
        let r = parse(&digested).unwrap();
        assert_eq!(r.pinned(D256), digested);
    }

    #[test]
    fn mirror_prefixes_normalise() {
        assert_eq!(
            canonical_prefix("Registry.RedHat.io/rhods/").unwrap(),
            "registry.redhat.io/rhods"
        );
        assert_eq!(canonical_prefix("quay.io").unwrap(), "quay.io");
        assert!(canonical_prefix("rhods/x").is_err());
    }

    fn reference_strategy() -> impl Strategy<Value = String> {
        let component = "[a-z0-9]{1,6}([._-][a-z0-9]{1,6}){0,2}";
        let domain = prop_oneof![
            Just(String::new()),
            "[a-z]{1,8}\\.(io|com)(:[0-9]{1,5})?/",
            Just("localhost:5000/".to_owned()),
            Just("[::1]:5000/".to_owned()),
        ];
        (
            domain,
            prop::collection::vec(component, 1..4),
            prop::option::of("[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}"),
            prop::option::of(prop_oneof![
                "[0-9a-f]{64}".prop_map(|h| format!("sha256:{h}")),
                "[0-9a-f]{128}".prop_map(|h| format!("sha512:{h}"))
            ]),
        )
            .prop_map(|(d, comps, tag, digest)| {
                let mut s = d + &comps.join("/");
                if let Some(t) = tag {
                    s.push(':');
                    s.push_str(&t);
                }
                if let Some(dg) = digest {
                    s.push('@');
                    s.push_str(&dg);
                }
                s
            })
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,300}") {
            let _ = parse(&s);
        }

        #[test]
        fn parse_never_panics_on_reference_alphabet(s in "[a-zA-Z0-9:/@._\\-\\[\\]]{0,80}") {
            if let Ok(r) = parse(&s) {
                // Whatever parses must display as itself and parse the same way again.
                let shown = r.to_string();
                prop_assert_eq!(&shown, &s);
                prop_assert_eq!(parse(&shown), Ok(r));
            }
        }

        #[test]
        fn generated_references_round_trip(s in reference_strategy()) {
            let r = parse(&s).map_err(|e| TestCaseError::fail(format!("{s}: {e}")))?;
            let shown = r.to_string();
            prop_assert_eq!(&shown, &s);
            let again = parse(&shown).unwrap();
            prop_assert_eq!(again.name(), r.name());
            prop_assert_eq!(again.tag(), r.tag());
            prop_assert_eq!(again.digest(), r.digest());
            // Pinning to a digest yields a reference that parses with that digest.
            let d = format!("sha256:{}", "0".repeat(64));
            let pinned = r.pinned(&d);
            let p = parse(&pinned).unwrap();
            prop_assert_eq!(p.digest(), Some(d.as_str()));
            prop_assert_eq!(p.name(), r.name());
        }
    }
}
