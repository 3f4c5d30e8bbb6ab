//! An OLM InstallPlan as `preflight` reads it: whether it waits for an
//! approval, and the CSVs approving it would install, each a target of its
//! own (OLM resolves a namespace at once, so one plan may carry several
//! operators, and approving it approves them all).
//!
//! A step's CSV is stored in one of two shapes: inline (`resource.manifest`
//! is the CSV as JSON), or, for a bundle OLM pulled by image, a reference to
//! the ConfigMap it unpacked the bundle into, in the catalog's namespace.
//! Both are read here; the ConfigMap itself is [`bundle`](super::bundle)'s.

use serde_json::Value;

/// The API group, version and plural of InstallPlans and Subscriptions.
pub const GROUP: &str = crate::admission::approval::OLM_GROUP;
pub const VERSION: &str = "v1alpha1";

/// Where a plan stands with respect to its approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Manual, not approved, `RequiresApproval`, every bundle unpacked:
    /// what `preflight` judges.
    Pending,
    /// OLM is still resolving or unpacking it: its steps are not all there
    /// yet. Why, in words.
    NotReady(String),
    /// Nothing waits for an approval: approved already, or automatic, or
    /// done. Why, in words.
    Settled(String),
}

/// One InstallPlan, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub namespace: String,
    pub name: String,
    /// `metadata.uid`, which an Event on the plan names.
    pub uid: Option<String>,
    /// `metadata.creationTimestamp`, as the API serves it (RFC 3339).
    pub created: Option<String>,
    pub state: State,
    /// The Subscriptions it belongs to (its owners).
    pub owners: Vec<String>,
    /// Every CSV step: what approving the plan installs.
    pub targets: Vec<Target>,
    /// The judgement it carries (the annotation's text), if any.
    pub judged: Option<String>,
}

/// One CSV a plan would install.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The CSV's name (the step's `resolving`).
    pub csv: String,
    pub manifest: Manifest,
    /// The CSV the step (or its bundle lookup) says it replaces.
    pub replaces: Option<String>,
    /// The operator package, from the bundle's `olm.package` property.
    pub package: Option<String>,
    /// The bundle image OLM unpacked it from.
    pub bundle: Option<String>,
    /// A catalog target's releases it upgrades from, nearest first (a
    /// plan's step names its own: empty).
    pub graph: Vec<String>,
}

/// Where a step's CSV is.
#[derive(Debug, Clone, PartialEq)]
pub enum Manifest {
    /// In the step itself, as OLM serialised it.
    Inline(Box<Value>),
    /// In the bundle OLM unpacked into this ConfigMap.
    Unpacked { namespace: String, name: String },
}

/// A plan that cannot be read as OLM writes plans.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("InstallPlan {plan}: {what}")]
    Shape { plan: String, what: String },
}

