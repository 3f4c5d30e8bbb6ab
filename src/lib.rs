//! digest-gate keeps model-serving workloads on promoted production image
//! digests: it finds every image in an object, decides each against an
//! allowlist of promoted digests, and rewrites or rejects what is not promoted.
//!
//! One image's way through: [`objects`] finds the image sites of an object
//! by its kind's entry in [`objects::kinds`], [`policy`] decides each against
//! the [`allowlist`] using the [`reference`](mod@reference) grammar, and [`judge`] turns the
//! decisions into a verdict and fixes; [`admission`] renders the JSON Patch
//! and the messages ([`text`] keeps request strings in them safe). [`check`] feeds the same path from manifest
//! files ([`yaml`] keeps their positions for `--fix`).
//!
//! One `POST /mutate`, one way through, never back into a module left:
//! 1. [`server`] accepts the TLS connection and hands the body to its HTTP route;
//! 2. [`admission`] decodes the AdmissionReview (only what the walkers read);
//! 3. [`judge`] walks the object ([`objects`]), decides each image ([`policy`]), finds the fixes;
//! 4. [`admission`] renders that [`judge::Judgement`] (warnings, patch, record) and encodes the answer;
//! 5. [`server`] sends it, then counts it ([`metrics`]) and logs the decision.

/// A closed vocabulary: an enum whose variants each have one string form,
/// derived once for serde, strum (`Display`, `&'static str`, `VARIANTS`)
/// and so for metric labels, SARIF rule ids and report fields. `$case` is
/// the form (`"lowercase"`, `"snake_case"`, `"kebab-case"`); an enum's own
/// `#[derive]`s (an order, parsing) go on it as usual.
macro_rules! vocabulary {
    ($case:literal; $(#[$meta:meta])* $vis:vis enum $name:ident { $($body:tt)* }) => {
        $(#[$meta])*
        #[derive(
            Debug,
            Clone,
            Copy,
            PartialEq,
            Eq,
            Hash,
            serde::Serialize,
            strum::IntoStaticStr,
            strum::Display,
            strum::VariantArray,
        )]
        #[serde(rename_all = $case)]
        #[strum(serialize_all = $case)]
        $vis enum $name { $($body)* }
    };
}

pub mod admission;
pub mod allowlist;
pub mod audit;
pub mod check;
pub mod cli;
pub mod edit;
pub mod flags;
pub mod fleet;
pub mod inventory;
pub mod json;
pub mod judge;
pub mod logsink;
pub mod metrics;
pub mod objects;
pub mod output;
pub mod policy;
pub mod preflight;
pub mod published;
pub mod reference;
pub mod registry;
pub mod report;
pub mod sarif;
pub mod server;
pub mod text;
// The incident's digests and allowlist, for unit tests, integration tests
// and benches alike (one definition).
#[doc(hidden)]
pub mod testing;
pub mod yaml;
