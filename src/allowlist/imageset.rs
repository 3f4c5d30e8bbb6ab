//! oc-mirror `ImageSetConfiguration`s: `mirror.additionalImages[].name`.

use serde_json::Value;

use super::Provenance;
use super::entries::{Ctx, Entries};

/// `mirror.additionalImages[].name` of the ImageSetConfiguration at `ptr`.
pub(super) fn read(out: &mut Entries<'_>, ctx: &Ctx<'_>, isc: &Value, ptr: &str) -> usize {
    let name = isc.pointer("/metadata/name").and_then(Value::as_str);
    let origin = match name {
        Some(n) => format!("ImageSetConfiguration {n}"),
        None => "ImageSetConfiguration".to_owned(),
    };
    let provenance = out.builder.provenance(Provenance::of(ctx.shared.clone(), origin));
    operators_not_read(out, ctx, isc, ptr);
    out.promote_list(ctx, isc, ptr, "/mirror/additionalImages", "name", provenance)
}

/// `mirror.operators` names catalogs (and packages) whose images oc-mirror
/// mirrors, but the images are in the catalog, not here: said, with how to
/// promote them, rather than read as if the set promoted only its
/// additional images.
fn operators_not_read(out: &mut Entries<'_>, ctx: &Ctx<'_>, isc: &Value, ptr: &str) {
    let Some(Value::Array(operators)) = isc.pointer("/mirror/operators") else {
        return;
    };
    for (i, operator) in operators.iter().enumerate() {
        let catalog = operator
            .get("catalog")
            .and_then(Value::as_str)
            .unwrap_or("a catalog");
        let packages: Vec<&str> = operator
            .get("packages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("name").and_then(Value::as_str))
            .collect();
        let which = match packages.is_empty() {
            true => "every package".to_owned(),
            false => format!("packages {}", packages.join(", ")),
        };
        let message = format!(
            "{which} of {catalog} not read: their images are in the catalog; promote them with the catalog itself (`opm render {catalog} > catalog.json`, then name catalog.json as an allowlist{})",
            match packages.is_empty() {
                true => String::new(),
                false => format!(" with --catalog-package {}", packages.join(",")),
            }
        );
        out.warnings
            .push(ctx.error(&format!("{ptr}/mirror/operators/{i}"), message));
    }
}
