//! Decoding only what the walkers read.

use std::cell::Cell;
use std::sync::LazyLock;

use serde_json::Value;

use super::kinds::{self, KINDS, Layout};

// === decoding only what the walkers read ===

/// What of an object the walkers read: image sites, the metadata reviews and
/// patches need, and ConfigMap data. Everything else (env, args, probes,
/// managedFields, status) is skipped while decoding, without allocating.
///
/// The keys on the way to a pod spec or a container are read from the
/// layouts in [`super::kinds`], so adding a kind there is all it takes; the
/// structure the walkers know by heart (a runtime's `workerSpec`, an
/// InferenceService's components) is named here. The tests check that a
/// pruned object walks to exactly the sites of the full one.
#[derive(Debug)]
pub enum Shape {
    /// Keep the value whole.
    Keep,
    /// An object: keep these keys, each shaped; drop the rest.
    Object(&'static [(&'static str, &'static Shape)]),
    /// An object whose keys are partly read from the kinds table, gathered
    /// on first use.
    Keyed(&'static LazyLock<Keys>),
    /// An array whose elements are shaped.
    List(&'static Shape),
}

impl Shape {
    /// How the value under `key` is kept, if it is: `None` drops it.
    fn field(&self, key: &str) -> Option<&'static Shape> {
        match self {
            Self::Object(fields) => fields.iter().find(|(name, _)| *name == key).map(|(_, s)| *s),
            Self::Keyed(keys) => keys.get(key),
            Self::Keep | Self::List(_) => None,
        }
    }
}

/// The keys an object keeps, bucketed by length. A spec is where most keys
/// are read and dropped (env, args, probes, resources…), once per key per
/// review: a dropped key costs a length lookup and the few comparisons of
/// its bucket, not one per kept key.
#[derive(Debug)]
pub struct Keys {
    by_len: Vec<Vec<(&'static str, &'static Shape)>>,
}

impl Keys {
    /// The first shape given for a key wins.
    fn new(entries: impl IntoIterator<Item = (&'static str, &'static Shape)>) -> Self {
        let mut by_len: Vec<Vec<(&'static str, &'static Shape)>> = Vec::new();
        for (name, shape) in entries {
            if by_len.len() <= name.len() {
                by_len.resize_with(name.len() + 1, Vec::new);
            }
            let bucket = &mut by_len[name.len()];
            if !bucket.iter().any(|(n, _)| *n == name) {
                bucket.push((name, shape));
            }
        }
        Self { by_len }
    }

    fn get(&self, key: &str) -> Option<&'static Shape> {
        let bucket = self.by_len.get(key.len())?;
        bucket.iter().find(|(name, _)| *name == key).map(|(_, s)| *s)
    }
}

/// The JSON Pointers the kinds table names: each pod spec (`false`) and
/// each container (`true`).
fn table_pointers() -> Vec<(&'static str, bool)> {
    let mut out = Vec::new();
    for kind in KINDS {
        match kind.layout {
            Layout::PodSpec(p) => out.push((p, false)),
            Layout::PodSpecs(specs) => out.extend(specs.iter().map(|(p, _)| (*p, false))),
            Layout::Container(p) => out.push((p, true)),
            _ => {}
        }
    }
    out
}

/// Every key on the way from an object's `spec` (or `template`) to a pod
/// spec or a container the table names: what [`SPEC`] keeps as itself.
fn holders() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = Vec::new();
    for (pointer, container) in table_pointers() {
        let tokens: Vec<&'static str> = pointer.trim_start_matches('/').split('/').collect();
        // A container's last token is the container itself.
        let holders = if container {
            &tokens[..tokens.len() - 1]
        } else {
            &tokens[..]
        };
        for t in holders {
            if !keys.contains(t) {
                keys.push(t);
            }
        }
    }
    keys
}

/// The keys the table names a single container by (`container`).
fn container_keys() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = Vec::new();
    for (pointer, container) in table_pointers() {
        if let (true, Some((_, last))) = (container, pointer.rsplit_once('/'))
            && !keys.contains(&last)
        {
            keys.push(last);
        }
    }
    keys
}

