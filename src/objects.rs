//! Where images live: every image site of the kinds digest-gate knows, each
//! with its JSON Pointer and the container (or volume) it belongs to.
//!
//! Walkers are defensive: KServe's minimal CRD does not validate `spec`, so a
//! `containers` that is not a list or an image that is not a string becomes a
//! site with a reason, never a panic. Kinds without images are not errors.

use serde_json::Value;

use crate::yaml::{self, Document};

/// What an image site belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Container,
    InitContainer,
    EphemeralContainer,
    /// A container of a multi-node runtime's `workerSpec`.
    WorkerContainer,
    /// An image volume (`volumes[].image.reference`).
    Volume,
    /// An InferenceService predictor's model or framework image.
    Predictor,
    /// The explainer's image.
    Explainer,
    /// Structure around images that is malformed.
    Structure,
}

/// One place an image is (or should be) written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// JSON Pointer in the object. For a document embedded in a ConfigMap:
    /// `/data/<key>#<pointer in the document>`.
    pub pointer: String,
    pub role: Role,
    /// Container or volume name (or framework, for InferenceService).
    pub name: Option<String>,
    /// The image, or why there is no usable one here.
    pub image: Result<String, String>,
    /// For embedded documents: which one, and the pointer inside it.
    pub embedded: Option<EmbeddedSite>,
}

/// Where an embedded site lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedSite {
    /// Index into [`Walk::embedded`].
    pub source: usize,
    /// Document index within the embedded text.
    pub document: usize,
    /// Pointer inside that document.
    pub pointer: String,
    /// Line of the image inside the embedded text.
    pub line: usize,
}

/// A YAML text inside an object (a ConfigMap value) that holds runtimes.
#[derive(Debug, Clone)]
pub struct Embedded {
    /// Pointer of the string in the object, e.g. `/data/default-config`.
    pub pointer: String,
    pub text: String,
    pub documents: Vec<Document>,
}

/// The image sites of one object.
#[derive(Debug, Clone, Default)]
pub struct Walk {
    /// Whether the kind is one digest-gate knows how to read.
    pub known: bool,
    pub sites: Vec<Site>,
    pub embedded: Vec<Embedded>,
}

// === impl Site ===

impl Site {
    /// How messages refer to this site, e.g. `container "ovms"`.
    pub fn describe(&self) -> String {
        let what = match self.role {
            Role::Container => "container",
            Role::InitContainer => "init container",
            Role::EphemeralContainer => "ephemeral container",
            Role::WorkerContainer => "worker container",
            Role::Volume => "image volume",
            Role::Predictor => "predictor",
            Role::Explainer => "explainer",
            Role::Structure => return format!("at {}", self.pointer),
        };
        match &self.name {
            Some(name) => format!("{what} \"{name}\""),
            None => format!("{what} at {}", self.pointer),
        }
    }
}

/// Finds the image sites of `object` by its own `apiVersion` and `kind`.
pub fn walk(object: &Value) -> Walk {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    walk_as(group_of(api_version), kind, object)
}

/// The API group of an `apiVersion` (`apps/v1` → `apps`, `v1` → ``).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Finds the image sites of `object`, read as `group`/`kind` (the webhook
/// knows the kind from the request even when the object omits it).
pub fn walk_as(group: &str, kind: &str, object: &Value) -> Walk {
    let mut walk = Walk::default();
    walk.known = visit(group, kind, object, "", &mut walk, 0);
    walk
}

/// Templates can nest; nothing legitimate nests deeper than this.
const MAX_TEMPLATE_DEPTH: usize = 8;

/// The workload kinds whose pod template is at `/spec/template`.
fn has_pod_template(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
            | ("batch", "Job")
            | ("", "ReplicationController")
            | ("extensions", "Deployment" | "ReplicaSet" | "DaemonSet")
    )
}

