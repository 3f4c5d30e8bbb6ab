//! digest-gate keeps model-serving workloads on promoted production image
//! digests: it finds every image in an object, decides each against an
//! allowlist of promoted digests, and rewrites or rejects what is not promoted.
//!
//! One image's way through: [`objects`] finds the image sites of an object
//! by its kind's entry in [`objects::kinds`], [`policy`] decides each against
//! the [`allowlist`] using the [`reference`] grammar, and [`review`] turns the
//! decisions into a verdict, a JSON Patch and messages ([`text`] keeps
//! request strings in them safe). [`check`] feeds the same path from manifest
//! files ([`yaml`] keeps their positions for `--fix`).

pub mod admission;
pub mod allowlist;
pub mod check;
pub mod cli;
pub mod metrics;
pub mod objects;
pub mod policy;
pub mod reference;
pub mod review;
pub mod server;
pub mod text;
// The incident's digests and allowlist, for unit tests, integration tests
// and benches alike (one definition).
#[doc(hidden)]
pub mod testing;
pub mod yaml;
