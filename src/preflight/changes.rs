//! What an upgrade changes, informational: per repository, the replaced
//! release's promoted digests against the target's, each named as the
//! target names it (its `relatedImages` name, else its `RELATED_IMAGE_*`
//! variable). The digests come from the allowlist each release loads as
//! (the one reader of CSVs); only the names are read here.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::allowlist::Allowlist;
use crate::reference;

/// How one repository's promoted digests change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub repository: String,
    /// The release's name for the image, where it gives one.
    pub name: Option<String>,
    /// Promoted by the replaced release (empty: the target adds it).
    pub from: Vec<String>,
    /// Promoted by the target (empty: the target drops it).
    pub to: Vec<String>,
}

impl Change {
    pub fn is_added(&self) -> bool {
        self.from.is_empty()
    }

    pub fn is_dropped(&self) -> bool {
        self.to.is_empty()
    }
}

/// Every repository whose promoted digests differ between `replaced` (none
/// for a fresh install) and `target`, in repository order. Each side is a
/// release's allowlist and its CSV.
pub fn between(replaced: Option<(&Allowlist, &Value)>, target: (&Allowlist, &Value)) -> Vec<Change> {
    // Per repository: (the replaced release's digests, the target's).
    let mut by_repository: BTreeMap<String, [Vec<String>; 2]> = BTreeMap::new();
    let mut add = |list: &Allowlist, side: usize| {
        for repo in list.repositories() {
            let digests = &mut by_repository.entry(repo.name().to_owned()).or_default()[side];
            digests.extend(repo.digests().map(|p| p.digest().to_owned()));
            digests.sort();
            digests.dedup();
        }
    };
    if let Some((list, _)) = replaced {
        add(list, 0);
    }
    add(target.0, 1);
    let names: Vec<BTreeMap<String, String>> = [Some(target.1), replaced.map(|r| r.1)]
        .into_iter()
        .flatten()
        .map(related_names)
        .collect();
    by_repository
        .into_iter()
        .filter(|(_, [from, to])| from != to)
        .map(|(repository, [from, to])| Change {
            name: names.iter().find_map(|n| n.get(&repository)).cloned(),
            repository,
            from,
            to,
        })
        .collect()
}

/// What a CSV calls each repository it lists: `spec.relatedImages[].name`,
/// else the `RELATED_IMAGE_*` variable of its deployments that holds it.
fn related_names(csv: &Value) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for related in crate::allowlist::related_images(csv) {
        let (Some(image), Some(called)) = (related.value.and_then(Value::as_str), related.called) else {
            continue;
        };
        let repository = reference::parse(image)
            .ok()
            .and_then(|r| r.canonical_repository(None).map(|c| c.into_owned()));
        if let Some(repository) = repository {
            names.entry(repository).or_insert_with(|| called.to_owned());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allowlist::load_text;

    const OLD: &str = "tests/data/allowlists/rhods-operator.1.20.1.csv.yaml";
    const NEW: &str = "tests/data/allowlists/rhods-operator.csv.yaml";

    fn release(path: &str) -> (Allowlist, Value) {
        let text = &crate::testing::fixture(path);
        let list = load_text("csv.yaml", text).unwrap().allowlist;
        let csv = crate::yaml::parse_stream(text).unwrap().remove(0).value;
        (list, csv)
    }

    #[test]
    fn the_incident_upgrade_changes_the_runtime_and_nothing_else() {
        let (old, new) = (release(OLD), release(NEW));
        let changes = between(Some((&old.0, &old.1)), (&new.0, &new.1));
        let [runtime] = changes.as_slice() else {
            panic!("{changes:?}")
        };
        assert_eq!(
            (runtime.repository.as_str(), runtime.name.as_deref()),
            (
                "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8",
                Some("odh-openvino-servingruntime-rhel8")
            )
        );
        assert!(runtime.from[0].starts_with("sha256:1201000000"), "{runtime:?}");
        assert!(runtime.to[0].starts_with("sha256:8af20e48bb48"), "{runtime:?}");
        assert!(!runtime.is_added() && !runtime.is_dropped());
    }

    #[test]
    fn a_fresh_install_adds_everything_and_the_same_release_changes_nothing() {
        let new = release(NEW);
        let changes = between(None, (&new.0, &new.1));
        assert!(changes.len() == new.0.repository_count() && changes.iter().all(Change::is_added));
        assert!(between(Some((&new.0, &new.1)), (&new.0, &new.1)).is_empty());
    }

    #[test]
    fn moving_to_the_real_rhoai_release_drops_and_adds_repositories_by_name() {
        let (old, new) = (
            release(NEW),
            release("tests/fixtures/olm/rhods-operator.3.3.5.clusterserviceversion.yaml"),
        );
        let changes = between(Some((&old.0, &old.1)), (&new.0, &new.1));
        let dropped: Vec<&str> = changes
            .iter()
            .filter(|c| c.is_dropped())
            .map(|c| c.repository.as_str())
            .collect();
        assert!(
            dropped.contains(&"registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8"),
            "{dropped:?}"
        );
        let ovms = changes
            .iter()
            .find(|c| c.repository == "registry.redhat.io/rhoai/odh-openvino-model-server-rhel9")
            .unwrap();
        // relatedImages names it; its RELATED_IMAGE_* variable does too,
        // but the list's name comes first.
        assert_eq!(ovms.name.as_deref(), Some("odh_openvino_model_server_image"));
        assert!(ovms.is_added());
    }
}
