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
    out.promote_list(ctx, isc, ptr, "/mirror/additionalImages", "name", provenance)
}