fn visit(group: &str, kind: &str, object: &Value, ptr: &str, walk: &mut Walk, depth: usize) -> bool {
    let mut out = Collector {
        sites: &mut walk.sites,
    };
    match (group, kind) {
        ("", "Pod") => out.pod_spec(object.get("spec"), &format!("{ptr}/spec")),
        ("", "PodTemplate") => {
            out.pod_spec(object.pointer("/template/spec"), &format!("{ptr}/template/spec"))
        }
        (g, k) if has_pod_template(g, k) => out.pod_spec(
            object.pointer("/spec/template/spec"),
            &format!("{ptr}/spec/template/spec"),
        ),
        ("batch", "CronJob") => out.pod_spec(
            object.pointer("/spec/jobTemplate/spec/template/spec"),
            &format!("{ptr}/spec/jobTemplate/spec/template/spec"),
        ),
        ("serving.kserve.io", "ServingRuntime" | "ClusterServingRuntime") => {
            out.runtime_spec(object.get("spec"), &format!("{ptr}/spec"))
        }
        ("serving.kserve.io", "InferenceService") => {
            out.inference_service(object.get("spec"), &format!("{ptr}/spec"))
        }
        ("", "ConfigMap") => embedded_runtimes(object, ptr, walk),
        ("template.openshift.io" | "", "Template") => {
            let objects_ptr = format!("{ptr}/objects");
            match object.get("objects") {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        let item_ptr = format!("{objects_ptr}/{i}");
                        if depth >= MAX_TEMPLATE_DEPTH {
                            walk.sites
                                .push(structure(&item_ptr, "Templates are nested too deeply".into()));
                            break;
                        }
                        let kind = item.get("kind").and_then(Value::as_str).unwrap_or("");
                        let group = group_of(item.get("apiVersion").and_then(Value::as_str).unwrap_or(""));
                        visit(group, kind, item, &item_ptr, walk, depth + 1);
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
        _ => return false,
    }
    true
}

fn structure(pointer: &str, reason: String) -> Site {
    Site {
        pointer: pointer.to_owned(),
        role: Role::Structure,
        name: None,
        image: Err(reason),
        embedded: None,
    }
}

/// A structure site for a field of the wrong JSON type.
fn mistyped(pointer: &str, expected: &str, found: &Value) -> Site {
    structure(pointer, wrong_type(pointer, expected, found))
}

/// "spec.containers must be a list of containers, found a string".
fn wrong_type(pointer: &str, expected: &str, found: &Value) -> String {
    format!(
        "{} must be {expected}, found {}",
        field_path(pointer),
        yaml::type_name(found)
    )
}

/// `base/seg`, without the formatting machinery (walkers build many).
fn join(base: &str, seg: &str) -> String {
    let mut s = String::with_capacity(base.len() + seg.len() + 8);
    s.push_str(base);
    s.push('/');
    s.push_str(seg);
    s
}

/// `base/i` (or `base/i/seg`).
fn join_index(base: &str, i: usize, seg: Option<&str>) -> String {
    let mut s = String::with_capacity(base.len() + 24);
    s.push_str(base);
    s.push('/');
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
    s.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
    if let Some(seg) = seg {
        s.push('/');
        s.push_str(seg);
    }
    s
}

/// Human path for messages: `/spec/containers` → `spec.containers`.
fn field_path(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

struct Collector<'w> {
    sites: &'w mut Vec<Site>,
}

impl Collector<'_> {
    fn push(&mut self, pointer: String, role: Role, name: Option<&str>, image: Result<String, String>) {
        self.sites.push(Site {
            pointer,
            role,
            name: name.map(str::to_owned),
            image,
            embedded: None,
        });
    }

    /// `spec` must be a mapping when present.
    fn mapping<'v>(
        &mut self,
        value: Option<&'v Value>,
        ptr: &str,
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

    fn pod_spec(&mut self, spec: Option<&Value>, ptr: &str) {
        let Some(spec) = self.mapping(spec, ptr) else {
            return;
        };
        self.containers(spec, ptr, "containers", Role::Container);
        self.containers(spec, ptr, "initContainers", Role::InitContainer);
        self.containers(spec, ptr, "ephemeralContainers", Role::EphemeralContainer);
        self.volumes(spec, ptr);
    }

    fn runtime_spec(&mut self, spec: Option<&Value>, ptr: &str) {
        if let Some(spec) = self.mapping(spec, ptr) {
            self.runtime_parts(spec, ptr);
        }
    }

    /// A runtime spec's images, and an InferenceService component's (which
    /// inlines the same fields): containers, image volumes, and the
    /// `workerSpec` pod of multi-node runtimes.
    fn runtime_parts(&mut self, spec: &serde_json::Map<String, Value>, ptr: &str) {
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

    fn inference_service(&mut self, spec: Option<&Value>, ptr: &str) {
        /// Legacy per-framework predictors, each an inline container.
        const FRAMEWORKS: [&str; 10] = [
            "sklearn",
            "xgboost",
            "tensorflow",
            "pytorch",
            "triton",
            "onnx",
            "huggingface",
            "pmml",
            "lightgbm",
            "paddle",
        ];
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
            let inline: &[&str] = match component {
                "predictor" => &FRAMEWORKS,
                "explainer" => &["art"],
                _ => &[],
            };
            let model = (component == "predictor").then_some("model");
            for field in model.iter().chain(inline) {
                if c.get(*field).is_none_or(Value::is_null) {
                    continue;
                }
                let fptr = join(&cptr, field);
                let Some(m) = self.mapping(c.get(*field), &fptr) else {
                    continue;
                };
                let role = if component == "predictor" {
                    Role::Predictor
                } else {
                    Role::Explainer
                };
                self.image(m.get("image"), join(&fptr, "image"), role, Some(field));
            }
        }
    }

    /// The containers under `parent[field]`; pointers are built only for
    /// what is there.
    fn containers(&mut self, parent: &serde_json::Map<String, Value>, ptr: &str, field: &str, role: Role) {
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
    fn volumes(&mut self, parent: &serde_json::Map<String, Value>, ptr: &str) {
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
    fn image(&mut self, value: Option<&Value>, ptr: String, role: Role, name: Option<&str>) {
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

/// ConfigMap values that are ServingRuntime documents. `servingruntimes-config`
/// must parse; other ConfigMaps are only read when a value looks like one.
fn embedded_runtimes(object: &Value, ptr: &str, walk: &mut Walk) {
    let Some(Value::Object(data)) = object.get("data") else {
        return;
    };
    let name = object.pointer("/metadata/name").and_then(Value::as_str);
    let runtimes_config = name == Some(RUNTIMES_CONFIGMAP);
    for (key, value) in data {
        let Value::String(text) = value else { continue };
        if !text.contains("ServingRuntime") {
            continue;
        }
        let pointer = format!("{ptr}/data/{}", yaml::escape_token(key));
        let documents = match yaml::parse_stream(text) {
            Ok(d) => d,
            Err(e) if runtimes_config => {
                walk.sites.push(structure(
                    &pointer,
                    format!("data.{key} of {RUNTIMES_CONFIGMAP} is not valid YAML: {e}"),
                ));
                continue;
            }
            Err(_) => continue,
        };
        let source = walk.embedded.len();
        let mut sites = Vec::new();
        for doc in &documents {
            let kind = doc.value.get("kind").and_then(Value::as_str).unwrap_or("");
            if !matches!(kind, "ServingRuntime" | "ClusterServingRuntime") {
                continue;
            }
            let before = sites.len();
            Collector { sites: &mut sites }.runtime_spec(doc.value.get("spec"), "/spec");
            let doc_tag = if doc.index == 0 {
                String::new()
            } else {
                doc.index.to_string()
            };
            for site in &mut sites[before..] {
                let inner = std::mem::take(&mut site.pointer);
                site.pointer = format!("{pointer}#{doc_tag}{inner}");
                site.embedded = Some(EmbeddedSite {
                    source,
                    document: doc.index,
                    line: doc.line_of(&inner),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pointers(w: &Walk) -> Vec<(&str, Option<&str>)> {
        w.sites
            .iter()
            .map(|s| (s.pointer.as_str(), s.name.as_deref()))
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

    #[test]
    fn malformed_structure_becomes_sites_with_reasons() {
        let cases = [
            (
                json!({"containers": "nginx"}),
                "spec.containers must be a list of containers, found a string",
            ),
            (
                json!({"containers": [42]}),
                "spec.containers.0 must be a container mapping, found a number",
            ),
            (
                json!({"containers": [{"name": "a", "image": 3}]}),
                "spec.containers.0.image must be a string, found a number",
            ),
            (
                json!({"containers": [{"name": "a", "image": ["x"]}]}),
                "spec.containers.0.image must be a string, found a list",
            ),
            (
                json!({"volumes": {"a": 1}}),
                "spec.volumes must be a list of volumes, found a mapping",
            ),
            (
                json!({"volumes": [{"name": "v", "image": "q.io/x"}]}),
                "spec.volumes.0.image must be a mapping, found a string",
            ),
            (
                json!({"workerSpec": []}),
                "spec.workerSpec must be a mapping, found a list",
            ),
        ];
        for (spec, want) in cases {
            let sr =
                json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime", "spec": spec});
            let w = walk(&sr);
            assert_eq!(w.sites.len(), 1, "{want}");
            assert_eq!(w.sites[0].image.as_ref().unwrap_err(), want);
        }
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

// === decoding only what the walkers read ===

/// What of an object the walkers read: image sites, the metadata reviews and
/// patches need, and ConfigMap data. Everything else (env, args, probes,
/// managedFields, status) is skipped while decoding, without allocating.
///
/// Keep this in step with [`walk`]: the tests check that a pruned object walks
/// to exactly the sites of the full one.
#[derive(Debug)]
pub enum Shape {
    /// Keep the value whole.
    Keep,
    /// An object: keep these keys, each shaped; drop the rest.
    Object(&'static [(&'static str, &'static Shape)]),
    /// An array whose elements are shaped.
    List(&'static Shape),
}

static KEEP: Shape = Shape::Keep;
static CONTAINER: Shape = Shape::Object(&[("name", &KEEP), ("image", &KEEP)]);
static CONTAINERS: Shape = Shape::List(&CONTAINER);
static VOLUME: Shape = Shape::Object(&[("name", &KEEP), ("image", &KEEP)]);
static VOLUMES: Shape = Shape::List(&VOLUME);
/// The union of a pod spec, a runtime spec, an InferenceService component,
/// and the workload kinds' templates.
static SPEC: Shape = Shape::Object(&[
    ("containers", &CONTAINERS),
    ("initContainers", &CONTAINERS),
    ("ephemeralContainers", &CONTAINERS),
    ("volumes", &VOLUMES),
    ("workerSpec", &SPEC),
    ("template", &TEMPLATE),
    ("jobTemplate", &JOB_TEMPLATE),
    ("predictor", &SPEC),
    ("transformer", &SPEC),
    ("explainer", &SPEC),
    ("model", &CONTAINER),
    ("art", &CONTAINER),
    ("sklearn", &CONTAINER),
    ("xgboost", &CONTAINER),
    ("tensorflow", &CONTAINER),
    ("pytorch", &CONTAINER),
    ("triton", &CONTAINER),
    ("onnx", &CONTAINER),
    ("huggingface", &CONTAINER),
    ("pmml", &CONTAINER),
    ("lightgbm", &CONTAINER),
    ("paddle", &CONTAINER),
]);
static TEMPLATE: Shape = Shape::Object(&[("spec", &SPEC)]);
static JOB_TEMPLATE: Shape = Shape::Object(&[("spec", &SPEC)]);
static METADATA: Shape = Shape::Object(&[
    ("name", &KEEP),
    ("generateName", &KEEP),
    ("namespace", &KEEP),
    ("annotations", &KEEP),
    ("deletionTimestamp", &KEEP),
]);
/// A Kubernetes object as the walkers read it.
pub static OBJECT: Shape = Shape::Object(&[
    ("apiVersion", &KEEP),
    ("kind", &KEEP),
    ("metadata", &METADATA),
    ("spec", &SPEC),
    ("template", &TEMPLATE),
    ("data", &KEEP),
    ("objects", &OBJECTS),
]);
static OBJECTS: Shape = Shape::List(&OBJECT);

/// Decodes a value keeping only what `shape` names. A value whose JSON type
/// does not match its shape is kept whole, so the walkers still see (and
/// explain) malformed structure.
#[derive(Debug, Clone, Copy)]
pub struct Pruned(pub &'static Shape);

impl<'de> serde::de::DeserializeSeed<'de> for Pruned {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self.0 {
            Shape::Keep => <Value as serde::Deserialize>::deserialize(deserializer),
            shape => deserializer.deserialize_any(PrunedVisitor(shape)),
        }
    }
}

struct PrunedVisitor(&'static Shape);

impl<'de> serde::de::Visitor<'de> for PrunedVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        match self.0 {
            Shape::List(element) => {
                while let Some(v) = seq.next_element_seed(Pruned(element))? {
                    items.push(v);
                }
            }
            _ => {
                while let Some(v) = seq.next_element::<Value>()? {
                    items.push(v);
                }
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        match self.0 {
            Shape::Object(fields) => {
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match fields.iter().find(|(name, _)| *name == key) {
                        Some((_, shape)) => {
                            let v = map.next_value_seed(Pruned(shape))?;
                            out.insert(key.into_owned(), v);
                        }
                        None => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
            }
            _ => {
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    out.insert(k, v);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod prune_tests {
    use super::*;
    use proptest::prelude::*;
    use serde::de::DeserializeSeed;

    fn pruned(v: &Value) -> Value {
        let text = serde_json::to_string(v).unwrap();
        Pruned(&OBJECT)
            .deserialize(&mut serde_json::Deserializer::from_str(&text))
            .unwrap()
    }

    fn same_walk(v: &Value) {
        let (a, b) = (walk(v), walk(&pruned(v)));
        assert_eq!(a.known, b.known);
        assert_eq!(a.sites, b.sites, "{v}");
        assert_eq!(a.embedded.len(), b.embedded.len());
    }

    #[test]
    fn pruning_keeps_images_and_drops_the_rest() {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "managedFields": [{"x": 1}], "annotations": {"k": "v"}},
            "spec": {"containers": [{"name": "c", "image": "q.io/x:1", "env": [{"name": "A", "value": "1"}], "args": ["x"]}],
                     "nodeName": "n", "volumes": [{"name": "v", "configMap": {"name": "cm"}}]},
            "status": {"phase": "Pending"}});
        let p = pruned(&pod);
        assert_eq!(
            p,
            serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "annotations": {"k": "v"}},
            "spec": {"containers": [{"name": "c", "image": "q.io/x:1"}], "volumes": [{"name": "v"}]}})
        );
        same_walk(&pod);
    }

    #[test]
    fn malformed_values_are_kept_whole() {
        let sr = serde_json::json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
            "spec": {"containers": {"name": "x", "image": 3}, "workerSpec": ["a"], "volumes": "v"}});
        assert_eq!(pruned(&sr)["spec"], sr["spec"]);
        same_walk(&sr);
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            Just("containers"),
            Just("initContainers"),
            Just("image"),
            Just("name"),
            Just("spec"),
            Just("template"),
            Just("volumes"),
            Just("reference"),
            Just("workerSpec"),
            Just("objects"),
            Just("kind"),
            Just("apiVersion"),
            Just("predictor"),
            Just("model"),
            Just("data"),
            Just("other"),
        ]
        .prop_map(str::to_owned);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            prop_oneof![
                Just("Pod"),
                Just("v1"),
                Just("Template"),
                Just("q.io/a:1"),
                Just("serving.kserve.io/v1alpha1"),
                Just("ServingRuntime"),
                Just("apps/v1"),
                Just("Deployment")
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(6, 96, 5, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key.clone(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn pruned_objects_walk_like_full_ones(v in json_value(), kind in prop_oneof![Just(("v1", "Pod")), Just(("serving.kserve.io/v1alpha1", "ServingRuntime")), Just(("template.openshift.io/v1", "Template")), Just(("apps/v1", "Deployment")), Just(("batch/v1", "CronJob")), Just(("serving.kserve.io/v1beta1", "InferenceService"))]) {
            let mut object = serde_json::json!({"apiVersion": kind.0, "kind": kind.1});
            object["spec"] = v.clone();
            object["objects"] = serde_json::json!([{"apiVersion": kind.0, "kind": kind.1, "spec": v}]);
            same_walk(&object);
        }
    }
}
