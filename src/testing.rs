//! Shared by the unit tests, the integration tests and the benches: the
//! incident's digests and a one-entry allowlist. Not part of the API.

use crate::allowlist::{Allowlist, Origin, load_text};

/// RHODS 1.21's promoted OpenVINO runtime digest.
pub const GOOD: &str = "sha256:8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6";
/// The digest upgraded clusters were left on, never promoted.
pub const BAD: &str = "sha256:7ef272bc7be866257b8126620e139d6e915ee962304d3eceba9c9d50d4e79767";
/// The runtime's repository.
pub const REPO: &str = "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8";

/// An allowlist promoting [`GOOD`] for [`REPO`], tagged `v1.21.0-15`.
pub fn incident_allowlist() -> Allowlist {
    load_text("l.txt", &format!("{REPO}:v1.21.0-15@{GOOD}\n"))
        .unwrap()
        .allowlist
}

/// A file of the repository, read when a test runs (not embedded: the
/// image's build copies only what the binary embeds).
pub fn fixture(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// A made-up digest of one repeated hex character, `sha256:aaaa…`, for
/// tests of the allowlist's model and rules.
pub fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

/// Where a test's entry comes from: source 0, `a.yaml`, line `line`.
pub fn origin(line: usize) -> Origin {
    Origin {
        provenance: 0,
        file: "a.yaml".into(),
        line,
    }
}
