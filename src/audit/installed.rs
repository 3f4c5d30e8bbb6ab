//! The installed operators' ClusterServiceVersions as an allowlist source
//! (`audit --allowlist-csv NAMESPACE[/NAME-PREFIX]`). The incident happened
//! because two copies of "what is promoted" drifted: the operator's CSV
//! listed the promoted digest, a ConfigMap kept the old one. Reading the CSV
//! the cluster runs removes one copy.
//!
//! Only what the allowlist reads of a CSV is kept (its name, version,
//! `replaces`, `relatedImages` and deployments), so a large CSV's CRD
//! descriptions never sit in memory.

use kube::core::ApiResource;
use serde::Deserialize;
use serde_json::Value;

use super::{Connection, Failure, ListedAs, Lister};
use crate::allowlist::Source;
use crate::objects::{Pruned, Shape};

/// The source name prefix that marks a CSV read from the cluster: the
/// allowlist names its provenance `ClusterServiceVersion <name> (installed)`.
pub const INSTALLED: &str = "cluster:";

/// Where to read CSVs: a namespace, and optionally a name prefix
/// (`redhat-ods-operator/rhods-operator`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Csvs {
    pub namespace: String,
    pub prefix: Option<String>,
}

impl std::str::FromStr for Csvs {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (namespace, prefix) = match s.split_once('/') {
            Some((ns, p)) => (ns, Some(p.to_owned()).filter(|p| !p.is_empty())),
            None => (s, None),
        };
        if namespace.is_empty() {
            return Err(format!("'{s}' names no namespace; write NAMESPACE[/NAME-PREFIX]"));
        }
        Ok(Self {
            namespace: namespace.to_owned(),
            prefix,
        })
    }
}

static KEEP: Shape = Shape::Keep;
static METADATA: Shape = Shape::Object(&[("name", &KEEP), ("labels", &KEEP)], &[]);
static SPEC: Shape = Shape::Object(
    &[
        ("version", &KEEP),
        ("replaces", &KEEP),
        ("relatedImages", &KEEP),
        ("install", &KEEP),
    ],
    &[],
);
static CSV: Shape = Shape::Object(
    &[
        ("apiVersion", &KEEP),
        ("kind", &KEEP),
        ("metadata", &METADATA),
        ("spec", &SPEC),
    ],
    &[],
);

struct ListedCsv(Value);

impl<'de> Deserialize<'de> for ListedCsv {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::DeserializeSeed;
        Pruned(&CSV).deserialize(deserializer).map(ListedCsv)
    }
}

impl ListedAs for ListedCsv {
    fn into_value(self) -> Value {
        self.0
    }
}

/// The CSVs `csvs` names, each an allowlist source. OLM's copies of a CSV
/// in other namespaces (label `olm.copiedFrom`) are left out.
pub async fn read(connection: &Connection, csvs: &Csvs) -> Result<Vec<Source>, Failure> {
    let resource = ApiResource {
        group: "operators.coreos.com".into(),
        version: "v1alpha1".into(),
        api_version: "operators.coreos.com/v1alpha1".into(),
        kind: "ClusterServiceVersion".into(),
        plural: "clusterserviceversions".into(),
    };
    let lister = Lister {
        connection,
        resource: &resource,
        page: 20,
        label_selector: None,
    };
    let mut sources = Vec::new();
    lister
        .list_as::<ListedCsv>(Some(&csvs.namespace), |csv| {
            let name = csv
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let copied = csv.pointer("/metadata/labels/olm.copiedFrom").is_some();
            let wanted = csvs.prefix.as_deref().is_none_or(|p| name.starts_with(p));
            if wanted && !copied {
                sources.push(Source {
                    name: format!("{INSTALLED}{}/{name}", csvs.namespace),
                    text: csv.to_string(),
                });
            }
        })
        .await?;
    Ok(sources)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(
            "redhat-ods-operator/rhods-operator".parse::<Csvs>(),
            Ok(Csvs {
                namespace: "redhat-ods-operator".into(),
                prefix: Some("rhods-operator".into())
            })
        );
        assert_eq!("ns".parse::<Csvs>().map(|c| c.prefix), Ok(None));
        assert!("/x".parse::<Csvs>().is_err());
    }
}
