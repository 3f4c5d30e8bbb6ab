//! The walkers: every image site of an object, by its kind's layout.

use json_patch::jsonptr::{Pointer, PointerBuf, Token};
use serde_json::Value;

use super::kinds::{self, Layout};
use super::{Embedded, EmbeddedSite, Role, Site, Walk, group_of};
use crate::yaml;

/// Templates can nest; nothing legitimate nests deeper than this.
const MAX_TEMPLATE_DEPTH: usize = 8;

/// Walks `object` at `ptr` by its kind's layout; false when digest-gate
/// does not read `group`/`kind`.
pub(super) fn visit(
    group: &str,
    kind: &str,
    object: &Value,
    ptr: &Pointer,
    walk: &mut Walk,
    depth: usize,
) -> bool {
    let Some(entry) = kinds::find(group, kind) else {
        return false;
    };
    let mut out = Collector {
        sites: &mut walk.sites,
    };
    match entry.layout {
        Layout::PodSpec(at) => out.pod_spec(object.pointer(at), &ptr.concat(Pointer::from_static(at))),
        Layout::PodSpecs(parts) => {
            for (at, part) in parts {
                let first = out.sites.len();
                out.pod_spec(object.pointer(at), &ptr.concat(Pointer::from_static(at)));
                if !part.is_empty() {
                    for site in &mut out.sites[first..] {
                        site.within = Some((*part).to_owned());
                    }
                }
            }
        }
        Layout::Container(at) => {
            let at = Pointer::from_static(at);
            let container_ptr = ptr.concat(at);
            if let Some(c) = out.mapping(object.pointer(at.as_str()), &container_ptr) {
                let name = c.get("name").and_then(Value::as_str);
                if let Some(image) = c.get("image").filter(|v| !v.is_null()) {
                    out.image(Some(image), join(&container_ptr, "image"), Role::Container, name);
                }
            }
        }
        Layout::Runtime => out.runtime_spec(object.get("spec"), &join(ptr, "spec")),
        Layout::InferenceService => out.inference_service(object.get("spec"), &join(ptr, "spec")),
        Layout::EmbeddedRuntimes => embedded_runtimes(object, ptr, walk),
        Layout::Template => template_objects(object, ptr, walk, depth),
        Layout::Approval => {}
    }
    true
}

/// A Template's objects, each walked by its own kind.
fn template_objects(object: &Value, ptr: &Pointer, walk: &mut Walk, depth: usize) {
    let objects_ptr = join(ptr, "objects");
    match object.get("objects") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let item_ptr = join_index(&objects_ptr, i, None);
                if depth >= MAX_TEMPLATE_DEPTH {
                    walk.sites
                        .push(structure(&item_ptr, "Templates are nested too deeply".into()));
                    break;
                }
                let kind = item.get("kind").and_then(Value::as_str).unwrap_or("");
                let group = group_of(item.get("apiVersion").and_then(Value::as_str).unwrap_or(""));
                let first = walk.sites.len();
                visit(group, kind, item, &item_ptr, walk, depth + 1);
                let name = item.pointer("/metadata/name").and_then(Value::as_str);
                let label = format!("objects[{i}] {kind} {}", name.unwrap_or("(unnamed)"));
                for site in &mut walk.sites[first..] {
                    site.within = Some(match site.within.take() {
                        Some(inner) => format!("{label}: {inner}"),
                        None => label.clone(),
                    });
                    from_parameter(object, ptr, site);
                }
            }
        }
        Some(other) => walk.sites.push(structure(
            &objects_ptr,
            format!(
                "Template objects must be a list, found {}",
                yaml::type_name(other)
            ),
        )),
    }
}

/// An image written `${NAME}` in a Template's object is instantiated from
/// parameter NAME: with a default `value`, that value is the image to judge
/// and the place to rewrite. Without one (or written inside a longer
/// string), it stays the placeholder it is.
fn from_parameter(template: &Value, ptr: &Pointer, site: &mut Site) {
    if site.embedded.is_some() || site.parameter.is_some() {
        return;
    }
    let Some(name) = site
        .image
        .as_deref()
        .ok()
        .and_then(|i| i.strip_prefix("${"))
        .and_then(|i| i.strip_suffix('}'))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    else {
        return;
    };
    let Some(Value::Array(parameters)) = template.get("parameters") else {
        return;
    };
    let found = parameters
        .iter()
        .enumerate()
        .find(|(_, p)| p.get("name").and_then(Value::as_str) == Some(name));
    if let Some((i, Value::String(default))) = found.and_then(|(i, p)| Some((i, p.get("value")?)))
        && !default.is_empty()
    {
        site.pointer = join_index(&join(ptr, "parameters"), i, Some("value"));
        site.parameter = Some(name.to_owned());
        site.image = Ok(default.clone());
    }
}

