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
                SourceKind::PlannedCsv { plan, .. } => format!(" (pending in InstallPlan {plan})"),
                _ => String::new(),
            }
        ),
        package: name.and_then(|n| package_of(n, version.as_ref())),
        name: name.map(str::to_owned),
        version,
        replaces: text("/spec/replaces").map(str::to_owned),
        rank: None,
    });
    let mut entries = out.promote_list(ctx, csv, ptr, "/spec/relatedImages", "image", provenance);
    if let Some(Value::Array(deployments)) = csv.pointer("/spec/install/spec/deployments") {
        for (d, deployment) in deployments.iter().enumerate() {
            for list in ["containers", "initContainers"] {
                let Some(Value::Array(containers)) =
                    deployment.pointer(&format!("/spec/template/spec/{list}"))
                else {
                    continue;
                };
                for (c, container) in containers.iter().enumerate() {
                    let Some(Value::Array(env)) = container.get("env") else {
                        continue;
                    };
                    for (e, var) in env.iter().enumerate() {
                        let related = var
                            .get("name")
                            .and_then(Value::as_str)
                            .is_some_and(|n| n.starts_with("RELATED_IMAGE_"));
                        if !related {
                            continue;
                        }
                        let p = format!(
                            "{ptr}/spec/install/spec/deployments/{d}/spec/template/spec/{list}/{c}/env/{e}/value"
                        );
                        if let Some(image) = out.string(ctx, var.get("value"), &p) {
                            entries += out.promote_image(ctx, image, &p, provenance);
                        }
                    }
                }
            }
        }
    }
    entries
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