static KEEP: Shape = Shape::Keep;
static CONTAINER: Shape = Shape::Object(&[("name", &KEEP), ("image", &KEEP)]);
static CONTAINERS: Shape = Shape::List(&CONTAINER);
static VOLUME: Shape = Shape::Object(&[("name", &KEEP), ("image", &KEEP)]);
static VOLUMES: Shape = Shape::List(&VOLUME);
/// The union of a pod spec, a runtime spec, an InferenceService component,
/// the workload kinds' templates, and the parts of an LLMInferenceService
/// (whose `template` is a pod spec, where a workload's holds one in `spec`)
/// and a ClusterStorageContainer.
static SPEC: Shape = Shape::Keyed(&SPEC_KEYS);
static SPEC_KEYS: LazyLock<Keys> = LazyLock::new(|| {
    let written: [(&'static str, &'static Shape); 8] = [
        ("containers", &CONTAINERS),
        ("initContainers", &CONTAINERS),
        ("ephemeralContainers", &CONTAINERS),
        ("volumes", &VOLUMES),
        // A runtime's multi-node workers, and an InferenceService's
        // components: the walkers' own structure, not the table's.
        ("workerSpec", &SPEC),
        ("predictor", &SPEC),
        ("transformer", &SPEC),
        ("explainer", &SPEC),
    ];
    let inline = kinds::PREDICTOR_INLINE.iter().chain(kinds::EXPLAINER_INLINE);
    Keys::new(
        written
            .into_iter()
            .chain(holders().into_iter().map(|k| (k, &SPEC)))
            .chain(container_keys().into_iter().map(|k| (k, &CONTAINER)))
            .chain(inline.map(|k| (*k, &CONTAINER))),
    )
});
/// The metadata reviews and patches need, and `$extra` fields.
macro_rules! metadata_shape {
    ($($extra:literal),*) => {
        Shape::Object(
            &[
                ("name", &KEEP),
                ("generateName", &KEEP),
                ("namespace", &KEEP),
                ("annotations", &KEEP),
                ("deletionTimestamp", &KEEP),
                $(($extra, &KEEP)),*
            ],
        )
    };
}
static METADATA: Shape = metadata_shape!();
/// An object's top level around its `metadata` shape, and `$extra` fields.
macro_rules! object_shape {
    ($metadata:expr $(, ($extra:literal, $shape:expr))*) => {
        Shape::Object(&[
            ("apiVersion", &KEEP),
            ("kind", &KEEP),
            ("metadata", $metadata),
            ("spec", &SPEC),
            ("template", &SPEC),
            ("data", &KEEP),
            ("objects", &OBJECTS),
            ("parameters", &PARAMETERS),
            $(($extra, $shape)),*
        ])
    };
}
/// A Kubernetes object as the walkers read it.
pub static OBJECT: Shape = object_shape!(&METADATA);
static OBJECTS: Shape = Shape::List(&OBJECT);
/// A Template's parameters: an image written `${NAME}` is read from the
/// default of parameter NAME.
static PARAMETER: Shape = Shape::Object(&[("name", &KEEP), ("value", &KEEP)]);
static PARAMETERS: Shape = Shape::List(&PARAMETER);
static LISTED_METADATA: Shape = metadata_shape!("uid", "ownerReferences");
/// A container's status: what its node resolved the image to (`imageID`).
static CONTAINER_STATUS: Shape = Shape::Object(&[("name", &KEEP), ("imageID", &KEEP)]);
static CONTAINER_STATUSES: Shape = Shape::List(&CONTAINER_STATUS);
static STATUS: Shape = Shape::Object(&[
    ("containerStatuses", &CONTAINER_STATUSES),
    ("initContainerStatuses", &CONTAINER_STATUSES),
    ("ephemeralContainerStatuses", &CONTAINER_STATUSES),
]);
/// A Kubernetes object as `audit` reads it from a list: [`OBJECT`], the
/// object's uid and owner references, which name what to fix, and a Pod's
/// container statuses, which say what its node runs.
pub static LISTED: Shape = object_shape!(&LISTED_METADATA, ("status", &STATUS));

// === how many values a decoding may keep ===

thread_local! {
    /// Values the pruned decoder may still keep on this thread, and the
    /// figure it started from (see [`bounded`]).
    static LEFT: Cell<usize> = const { Cell::new(usize::MAX) };
    static LIMIT: Cell<usize> = const { Cell::new(usize::MAX) };
    /// Whether a decoding ran out of them.
    static RAN_OUT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `decode` with the pruned decoder keeping at most `values` values
/// (each string, number, list and mapping it keeps is one); past them it
/// fails with an error that says so, and the `bool` is true. Decoding is
/// synchronous, so the figure is this thread's for the duration of `decode`.
///
/// What is dropped costs nothing; what is kept costs 100-300 bytes a value
/// (a small mapping's tree node is ~600), so without a bound an 8 MiB review
/// of 600,000 one-byte annotations kept 83 MB, and 200,000 empty volumes
/// 145 MB.
pub fn bounded<T>(values: usize, decode: impl FnOnce() -> T) -> (T, bool) {
    /// Puts the figures back however `decode` ends, a panic included, so
    /// no later decoding on this thread inherits them.
    struct Restore(usize, usize, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            LEFT.set(self.0);
            LIMIT.set(self.1);
            RAN_OUT.set(self.2);
        }
    }
    let _restore = Restore(
        LEFT.replace(values),
        LIMIT.replace(values),
        RAN_OUT.replace(false),
    );
    let out = decode();
    (out, RAN_OUT.get())
}

