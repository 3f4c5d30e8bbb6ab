//! Micro-benchmarks of the decision path, and the same policy in Rego
//! (regorus) on the same inputs as the peer to beat.
//!
//!   cargo bench --bench admission
//!
//! Figures are reported as ratios within one run (see BENCHMARKS.md).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use digest_gate::admission::{self, Endpoint};
use digest_gate::allowlist::{self, Allowlist};
use digest_gate::policy::Policy;
use digest_gate::{judge, reference};
use serde_json::{Value, json};

const POD: &str = include_str!("../bench/modelmesh-pod.json");
const PROMOTED: &str = include_str!("../bench/modelmesh-promoted.txt");
const REGO: &str = include_str!("rego/promoted_digests.rego");
/// A real CSV, the size of what an InstallPlan's steps carry inline.
const CSV: &str = include_str!("../tests/fixtures/olm/rhods-operator.3.3.5.clusterserviceversion.yaml");
use digest_gate::testing::BAD as NEVER_PROMOTED;

/// Hex that looks like a digest, derived from `i` (no crypto needed).
fn fake_digest(i: usize) -> String {
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    let mut hex = String::with_capacity(64);
    for _ in 0..4 {
        x ^= x >> 33;
        x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        hex.push_str(&format!("{x:016x}"));
    }
    format!("sha256:{hex}")
}

/// The pod's promoted images plus `extra` filler repositories.
fn allowlist_text(extra: usize) -> String {
    let mut text = String::from(PROMOTED);
    for i in 0..extra {
        text.push_str(&format!(
            "registry.example.com/team-{}/model-server-{i}:v{i}@{}\n",
            i % 97,
            fake_digest(i)
        ));
    }
    text
}

fn allowlist(extra: usize) -> Allowlist {
    allowlist::load_text("bench.txt", &allowlist_text(extra))
        .unwrap()
        .allowlist
}

/// data.promoted for the Rego policy, from the same allowlist.
fn rego_data(list: &Allowlist) -> Value {
    let mut promoted = serde_json::Map::new();
    for repo in list.repositories() {
        let digests: serde_json::Map<String, Value> = repo
            .digests()
            .map(|p| (p.digest().to_owned(), Value::Bool(true)))
            .collect();
        let tags: serde_json::Map<String, Value> = repo
            .digests()
            .flat_map(|p| {
                p.tags()
                    .map(move |t| (t.to_owned(), Value::String(p.digest().to_owned())))
            })
            .collect();
        promoted.insert(repo.name().to_owned(), json!({"digests": digests, "tags": tags}));
    }
    json!({ "promoted": promoted })
}

fn pod() -> Value {
    serde_json::from_str(POD).unwrap()
}

/// A pod with `n` containers, all promoted images.
fn pod_with(n: usize) -> Value {
    let mut p = pod();
    let base = p["spec"]["containers"].as_array().unwrap().clone();
    let containers: Vec<Value> = (0..n)
        .map(|i| {
            let mut c = base[i % base.len()].clone();
            c["name"] = json!(format!("c{i}"));
            c
        })
        .collect();
    p["spec"]["containers"] = Value::Array(containers);
    p["spec"]["initContainers"] = json!([]);
    p
}

fn review_body(object: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "8c5f0b0e-6a49-4a27-9b5e-2f1d0c3b4a59",
            "kind": {"group": object["apiVersion"].as_str().unwrap().rsplit_once('/').map_or("", |(g, _)| g),
                     "version": "v1", "kind": object["kind"]},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "demo-models", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller", "groups": ["system:serviceaccounts"]},
            "object": object, "oldObject": null, "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    }))
    .unwrap()
}

fn serving_runtime(image: &str) -> Value {
    json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
           "metadata": {"name": "ovms", "namespace": "demo-models", "labels": {"opendatahub.io/dashboard": "true"}},
           "spec": {"multiModel": true, "grpcEndpoint": "port:8085", "grpcDataEndpoint": "port:8001",
                    "supportedModelFormats": [{"name": "openvino_ir", "version": "opset1", "autoSelect": true}],
                    "containers": [{"name": "ovms", "image": image,
                                    "args": ["--port=8001", "--rest_port=8888", "--config_path=/models/model_config_list.json"],
                                    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}}],
                    "builtInAdapter": {"serverType": "ovms", "runtimeManagementPort": 8888, "memBufferBytes": 134217728}}})
}