pub(super) fn structure(pointer: &Pointer, reason: String) -> Site {
    Site {
        pointer: pointer.to_buf(),
        role: Role::Structure,
        name: None,
        image: Err(reason),
        embedded: None,
        within: None,
        parameter: None,
    }
}

/// A structure site for a field of the wrong JSON type.
fn mistyped(pointer: &Pointer, expected: &str, found: &Value) -> Site {
    structure(pointer, wrong_type(pointer, expected, found))
}

/// "spec.containers must be a list of containers, found a string".
fn wrong_type(pointer: &Pointer, expected: &str, found: &Value) -> String {
    format!(
        "{} must be {expected}, found {}",
        field_path(pointer),
        yaml::type_name(found)
    )
}

/// `base/seg`, allocated once (walkers build many).
fn join(base: &Pointer, seg: &str) -> PointerBuf {
    let mut p = base.to_buf();
    p.push_back(seg);
    p
}

/// `base/i` (or `base/i/seg`), the index written without allocating.
fn join_index(base: &Pointer, i: usize, seg: Option<&str>) -> PointerBuf {
    let mut digits = [0u8; 20];
    let mut n = i;
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut p = base.to_buf();
    p.push_back(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
    if let Some(seg) = seg {
        p.push_back(seg);
    }
    p
}

/// Human path for messages: `/spec/containers` → `spec.containers`.
fn field_path(pointer: &Pointer) -> String {
    pointer.as_str().trim_start_matches('/').replace('/', ".")
}

struct Collector<'w> {
    sites: &'w mut Vec<Site>,
}