/// One more value kept, or the refusal.
fn keep<E: serde::de::Error>() -> Result<(), E> {
    match LEFT.get() {
        0 => Err({
            RAN_OUT.set(true);
            E::custom(format_args!(
                "the object holds more than {} values that digest-gate reads (containers, volumes, labels, annotations, data); refusing to read it",
                LIMIT.get()
            ))
        }),
        n => {
            LEFT.set(n - 1);
            Ok(())
        }
    }
}

/// Decodes a value keeping only what `shape` names. A value whose JSON type
/// does not match its shape is kept whole, so the walkers still see (and
/// explain) malformed structure. Every value kept counts against
/// [`bounded`]'s figure.
#[derive(Debug, Clone, Copy)]
pub struct Pruned(pub &'static Shape);

impl<'de> serde::de::DeserializeSeed<'de> for Pruned {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(PrunedVisitor(self.0))
    }
}

struct PrunedVisitor(&'static Shape);

impl<'de> serde::de::Visitor<'de> for PrunedVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        keep()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        keep()?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        keep()?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        keep()?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        keep()?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        keep()?;
        Ok(Value::String(v))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        keep()?;
        Ok(Value::Null)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        keep()?;
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        keep()?;
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        let element = match self.0 {
            Shape::List(element) => element,
            _ => &KEEP,
        };
        while let Some(v) = seq.next_element_seed(Pruned(element))? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        keep()?;
        let mut out = serde_json::Map::new();
        match self.0 {
            Shape::Object(_) | Shape::Keyed(_) => {
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match self.0.field(&key) {
                        Some(shape) => {
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
                while let Some(k) = map.next_key::<String>()? {
                    let v = map.next_value_seed(Pruned(&KEEP))?;
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
    use crate::objects::walk;
    use proptest::prelude::*;
    use serde::de::DeserializeSeed;

    fn pruned(v: &Value) -> Value {
        let text = serde_json::to_string(v).unwrap();
        Pruned(&OBJECT)
            .deserialize(&mut serde_json::Deserializer::from_str(&text))
            .unwrap()
    }

    /// Issue 57: what a decoding keeps is bounded, and the bound ends
    /// with it.
    #[test]
    fn a_decoding_keeps_at_most_the_values_it_is_given() {
        let text = r#"{"metadata": {"annotations": {"a": "1", "b": "2"}}, "spec": {"env": [1, 2, 3]}}"#;
        let decode = || Pruned(&OBJECT).deserialize(&mut serde_json::Deserializer::from_str(text));
        // The object, metadata, annotations and two values: spec's env is
        // skipped unread, spec itself kept.
        assert!(matches!(bounded(6, decode), (Ok(_), false)));
        let (decoded, ran_out) = bounded(5, decode);
        let err = decoded.unwrap_err().to_string();
        assert!(err.starts_with("the object holds more than 5 values"), "{err}");
        assert!(ran_out);
        assert!(decode().is_ok(), "the bound ends with the decoding");
    }

    fn same_walk(v: &Value) {
        let (a, b) = (walk(v), walk(&pruned(v)));
        assert_eq!(a.known, b.known);
        assert_eq!(a.sites, b.sites, "{v}");
        assert_eq!(a.embedded.len(), b.embedded.len());
    }

    /// An object of `kind` with an image at every place its layout names
    /// by pointer (a container in each pod spec, the container itself).
    fn with_images(kind: &kinds::Kind) -> Option<Value> {
        let group = kind.groups[0];
        let api = if group.is_empty() {
            "v1".to_owned()
        } else {
            format!("{group}/v1")
        };
        let mut object = serde_json::json!({"apiVersion": api, "kind": kind.name, "metadata": {"name": "x"}});
        let container = || serde_json::json!({"name": "c", "image": "quay.io/x/y:1", "env": [{"name": "A"}]});
        let mut put = |pointer: &str, value: Value| {
            let mut at = &mut object;
            for token in pointer.trim_start_matches('/').split('/') {
                at = at
                    .as_object_mut()
                    .unwrap()
                    .entry(token)
                    .or_insert_with(|| serde_json::json!({}));
            }
            *at = value;
        };
        match kind.layout {
            kinds::Layout::PodSpec(pointer) => put(pointer, serde_json::json!({"containers": [container()]})),
            kinds::Layout::PodSpecs(specs) => {
                for (pointer, _) in specs {
                    put(pointer, serde_json::json!({"containers": [container()]}));
                }
            }
            kinds::Layout::Container(pointer) => put(pointer, container()),
            _ => return None,
        }
        Some(object)
    }

    /// The pruned decoder keeps every place a kind's layout names, read
    /// from the table: a kind added there is decoded without a change here.
    #[test]
    fn every_place_the_kinds_table_names_survives_pruning() {
        let mut checked = 0;
        for kind in kinds::KINDS {
            let Some(object) = with_images(kind) else { continue };
            let full = walk(&object);
            assert!(!full.sites.is_empty(), "{}: {object}", kind.name);
            assert_eq!(full.sites, walk(&pruned(&object)).sites, "{}", kind.name);
            checked += 1;
        }
        assert!(checked >= 12, "{checked}");
    }

    #[test]
    fn the_keys_read_from_the_table_are_the_ones_written_before() {
        let mut holders = holders();
        holders.sort_unstable();
        assert_eq!(
            holders,
            [
                "jobTemplate",
                "prefill",
                "router",
                "scheduler",
                "spec",
                "template",
                "tokenizer",
                "worker"
            ]
        );
        assert_eq!(container_keys(), ["container"]);
    }

    #[test]
    fn a_key_is_found_in_its_length_bucket_and_the_first_shape_given_wins() {
        let keys = Keys::new([
            ("image", &KEEP),
            ("spec", &SPEC),
            ("image", &CONTAINER),
            ("name", &KEEP),
        ]);
        assert!(matches!(keys.get("image"), Some(Shape::Keep)));
        assert!(matches!(keys.get("spec"), Some(Shape::Keyed(_))));
        assert!(matches!(keys.get("name"), Some(Shape::Keep)));
        // Same length as a kept key, longer than any, and empty.
        for missing in ["imagf", "spex", "terminationMessagePolicy", ""] {
            assert!(keys.get(missing).is_none(), "{missing}");
        }
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
    fn every_inline_image_of_an_inference_service_survives_pruning() {
        let mut predictor = serde_json::Map::new();
        for field in kinds::PREDICTOR_INLINE {
            predictor.insert(
                (*field).into(),
                serde_json::json!({"image": format!("q.io/{field}:1"), "x": 1}),
            );
        }
        let mut explainer = serde_json::Map::new();
        for field in kinds::EXPLAINER_INLINE {
            explainer.insert(
                (*field).into(),
                serde_json::json!({"image": format!("q.io/{field}:1")}),
            );
        }
        let isvc = serde_json::json!({"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "spec": {"predictor": predictor, "explainer": explainer}});
        let w = walk(&pruned(&isvc));
        assert_eq!(
            w.sites.len(),
            kinds::PREDICTOR_INLINE.len() + kinds::EXPLAINER_INLINE.len()
        );
        same_walk(&isvc);
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
            Just("worker"),
            Just("prefill"),
            Just("router"),
            Just("scheduler"),
            Just("tokenizer"),
            Just("container"),
            Just("objects"),
            Just("parameters"),
            Just("value"),
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
                Just("${X}"),
                Just("X"),
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
        fn pruned_objects_walk_like_full_ones(v in json_value(), kind in prop_oneof![Just(("v1", "Pod")), Just(("serving.kserve.io/v1alpha1", "ServingRuntime")), Just(("template.openshift.io/v1", "Template")), Just(("apps/v1", "Deployment")), Just(("batch/v1", "CronJob")), Just(("serving.kserve.io/v1beta1", "InferenceService")), Just(("serving.kserve.io/v1alpha2", "LLMInferenceService")), Just(("serving.kserve.io/v1alpha1", "ClusterStorageContainer"))]) {
            let mut object = serde_json::json!({"apiVersion": kind.0, "kind": kind.1});
            object["spec"] = v.clone();
            object["objects"] = serde_json::json!([{"apiVersion": kind.0, "kind": kind.1, "spec": v}]);
            same_walk(&object);
        }
    }
}
