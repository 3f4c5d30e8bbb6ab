//! Targets read from files, before any plan exists: a ClusterServiceVersion
//! (`--csv FILE`), a registry+v1 bundle directory (`--bundle DIR`, its CSV
//! in `manifests/*.clusterserviceversion.yaml`), as a vendor ships it, or a
//! release of a file-based catalog (`--catalog`, see [`super::catalog`]);
//! and the plan each would make where its package's Subscription is.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::catalog::CatalogTarget;
use super::plan::{self, Manifest, Plan, State};
use super::{Preflight, cluster, replaced};
use crate::audit::Connection;

/// A target named by a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileTarget {
    Csv(PathBuf),
    Bundle(PathBuf),
    Catalog(CatalogTarget),
}

/// A file target, read.
struct Read {
    csv: Value,
    graph: Vec<String>,
    bundle: Option<String>,
    /// The catalog channel that ordered it.
    channel: Option<String>,
}

impl FileTarget {
    /// How reports name it.
    pub fn label(&self) -> String {
        match self {
            Self::Csv(path) => format!("CSV file {}", path.display()),
            Self::Bundle(path) => format!("bundle {}", path.display()),
            Self::Catalog(c) => format!("catalog {} package {}", c.path.display(), c.package),
        }
    }

    /// How JSON names it: the path read.
    pub fn path(&self) -> &Path {
        match self {
            Self::Csv(path) | Self::Bundle(path) => path,
            Self::Catalog(c) => &c.path,
        }
    }

    fn read(&self) -> Result<Read, FileError> {
        let plain = |csv| Read {
            csv,
            graph: Vec::new(),
            bundle: None,
            channel: None,
        };
        match self {
            Self::Csv(path) => csv_file(path).map(plain),
            Self::Bundle(dir) => bundle_dir(dir).map(plain),
            Self::Catalog(c) => Ok(c.choose().map(|chosen| Read {
                csv: chosen.csv,
                graph: chosen.graph,
                bundle: chosen.bundle,
                channel: chosen.channel,
            })?),
        }
    }
}

/// The one target of a plan made up where the package's Subscription is
/// (any namespace): its `status.installedCSV` is what the target replaces,
/// and its namespace's installed CSVs are the allowlist in force. No
/// Subscription of the package: a fresh install.
pub(super) async fn plan(
    connection: &Connection,
    target: &FileTarget,
    found: &mut Preflight,
) -> Vec<(String, String, Plan)> {
    let read = match target.read() {
        Ok(read) => read,
        Err(e) => {
            found.errors.push(e.to_string());
            return Vec::new();
        }
    };
    let text = |v: &Value, p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let package = match target {
        FileTarget::Catalog(c) => Some(c.package.clone()),
        _ => replaced::package(&read.csv),
    };
    let subscription = match (&package, cluster::subscriptions(connection, None).await) {
        (Some(package), Ok(all)) => all
            .into_iter()
            .find(|s| s.pointer("/spec/name").and_then(Value::as_str) == Some(package.as_str())),
        (None, _) => None,
        (_, Err(e)) => {
            found.errors.push(e.message().to_owned());
            return Vec::new();
        }
    };
    // A Subscription follows its own channel; the graph read is another's.
    if let (Some(s), Some(ordered)) = (&subscription, &read.channel) {
        let follows = text(s, "/spec/channel");
        if !follows.is_empty() && &follows != ordered {
            found.notes.push(format!(
                "Subscription {}/{} follows channel {follows}, the target is {ordered}'s: name --catalog-channel {follows} to judge what it will install",
                text(s, "/metadata/namespace"),
                text(s, "/metadata/name"),
            ));
        }
    }
    let plan = Plan {
        namespace: subscription
            .as_ref()
            .map(|s| text(s, "/metadata/namespace"))
            .unwrap_or_default(),
        name: String::new(),
        uid: None,
        created: None,
        judged: None,
        state: State::Pending,
        owners: subscription.iter().map(|s| text(s, "/metadata/name")).collect(),
        targets: vec![plan::Target {
            csv: text(&read.csv, "/metadata/name"),
            package,
            replaces: None,
            bundle: read.bundle,
            graph: read.graph,
            manifest: Manifest::Inline(Box::new(read.csv)),
        }],
    };
    vec![(target.label(), target.path().display().to_string(), plan)]
}

/// A target file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {why}")]
    Read { path: String, why: String },
    #[error("{path}: {why}")]
    Shape { path: String, why: String },
    #[error(transparent)]
    Catalog(#[from] super::catalog::CatalogError),
}

