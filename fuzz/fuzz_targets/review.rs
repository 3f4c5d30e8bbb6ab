//! The AdmissionReview decoder and the whole judgement: any bytes get an
//! answer or a refusal, never a panic; an answer's patch applies to the
//! object and leaves nothing more to rewrite.
#![no_main]

use digest_gate::admission::{self, Endpoint};
use digest_gate::policy::Policy;
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;
use common::allowlist;

fuzz_target!(|data: &[u8]| {
    let policy = Policy::default();
    let rules = digest_gate::judge::Rules { policy: &policy, allowlist: allowlist(), published: None };
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        let Ok(answer) = admission::answer(endpoint, data, rules) else { continue };
        let v: serde_json::Value = serde_json::from_slice(&answer.body).expect("answers are JSON");
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        let Some(patch) = v["response"]["patch"].as_str() else { continue };
        assert_eq!(endpoint, Endpoint::Mutate, "validate never patches");
        // Apply the patch to the object as the apiserver would, and review again.
        use base64::Engine;
        let ops: json_patch::Patch =
            serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(patch).unwrap()).unwrap();
        // The parts digest-gate does not read are skipped without full
        // validation (a lone surrogate escape there is not an error to it), so
        // a body it answered may still be one a strict parser refuses.
        let Ok(mut review) = serde_json::from_slice::<serde_json::Value>(data) else { continue };
        json_patch::patch(&mut review["request"]["object"], &ops).expect("the patch applies");
        let again = admission::answer(endpoint, &serde_json::to_vec(&review).unwrap(), rules).unwrap();
        let again: serde_json::Value = serde_json::from_slice(&again.body).unwrap();
        assert!(again["response"].get("patch").is_none(), "a patched object needs no second patch");
    }
});