impl Collector<'_> {
    fn push(&mut self, pointer: PointerBuf, role: Role, name: Option<&str>, image: Result<String, String>) {
        self.sites.push(Site {
            pointer,
            role,
            name: name.map(str::to_owned),
            image,
            embedded: None,
            within: None,
            parameter: None,
        });
    }

    /// `spec` must be a mapping when present.
    fn mapping<'v>(
        &mut self,
        value: Option<&'v Value>,
        ptr: &Pointer,
    ) -> Option<&'v serde_json::Map<String, Value>> {
        match value {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m),
            Some(other) => {
                self.sites.push(mistyped(ptr, "a mapping", other));
                None
            }
        }
    }

    fn pod_spec(&mut self, spec: Option<&Value>, ptr: &Pointer) {
        let Some(spec) = self.mapping(spec, ptr) else {
            return;
        };
        self.containers(spec, ptr, "containers", Role::Container);
        self.containers(spec, ptr, "initContainers", Role::InitContainer);
        self.containers(spec, ptr, "ephemeralContainers", Role::EphemeralContainer);
        self.volumes(spec, ptr);
    }

    fn runtime_spec(&mut self, spec: Option<&Value>, ptr: &Pointer) {
        if let Some(spec) = self.mapping(spec, ptr) {
            self.runtime_parts(spec, ptr);
        }
    }

    /// A runtime spec's images, and an InferenceService component's (which
    /// inlines the same fields): containers, image volumes, and the
    /// `workerSpec` pod of multi-node runtimes.
    fn runtime_parts(&mut self, spec: &serde_json::Map<String, Value>, ptr: &Pointer) {
        self.containers(spec, ptr, "containers", Role::Container);
        self.volumes(spec, ptr);
        if let Some(w) = spec.get("workerSpec").filter(|w| !w.is_null()) {
            let worker_ptr = join(ptr, "workerSpec");
            if let Some(worker) = self.mapping(Some(w), &worker_ptr) {
                self.containers(worker, &worker_ptr, "containers", Role::WorkerContainer);
                self.volumes(worker, &worker_ptr);
            }
        }
    }

    fn inference_service(&mut self, spec: Option<&Value>, ptr: &Pointer) {
        let Some(spec) = self.mapping(spec, ptr) else {
            return;
        };
        for component in ["predictor", "transformer", "explainer"] {
            if spec.get(component).is_none_or(Value::is_null) {
                continue;
            }
            let cptr = join(ptr, component);
            let Some(c) = self.mapping(spec.get(component), &cptr) else {
                continue;
            };
            self.runtime_parts(c, &cptr);
            self.containers(c, &cptr, "initContainers", Role::InitContainer);
            let (inline, role) = match component {
                "predictor" => (kinds::PREDICTOR_INLINE, Role::Predictor),
                "explainer" => (kinds::EXPLAINER_INLINE, Role::Explainer),
                _ => continue,
            };
            for field in inline {
                if c.get(*field).is_none_or(Value::is_null) {
                    continue;
                }
                let fptr = join(&cptr, field);
                let Some(m) = self.mapping(c.get(*field), &fptr) else {
                    continue;
                };
                self.image(m.get("image"), join(&fptr, "image"), role, Some(field));
            }
        }
    }

    /// The containers under `parent[field]`; pointers are built only for
    /// what is there.
    fn containers(
        &mut self,
        parent: &serde_json::Map<String, Value>,
        ptr: &Pointer,
        field: &str,
        role: Role,
    ) {
        let items = match parent.get(field) {
            None | Some(Value::Null) => return,
            Some(Value::Array(items)) => items,
            Some(other) => {
                self.sites
                    .push(mistyped(&join(ptr, field), "a list of containers", other));
                return;
            }
        };
        let list_ptr = join(ptr, field);
        for (i, item) in items.iter().enumerate() {
            let Value::Object(c) = item else {
                let item_ptr = join_index(&list_ptr, i, None);
                self.sites.push(mistyped(&item_ptr, "a container mapping", item));
                continue;
            };
            let name = c.get("name").and_then(Value::as_str);
            if let Some(image) = c.get("image").filter(|v| !v.is_null()) {
                self.image(Some(image), join_index(&list_ptr, i, Some("image")), role, name);
            }
        }
    }

    /// Image volumes under `parent.volumes`.
    fn volumes(&mut self, parent: &serde_json::Map<String, Value>, ptr: &Pointer) {
        let items = match parent.get("volumes") {
            None | Some(Value::Null) => return,
            Some(Value::Array(items)) => items,
            Some(other) => {
                self.sites
                    .push(mistyped(&join(ptr, "volumes"), "a list of volumes", other));
                return;
            }
        };
        let mut list_ptr = None;
        for (i, volume) in items.iter().enumerate() {
            let Some(image) = volume.get("image") else {
                continue;
            };
            let list_ptr = list_ptr.get_or_insert_with(|| join(ptr, "volumes"));
            let vptr = join_index(list_ptr, i, Some("image"));
            let name = volume.get("name").and_then(Value::as_str);
            match image {
                Value::Null => {}
                Value::Object(source) => self.image(
                    source.get("reference"),
                    join(&vptr, "reference"),
                    Role::Volume,
                    name,
                ),
                other => self.sites.push(mistyped(&vptr, "a mapping", other)),
            }
        }
    }

    /// An image field: absent or null means "no image here" (the apiserver
    /// validates required images); anything but a string is malformed.
    fn image(&mut self, value: Option<&Value>, ptr: PointerBuf, role: Role, name: Option<&str>) {
        match value {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => self.push(ptr, role, name, Ok(s.clone())),
            Some(other) => {
                let reason = wrong_type(&ptr, "a string", other);
                self.push(ptr, role, name, Err(reason));
            }
        }
    }
}

/// The ConfigMap the RHODS dashboard reads its default runtime from.
const RUNTIMES_CONFIGMAP: &str = "servingruntimes-config";

/// The most text of runtime documents one object's ConfigMap values may
/// hold (a Template's ConfigMaps together): what the apiserver stores in
/// one ConfigMap, so only a review it never sent holds more.
pub const EMBEDDED_BYTES: usize = 1 << 20;
/// The most nodes those documents may make together: about 14 MiB of trees
/// with their positions, where a ServingRuntime document makes ~100. With
/// the bytes, this is what keeps a review within SECURITY.md's budget.
pub const EMBEDDED_NODES: usize = 50_000;

