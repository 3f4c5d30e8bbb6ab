//! A fixed workload for profilers: answers the ModelMesh runtime pod's review
//! N times (and parses its images N times), with nothing else running.
//!
//!   cargo build --release --example profile_review
//!   valgrind --tool=callgrind target/release/examples/profile_review 2000 [EXTRA_REPOSITORIES]
//!   callgrind_annotate callgrind.out.* | head -40
//!
//! With EXTRA_REPOSITORIES the allowlist gains that many filler entries; the
//! instructions spent in `review::review` should not change with it.

use digest_gate::admission::{self, Endpoint};
use digest_gate::allowlist;
use digest_gate::policy::Policy;
use serde_json::{Value, json};

const POD: &str = include_str!("../bench/modelmesh-pod.json");
const PROMOTED: &str = include_str!("../bench/modelmesh-promoted.txt");

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let extra: usize = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(0);
    let mut text = String::from(PROMOTED);
    for i in 0..extra {
        text.push_str(&format!(
            "registry.example.com/team-{}/model-server-{i}@sha256:{:064x}\n",
            i % 97,
            i as u128 * 0x9E37_79B9_7F4A_7C15
        ));
    }
    let list = allowlist::load_text("promoted.txt", &text).unwrap().allowlist;
    let policy = Policy::default();
    let pod: Value = serde_json::from_str(POD).unwrap();
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "namespace": "demo-models", "operation": "CREATE", "userInfo": {"username": "x"},
                    "object": pod, "dryRun": false}
    }))
    .unwrap();
    let rules = digest_gate::judge::Rules {
        policy: &policy,
        allowlist: &list,
        published: None,
    };
    let mut bytes = 0;
    for _ in 0..n {
        bytes += admission::answer(Endpoint::Mutate, &body, rules)
            .unwrap()
            .body
            .len();
    }
    // The decision alone, on the already-decoded object.
    let mut allowed = 0;
    for _ in 0..n {
        let r = digest_gate::judge::judge(&pod, None, &policy, &list);
        allowed += usize::from(r.verdict == digest_gate::judge::ObjectVerdict::Allow);
    }
    println!("{allowed} decisions allowed");
    let images: Vec<&str> = PROMOTED.lines().filter(|l| !l.starts_with('#')).collect();
    let mut ok = 0;
    for _ in 0..n {
        for image in &images {
            ok += usize::from(digest_gate::reference::parse(image).is_ok());
        }
    }
    println!("{bytes} bytes answered, {ok} references parsed");
}
