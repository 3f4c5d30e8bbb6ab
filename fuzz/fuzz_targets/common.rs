//! Shared by the fuzz targets: the example allowlist, loaded once.

use std::sync::OnceLock;

use digest_gate::allowlist::{self, Allowlist};

pub fn allowlist() -> &'static Allowlist {
    static LIST: OnceLock<Allowlist> = OnceLock::new();
    LIST.get_or_init(|| {
        allowlist::load_text("fuzz.yaml", include_str!("../../examples/allowlist.yaml"))
            .expect("the example allowlist loads")
            .allowlist
    })
}
