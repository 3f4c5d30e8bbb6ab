//! digest-gate keeps model-serving workloads on promoted production image
//! digests: it finds every image in an object, decides each against an
//! allowlist of promoted digests, and rewrites or rejects what is not promoted.

pub mod allowlist;
pub mod reference;
pub mod yaml;
