//! OLM `ClusterServiceVersion`s: `spec.relatedImages[].image` and the
//! `RELATED_IMAGE_*` env values of the operator's deployments, each release
//! named by its CSV (and `(installed)` when read from the cluster).

use serde_json::Value;

use super::Provenance;
use super::entries::{Ctx, Entries};
use super::input::SourceKind;

/// `spec.relatedImages[].image` and the `RELATED_IMAGE_*` env values of the
/// operator's deployments, of the CSV at `ptr`.
pub(super) fn read(out: &mut Entries<'_>, ctx: &Ctx<'_>, csv: &Value, ptr: &str) -> usize {
    let text = |p: &str| csv.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty());
    let name = text("/metadata/name");
    let version = text("/spec/version").and_then(|v| semver::Version::parse(v.trim_start_matches('v')).ok());
    let provenance = out.builder.provenance(Provenance {
        source: ctx.shared.clone(),
        origin: format!(
            "ClusterServiceVersion {}{}",
            name.unwrap_or("(unnamed)"),
            match out.kind {
                SourceKind::InstalledCsv { .. } => " (installed)".to_owned(),
                SourceKind::PlannedCsv { by, .. } => format!(" (pending in {by})"),
                _ => String::new(),
            }
        ),
        package: name.and_then(|n| package_of(n, version.as_ref())),
        name: name.map(str::to_owned),
        version,
        replaces: text("/spec/replaces").map(str::to_owned),
        rank: None,
    });
    let mut entries = 0;
    for related in related_images(csv) {
        let p = format!("{ptr}{}", related.pointer);
        if let Some(image) = out.string(ctx, related.value, &p) {
            entries += out.promote_image(ctx, image, &p, provenance);
        }
    }
    entries
}

/// One image a CSV lists: where it stands (a JSON pointer into the CSV),
/// its value as written, and what the CSV calls it.
pub struct Related<'v> {
    pub pointer: String,
    pub value: Option<&'v Value>,
    /// The `relatedImages` entry's `name`, or the `RELATED_IMAGE_*` variable.
    pub called: Option<&'v str>,
}

/// The images a CSV lists, in order: `spec.relatedImages[].image`, then the
/// `RELATED_IMAGE_*` env values of its deployments' containers and init
/// containers. What the allowlist promotes, and what `preflight` names.
pub fn related_images(csv: &Value) -> Vec<Related<'_>> {
    let mut out: Vec<Related<'_>> = items(csv, "/spec/relatedImages")
        .into_iter()
        .map(|(i, item)| Related {
            pointer: format!("/spec/relatedImages/{i}/image"),
            value: item.get("image"),
            called: item.get("name").and_then(Value::as_str),
        })
        .collect();
    for (d, deployment) in items(csv, "/spec/install/spec/deployments") {
        for list in ["containers", "initContainers"] {
            for (c, container) in items(deployment, &format!("/spec/template/spec/{list}")) {
                for (e, var) in items(container, "/env") {
                    let Some(called) = var
                        .get("name")
                        .and_then(Value::as_str)
                        .filter(|n| n.starts_with("RELATED_IMAGE_"))
                    else {
                        continue;
                    };
                    out.push(Related {
                        pointer: format!(
                            "/spec/install/spec/deployments/{d}/spec/template/spec/{list}/{c}/env/{e}/value"
                        ),
                        value: var.get("value"),
                        called: Some(called),
                    });
                }
            }
        }
    }
    out
}

/// The items of the array at `pointer` in `v`, with their indexes.
fn items<'v>(v: &'v Value, pointer: &str) -> Vec<(usize, &'v Value)> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| a.iter().enumerate().collect())
        .unwrap_or_default()
}

/// The operator a CSV named `name` is a release of: the name without its
/// version suffix (`rhods-operator.1.21.0`, `opendatahub-operator.v2.8.0`).
pub fn package_of(name: &str, version: Option<&semver::Version>) -> Option<String> {
    let version = version?.to_string();
    let package = name
        .strip_suffix(&version)?
        .strip_suffix(".v")
        .or_else(|| name.strip_suffix(&version)?.strip_suffix('.'))?;
    (!package.is_empty()).then(|| package.to_owned())
}
