//! A release in a file-based catalog as the target (`--catalog FILE|DIR`
//! with `--catalog-package`): the bundle `--target-version` names, else the
//! head of the package's ordering channel, found by the allowlist's catalog
//! reader (the one reader of the upgrade graph). An FBC bundle carries no
//! CSV body unless `opm` kept it (`olm.bundle.object`); what the CSV would
//! say of its images and its place in the graph is in the bundle blob
//! (`relatedImages`, `olm.package`) and the channel entry (`replaces`,
//! `skips`), so the target is that CSV as those blobs describe it.

use std::collections::{HashSet, VecDeque};
use std::io::BufReader;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::{Value, json};

use crate::allowlist::{self, CatalogOptions, Provenance};

/// A catalog that cannot give the release asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {why}")]
pub struct CatalogError {
    pub path: String,
    pub why: String,
}

/// `--catalog` and the flags that choose its release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogTarget {
    pub path: PathBuf,
    pub package: String,
    /// `--catalog-channel`; none: the package's `defaultChannel`.
    pub channel: Option<String>,
    /// `--target-version`: a bundle's version or its CSV name.
    pub version: Option<String>,
}

/// The release chosen, as a CSV, and where it sits in the graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Chosen {
    pub csv: Value,
    /// The channel that ordered the package's releases.
    pub channel: Option<String>,
    /// The entries the target upgrades from, nearest first (along
    /// `replaces` and `skips`, breadth first): where an installed release
    /// is looked for when nothing nearer names it.
    pub graph: Vec<String>,
    /// The bundle image, which no workload runs.
    pub bundle: Option<String>,
}

impl CatalogTarget {
    /// Reads the catalog twice: once through the allowlist's reader, for
    /// the package's releases in graph order, then for the chosen bundle's
    /// blob and its channel's entries.
    pub fn choose(&self) -> Result<Chosen, CatalogError> {
        let shown = self.path.display().to_string();
        let shape = |why: String| CatalogError {
            path: shown.clone(),
            why,
        };
        let options = CatalogOptions {
            packages: vec![self.package.clone()],
            channel: self.channel.clone(),
        };
        let loaded = allowlist::load_paths_with(&[&self.path], &options).map_err(|e| shape(e.to_string()))?;
        let channel = loaded
            .catalogs
            .iter()
            .find(|c| c.package == self.package)
            .and_then(|c| c.ordered_by.clone());
        let releases: Vec<&Provenance> = loaded
            .allowlist
            .provenances()
            .iter()
            .map(|p| &**p)
            .filter(|p| p.package.as_deref() == Some(&self.package) && p.name.is_some())
            .collect();
        let name = self.pick(&releases, channel.as_deref()).map_err(&shape)?;
        let blobs = Blobs::read(&self.path, &self.package, &name, channel.as_deref())?;
        let bundle = blobs
            .bundle
            .ok_or_else(|| shape(format!("the bundle {name} was ordered but not read again")))?;
        let entry = blobs
            .entries
            .iter()
            .find(|e| e.get("name").and_then(Value::as_str) == Some(&name));
        Ok(Chosen {
            csv: as_csv(&bundle, entry),
            graph: upgrades_from(&blobs.entries, &name),
            channel,
            bundle: bundle.get("image").and_then(Value::as_str).map(str::to_owned),
        })
    }

    /// The CSV name of the release to judge: the one named, else the head.
    fn pick(&self, releases: &[&Provenance], channel: Option<&str>) -> Result<String, String> {
        let name = |p: &Provenance| p.name.clone().unwrap_or_default();
        let known = || {
            let mut all: Vec<String> = releases.iter().map(|p| name(p)).collect();
            all.sort();
            all.join(", ")
        };
        if let Some(wanted) = &self.version {
            let version = semver::Version::parse(wanted.trim_start_matches('v')).ok();
            return releases
                .iter()
                .find(|p| p.name.as_deref() == Some(wanted) || (version.is_some() && p.version == version))
                .map(|p| name(p))
                .ok_or_else(|| {
                    format!(
                        "package {} has no bundle in a channel at version or name '{wanted}' (it has {})",
                        self.package,
                        known()
                    )
                });
        }
        let Some(channel) = channel else {
            return Err(format!(
                "package {} has no channel to find a head in: name --catalog-channel or --target-version",
                self.package
            ));
        };
        releases
            .iter()
            .filter(|p| p.rank.is_some())
            .max_by(|a, b| a.recency().cmp(&b.recency()))
            .map(|p| name(p))
            .ok_or_else(|| format!("channel {channel} of package {} lists no bundle", self.package))
    }
}

/// What the second read keeps: the chosen bundle's blob, and the entries
/// of the ordering channel.
#[derive(Default)]
struct Blobs {
    bundle: Option<Value>,
    entries: Vec<Value>,
}

