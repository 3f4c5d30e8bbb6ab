//! Whether a promoted digest is published: what a registry said about it.
//!
//! The vocabulary of `allowlist verify` (and, later, of `check --registry`
//! and the webhook's background verification). It sits beside `allowlist`
//! so the layers that decide (policy, judge) can read it without reaching
//! up to the registry client that finds it out.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;

vocabulary! {
    "kebab-case";
    /// What a registry said about one promoted (repository, digest), worst
    /// last: when several things are wrong, the greatest names it.
    #[derive(PartialOrd, Ord, strum::EnumString)]
    pub enum State {
        /// Present, runnable, and there for every platform asked for.
        Ok,
        /// Not checked to the end: refused credentials, an unknown repository
        /// (which Docker Hub and Quay answer exactly as a private one), network
        /// errors, rate limits after retries. Never counted as missing.
        Unverifiable,
        /// Runnable, but not for every platform asked for (or a blob of that
        /// platform's image is not there: a sparse mirror).
        PlatformMissing,
        /// Present, but not an image: a signature, an attestation, another
        /// artifact, or an index of none.
        NotRunnable,
        /// The registry said, to a request it authorised, that it does not
        /// have this manifest (`MANIFEST_UNKNOWN`).
        Missing,
    }
}

impl State {
    /// Whether Pods using it will not start (what exit code 1 reports).
    pub fn fails(self) -> bool {
        matches!(self, Self::Missing | Self::NotRunnable | Self::PlatformMissing)
    }
}

/// How many of something are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub ok: usize,
    pub missing: usize,
    pub not_runnable: usize,
    pub platform_missing: usize,
    pub unverifiable: usize,
}

impl Counts {
    pub fn add(&mut self, state: State) {
        *self.slot(state) += 1;
    }

    /// Adds every state's count of `other`.
    pub fn add_all(&mut self, other: Counts) {
        self.ok += other.ok;
        self.missing += other.missing;
        self.not_runnable += other.not_runnable;
        self.platform_missing += other.platform_missing;
        self.unverifiable += other.unverifiable;
    }

    /// How many are in `state`.
    pub fn of(mut self, state: State) -> usize {
        *self.slot(state)
    }

    /// The one field each state is counted in.
    fn slot(&mut self, state: State) -> &mut usize {
        match state {
            State::Ok => &mut self.ok,
            State::Missing => &mut self.missing,
            State::NotRunnable => &mut self.not_runnable,
            State::PlatformMissing => &mut self.platform_missing,
            State::Unverifiable => &mut self.unverifiable,
        }
    }

    /// Those whose Pods would not start.
    pub fn failing(&self) -> usize {
        self.missing + self.not_runnable + self.platform_missing
    }
}

vocabulary! {
    "kebab-case";
    /// What a tag the allowlist names for a digest names now. A tag never
    /// changes its digest's [`State`]: it is a label, the digest is the pin.
    pub enum TagState {
        /// Names the promoted digest.
        Ok,
        /// Names another digest now.
        Moved,
        /// Not in the repository.
        Missing,
        /// Could not be asked.
        Unverifiable,
    }
}

vocabulary! {
    "snake_case";
    /// Why a registry could not be asked to the end: what made a digest
    /// [`State::Unverifiable`], by kind, for the `reason` label of
    /// `digest_gate_registry_verification_errors_total`.
    pub enum Trouble {
        /// No credentials for it, or credentials it refused (401,
        /// `UNAUTHORIZED`, a token service's refusal).
        Credentials,
        /// Credentials it took but that may not read the repository
        /// (`DENIED`), or a repository it does not show (`NAME_UNKNOWN`).
        Denied,
        /// A certificate not trusted, or no TLS at all.
        Tls,
        /// No connection, or no answer in time, after the retries.
        Unreachable,
        /// Still rate limiting after the retries.
        RateLimited,
        /// Still failing (5xx) after the retries.
        ServerError,
        /// Bytes that do not hash to the digest asked for.
        DigestMismatch,
        /// Any other answer.
        UnexpectedAnswer,
        /// The credentials file or a CA file could not be used.
        Setup,
    }
}