/// The ClusterServiceVersion in `path`: its one document of that kind.
pub fn csv_file(path: &Path) -> Result<Value, FileError> {
    let shown = path.display().to_string();
    let text = read_bounded(path, super::bundle::MAX_FILE_BYTES).map_err(|why| FileError::Read {
        path: shown.clone(),
        why,
    })?;
    let shape = |why: String| FileError::Shape {
        path: shown.clone(),
        why,
    };
    let documents = crate::yaml::documents_capped(&text, super::bundle::MAX_CSV_NODES)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| shape(e.to_string()))?;
    let mut csvs = documents
        .into_iter()
        .map(|d| d.value)
        .filter(|v| v.get("kind").and_then(Value::as_str) == Some("ClusterServiceVersion"));
    match (csvs.next(), csvs.next()) {
        (Some(csv), None) if csv.pointer("/metadata/name").and_then(Value::as_str).is_some() => Ok(csv),
        (Some(_), None) => Err(shape("the ClusterServiceVersion has no metadata.name".into())),
        (None, _) => Err(shape("holds no ClusterServiceVersion".into())),
        (Some(_), Some(_)) => Err(shape(
            "holds more than one ClusterServiceVersion: name one file".into(),
        )),
    }
}

/// The text of `path`, refused past `max` bytes however much it holds
/// (`--csv /dev/zero` would read until the kernel stops it).
fn read_bounded(path: &Path, max: u64) -> Result<String, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(max + 1).read_to_end(&mut bytes))
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!(
            "over {} MiB; a ClusterServiceVersion is under 1 MiB",
            max >> 20
        ));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())
}

/// The ClusterServiceVersion of the bundle in `dir`: the one
/// `manifests/*.clusterserviceversion.yaml` (or `.yml`).
pub fn bundle_dir(dir: &Path) -> Result<Value, FileError> {
    let manifests = dir.join("manifests");
    let shown = manifests.display().to_string();
    let entries = std::fs::read_dir(&manifests).map_err(|e| FileError::Read {
        path: shown.clone(),
        why: format!("{e} (a registry+v1 bundle keeps its CSV in manifests/)"),
    })?;
    let mut found: Vec<std::path::PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.ends_with(".clusterserviceversion.yaml") || n.ends_with(".clusterserviceversion.yml")
            })
        })
        .collect();
    found.sort();
    match found.as_slice() {
        [one] => csv_file(one),
        [] => Err(FileError::Shape {
            path: shown,
            why: "holds no *.clusterserviceversion.yaml".into(),
        }),
        more => Err(FileError::Shape {
            path: shown,
            why: format!("holds {} CSVs; a bundle has one", more.len()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "tests/fixtures/olm/rhods-operator.3.3.5.clusterserviceversion.yaml";

    /// A scratch directory, removed when dropped.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn bundle(csvs: &[&str]) -> Scratch {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            Scratch(std::env::temp_dir().join(format!("digest-gate-bundle-{}-{n}", std::process::id())));
        std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
        std::fs::create_dir_all(dir.path().join("metadata")).unwrap();
        std::fs::write(dir.path().join("metadata/annotations.yaml"), "annotations: {}\n").unwrap();
        for name in csvs {
            std::fs::write(
                dir.path().join("manifests").join(name),
                crate::testing::fixture(CSV),
            )
            .unwrap();
        }
        dir
    }

    /// Issue 57: `--csv /dev/zero` read until the kernel stopped it.
    #[test]
    fn a_file_is_read_only_as_far_as_a_csv_can_be_long() {
        let err = csv_file(Path::new("/dev/zero")).unwrap_err().to_string();
        assert_eq!(
            err,
            "/dev/zero: over 16 MiB; a ClusterServiceVersion is under 1 MiB"
        );
    }

    #[test]
    fn the_real_rhoai_csv_is_a_target_as_a_file_and_in_a_bundle() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(CSV);
        let csv = csv_file(&path).unwrap();
        assert_eq!(csv["metadata"]["name"], "rhods-operator.3.3.5");
        let dir = bundle(&["rhods-operator.clusterserviceversion.yaml"]);
        assert_eq!(bundle_dir(dir.path()).unwrap(), csv);
    }

    #[test]
    fn a_bundle_with_no_csv_or_two_and_a_file_without_one_are_errors() {
        let err = bundle_dir(bundle(&[]).path()).unwrap_err().to_string();
        assert!(
            err.ends_with("manifests: holds no *.clusterserviceversion.yaml"),
            "{err}"
        );
        let two = bundle(&["a.clusterserviceversion.yaml", "b.clusterserviceversion.yaml"]);
        assert!(
            bundle_dir(two.path())
                .unwrap_err()
                .to_string()
                .ends_with("holds 2 CSVs; a bundle has one")
        );
        let missing = bundle_dir(Path::new("/nonexistent")).unwrap_err().to_string();
        assert!(
            missing.contains("a registry+v1 bundle keeps its CSV in manifests/"),
            "{missing}"
        );
        let dir = bundle(&[]);
        let plain = dir.path().join("metadata/annotations.yaml");
        assert!(
            csv_file(&plain)
                .unwrap_err()
                .to_string()
                .ends_with("holds no ClusterServiceVersion")
        );
    }
}
