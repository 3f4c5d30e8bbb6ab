//! What an allowlist promotes, told for the `allowlist` commands: `lint`
//! (what each source promotes, and what would surprise the people relying
//! on it) and `emit` (the native `Allowlist` document `allowlist convert`
//! and `allowlist verify --write-platforms` write). Above `policy`, as both
//! say which digest a rewrite goes to, and that rule lives there.

mod emit;
mod lint;

pub use emit::{Found, to_native_yaml, to_native_yaml_with};
pub use lint::{Lint, lint};