/// A node platform, `os/architecture[/variant]`, as an image index names
/// its children and as `kubernetes.io/os` and `kubernetes.io/arch` label
/// nodes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    /// Whether an image for `other` runs here: os and architecture equal,
    /// and the variant too when this one names one (`linux/arm64` takes
    /// `linux/arm64/v8`; `linux/arm/v7` does not take `linux/arm/v6`).
    pub fn accepts(&self, other: &Platform) -> bool {
        self.os == other.os
            && self.architecture == other.architecture
            && (self.variant.is_none() || self.variant == other.variant)
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        match &self.variant {
            Some(v) => write!(f, "/{v}"),
            None => Ok(()),
        }
    }
}

/// Why a platform does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a platform: write OS/ARCH or OS/ARCH/VARIANT, e.g. linux/amd64 or linux/arm/v7")]
pub struct PlatformError(String);

impl FromStr for Platform {
    type Err = PlatformError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        let valid = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        match parts[..] {
            [os, arch] if [os, arch].iter().all(valid) => Ok(Self {
                os: os.to_owned(),
                architecture: arch.to_owned(),
                variant: None,
            }),
            [os, arch, variant] if [os, arch, variant].iter().all(valid) => Ok(Self {
                os: os.to_owned(),
                architecture: arch.to_owned(),
                variant: Some(variant.to_owned()),
            }),
            _ => Err(PlatformError(s.to_owned())),
        }
    }
}

impl Serialize for Platform {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What a registry said of one reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    pub state: State,
    /// In words, e.g. `registry.redhat.io does not have this manifest
    /// (MANIFEST_UNKNOWN)`.
    pub detail: String,
    pub checked_at: std::time::SystemTime,
}

/// What is known of promoted references, by canonical repository and
/// digest: what `check --registry` verified, for the judge to read.
#[derive(Debug, Clone, Default)]
pub struct Published {
    /// By repository, then digest: a lookup borrows, never builds a key.
    known: HashMap<String, HashMap<String, Known>>,
}

impl Published {
    pub fn insert(&mut self, repository: &str, digest: &str, known: Known) {
        self.known
            .entry(repository.to_owned())
            .or_default()
            .insert(digest.to_owned(), known);
    }

    /// What is known of `repository@digest`.
    pub fn get(&self, repository: &str, digest: &str) -> Option<&Known> {
        self.known.get(repository)?.get(digest)
    }

    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::VariantArray;

    #[test]
    fn states_order_by_precedence_and_read_alike_everywhere() {
        let mut worst = State::Ok;
        for s in [
            State::Unverifiable,
            State::PlatformMissing,
            State::NotRunnable,
            State::Missing,
        ] {
            assert!(s > worst);
            worst = worst.max(s);
        }
        for s in State::VARIANTS {
            let name: &'static str = s.into();
            assert_eq!(serde_json::to_value(s).unwrap(), name);
            assert_eq!(s.to_string(), name);
            assert_eq!(name.parse::<State>().unwrap(), *s);
        }
        for s in TagState::VARIANTS {
            let name: &'static str = s.into();
            assert_eq!(serde_json::to_value(s).unwrap(), name);
        }
        assert_eq!(State::PlatformMissing.to_string(), "platform-missing");
        assert!(!State::Unverifiable.fails() && State::Missing.fails());
    }

    #[test]
    fn platforms_parse_print_and_match_as_nodes_and_indexes_name_them() {
        let arm64: Platform = "linux/arm64".parse().unwrap();
        let v8: Platform = "linux/arm64/v8".parse().unwrap();
        assert_eq!(v8.to_string(), "linux/arm64/v8");
        assert!(arm64.accepts(&v8) && !v8.accepts(&arm64));
        let v7: Platform = "linux/arm/v7".parse().unwrap();
        assert!(!v7.accepts(&"linux/arm/v6".parse().unwrap()));
        for bad in [
            "linux",
            "linux/",
            "/amd64",
            "linux/amd64/v1/x",
            "linux/am d64",
            "",
        ] {
            let e = bad.parse::<Platform>().unwrap_err();
            assert!(e.to_string().contains("OS/ARCH"), "{bad}: {e}");
        }
    }
}
