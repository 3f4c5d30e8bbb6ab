//! The kinds digest-gate reads, one entry each: the walker dispatches on
//! this table, metrics label kinds from it, and the pruned decoder reads
//! from it which keys lead to pod specs and containers, and the inline
//! image fields. Adding a kind is one entry here (and its tests).

/// Where a kind keeps its images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// A pod spec at this JSON Pointer.
    PodSpec(&'static str),
    /// Pod specs at these JSON Pointers, each with the name messages give
    /// its part ("" for the main one).
    PodSpecs(&'static [(&'static str, &'static str)]),
    /// One container at this JSON Pointer.
    Container(&'static str),
    /// A KServe runtime spec at `/spec`: containers, image volumes, and the
    /// `workerSpec` of multi-node runtimes.
    Runtime,
    /// An InferenceService: runtime-like components under `/spec`, plus the
    /// inline images of [`PREDICTOR_INLINE`] and [`EXPLAINER_INLINE`].
    InferenceService,
    /// ServingRuntime documents embedded in `data` values.
    EmbeddedRuntimes,
    /// Objects of any kind in `/objects`, each read by its own kind.
    Template,
    /// No images: an operator upgrade's approval, reviewed from the
    /// pre-flight's judgement on it (`admission::approval`). Listed so that
    /// a per-kind mode may name it; `audit` does not read it.
    Approval,
}

/// One kind digest-gate reads.
#[derive(Debug, PartialEq, Eq)]
pub struct Kind {
    /// The kind's name, which is also its metrics label.
    pub name: &'static str,
    /// The API groups it is read in (`""` is the core group).
    pub groups: &'static [&'static str],
    pub layout: Layout,
}

const WORKLOAD_TEMPLATE: Layout = Layout::PodSpec("/spec/template/spec");

/// The pod specs of KServe's llm-d based serving (LLMInferenceService and
/// the LLMInferenceServiceConfig presets it merges): every pod spec the
/// v1alpha1 and v1alpha2 CRDs define, the decode pods and their multi-node
/// workers, the prefill pods and workers, and the router's scheduler and
/// its tokenizer. `tests/judge_fixtures.rs` walks the CRDs' schemas to
/// prove no `image` is left out.
pub const LLM_POD_SPECS: &[(&str, &str)] = &[
    ("/spec/template", ""),
    ("/spec/worker", "worker"),
    ("/spec/prefill/template", "prefill"),
    ("/spec/prefill/worker", "prefill worker"),
    ("/spec/router/scheduler/template", "scheduler"),
    ("/spec/router/scheduler/tokenizer/template", "tokenizer"),
];

/// Every kind digest-gate reads.
pub static KINDS: &[Kind] = &[
    Kind {
        name: "Pod",
        groups: &[""],
        layout: Layout::PodSpec("/spec"),
    },
    Kind {
        name: "ServingRuntime",
        groups: &["serving.kserve.io"],
        layout: Layout::Runtime,
    },
    Kind {
        name: "ClusterServingRuntime",
        groups: &["serving.kserve.io"],
        layout: Layout::Runtime,
    },
    Kind {
        name: "InferenceService",
        groups: &["serving.kserve.io"],
        layout: Layout::InferenceService,
    },
    Kind {
        name: "LLMInferenceService",
        groups: &["serving.kserve.io"],
        layout: Layout::PodSpecs(LLM_POD_SPECS),
    },
    Kind {
        name: "LLMInferenceServiceConfig",
        groups: &["serving.kserve.io"],
        layout: Layout::PodSpecs(LLM_POD_SPECS),
    },
    // The storage initializer KServe injects into predictor pods.
    Kind {
        name: "ClusterStorageContainer",
        groups: &["serving.kserve.io"],
        layout: Layout::Container("/spec/container"),
    },
    // extensions/v1beta1 still reaches webhooks from old manifests.
    Kind {
        name: "Deployment",
        groups: &["apps", "extensions"],
        layout: WORKLOAD_TEMPLATE,
    },
    Kind {
        name: "ReplicaSet",
        groups: &["apps", "extensions"],
        layout: WORKLOAD_TEMPLATE,
    },
    Kind {
        name: "StatefulSet",
        groups: &["apps"],
        layout: WORKLOAD_TEMPLATE,
    },
    Kind {
        name: "DaemonSet",
        groups: &["apps", "extensions"],
        layout: WORKLOAD_TEMPLATE,
    },
    Kind {
        name: "Job",
        groups: &["batch"],
        layout: WORKLOAD_TEMPLATE,
    },
    Kind {
        name: "CronJob",
        groups: &["batch"],
        layout: Layout::PodSpec("/spec/jobTemplate/spec/template/spec"),
    },
    Kind {
        name: "ReplicationController",
        groups: &[""],
        layout: WORKLOAD_TEMPLATE,
    },
    Kind {
        name: "PodTemplate",
        groups: &[""],
        layout: Layout::PodSpec("/template/spec"),
    },
    Kind {
        name: "ConfigMap",
        groups: &[""],
        layout: Layout::EmbeddedRuntimes,
    },
    // OpenShift's own `oc process` input may omit the group.
    Kind {
        name: "Template",
        groups: &["template.openshift.io", ""],
        layout: Layout::Template,
    },
    Kind {
        name: "InstallPlan",
        groups: &["operators.coreos.com"],
        layout: Layout::Approval,
    },
];

/// An InferenceService predictor's inline images: the `model` and the legacy
/// per-framework predictors, each an inline container.
pub const PREDICTOR_INLINE: &[&str] = &[
    "model",
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

/// An InferenceService explainer's inline images.
pub const EXPLAINER_INLINE: &[&str] = &["art"];

/// The entry for `group`/`kind`, if digest-gate reads it.
pub fn find(group: &str, kind: &str) -> Option<&'static Kind> {
    KINDS.iter().find(|k| k.name == kind && k.groups.contains(&group))
}

/// The kind a setting names (`--kind-mode`, `--kinds`, the chart's
/// `kindModes`): its kind name or its plural resource name, in any case
/// (`ServingRuntime`, `servingruntimes`, `PODS`).
pub fn named(name: &str) -> Result<&'static Kind, UnknownKind> {
    let name = name.trim();
    KINDS
        .iter()
        .find(|k| name.eq_ignore_ascii_case(k.name) || name.eq_ignore_ascii_case(&k.plural()))
        .ok_or_else(|| UnknownKind(name.to_owned()))
}