/// ConfigMap values that are ServingRuntime documents. `servingruntimes-config`
/// must parse; other ConfigMaps are only read when a value looks like one.
fn embedded_runtimes(object: &Value, ptr: &Pointer, walk: &mut Walk) {
    let Some(Value::Object(data)) = object.get("data") else {
        return;
    };
    let name = object.pointer("/metadata/name").and_then(Value::as_str);
    let runtimes_config = name == Some(RUNTIMES_CONFIGMAP);
    for (key, value) in data {
        let Value::String(text) = value else { continue };
        // Cheap before parsing: a runtime document names its kind.
        if !kinds::runtimes().any(|k| text.contains(k.name)) {
            continue;
        }
        let mut pointer = join(ptr, "data");
        pointer.push_back(Token::new(key.as_str()));
        let documents = match embedded_documents(text, &mut walk.spent) {
            Ok(d) => d,
            Err(why) if runtimes_config => {
                let why = match why {
                    Unread::Syntax(e) => format!("is not valid YAML: {e}"),
                    Unread::TooLarge(e) => format!("is too large to judge: {e}; refusing to read it"),
                };
                walk.sites.push(structure(
                    &pointer,
                    format!("data.{key} of {RUNTIMES_CONFIGMAP} {why}"),
                ));
                continue;
            }
            Err(_) => continue,
        };
        let source = walk.embedded.len();
        let mut sites = Vec::new();
        for doc in &documents {
            let kind = doc.value.get("kind").and_then(Value::as_str).unwrap_or("");
            if !kinds::is_runtime(kind) {
                continue;
            }
            let before = sites.len();
            Collector { sites: &mut sites }
                .runtime_spec(doc.value.get("spec"), Pointer::from_static("/spec"));
            for site in &mut sites[before..] {
                let inner = std::mem::replace(&mut site.pointer, pointer.clone());
                site.embedded = Some(EmbeddedSite {
                    source,
                    document: doc.index,
                    line: doc.line_of(inner.as_str()),
                    pointer: inner,
                });
            }
        }
        if !sites.is_empty() {
            walk.sites.extend(sites);
            walk.embedded.push(Embedded {
                pointer,
                text: text.clone(),
                documents,
            });
        }
    }
}

/// Why an embedded text was not read.
enum Unread {
    Syntax(yaml::YamlError),
    /// Past [`EMBEDDED_BYTES`] or [`EMBEDDED_NODES`].
    TooLarge(String),
}