fn bench_reference(c: &mut Criterion) {
    let mut g = c.benchmark_group("reference_parse");
    for (name, image) in [
        (
            "digest",
            "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@sha256:8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6",
        ),
        (
            "tag_and_digest",
            "quay.io/modh/openvino_model_server:2023.1@sha256:53b7fcf95de9b81e4c8652d0bf4e84e22d5b696827a5d951d863420c68b9cfe8",
        ),
        (
            "tag",
            "quay.io/modh/odh-openvino-servingruntime-container:v1.19.0-18",
        ),
        ("short", "ovms-1:replace"),
    ] {
        g.bench_function(name, |b| b.iter(|| reference::parse(black_box(image)).is_ok()));
    }
    g.finish();
}

fn bench_containers(c: &mut Criterion) {
    let list = allowlist(1000);
    let policy = Policy::default();
    let mut g = c.benchmark_group("decide_pod_containers");
    for n in [1usize, 10, 50] {
        let p = pod_with(n);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &p, |b, p| {
            b.iter(|| judge::judge(black_box(p), None, &policy, &list).verdict)
        });
    }
    g.finish();
}

fn bench_allowlist_size(c: &mut Criterion) {
    let policy = Policy::default();
    let p = pod();
    let mut g = c.benchmark_group("decide_allowlist_size");
    for extra in [10usize, 1_000, 100_000] {
        let list = allowlist(extra);
        g.bench_with_input(BenchmarkId::from_parameter(extra), &list, |b, list| {
            b.iter(|| judge::judge(black_box(&p), None, &policy, list).verdict)
        });
    }
    g.finish();
}

fn bench_review_response(c: &mut Criterion) {
    let list = allowlist(10_000);
    let policy = Policy::default();
    let mut rewrite_pod = pod();
    rewrite_pod["spec"]["containers"][3]["image"] = json!(format!(
        "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@{NEVER_PROMOTED}"
    ));
    let promoted_sr = serving_runtime(
        "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@sha256:8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6",
    );
    let rewrite_sr = serving_runtime(&format!(
        "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@{NEVER_PROMOTED}"
    ));
    let mut g = c.benchmark_group("review_response");
    for (name, object) in [
        ("modelmesh_pod_allow", pod()),
        ("modelmesh_pod_rewrite", rewrite_pod),
        ("servingruntime_allow", promoted_sr),
        ("servingruntime_rewrite", rewrite_sr),
    ] {
        let rules = digest_gate::judge::Rules {
            policy: &policy,
            allowlist: &list,
            published: None,
        };
        let body = review_body(&object);
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                admission::answer(Endpoint::Mutate, black_box(&body), rules)
                    .unwrap()
                    .body
                    .len()
            })
        });
    }
    // The JSON work alone (decode the review, encode a bare answer): the
    // floor every webhook pays, for the ratio in BENCHMARKS.md.
    let body = review_body(&pod());
    g.bench_function("json_floor_modelmesh_pod", |b| {
        b.iter(|| {
            let v: Value = serde_json::from_slice(black_box(&body)).unwrap();
            let uid = v["request"]["uid"].as_str().unwrap_or_default();
            serde_json::to_vec(
                &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                       "response": {"uid": uid, "allowed": true}}),
            )
            .unwrap()
            .len()
        })
    });
    g.finish();
}

fn rego_engine(list: &Allowlist) -> regorus::Engine {
    let mut engine = regorus::Engine::new();
    engine
        .add_policy("promoted_digests.rego".into(), REGO.into())
        .unwrap();
    engine
        .add_data(regorus::Value::from_json_str(&rego_data(list).to_string()).unwrap())
        .unwrap();
    engine
}

fn bench_rego(c: &mut Criterion) {
    let policy = Policy::default();
    let mut g = c.benchmark_group("rego_vs_native");
    for extra in [10usize, 1_000] {
        let list = allowlist(extra);
        let p = pod();
        let mut engine = rego_engine(&list);
        let input = regorus::Value::from_json_str(POD).unwrap();
        // Same answer first: all five images promoted, no violations.
        engine.set_input(input.clone());
        let violations = engine.eval_rule("data.digestgate.violation".into()).unwrap();
        assert_eq!(violations.to_json_str().unwrap(), "[]");
        assert_eq!(
            judge::judge(&p, None, &policy, &list).verdict,
            judge::ObjectVerdict::Allow
        );

        g.bench_with_input(BenchmarkId::new("native", extra), &p, |b, p| {
            b.iter(|| judge::judge(black_box(p), None, &policy, &list).verdict)
        });
        g.bench_with_input(BenchmarkId::new("rego", extra), &input, |b, input| {
            b.iter(|| {
                engine.set_input(black_box(input.clone()));
                engine.eval_rule("data.digestgate.violation".into()).unwrap()
            })
        });
    }
    g.finish();
}