/// A setting named a kind digest-gate does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a kind digest-gate reads; it reads {known} (a kind or its plural resource name, any case)", known = known())]
pub struct UnknownKind(pub String);

/// The kinds digest-gate reads, comma-separated, for messages.
pub fn known() -> String {
    KINDS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
}

// === impl Kind ===

impl Kind {
    /// Its plural resource name, as kubectl and RBAC spell it: every kind
    /// digest-gate reads takes a plain `s` (`servingruntimes`,
    /// `llminferenceserviceconfigs`).
    pub fn plural(&self) -> String {
        format!("{}s", self.name.to_ascii_lowercase())
    }
}

/// Whether a document embedded in a ConfigMap is a runtime, by its kind
/// alone: the dashboard's templates do not always say the group.
pub fn is_runtime(kind: &str) -> bool {
    runtimes().any(|k| k.name == kind)
}

/// The runtime kinds (ServingRuntime, ClusterServingRuntime).
pub fn runtimes() -> impl Iterator<Item = &'static Kind> {
    KINDS.iter().filter(|k| k.layout == Layout::Runtime)
}

/// A closed-set metrics label for a kind: its name if digest-gate reads it,
/// else `other`.
pub fn kind_label(kind: &str) -> &'static str {
    KINDS.iter().find(|k| k.name == kind).map_or("other", |k| k.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_per_group() {
        let mut seen = std::collections::HashSet::new();
        for k in KINDS {
            for g in k.groups {
                assert!(seen.insert((*g, k.name)), "{g}/{} listed twice", k.name);
            }
        }
    }

    #[test]
    fn lookups() {
        assert_eq!(
            find("apps", "Deployment").map(|k| k.layout),
            Some(WORKLOAD_TEMPLATE)
        );
        assert!(find("", "Deployment").is_none());
        assert!(find("example.com", "ServingRuntime").is_none());
        assert!(is_runtime("ClusterServingRuntime") && !is_runtime("InferenceService"));
        assert_eq!(kind_label("ConfigMap"), "ConfigMap");
        assert_eq!(kind_label("Secret"), "other");
    }

    /// The chart's schema refuses a `kindModes` key before `helm install`
    /// gets to the binary: it must name exactly the kinds of this table.
    #[test]
    fn the_charts_schema_names_every_kind_and_no_other() {
        // Read, not embedded: the image's build copies no chart.
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/charts/digest-gate/values.schema.json"
        );
        let schema: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let pattern = schema["properties"]["kindModes"]["propertyNames"]["pattern"]
            .as_str()
            .unwrap();
        let alternatives = pattern
            .strip_prefix("^(?i:")
            .and_then(|p| p.strip_suffix(")$"))
            .unwrap();
        let mut named: Vec<&str> = alternatives.split('|').collect();
        let mut table: Vec<String> = KINDS
            .iter()
            .flat_map(|k| [k.name.to_ascii_lowercase(), k.plural()])
            .collect();
        named.sort_unstable();
        table.sort_unstable();
        assert_eq!(named, table);
    }

    #[test]
    fn settings_name_a_kind_or_its_resource_in_any_case() {
        for name in [
            "ServingRuntime",
            "servingruntime",
            "ServingRuntimes",
            "servingruntimes",
            " SERVINGRUNTIMES ",
        ] {
            assert_eq!(named(name).map(|k| k.name), Ok("ServingRuntime"), "{name}");
        }
        assert_eq!(named("pods").map(|k| k.name), Ok("Pod"));
        assert_eq!(named("Bogus"), Err(UnknownKind("Bogus".into())));
        // A resource of another kind, and kubectl's short names, are not kinds.
        assert!(named("secrets").is_err() && named("isvc").is_err() && named("").is_err());
        let message = UnknownKind("Bogus".into()).to_string();
        assert!(
            message.starts_with("'Bogus' is not a kind digest-gate reads; it reads Pod, ServingRuntime,"),
            "{message}"
        );
    }
}
