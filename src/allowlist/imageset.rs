//! oc-mirror `ImageSetConfiguration`s: `mirror.additionalImages[].name`.

use serde_json::Value;

use super::Provenance;
use super::load::{Ctx, Loader};

// === impl Loader ===

impl Loader {
    /// `mirror.additionalImages[].name`.
    pub(super) fn image_set(&mut self, ctx: &Ctx<'_>, isc: &Value, ptr: &str) -> usize {
        let name = isc.pointer("/metadata/name").and_then(Value::as_str);
        let origin = match name {
            Some(n) => format!("ImageSetConfiguration {n}"),
            None => "ImageSetConfiguration".to_owned(),
        };
        let provenance = self
            .builder
            .provenance(Provenance::of(ctx.shared.clone(), origin));
        self.promote_list(ctx, isc, ptr, "/mirror/additionalImages", "name", provenance)
    }
}
