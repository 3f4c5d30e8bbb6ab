//! The AdmissionReview decoder and the whole judgement: any bytes get an
//! answer or a refusal, never a panic; an answer's patch applies to the
//! object and leaves nothing more to rewrite.
#![no_main]

use std::sync::OnceLock;

use digest_gate::admission::{self, Endpoint};
use digest_gate::allowlist::{self, Allowlist};
use digest_gate::policy::Policy;
use libfuzzer_sys::fuzz_target;

fn allowlist() -> &'static Allowlist {
    static LIST: OnceLock<Allowlist> = OnceLock::new();
    LIST.get_or_init(|| {
        allowlist::load_text("fuzz.yaml", include_str!("../../examples/allowlist.yaml"))
            .expect("the example allowlist loads")
            .allowlist
    })
}

fuzz_target!(|data: &[u8]| {
    let policy = Policy::default();
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        let Ok(answer) = admission::answer(endpoint, data, &policy, allowlist()) else { continue };
        let v: serde_json::Value = serde_json::from_slice(&answer.body).expect("answers are JSON");
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        if endpoint == Endpoint::Validate {
            assert!(v["response"].get("patch").is_none());
        }
    }
});
