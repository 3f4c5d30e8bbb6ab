//! The library path on real manifests: ModelMesh's rendered Deployments and
//! the upstream runtimes, judged, patched, and judged again.

use digest_gate::admission::render::{REWRITTEN_ANNOTATION, Rendered};
use digest_gate::allowlist::{self, Allowlist};
use digest_gate::judge::{self, ObjectVerdict};
use digest_gate::objects;
use digest_gate::policy::Policy;
use digest_gate::yaml;
use serde_json::Value;

mod common;

use common::root;
use digest_gate::testing::GOOD as PROMOTED;

fn example_allowlist() -> Allowlist {
    allowlist::load_paths(&[root().join("examples/allowlist.yaml")])
        .unwrap()
        .allowlist
}

/// The Deployment YAML snapshots of a goldga TOML file (`'''` strings).
fn golden_deployments(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("tests/fixtures/upstream/rendered").join(file)).unwrap();
    text.split("'''")
        .skip(1)
        .step_by(2)
        .filter_map(|block| {
            let docs = yaml::parse_stream(block).ok()?;
            docs.into_iter()
                .map(|d| d.value)
                .find(|v| v["kind"] == "Deployment")
        })
        .collect()
}

#[test]
fn modelmesh_rendered_deployments_expose_every_container() {
    for file in [
        "kserve_modelmesh-serving_servingruntime_controller.golden.toml",
        "opendatahub-io_modelmesh-serving_servingruntime_controller.golden.toml",
    ] {
        let deployments = golden_deployments(file);
        assert!(deployments.len() >= 5, "{file}: {}", deployments.len());
        let mut adapters = 0;
        for d in &deployments {
            let walk = objects::walk(d);
            assert!(walk.known);
            let containers = d["spec"]["template"]["spec"]["containers"].as_array().unwrap();
            let names: Vec<&str> = walk.sites.iter().filter_map(|s| s.name.as_deref()).collect();
            let expected: Vec<&str> = containers.iter().filter_map(|c| c["name"].as_str()).collect();
            assert_eq!(names, expected, "{file}");
            assert!(names.contains(&"mm"), "{names:?}");
            adapters += names.iter().filter(|n| n.ends_with("-adapter")).count();
            for (i, site) in walk.sites.iter().enumerate() {
                assert_eq!(site.pointer, format!("/spec/template/spec/containers/{i}/image"));
                assert_eq!(site.image.as_deref().ok(), containers[i]["image"].as_str());
            }
            // The test configuration's images are all short names ("image:tag")
            // or placeholders ("mlserver-1:replace"): denied with a reason,
            // never rewritten.
            let r = judge::judge(d, None, &Policy::default(), &example_allowlist());
            assert_eq!(r.verdict, ObjectVerdict::Deny);
            for i in &r.images {
                let m = i.message();
                assert!(
                    m.contains("has no registry domain")
                        || m.contains("is an unsubstituted placeholder (the tag ':replace'")
                        || m.contains("not in the promoted-digest allowlist"),
                    "{m}"
                );
            }
        }
        assert!(adapters > 0, "{file}: no runtime adapter containers seen");
    }
}

/// Every upstream runtime with its images replaced by an unpromoted digest of
/// a promoted repository: each must rewrite, and the patched object must
/// judge clean.
#[test]
fn upstream_runtimes_rewrite_and_settle() {
    let list = example_allowlist();
    let unpromoted = format!(
        "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8:v1.21.0-15@sha256:{}",
        "7".repeat(64)
    );
    let dir = root().join("tests/fixtures/upstream/servingruntimes");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut rewritten = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in yaml::parse_stream(&text).unwrap() {
            let mut object = doc.value;
            let walk = objects::walk(&object);
            if !walk.known {
                continue;
            }
            for site in walk.sites.iter().filter(|s| s.embedded.is_none()) {
                *object.pointer_mut(site.pointer.as_str()).unwrap() = Value::String(unpromoted.clone());
            }
            let r = judge::judge(&object, None, &Policy::default(), &list);
            let name = file.file_name().unwrap().to_string_lossy().to_string();
            if name.starts_with("02_") {
                // Its embedded runtime holds a placeholder, not a digest.
                assert_eq!(r.verdict, ObjectVerdict::Deny, "{name}");
                continue;
            }
            assert_eq!(r.verdict, ObjectVerdict::Rewrite, "{name}: {:?}", r.images);
            let (ops, _) = Rendered::of(&r, &object).take_patch(true).unwrap();
            let mut patched = object.clone();
            json_patch::patch(&mut patched, &ops).unwrap();
            let again = judge::judge(&patched, None, &Policy::default(), &list);
            assert_eq!(again.verdict, ObjectVerdict::Allow, "{name}");
            assert!(
                Rendered::of(&again, &patched).take_patch(true).is_none(),
                "{name}"
            );
            let note = patched["metadata"]["annotations"][REWRITTEN_ANNOTATION]
                .as_str()
                .unwrap();
            let note: Value = serde_json::from_str(note).unwrap();
            assert_eq!(note.as_object().unwrap().len(), r.rewrites().count(), "{name}");
            for entry in note.as_object().unwrap().values() {
                assert!(entry["to"].as_str().unwrap().ends_with(PROMOTED), "{name}");
            }
            rewritten += 1;
        }
    }
    assert_eq!(rewritten, 11);
}

