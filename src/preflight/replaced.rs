//! Which installed release a target replaces. OLM says it in several
//! places, none always filled (RHOAI's CSVs carry neither `replaces` nor
//! `olm.skipRange`), so they are asked in order of how directly they speak
//! of this upgrade, and the first that names an installed CSV decides:
//! the step's (or its bundle lookup's) `replaces`; the Subscription's
//! `status.installedCSV`; the target CSV's `spec.replaces`, then its
//! `spec.skips`; for a catalog's release, the nearest installed along its
//! upgrade graph; else the installed CSV of the same package. `skipRange`
//! is not evaluated. Nothing installed replaced: a fresh install.

use serde_json::Value;

use super::plan::Target;

/// Where the replaced release was learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::Display)]
pub enum Why {
    #[strum(serialize = "the plan's step says it replaces it")]
    Step,
    #[strum(serialize = "the Subscription's installed CSV")]
    Subscription,
    #[strum(serialize = "the target CSV's spec.replaces")]
    CsvReplaces,
    #[strum(serialize = "the target CSV's spec.skips")]
    CsvSkips,
    #[strum(serialize = "the catalog's upgrade graph")]
    Graph,
    #[strum(serialize = "the installed CSV of the same package")]
    SamePackage,
}

/// The package of a CSV by its name and `spec.version`, as the allowlist
/// names a release's package (`rhods-operator.1.21.0`: `rhods-operator`).
pub fn package(csv: &Value) -> Option<String> {
    let name = csv.pointer("/metadata/name").and_then(Value::as_str)?;
    let version = csv.pointer("/spec/version").and_then(Value::as_str)?;
    let version = semver::Version::parse(version.trim_start_matches('v')).ok()?;
    crate::allowlist::package_of(name, Some(&version))
}

/// An installed CSV, as the choice needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub name: String,
    /// Its operator package, where known.
    pub package: Option<String>,
}

/// The installed CSV `target` (whose CSV is `csv`) replaces, and how that
/// was learnt; `None` for a fresh install. `subscription` is the
/// `status.installedCSV` of the Subscription the plan belongs to.
pub fn replaced<'i>(
    target: &Target,
    csv: &Value,
    subscription: Option<&str>,
    installed: &'i [Installed],
) -> Option<(&'i Installed, Why)> {
    let find = |name: &str| installed.iter().find(|i| i.name == name && i.name != target.csv);
    let named = |list: &str| {
        csv.pointer(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find_map(find)
    };
    let spec_replaces = csv.pointer("/spec/replaces").and_then(Value::as_str);
    target
        .replaces
        .as_deref()
        .and_then(find)
        .map(|i| (i, Why::Step))
        .or_else(|| subscription.and_then(find).map(|i| (i, Why::Subscription)))
        .or_else(|| spec_replaces.and_then(find).map(|i| (i, Why::CsvReplaces)))
        .or_else(|| named("/spec/skips").map(|i| (i, Why::CsvSkips)))
        .or_else(|| target.graph.iter().find_map(|n| find(n)).map(|i| (i, Why::Graph)))
        .or_else(|| {
            let package = target.package.clone().or_else(|| package(csv))?;
            let package = package.as_str();
            installed
                .iter()
                .find(|i| i.package.as_deref() == Some(package) && i.name != target.csv)
                .map(|i| (i, Why::SamePackage))
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::preflight::plan::Manifest;

    fn target(replaces: Option<&str>, package: Option<&str>) -> Target {
        Target {
            csv: "rhods-operator.1.21.0".into(),
            manifest: Manifest::Unpacked {
                namespace: "openshift-marketplace".into(),
                name: "x".into(),
            },
            replaces: replaces.map(Into::into),
            package: package.map(Into::into),
            bundle: None,
            graph: Vec::new(),
        }
    }

    fn installed(names: &[&str]) -> Vec<Installed> {
        names
            .iter()
            .map(|n| Installed {
                name: (*n).into(),
                package: Some(n.split('.').next().unwrap().into()),
            })
            .collect()
    }

    fn csv(spec: Value) -> Value {
        json!({"metadata": {"name": "rhods-operator.1.21.0"}, "spec": spec})
    }

    #[test]
    fn each_place_is_asked_in_order_and_the_first_installed_decides() {
        let all = installed(&[
            "rhods-operator.1.20.0",
            "rhods-operator.1.20.1",
            "rhods-operator.1.19.0",
        ]);
        let spec = csv(json!({"version": "1.21.0", "replaces": "rhods-operator.1.19.0",
                             "skips": ["rhods-operator.1.20.0"]}));
        let of = |t: &Target, sub: Option<&str>, spec: &Value| {
            replaced(t, spec, sub, &all).map(|(i, why)| (i.name.clone(), why))
        };
        let step = target(Some("rhods-operator.1.20.1"), None);
        assert_eq!(
            of(&step, Some("rhods-operator.1.20.0"), &spec),
            Some(("rhods-operator.1.20.1".into(), Why::Step))
        );
        // A step naming what is not installed does not decide.
        let gone = target(Some("rhods-operator.1.18.0"), None);
        assert_eq!(
            of(&gone, Some("rhods-operator.1.20.0"), &spec),
            Some(("rhods-operator.1.20.0".into(), Why::Subscription))
        );
        assert_eq!(
            of(&gone, None, &spec),
            Some(("rhods-operator.1.19.0".into(), Why::CsvReplaces))
        );
        let skips_only = csv(json!({"version": "1.21.0", "skips": ["rhods-operator.1.20.0"]}));
        assert_eq!(
            of(&gone, None, &skips_only),
            Some(("rhods-operator.1.20.0".into(), Why::CsvSkips))
        );
        // A catalog's release: the nearest installed along its graph, before
        // any of the package.
        let mut along = target(None, None);
        along.graph = vec!["rhods-operator.1.20.5".into(), "rhods-operator.1.20.1".into()];
        assert_eq!(
            of(&along, None, &csv(json!({"version": "1.21.0"}))),
            Some(("rhods-operator.1.20.1".into(), Why::Graph))
        );
        // RHOAI's CSVs say neither: the package decides, by the bundle's
        // property or else by the CSV's name and version.
        let bare = csv(json!({"version": "1.21.0"}));
        assert_eq!(
            of(&gone, None, &bare),
            Some(("rhods-operator.1.20.0".into(), Why::SamePackage))
        );
        assert_eq!(
            of(&target(None, Some("rhods-operator")), None, &bare).map(|r| r.1),
            Some(Why::SamePackage)
        );
    }

    #[test]
    fn nothing_of_the_package_installed_is_a_fresh_install() {
        let others = installed(&["other-operator.2.0.0"]);
        let bare = csv(json!({"version": "1.21.0"}));
        assert_eq!(replaced(&target(None, None), &bare, None, &others), None);
        // The target itself installed (a plan re-resolved) replaces nothing.
        let itself = installed(&["rhods-operator.1.21.0"]);
        assert_eq!(
            replaced(&target(Some("rhods-operator.1.21.0"), None), &bare, None, &itself),
            None
        );
    }

    #[test]
    fn the_real_rhoai_csv_names_its_package_by_name_and_version() {
        let text =
            crate::testing::fixture("tests/fixtures/olm/rhods-operator.3.3.5.clusterserviceversion.yaml");
        let csv = crate::yaml::parse_stream(&text).unwrap().remove(0).value;
        assert_eq!(csv.pointer("/spec/replaces"), None);
        assert_eq!(package(&csv).as_deref(), Some("rhods-operator"));
    }
}