/// The documents of one embedded text, within what the object's earlier
/// texts left of [`EMBEDDED_BYTES`] and [`EMBEDDED_NODES`] (`spent`).
fn embedded_documents(text: &str, spent: &mut (usize, usize)) -> Result<Vec<yaml::Document>, Unread> {
    let (bytes, nodes) = *spent;
    if text.len() > EMBEDDED_BYTES - bytes {
        return Err(Unread::TooLarge(format!(
            "{} KiB of runtime documents, more than the {} KiB a ConfigMap holds",
            (bytes + text.len()).div_ceil(1024),
            EMBEDDED_BYTES >> 10
        )));
    }
    let mut documents = yaml::documents_capped(text, EMBEDDED_NODES - nodes);
    let read: Result<Vec<_>, _> = documents.by_ref().collect();
    *spent = (
        bytes + text.len(),
        nodes + documents.nodes().min(EMBEDDED_NODES - nodes),
    );
    read.map_err(|e| match documents.too_large() {
        true => Unread::TooLarge(e.to_string()),
        false => Unread::Syntax(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::walk;
    use serde_json::json;

    /// Each site's path (leaked: a test's few strings, compared as `&str`).
    fn pointers(w: &Walk) -> Vec<(&'static str, Option<&str>)> {
        w.sites
            .iter()
            .map(|s| {
                (
                    &*Box::leak(s.path().into_owned().into_boxed_str()),
                    s.name.as_deref(),
                )
            })
            .collect()
    }

    #[test]
    fn pod_sites() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {
            "containers": [{"name": "a", "image": "q.io/a:1"}, {"name": "b", "image": "q.io/b:1"}],
            "initContainers": [{"name": "i", "image": "q.io/i:1"}],
            "ephemeralContainers": [{"name": "e", "image": "q.io/e:1"}],
            "volumes": [{"name": "m", "image": {"reference": "q.io/m:1"}}, {"name": "x", "emptyDir": {}}]}});
        let w = walk(&pod);
        assert!(w.known);
        assert_eq!(
            pointers(&w),
            vec![
                ("/spec/containers/0/image", Some("a")),
                ("/spec/containers/1/image", Some("b")),
                ("/spec/initContainers/0/image", Some("i")),
                ("/spec/ephemeralContainers/0/image", Some("e")),
                ("/spec/volumes/0/image/reference", Some("m")),
            ]
        );
        assert_eq!(w.sites[2].describe(), "init container \"i\"");
    }

    #[test]
    fn workload_kinds_use_their_pod_template() {
        let spec = json!({"containers": [{"name": "c", "image": "q.io/c:1"}]});
        for (api, kind, ptr) in [
            ("apps/v1", "Deployment", "/spec/template/spec/containers/0/image"),
            ("apps/v1", "StatefulSet", "/spec/template/spec/containers/0/image"),
            ("apps/v1", "DaemonSet", "/spec/template/spec/containers/0/image"),
            ("apps/v1", "ReplicaSet", "/spec/template/spec/containers/0/image"),
            ("batch/v1", "Job", "/spec/template/spec/containers/0/image"),
            (
                "batch/v1",
                "CronJob",
                "/spec/jobTemplate/spec/template/spec/containers/0/image",
            ),
        ] {
            let mut obj = json!({"apiVersion": api, "kind": kind, "spec": {}});
            let target = if kind == "CronJob" {
                json!({"jobTemplate": {"spec": {"template": {"spec": spec}}}})
            } else {
                json!({"template": {"spec": spec}})
            };
            obj["spec"] = target;
            assert_eq!(pointers(&walk(&obj)), vec![(ptr, Some("c"))], "{kind}");
        }
    }

    #[test]
    fn runtime_sites_include_worker_spec() {
        let sr = json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterServingRuntime", "spec": {
            "containers": [{"name": "kserve-container", "image": "a:replace"}],
            "workerSpec": {"containers": [{"name": "worker-container", "image": "a:replace"}],
                           "volumes": [{"name": "v", "image": {"reference": "q.io/v:1"}}]}}});
        assert_eq!(
            pointers(&walk(&sr)),
            vec![
                ("/spec/containers/0/image", Some("kserve-container")),
                ("/spec/workerSpec/containers/0/image", Some("worker-container")),
                ("/spec/workerSpec/volumes/0/image/reference", Some("v")),
            ]
        );
    }

    #[test]
    fn inference_service_sites() {
        let isvc = json!({"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "spec": {
            "predictor": {"model": {"modelFormat": {"name": "sklearn"}, "image": "q.io/m:1"},
                          "sklearn": {"image": "q.io/s:1"},
                          "containers": [{"name": "kserve-container", "image": "q.io/c:1"}],
                          "workerSpec": {"containers": [{"name": "w", "image": "q.io/w:1"}],
                                         "volumes": [{"name": "wv", "image": {"reference": "q.io/v:1"}}]}},
            "transformer": {"containers": [{"name": "t", "image": "q.io/t:1"}]},
            "explainer": {"art": {"image": "q.io/art:1"}}}});
        assert_eq!(
            pointers(&walk(&isvc)),
            vec![
                ("/spec/predictor/containers/0/image", Some("kserve-container")),
                ("/spec/predictor/workerSpec/containers/0/image", Some("w")),
                ("/spec/predictor/workerSpec/volumes/0/image/reference", Some("wv")),
                ("/spec/predictor/model/image", Some("model")),
                ("/spec/predictor/sklearn/image", Some("sklearn")),
                ("/spec/transformer/containers/0/image", Some("t")),
                ("/spec/explainer/art/image", Some("art")),
            ]
        );
    }

    #[test]
    fn template_objects_are_told_apart_and_read_their_parameters() {
        let runtime = |name: &str, image: &str| {
            json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime", "metadata": {"name": name},
                "spec": {"containers": [{"name": "kserve-container", "image": image}]}})
        };
        let t = json!({"apiVersion": "template.openshift.io/v1", "kind": "Template",
            "objects": [runtime("ovms", "${OVMS_IMAGE}"), runtime("ovms-gpu", "${GPU_IMAGE}"), runtime("tgis", "q.io/${TAG}")],
            "parameters": [
                {"name": "GPU_IMAGE", "description": "no default"},
                {"name": "OVMS_IMAGE", "value": "quay.io/modh/openvino_model_server:2024"},
                {"name": "TAG", "value": "1"}]});
        let w = walk(&t);
        let seen: Vec<(String, &str, Result<&str, &str>)> = w
            .sites
            .iter()
            .map(|s| {
                (
                    s.describe(),
                    s.pointer.as_str(),
                    s.image.as_deref().map_err(|e| e.as_str()),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "objects[0] ServingRuntime ovms: container \"kserve-container\" (parameter OVMS_IMAGE)"
                        .to_owned(),
                    "/parameters/1/value",
                    Ok("quay.io/modh/openvino_model_server:2024")
                ),
                // No default, or inside a longer string: the placeholder stays.
                (
                    "objects[1] ServingRuntime ovms-gpu: container \"kserve-container\"".to_owned(),
                    "/objects/1/spec/containers/0/image",
                    Ok("${GPU_IMAGE}")
                ),
                (
                    "objects[2] ServingRuntime tgis: container \"kserve-container\"".to_owned(),
                    "/objects/2/spec/containers/0/image",
                    Ok("q.io/${TAG}")
                ),
            ]
        );
    }

    #[test]
    fn templates_are_walked_recursively() {
        let t = json!({"apiVersion": "template.openshift.io/v1", "kind": "Template", "objects": [
            {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime", "spec": {"containers": [{"name": "ovms", "image": "ovms-1"}]}},
            {"apiVersion": "v1", "kind": "Service"},
            {"apiVersion": "template.openshift.io/v1", "kind": "Template", "objects": [
                {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "p", "image": "q.io/p:1"}]}}]}]});
        assert_eq!(
            pointers(&walk(&t)),
            vec![
                ("/objects/0/spec/containers/0/image", Some("ovms")),
                ("/objects/2/objects/0/spec/containers/0/image", Some("p")),
            ]
        );
    }

    #[test]
    fn configmaps_embedding_runtimes() {
        let text = "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nspec:\n  containers:\n    - name: ovms\n      image: q.io/o:1\n";
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "servingruntimes-config"},
                        "data": {"default-config": text, "other": "plain text", "a/b": format!("---\n{text}---\n{text}")}});
        let w = walk(&cm);
        assert_eq!(
            pointers(&w),
            vec![
                ("/data/a~1b#/spec/containers/0/image", Some("ovms")),
                ("/data/a~1b#1/spec/containers/0/image", Some("ovms")),
                ("/data/default-config#/spec/containers/0/image", Some("ovms")),
            ]
        );
        assert_eq!(w.embedded.len(), 2);
        assert_eq!(
            w.sites[2].embedded.as_ref().unwrap().pointer,
            "/spec/containers/0/image"
        );
        assert_eq!(w.embedded[1].pointer, "/data/default-config");
    }

    #[test]
    fn broken_runtime_config_is_a_site() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "servingruntimes-config"},
                        "data": {"default-config": "kind: ServingRuntime\nspec: [\n"}});
        let w = walk(&cm);
        assert_eq!(w.sites.len(), 1);
        assert!(
            w.sites[0]
                .image
                .as_ref()
                .unwrap_err()
                .contains("is not valid YAML")
        );
        // Any other ConfigMap with unparseable text is simply not a runtime.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                        "data": {"notes": "ServingRuntime: [\n"}});
        assert!(walk(&cm).sites.is_empty());
    }

    #[rstest::rstest]
    #[case::containers_not_a_list(json!({"containers": "nginx"}), "spec.containers must be a list of containers, found a string")]
    #[case::container_not_a_mapping(json!({"containers": [42]}), "spec.containers.0 must be a container mapping, found a number")]
    #[case::image_a_number(json!({"containers": [{"name": "a", "image": 3}]}), "spec.containers.0.image must be a string, found a number")]
    #[case::image_a_list(json!({"containers": [{"name": "a", "image": ["x"]}]}), "spec.containers.0.image must be a string, found a list")]
    #[case::volumes_not_a_list(json!({"volumes": {"a": 1}}), "spec.volumes must be a list of volumes, found a mapping")]
    #[case::volume_image_a_string(json!({"volumes": [{"name": "v", "image": "q.io/x"}]}), "spec.volumes.0.image must be a mapping, found a string")]
    #[case::worker_spec_a_list(json!({"workerSpec": []}), "spec.workerSpec must be a mapping, found a list")]
    fn malformed_structure_becomes_a_site_with_its_reason(#[case] spec: Value, #[case] want: &str) {
        let sr = json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime", "spec": spec});
        let w = walk(&sr);
        assert_eq!(w.sites.len(), 1, "{want}");
        assert_eq!(w.sites[0].image.as_ref().unwrap_err(), want);
    }

    #[test]
    fn a_spec_that_is_not_a_mapping_is_a_site_with_its_reason() {
        let sr = json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime", "spec": "x"});
        assert_eq!(
            walk(&sr).sites[0].image.as_ref().unwrap_err(),
            "spec must be a mapping, found a string"
        );
    }

    #[test]
    fn unknown_kinds_are_skipped() {
        let w =
            walk(&json!({"apiVersion": "v1", "kind": "Service", "spec": {"containers": [{"image": "x"}]}}));
        assert!(!w.known);
        assert!(w.sites.is_empty());
        // A ServingRuntime kind from another group is not KServe's.
        assert!(!walk(&json!({"apiVersion": "example.com/v1", "kind": "ServingRuntime"})).known);
    }
}