impl Plan {
    /// Reads an InstallPlan as the API serves it.
    pub fn read(object: &Value) -> Result<Plan, PlanError> {
        let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let namespace = text("/metadata/namespace").to_owned();
        let name = text("/metadata/name").to_owned();
        let at = format!("{namespace}/{name}");
        let shape = |what: String| PlanError::Shape {
            plan: at.clone(),
            what,
        };
        let lookups: Vec<&Value> = array(object, "/status/bundleLookups").collect();
        let mut targets = Vec::new();
        for step in array(object, "/status/plan") {
            if step.pointer("/resource/kind").and_then(Value::as_str) != Some("ClusterServiceVersion") {
                continue;
            }
            targets.push(Target::read(step, &lookups).map_err(shape)?);
        }
        let state = state(object, &lookups, &targets);
        Ok(Plan {
            uid: object
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_owned),
            namespace,
            name,
            created: object
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .map(str::to_owned),
            state,
            owners: array(object, "/metadata/ownerReferences")
                .filter(|o| o.get("kind").and_then(Value::as_str) == Some("Subscription"))
                .filter_map(|o| o.get("name").and_then(Value::as_str))
                .map(str::to_owned)
                .collect(),
            targets,
            judged: object
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(crate::admission::approval::JUDGED_ANNOTATION))
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    /// `namespace/name`, as messages name it.
    pub fn at(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl Target {
    fn read(step: &Value, lookups: &[&Value]) -> Result<Target, String> {
        let csv = step
            .get("resolving")
            .and_then(Value::as_str)
            .or_else(|| step.pointer("/resource/name").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned();
        let manifest = step
            .pointer("/resource/manifest")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let lookup = lookups
            .iter()
            .find(|l| l.get("identifier").and_then(Value::as_str) == Some(csv.as_str()));
        let from_lookup = |key: &str| lookup.and_then(|l| l.get(key)).and_then(Value::as_str);
        let parsed: Value = serde_json::from_str(manifest)
            .map_err(|e| format!("the step of CSV {csv} holds no manifest OLM could have written: {e}"))?;
        let (manifest, replaces, properties) = match reference(&parsed) {
            Some(r) => r,
            None if parsed.get("kind").and_then(Value::as_str) == Some("ClusterServiceVersion") => {
                (Manifest::Inline(Box::new(parsed)), None, None)
            }
            None => {
                return Err(format!(
                    "the step of CSV {csv} is neither the CSV nor a reference to an unpacked bundle"
                ));
            }
        };
        let replaces = replaces.or(from_lookup("replaces")).filter(|r| !r.is_empty());
        let properties = properties.or(from_lookup("properties"));
        Ok(Target {
            package: properties.and_then(package),
            replaces: replaces.map(str::to_owned),
            graph: Vec::new(),
            bundle: from_lookup("path").filter(|p| !p.is_empty()).map(str::to_owned),
            manifest,
            csv,
        })
    }
}

/// A step's manifest as a reference to the ConfigMap OLM unpacked a bundle
/// into, with what it says the bundle replaces and its properties: OLM's
/// own test of the shape (a ConfigMap, and every name given).
fn reference(parsed: &Value) -> Option<(Manifest, Option<&str>, Option<&str>)> {
    let text = |key: &str| parsed.get(key).and_then(Value::as_str).filter(|s| !s.is_empty());
    if text("kind") != Some("ConfigMap") {
        return None;
    }
    let (name, namespace) = (text("name")?, text("namespace")?);
    text("catalogSourceName")?;
    text("catalogSourceNamespace")?;
    let manifest = Manifest::Unpacked {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    Some((manifest, text("replaces"), text("properties")))
}

/// The package named by the `olm.package` property of a bundle's
/// properties, which OLM keeps as a JSON string.
fn package(properties: &str) -> Option<String> {
    let parsed: Value = serde_json::from_str(properties).ok()?;
    array(&parsed, "/properties")
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("olm.package"))
        .find_map(|p| p.pointer("/value/packageName").and_then(Value::as_str))
        .map(str::to_owned)
}

/// Where a plan stands: only a manual plan not yet approved, whose bundles
/// are all unpacked into steps, waits for an approval `preflight` can judge.
fn state(object: &Value, lookups: &[&Value], targets: &[Target]) -> State {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let phase = text("/status/phase");
    if text("/spec/approval") != "Manual" {
        return State::Settled(format!(
            "its approval is {}: OLM installs it without waiting for one",
            or_unset(text("/spec/approval"))
        ));
    }
    if object.pointer("/spec/approved").and_then(Value::as_bool) == Some(true) {
        return State::Settled(format!("approved already (phase {})", or_unset(phase)));
    }
    match phase {
        "RequiresApproval" => {}
        "" | "Planning" => {
            return State::NotReady(format!("phase {}: OLM is still resolving it", or_unset(phase)));
        }
        other => return State::Settled(format!("phase {other}")),
    }
    for lookup in lookups {
        let identifier = lookup
            .get("identifier")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let pending = array(lookup, "/conditions").any(|c| {
            c.get("type").and_then(Value::as_str) == Some("BundleLookupPending")
                && c.get("status").and_then(Value::as_str) == Some("True")
        });
        if pending || !targets.iter().any(|t| t.csv == identifier) {
            return State::NotReady(format!("OLM is still unpacking the bundle of {identifier}"));
        }
    }
    State::Pending
}

fn or_unset(s: &str) -> &str {
    if s.is_empty() { "unset" } else { s }
}

/// The items of the array at `pointer`, none where there is none.
fn array<'v>(object: &'v Value, pointer: &str) -> impl Iterator<Item = &'v Value> + use<'v> {
    object
        .pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A real InstallPlan (quay-operator#743): Manual approval, approved
    /// already, its bundle lookup kept, its `status.plan` cut off.
    fn quay() -> Value {
        let text = crate::testing::fixture("tests/fixtures/olm/installplan-quay-operator-743.yaml");
        crate::yaml::parse_stream(&text).unwrap().remove(0).value
    }

    /// The real RHOAI 3.3.5 bundle CSV.
    fn rhoai() -> Value {
        let text =
            crate::testing::fixture("tests/fixtures/olm/rhods-operator.3.3.5.clusterserviceversion.yaml");
        crate::yaml::parse_stream(&text).unwrap().remove(0).value
    }

    /// A CSV step in the shape OLM writes (operator-lifecycle-manager#1589,
    /// #1957): its manifest the given string.
    fn step(csv: &str, manifest: String) -> Value {
        json!({"resolving": csv, "status": "Unknown", "resource": {
            "group": "operators.coreos.com", "version": "v1alpha1", "kind": "ClusterServiceVersion",
            "name": csv, "sourceName": "operatorhubio-catalog", "sourceNamespace": "olm", "manifest": manifest}})
    }

    /// OLM's reference to the ConfigMap it unpacked `lookup`'s bundle into.
    fn reference(lookup: &Value, configmap: &str) -> String {
        json!({"kind": "ConfigMap", "name": configmap, "namespace": "olm",
               "catalogSourceName": "operatorhubio-catalog", "catalogSourceNamespace": "olm",
               "replaces": lookup["replaces"], "properties": lookup["properties"]})
        .to_string()
    }

    /// The quay plan as it stood before its approval: waiting, its CSV
    /// step a reference to the unpacked bundle.
    fn pending() -> Value {
        let mut plan = quay();
        plan["spec"]["approved"] = false.into();
        plan["status"]["phase"] = "RequiresApproval".into();
        let lookup = plan["status"]["bundleLookups"][0].clone();
        plan["status"]["plan"] = json!([step("quay-operator.v3.7.10", reference(&lookup, "cbd1027"))]);
        plan
    }

    #[test]
    fn the_real_plan_as_stored_waits_for_nothing() {
        let plan = Plan::read(&quay()).unwrap();
        assert_eq!(plan.at(), "operators/install-4tlmv");
        assert_eq!(plan.created.as_deref(), Some("2023-01-11T15:54:18Z"));
        assert_eq!(
            plan.state,
            State::Settled("approved already (phase Complete)".into())
        );
    }

    #[test]
    fn a_pending_plan_names_its_csv_in_the_unpacked_bundle() {
        let plan = Plan::read(&pending()).unwrap();
        assert_eq!(plan.state, State::Pending);
        let [target] = plan.targets.as_slice() else {
            panic!("{:?}", plan.targets)
        };
        assert_eq!(
            target,
            &Target {
                csv: "quay-operator.v3.7.10".into(),
                manifest: Manifest::Unpacked {
                    namespace: "olm".into(),
                    name: "cbd1027".into()
                },
                // The lookup's `replaces` is empty: not a name.
                replaces: None,
                graph: Vec::new(),
                package: Some("project-quay".into()),
                bundle: Some("quay1.example/operatorhubio/project-quay:v3.7.10".into()),
            }
        );
    }

    #[test]
    fn an_inline_csv_is_the_step_itself_and_other_steps_are_not_targets() {
        let mut plan = pending();
        plan["status"]["bundleLookups"] = json!([]);
        let csv = rhoai();
        let name = csv["metadata"]["name"].as_str().unwrap().to_owned();
        let crd = json!({"resolving": name, "status": "Unknown", "resource": {
            "group": "apiextensions.k8s.io", "version": "v1", "kind": "CustomResourceDefinition",
            "name": "datascienceclusters.datasciencecluster.opendatahub.io", "manifest": "{}"}});
        plan["status"]["plan"] = json!([crd, step(&name, format!("{csv}\n"))]);
        let plan = Plan::read(&plan).unwrap();
        assert_eq!(plan.state, State::Pending);
        let [target] = plan.targets.as_slice() else {
            panic!("{:?}", plan.targets)
        };
        assert_eq!(target.manifest, Manifest::Inline(Box::new(csv)));
        assert_eq!((target.replaces.as_ref(), target.package.as_ref()), (None, None));
    }

    #[test]
    fn every_operator_of_a_plan_is_a_target() {
        let mut plan = pending();
        let mut second = plan["status"]["bundleLookups"][0].clone();
        second["identifier"] = "other-operator.v2.0.0".into();
        second["replaces"] = "other-operator.v1.0.0".into();
        second["properties"] =
            r#"{"properties":[{"type":"olm.package","value":{"packageName":"other","version":"2.0.0"}}]}"#
                .into();
        let step2 = step("other-operator.v2.0.0", reference(&second, "0ab"));
        plan["status"]["bundleLookups"]
            .as_array_mut()
            .unwrap()
            .push(second);
        plan["status"]["plan"].as_array_mut().unwrap().push(step2);
        let plan = Plan::read(&plan).unwrap();
        let names: Vec<(&str, Option<&str>, Option<&str>)> = plan
            .targets
            .iter()
            .map(|t| (t.csv.as_str(), t.package.as_deref(), t.replaces.as_deref()))
            .collect();
        assert_eq!(
            names,
            [
                ("quay-operator.v3.7.10", Some("project-quay"), None),
                (
                    "other-operator.v2.0.0",
                    Some("other"),
                    Some("other-operator.v1.0.0")
                )
            ]
        );
    }

    #[rstest::rstest]
    #[case::automatic("/spec/approval", json!("Automatic"), "Settled(\"its approval is Automatic: OLM installs it without waiting for one\")")]
    #[case::planning("/status/phase", json!("Planning"), "NotReady(\"phase Planning: OLM is still resolving it\")")]
    #[case::installing("/status/phase", json!("Installing"), "Settled(\"phase Installing\")")]
    fn only_a_manual_plan_waiting_for_approval_is_pending(
        #[case] pointer: &str,
        #[case] value: Value,
        #[case] state: &str,
    ) {
        let mut plan = pending();
        *plan.pointer_mut(pointer).unwrap() = value;
        assert_eq!(format!("{:?}", Plan::read(&plan).unwrap().state), state);
    }

    #[test]
    fn a_bundle_still_unpacking_is_not_ready() {
        // A lookup with no step yet, as OLM leaves it while it unpacks.
        let mut plan = pending();
        plan["status"]["plan"] = json!([]);
        let expected = State::NotReady("OLM is still unpacking the bundle of quay-operator.v3.7.10".into());
        assert_eq!(Plan::read(&plan).unwrap().state, expected);
        // Or with its step, still marked pending.
        let mut plan = pending();
        plan["status"]["bundleLookups"][0]["conditions"] =
            json!([{"type": "BundleLookupPending", "status": "True", "reason": "JobIncomplete"}]);
        assert_eq!(Plan::read(&plan).unwrap().state, expected);
    }

    #[test]
    fn a_step_that_is_neither_shape_is_an_error() {
        let mut plan = pending();
        plan["status"]["plan"][0]["resource"]["manifest"] = r#"{"kind":"ConfigMap","name":"x"}"#.into();
        let err = Plan::read(&plan).unwrap_err();
        assert_eq!(
            err.to_string(),
            "InstallPlan operators/install-4tlmv: the step of CSV quay-operator.v3.7.10 is neither the CSV nor a reference to an unpacked bundle"
        );
        plan["status"]["plan"][0]["resource"]["manifest"] = "".into();
        let err = Plan::read(&plan).unwrap_err().to_string();
        assert!(err.contains("holds no manifest OLM could have written"), "{err}");
    }
}