/// Paths (JSON Pointer templates, `-` for a list item) of every property
/// named `image` in a CRD version's schema, with its schema.
fn image_keys<'s>(schema: &'s Value, path: String, out: &mut Vec<(String, &'s Value)>) {
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (key, sub) in props {
            let p = format!("{path}/{key}");
            if key == "image" {
                out.push((p.clone(), sub));
            }
            image_keys(sub, p, out);
        }
    }
    if let Some(items) = schema.get("items") {
        image_keys(items, format!("{path}/-"), out);
    }
}

/// An object of `kind` holding one value at `path` (list items created as
/// needed), so the walker sees that one field.
fn object_with(api_version: &str, kind: &str, path: &str, value: Value) -> Value {
    let mut object = serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}});
    let mut at = &mut object;
    let tokens: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    for (i, token) in tokens.iter().enumerate() {
        let last = i + 1 == tokens.len();
        let next = if last {
            value.clone()
        } else if tokens[i + 1] == "-" {
            Value::Array(Vec::new())
        } else {
            serde_json::json!({})
        };
        at = if *token == "-" {
            let items = at.as_array_mut().unwrap();
            items.push(next);
            items.last_mut().unwrap()
        } else {
            at.as_object_mut().unwrap().entry(*token).or_insert(next)
        };
    }
    object
}

/// `image` keys that do not hold a container image.
const NOT_CONTAINER_IMAGES: &[(&str, &str)] = &[("/rbd/image", "a Ceph RBD image name")];

#[test]
fn every_image_in_the_llm_crds_schemas_is_a_site() {
    let dir = root().join("tests/fixtures/upstream/llm/crds");
    let mut seen = 0;
    for file in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
        let crd = yaml::parse_stream(&text).unwrap().remove(0).value;
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_owned();
        let group = crd["spec"]["group"].as_str().unwrap();
        for version in crd["spec"]["versions"].as_array().unwrap() {
            let api_version = format!("{group}/{}", version["name"].as_str().unwrap());
            let mut keys = Vec::new();
            image_keys(&version["schema"]["openAPIV3Schema"], String::new(), &mut keys);
            assert!(!keys.is_empty(), "{kind} {api_version}");
            for (field, schema) in keys {
                // An image volume's `image` is a mapping: the site is its reference.
                let (value, path) = if schema["type"] == "object" {
                    (
                        serde_json::json!({"reference": "quay.io/x/y:1"}),
                        format!("{field}/reference"),
                    )
                } else {
                    (Value::from("quay.io/x/y:1"), field.clone())
                };
                let object = object_with(&api_version, &kind, &field, value);
                let walk = objects::walk(&object);
                assert!(walk.known, "{kind} {api_version}");
                let pointers: Vec<&str> = walk.sites.iter().map(|s| s.pointer.as_str()).collect();
                let want = path.replace("/-/", "/0/");
                if NOT_CONTAINER_IMAGES
                    .iter()
                    .any(|(suffix, _)| path.ends_with(suffix))
                {
                    assert!(pointers.is_empty(), "{kind} {api_version} {path}: {pointers:?}");
                } else {
                    assert_eq!(pointers, [want.as_str()], "{kind} {api_version} {path}");
                    assert_eq!(walk.sites[0].image.as_deref(), Ok("quay.io/x/y:1"));
                    seen += 1;
                }
            }
        }
    }
    // 2 kinds × 2 versions × 6 pod specs × 4 (containers, init, ephemeral,
    // image volumes), and the ClusterStorageContainer's container.
    assert_eq!(seen, 2 * 2 * 6 * 4 + 1);
}

#[test]
fn the_upstream_llm_objects_have_every_image_judged() {
    let dir = root().join("tests/fixtures/upstream/llm");
    let mut files = 0;
    for file in std::fs::read_dir(&dir).unwrap() {
        let path = file.unwrap().path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        // Every `image:` line in the file is a site, and no other.
        let mut written: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim_start().trim_start_matches("- ").strip_prefix("image: "))
            .map(|i| i.trim().to_owned())
            .collect();
        written.sort();
        assert!(!written.is_empty(), "{}", path.display());
        for doc in yaml::parse_stream(&text).unwrap() {
            let j = judge::judge(&doc.value, None, &Policy::default(), &example_allowlist());
            let mut judged: Vec<&str> = j.images.iter().map(|i| i.image()).collect();
            judged.sort_unstable();
            assert_eq!(judged, written, "{}", path.display());
            // None of them is promoted in the example allowlist.
            assert_eq!(j.verdict, ObjectVerdict::Deny, "{}", path.display());
        }
    }
    assert_eq!(files, 7);
}