impl Blobs {
    fn read(path: &Path, package: &str, bundle: &str, channel: Option<&str>) -> Result<Self, CatalogError> {
        let files = allowlist::source_files(&[path]).map_err(|e| CatalogError {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        let mut out = Blobs::default();
        let mut keep = |blob: Value| {
            let text = |k: &str| blob.get(k).and_then(Value::as_str);
            let ours = |field: &str| text(field) == Some(package);
            match text("schema") {
                Some("olm.bundle") if ours("package") && text("name") == Some(bundle) => {
                    out.bundle = Some(blob)
                }
                Some("olm.channel")
                    if ours("package") && text("name").is_some() && text("name") == channel =>
                {
                    if let Some(Value::Array(entries)) = blob.get("entries") {
                        out.entries = entries.clone();
                    }
                }
                _ => {}
            }
        };
        for file in files {
            each_blob(&file, &mut keep)?;
        }
        Ok(out)
    }
}

/// Every blob of one catalog file, JSON objects one after another or YAML
/// documents, one at a time.
fn each_blob(file: &Path, each: &mut impl FnMut(Value)) -> Result<(), CatalogError> {
    let shown = file.display().to_string();
    let read = |why: String| CatalogError {
        path: shown.clone(),
        why,
    };
    let opened = std::fs::File::open(file).map_err(|e| read(e.to_string()))?;
    let mut source = crate::json::Source::new(BufReader::new(opened));
    if source.first().map_err(|e| read(e.message))? == Some(b'{') {
        let mut broken = None;
        crate::json::values(&mut source, |piece| {
            match serde_json::from_slice::<Value>(&piece.bytes) {
                Ok(blob) => {
                    each(blob);
                    ControlFlow::Continue(())
                }
                Err(e) => {
                    broken = Some(e.to_string());
                    ControlFlow::Break(())
                }
            }
        })
        .map_err(|e| read(e.message))?;
        return broken.map_or(Ok(()), |why| Err(read(why)));
    }
    let text = std::fs::read_to_string(file).map_err(|e| read(e.to_string()))?;
    for document in crate::yaml::documents(&text) {
        each(document.map_err(|e| read(e.to_string()))?.value);
    }
    Ok(())
}

/// The CSV the bundle blob describes: the one `opm` kept in an
/// `olm.bundle.object` property when it did, else its name, version and
/// related images (but the bundle's own image). Either way its place in the
/// graph is the channel entry's, where a file-based catalog keeps it.
fn as_csv(bundle: &Value, entry: Option<&Value>) -> Value {
    let properties = bundle.get("properties").and_then(Value::as_array);
    let property = |kind: &'static str| {
        properties
            .into_iter()
            .flatten()
            .filter(move |p| p.get("type").and_then(Value::as_str) == Some(kind))
            .filter_map(|p| p.get("value"))
    };
    let kept = property("olm.bundle.object").find_map(|v| {
        let data = v.get("data").and_then(Value::as_str)?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(data).ok()?;
        let object: Value = serde_json::from_slice(&bytes).ok()?;
        (object.get("kind").and_then(Value::as_str) == Some("ClusterServiceVersion")).then_some(object)
    });
    let mut csv = kept.unwrap_or_else(|| {
        let own = bundle.get("image").and_then(Value::as_str);
        let related: Vec<&Value> = bundle
            .get("relatedImages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|r| r.get("image").and_then(Value::as_str) != own)
            .collect();
        let version = property("olm.package").find_map(|v| v.get("version").cloned());
        json!({
            "apiVersion": "operators.coreos.com/v1alpha1",
            "kind": "ClusterServiceVersion",
            "metadata": {"name": bundle.get("name")},
            "spec": {"version": version, "relatedImages": related},
        })
    });
    if let (Some(entry), Some(spec)) = (entry, csv.get_mut("spec").and_then(Value::as_object_mut)) {
        for field in ["replaces", "skips"] {
            match entry.get(field) {
                Some(v) => spec.insert(field.to_owned(), v.clone()),
                None => spec.remove(field),
            };
        }
    }
    csv
}

/// The entries `name` upgrades from along `replaces` and `skips`, nearest
/// first.
fn upgrades_from(entries: &[Value], name: &str) -> Vec<String> {
    let from = |n: &str| -> Vec<String> {
        let Some(entry) = entries
            .iter()
            .find(|e| e.get("name").and_then(Value::as_str) == Some(n))
        else {
            return Vec::new();
        };
        let replaces = entry.get("replaces").and_then(Value::as_str);
        let skips = entry.get("skips").and_then(Value::as_array).into_iter().flatten();
        replaces
            .into_iter()
            .chain(skips.filter_map(Value::as_str))
            .map(str::to_owned)
            .collect()
    };
    let mut seen: HashSet<String> = HashSet::from([name.to_owned()]);
    let mut queue: VecDeque<String> = from(name).into();
    let mut out = Vec::new();
    while let Some(next) = queue.pop_front() {
        if seen.insert(next.clone()) {
            queue.extend(from(&next));
            out.push(next);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/olm/rhods");

    fn target(channel: Option<&str>, version: Option<&str>) -> CatalogTarget {
        CatalogTarget {
            path: DIR.into(),
            package: "rhods-operator".into(),
            channel: channel.map(Into::into),
            version: version.map(Into::into),
        }
    }

    fn text<'v>(v: &'v Value, pointer: &str) -> Option<&'v str> {
        v.pointer(pointer).and_then(Value::as_str)
    }

    #[test]
    fn the_channel_head_is_the_target_unless_a_version_is_named() {
        let chosen = target(Some("fast-3.x"), None).choose().unwrap();
        assert_eq!(text(&chosen.csv, "/metadata/name"), Some("rhods-operator.3.3.1"));
        assert_eq!(text(&chosen.csv, "/spec/version"), Some("3.3.1"));
        assert_eq!(text(&chosen.csv, "/spec/replaces"), Some("rhods-operator.3.3.0"));
        assert_eq!(chosen.channel.as_deref(), Some("fast-3.x"));
        assert_eq!(
            chosen.bundle.as_deref().map(|b| b.split('@').next().unwrap()),
            Some("registry.redhat.io/rhoai/odh-operator-bundle")
        );
        // Nearest first along the graph.
        assert_eq!(
            &chosen.graph[..3],
            [
                "rhods-operator.3.3.0",
                "rhods-operator.3.2.0",
                "rhods-operator.3.0.0"
            ]
        );
        for version in ["3.3.0", "rhods-operator.3.3.0", "v3.3.0"] {
            let chosen = target(Some("fast-3.x"), Some(version)).choose().unwrap();
            assert_eq!(
                text(&chosen.csv, "/metadata/name"),
                Some("rhods-operator.3.3.0"),
                "{version}"
            );
            assert_eq!(text(&chosen.csv, "/spec/replaces"), Some("rhods-operator.3.2.0"));
        }
    }

    #[test]
    fn the_csv_lists_the_bundles_related_images_but_its_own_and_loads_as_one() {
        let chosen = target(Some("fast-3.x"), None).choose().unwrap();
        let related = chosen
            .csv
            .pointer("/spec/relatedImages")
            .and_then(Value::as_array)
            .unwrap();
        let bundle = chosen.bundle.as_deref().unwrap();
        assert!(related.len() > 90, "{}", related.len());
        assert!(related.iter().all(|r| text(r, "/image") != Some(bundle)));
        assert!(related.iter().all(|r| text(r, "/name").is_some()));
        let loaded = allowlist::load_text("target.json", &chosen.csv.to_string()).unwrap();
        let provenance = &loaded.allowlist.provenances()[0];
        assert_eq!(provenance.name.as_deref(), Some("rhods-operator.3.3.1"));
        assert_eq!(provenance.package.as_deref(), Some("rhods-operator"));
        assert!(loaded.allowlist.repositories().count() > 80);
    }

    #[test]
    fn what_cannot_be_chosen_is_said() {
        let err = target(Some("fast-3.x"), Some("9.9.9"))
            .choose()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no bundle in a channel at version or name '9.9.9'"),
            "{err}"
        );
        assert!(err.contains("rhods-operator.3.3.1"), "{err}");
        let err = target(Some("no-such"), None).choose().unwrap_err().to_string();
        assert!(err.contains("no-such"), "{err}");
        let mut other = target(None, None);
        other.package = "other-operator".into();
        let err = other.choose().unwrap_err().to_string();
        assert!(
            err.contains("no catalog read has a package named 'other-operator'"),
            "{err}"
        );
    }

    #[test]
    fn a_kept_bundle_object_is_the_csv_and_the_entry_places_it() {
        // operator-registry's foo catalog keeps each bundle's CSV.
        let foo = CatalogTarget {
            path: concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/olm/foo.yaml").into(),
            package: "foo".into(),
            channel: Some("stable".into()),
            version: None,
        };
        let chosen = foo.choose().unwrap();
        assert_eq!(text(&chosen.csv, "/metadata/name"), Some("foo.v0.2.0"));
        assert_eq!(text(&chosen.csv, "/spec/displayName"), Some("Foo Operator"));
        assert_eq!(text(&chosen.csv, "/spec/replaces"), Some("foo.v0.1.0"));
        assert_eq!(
            chosen.csv.pointer("/spec/skips"),
            Some(&json!(["foo.v0.1.1", "foo.v0.1.2"]))
        );
        assert_eq!(chosen.graph, ["foo.v0.1.0", "foo.v0.1.1", "foo.v0.1.2"]);
        // The deployments' images are the CSV's own, not only relatedImages.
        assert!(chosen.csv.to_string().contains("foo-init-2:v0.2.0"));
    }
}
