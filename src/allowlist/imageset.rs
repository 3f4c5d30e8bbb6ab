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
        let mut entries = 0;
        if let Some(Value::Array(images)) = isc.pointer("/mirror/additionalImages") {
            for (i, item) in images.iter().enumerate() {
                let p = format!("{ptr}/mirror/additionalImages/{i}/name");
                if let Some(image) = self.string(ctx, item.get("name"), &p) {
                    entries += self.promote_image(ctx, image, &p, provenance);
                }
            }
        }
        entries
    }
}
