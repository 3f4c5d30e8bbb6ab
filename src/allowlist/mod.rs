//! The allowlist of promoted digests: which digests of which repository may
//! run, with the tags people know them by, an optional rewrite target, mirror
//! equivalences and exemptions.
//!
//! An [`Allowlist`] is immutable once built; the server swaps whole snapshots.
//! Every lookup is a hash probe per path prefix of the image's repository, so
//! its cost does not grow with the number of entries. Entries are compact
//! (one shared name per repository, digests scanned in place until a
//! repository has many), so a 10,000-repository list stays a few MiB.

mod catalog;
mod csv;
mod entries;
mod error;
mod exempt;
mod fbc;
mod imageset;
mod input;
mod load;
mod native;
mod plain;

mod builder;
mod candidates;
mod model;
mod provenance;
mod rows;

pub use builder::{Builder, Conflict};
pub use candidates::Candidates;
pub use csv::{Related, package_of, related_images};
pub use model::{ALLOW_CONTACTING_SOURCE, Allowlist, MirrorRule, NEVER_CONTACT_SOURCE};
pub use provenance::{Origin, Promotion, Provenance};
use rows::*;
pub use rows::{Promoted, Repository};

pub use entries::{Format, SourceSummary};
pub use error::{LoadError, LoadErrors};
pub use exempt::{Exemption, Pattern, PatternError};
pub use fbc::{CatalogOptions, ChannelSummary, PackageSummary};
pub use input::{
    INSTALLED_PREFIX, Input, OpenFile, Source, SourceKind, configmap_sources, inputs, open_files,
    source_files,
};
pub use load::{
    API_VERSION, Loaded, load_paths, load_paths_with, load_sources, load_sources_with, load_text,
    load_with_installed,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{digest as d, origin};

    #[test]
    fn tags_resolve() {
        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(1)).unwrap();
        b.promote("quay.io/x/y", &d('b'), &["v2"], &origin(2)).unwrap();
        let list = b.build();
        let c = list.candidates("quay.io/x/y");
        assert!(c.is_promoted(&d('a')));
        assert_eq!(c.digest_for_tag("v2").unwrap().digest(), d('b'));
    }

    #[test]
    fn lookups_agree_before_and_after_the_hash_index() {
        let mut b = Builder::default();
        let digests: Vec<String> = (0..20).map(|i| format!("sha256:{i:064x}")).collect();
        for (i, d) in digests.iter().enumerate() {
            let tag = format!("v{i}");
            b.promote("quay.io/x/y", d, &[&tag], &origin(i)).unwrap();
            // Re-promoting is idempotent, with the index or without.
            b.promote("quay.io/x/y", d, &[&tag], &origin(i)).unwrap();
        }
        let list = b.build();
        let repo = list.repository("quay.io/x/y").unwrap();
        assert!(list.indexes.contains_key(&repo.id));
        assert_eq!(repo.digest_count(), 20);
        assert_eq!(repo.digests().count(), 20);
        for (i, d) in digests.iter().enumerate() {
            assert!(repo.is_promoted(d));
            assert_eq!(
                repo.digest_for_tag(&format!("v{i}")).unwrap().digest(),
                d.as_str()
            );
        }
        assert!(!repo.is_promoted(&format!("sha256:{:064x}", 99)));
    }

    #[test]
    fn a_tag_naming_two_digests_is_a_conflict() {
        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(1)).unwrap();
        let err = b
            .promote("quay.io/x/y", &d('b'), &["v1"], &origin(7))
            .unwrap_err();
        assert!(
            matches!(*err, Conflict::Tag { ref first, .. } if first.line == 1),
            "{err}"
        );
    }

    #[test]
    fn two_rewrite_targets_are_a_conflict() {
        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &[], &origin(1)).unwrap();
        b.promote("quay.io/x/y", &d('b'), &[], &origin(1)).unwrap();
        b.rewrite_to("quay.io/x/y", &d('a'), &origin(2)).unwrap();
        b.rewrite_to("quay.io/x/y", &d('a'), &origin(5)).unwrap();
        let err = b.rewrite_to("quay.io/x/y", &d('b'), &origin(9)).unwrap_err();
        assert!(matches!(*err, Conflict::RewriteTo { .. }), "{err}");
        let err = b.rewrite_to("quay.io/x/z", &d('b'), &origin(9)).unwrap_err();
        assert!(matches!(*err, Conflict::RewriteToNotPromoted { .. }), "{err}");
    }

    #[test]
    fn mirrors_share_their_sources_digests() {
        let mut b = Builder::default();
        b.promote("registry.redhat.io/rhods/ovms", &d('a'), &["v1"], &origin(1))
            .unwrap();
        b.mirror("registry.redhat.io/rhods", &["quay.io/modh".to_owned()], false);
        let list = b.build();
        assert!(list.candidates("quay.io/modh/ovms").is_promoted(&d('a')));
        assert!(list.candidates("quay.io/modh/other").is_empty());
        assert!(list.candidates("quay.io/modhx/ovms").is_empty());
        assert!(list.candidates("quay.io/other/ovms").is_empty());
    }

    #[test]
    fn similar_names_are_found_by_basename() {
        let mut b = Builder::default();
        b.promote("quay.io/opendatahub/ovms-1", &d('a'), &[], &origin(1))
            .unwrap();
        let list = b.build();
        assert_eq!(list.similar("ovms-1"), ["quay.io/opendatahub/ovms-1"]);
        assert_eq!(list.similar("OVMS_1"), ["quay.io/opendatahub/ovms-1"]);
        assert!(list.similar("ovms").is_empty());
    }

    #[test]
    fn a_repository_costs_its_rows_and_its_strings() {
        // The memory of a reload under load (the old and the new list held
        // at once): a repository with one digest, one tag and one source is
        // one row of each of three tables and its strings, with no spare
        // room; the single source is held in the digest's row.
        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(1)).unwrap();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(1)).unwrap();
        let list = b.build();
        assert_eq!(
            (
                list.repos.len(),
                list.digests.len(),
                list.tags.len(),
                list.promotions.len()
            ),
            (1, 1, 1, 0)
        );
        assert_eq!(list.text, format!("quay.io/x/y{}v1", d('a')));
        assert_eq!(
            (
                list.text.capacity(),
                list.repos.capacity(),
                list.digests.capacity(),
                list.tags.capacity()
            ),
            (list.text.len(), 1, 1, 1)
        );
        // A second source promoting the same digest takes a row of its own.
        let mut b = Builder::default();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(1)).unwrap();
        b.promote("quay.io/x/y", &d('a'), &["v1"], &origin(2)).unwrap();
        let list = b.build();
        let lines: Vec<u32> = list
            .repositories()
            .flat_map(|r| r.digests())
            .flat_map(|p| p.promotions())
            .map(|p| p.line)
            .collect();
        assert_eq!(lines, [1, 2]);
    }
}