/// An InstallPlan as OLM stores it (the shape of
/// tests/fixtures/olm/installplan-quay-operator-743.yaml), its steps
/// carrying a real CSV inline three times, `approved` as given.
fn installplan(approved: bool) -> Value {
    let step = |kind: &str| {
        json!({"resolving": "rhods-operator.3.3.5", "status": "Created",
               "resource": {"group": "operators.coreos.com", "version": "v1alpha1", "kind": kind,
                            "name": "rhods-operator.3.3.5", "sourceName": "redhat-operators",
                            "sourceNamespace": "openshift-marketplace", "manifest": CSV}})
    };
    let judged = json!({"judgedAt": "2026-12-08T09:00:00Z", "targets": ["rhods-operator.3.3.5"],
                        "staleAfterUpgrade": 2, "named": ["models/ServingRuntime/ovms", "models/Deployment/ovms"]});
    json!({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "InstallPlan",
           "metadata": {"name": "install-4tlmv", "namespace": "redhat-ods-operator", "generateName": "install-",
                        "labels": {"operators.coreos.com/rhods-operator.redhat-ods-operator": ""},
                        "annotations": {"digest-gate.dev/preflight": judged.to_string()},
                        "ownerReferences": [{"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription",
                                             "name": "rhods-operator", "uid": "1be041ab-4c16-48ed-ba7e-9bb5a615f595",
                                             "controller": false, "blockOwnerDeletion": false}],
                        "managedFields": [{"manager": "catalog", "operation": "Update", "fieldsType": "FieldsV1",
                                           "fieldsV1": {"f:spec": {"f:approval": {}, "f:approved": {}}}}]},
           "spec": {"approval": "Manual", "approved": approved,
                    "clusterServiceVersionNames": ["rhods-operator.3.3.5"], "generation": 1},
           "status": {"phase": "RequiresApproval", "catalogSources": [],
                      "plan": [step("ClusterServiceVersion"), step("CustomResourceDefinition"), step("Secret")]}})
}

/// `/validate-approval`: every InstallPlan UPDATE reaches it before 1.28
/// (no matchConditions), so what a plain update costs (a label changed)
/// beside an approval judged, and the JSON floor of the same body.
fn bench_approval(c: &mut Criterion) {
    use admission::approval::Approvals;
    let writers = vec!["system:serviceaccount:digest-gate:digest-gate".to_owned()];
    let rules = Approvals {
        mode: digest_gate::policy::Mode::Enforce,
        writers: &writers,
    };
    let update = |old: &Value, new: &Value| {
        let mut body: Value = serde_json::from_slice(&review_body(new)).unwrap();
        body["request"]["operation"] = json!("UPDATE");
        body["request"]["kind"] =
            json!({"group": "operators.coreos.com", "version": "v1alpha1", "kind": "InstallPlan"});
        body["request"]["oldObject"] = old.clone();
        serde_json::to_vec(&body).unwrap()
    };
    let mut relabelled = installplan(false);
    relabelled["metadata"]["labels"]["team"] = json!("models");
    let plain = update(&installplan(false), &relabelled);
    let approval = update(&installplan(false), &installplan(true));
    let mut g = c.benchmark_group("approval");
    g.throughput(Throughput::Bytes(plain.len() as u64));
    g.bench_function("installplan_update", |b| {
        b.iter(|| {
            admission::answer_approval(black_box(&plain), rules)
                .unwrap()
                .allowed
        })
    });
    g.bench_function("installplan_approval_denied", |b| {
        b.iter(|| {
            admission::answer_approval(black_box(&approval), rules)
                .unwrap()
                .allowed
        })
    });
    g.bench_function("json_floor_installplan_update", |b| {
        b.iter(|| {
            serde_json::from_slice::<Value>(black_box(&plain))
                .unwrap()
                .is_object()
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    bench_approval,
    bench_reference,
    bench_containers,
    bench_allowlist_size,
    bench_review_response,
    bench_rego
);
criterion_main!(benches);
