//! What `preflight` reads from the cluster besides the objects the audit
//! reads: InstallPlans, the Subscriptions they belong to, and the bundle
//! ConfigMaps their steps refer to. Each through kube's API with the
//! group, version and kind OLM serves them under. The one write is the
//! judgement's annotation on a plan (`--annotate`).

use std::borrow::Cow;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind, Request, Resource, params::GetParams};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::plan::{GROUP, Plan, State, VERSION};
use super::{Plans, Preflight};
use crate::audit::{Connection, Continues, RequestFailure};
use crate::objects::{Pruned, Shape};

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

/// The InstallPlan `namespace/name`, as the API serves it, read as
/// [`read`] reads a listed one.
pub async fn plan(connection: &Connection, namespace: &str, name: &str) -> Result<Value, RequestFailure> {
    let resource = resource("InstallPlan", "installplans");
    let doing = format!("get InstallPlan {namespace}/{name}");
    let request = Request::new(DynamicObject::url_path(&resource, Some(namespace)))
        .get(name, &GetParams::default())
        .map_err(|e| RequestFailure::Request(format!("cannot {doing}: {e}")))?;
    let text = connection
        .client
        .request_text(request)
        .await
        .map_err(|e| describe(connection, &doing, &e))?;
    read(&text).map_err(|e| RequestFailure::Request(format!("cannot {doing}: {e}")))
}

/// The plans `which` names that wait for an approval; the others named in
/// the errors (a plan named and not pending, one not ready) or the notes.
pub(super) async fn read_plans(connection: &Connection, which: &Plans, found: &mut Preflight) -> Vec<Plan> {
    let mut values = Vec::new();
    match which {
        Plans::Named { namespace, name } => match plan(connection, namespace, name).await {
            Ok(v) => values.push(Ok(v)),
            Err(e) => found.errors.push(e.message().to_owned()),
        },
        Plans::AllPending { namespaces } if namespaces.is_empty() => match plans(connection, None).await {
            Ok(v) => values.extend(v.into_iter().map(readable)),
            Err(e) => found.errors.push(e.message().to_owned()),
        },
        Plans::AllPending { namespaces } => {
            for ns in namespaces {
                match plans(connection, Some(ns)).await {
                    Ok(v) => values.extend(v.into_iter().map(readable)),
                    Err(e) => found.errors.push(e.message().to_owned()),
                }
            }
        }
        Plans::File(_) => {}
    }
    let named = matches!(which, Plans::Named { .. });
    let mut out = Vec::new();
    let mut settled = 0;
    for value in values {
        let plan = match value.and_then(|v| Plan::read(&v).map_err(|e| (plan_at(&v), e.to_string()))) {
            Ok(p) => p,
            Err((at, e)) => {
                found.errors.push(e);
                found.plan_errors += 1;
                found.unreadable.push(at);
                continue;
            }
        };
        let error = match &plan.state {
            State::Pending => {
                out.push(plan);
                continue;
            }
            State::NotReady(why) => format!(
                "InstallPlan {} is not ready yet: {why}; run again once it waits for an approval",
                plan.at()
            ),
            State::Settled(why) if named => format!(
                "InstallPlan {} does not wait for an approval: {why}; nothing to judge",
                plan.at()
            ),
            State::Settled(_) => {
                settled += 1;
                continue;
            }
        };
        found.errors.push(error);
        found.plan_errors += 1;
    }
    if settled > 0 {
        found.notes.push(format!(
            "{settled} InstallPlan(s) that do not wait for an approval were passed over"
        ));
    }
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// A listed plan, or what names it and why it cannot be read.
fn readable(listed: Listed) -> Result<Value, ((String, String), String)> {
    listed
        .object
        .map_err(|e| ((e.namespace.clone(), e.name.clone()), e.to_string()))
}

/// A plan's namespace and name.
fn plan_at(plan: &Value) -> (String, String) {
    let text = |p: &str| plan.pointer(p).and_then(Value::as_str).unwrap_or("?").to_owned();
    (text("/metadata/namespace"), text("/metadata/name"))
}

/// Sets annotation `key` of InstallPlan `namespace/name` to `value` (a
/// merge patch: nothing else of the plan is touched, and OLM, which
/// updates its status, does not conflict with it).
pub async fn annotate_plan(
    connection: &Connection,
    (namespace, name): (&str, &str),
    (key, value): (&str, &str),
) -> Result<(), RequestFailure> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        connection.client.clone(),
        namespace,
        &resource("InstallPlan", "installplans"),
    );
    let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
    let doing = format!("annotate InstallPlan {namespace}/{name}");
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| describe(connection, &doing, &e))
}

/// Every InstallPlan in `namespace` (every namespace: `None`), each read
/// on its own: one that cannot be read is that plan's error.
pub async fn plans(connection: &Connection, namespace: Option<&str>) -> Result<Vec<Listed>, RequestFailure> {
    listed(connection, ("InstallPlan", "installplans"), namespace).await
}

/// The Subscriptions of `namespace` (every namespace: `None`, to find where
/// a package is subscribed); one that cannot be read is an error.
pub async fn subscriptions(
    connection: &Connection,
    namespace: Option<&str>,
) -> Result<Vec<Value>, RequestFailure> {
    let listed = listed(connection, ("Subscription", "subscriptions"), namespace).await?;
    listed
        .into_iter()
        .map(|l| l.object.map_err(|e| RequestFailure::Request(e.to_string())))
        .collect()
}

/// One object of a list, read on its own.
#[derive(Debug)]
pub struct Listed {
    pub kind: &'static str,
    pub object: Result<Value, Unreadable>,
}

/// A listed object that cannot be read: what of it names it, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {namespace}/{name}: cannot read it: {why}")]
pub struct Unreadable {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub why: String,
}

/// What is read of an OLM object: everything but `metadata.managedFields`,
/// which is free-form JSON anyone who may update the object writes, as
/// deep as they like (past serde_json's depth of 128 a whole list would not
/// decode).
static KEEP: Shape = Shape::Keep;
static OLM_OBJECT: Shape = Shape::Object(&[
    ("apiVersion", &KEEP),
    ("kind", &KEEP),
    (
        "metadata",
        &Shape::Object(&[
            ("name", &KEEP),
            ("namespace", &KEEP),
            ("uid", &KEEP),
            ("resourceVersion", &KEEP),
            ("creationTimestamp", &KEEP),
            ("labels", &KEEP),
            ("annotations", &KEEP),
            ("ownerReferences", &KEEP),
        ]),
    ),
    ("spec", &KEEP),
    ("status", &KEEP),
]);

/// An OLM object from its JSON, as [`OLM_OBJECT`] keeps it.
pub fn read(json: &str) -> Result<Value, serde_json::Error> {
    use serde::de::DeserializeSeed;
    let mut deserializer = serde_json::Deserializer::from_str(json);
    Pruned(&OLM_OBJECT)
        .deserialize(&mut deserializer)
        .and_then(|v| deserializer.end().map(|()| v))
}

/// One page of a list, its items not read yet.
#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    metadata: PageMeta,
    #[serde(default)]
    items: Vec<Box<RawValue>>,
}

#[derive(Default, Deserialize)]
struct PageMeta {
    #[serde(rename = "continue", default)]
    next: Option<String>,
}

/// Every object of OLM's `(kind, plural)` in `namespace`, or in every
/// namespace, page by page (plans and Subscriptions are few: a page of 500
/// holds a namespace's); each item read on its own.
async fn listed(
    connection: &Connection,
    (kind, plural): (&'static str, &str),
    namespace: Option<&str>,
) -> Result<Vec<Listed>, RequestFailure> {
    let resource = resource(kind, plural);
    let path = DynamicObject::url_path(&resource, namespace);
    let doing = match namespace {
        Some(ns) => format!("list {kind}s in namespace \"{ns}\""),
        None => format!("list {kind}s in every namespace"),
    };
    let failed = |e: &dyn std::fmt::Display| RequestFailure::Request(format!("cannot {doing}: {e}"));
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    let mut continues = Continues::default();
    loop {
        let request = Request::new(&path).list(&params).map_err(|e| failed(&e))?;
        let page: Page = connection
            .client
            .request(request)
            .await
            .map_err(|e| describe(connection, &doing, &e))?;
        out.extend(page.items.iter().map(|raw| item(kind, raw.get())));
        match continues
            .next(page.metadata.next.as_deref())
            .map_err(|e| failed(&e))?
        {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// A list item read; when it cannot be, what names it.
fn item(kind: &'static str, json: &str) -> Listed {
    let object = read(json).map_err(|why| {
        // Its name, if that much can be read.
        let named = name_only(json);
        let text = |p: &str| named.pointer(p).and_then(Value::as_str).unwrap_or("?").to_owned();
        Unreadable {
            kind,
            namespace: text("/metadata/namespace"),
            name: text("/metadata/name"),
            why: crate::text::one_line_owned(why.to_string(), 300, crate::text::Cut::End),
        }
    });
    Listed { kind, object }
}

/// Only an object's namespace, name and resource version, whatever else
/// it holds.
fn name_only(json: &str) -> Value {
    use serde::de::DeserializeSeed;
    static NAME: Shape = Shape::Object(&[("namespace", &KEEP), ("name", &KEEP), ("resourceVersion", &KEEP)]);
    static NAMED: Shape = Shape::Object(&[("metadata", &NAME)]);
    Pruned(&NAMED)
        .deserialize(&mut serde_json::Deserializer::from_str(json))
        .unwrap_or_default()
}

/// The bundle ConfigMap `namespace/name` a step refers to. Listed by its
/// name rather than got: the background audit may list ConfigMaps
/// everywhere already, so judging a plan in the webhook needs no right
/// more (a person running `preflight` has both).
pub async fn bundle(
    connection: &Connection,
    namespace: &str,
    name: &str,
) -> Result<ConfigMap, RequestFailure> {
    let api: Api<ConfigMap> = Api::namespaced(connection.client.clone(), namespace);
    let doing = format!("get the bundle ConfigMap {namespace}/{name}");
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    let listed = api
        .list(&params)
        .await
        .map_err(|e| describe(connection, &doing, &e))?;
    listed
        .items
        .into_iter()
        .next()
        .ok_or_else(|| RequestFailure::Request(format!("cannot {doing}: configmaps \"{name}\" not found")))
}

/// A 404 for the resource type itself, not for one object of it.
fn unserved(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404 && s.message.contains("could not find the requested resource"))
}

/// [`Connection::describe`], with the hint a cluster without OLM needs.
fn describe(connection: &Connection, doing: &str, e: &kube::Error) -> RequestFailure {
    match connection.describe(doing, e) {
        RequestFailure::Request(m) if unserved(e) => RequestFailure::Request(format!(
            "{m}; the cluster may not serve {GROUP}/{VERSION} (is OLM installed?)"
        )),
        other => other,
    }
}

/// An InstallPlan as a watch hands it out: read as a list's items are, and
/// one that cannot be read still an event (its name, and why), so that a
/// plan nobody can read never stops the watch of every other.
#[derive(Debug, Clone)]
pub struct WatchedPlan {
    metadata: ObjectMeta,
    /// The plan, or why it cannot be read.
    pub object: Result<Value, String>,
}

impl<'de> Deserialize<'de> for WatchedPlan {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        let object = read(raw.get()).map_err(|e| e.to_string());
        let at = match &object {
            Ok(v) => v.clone(),
            Err(_) => name_only(raw.get()),
        };
        let text = |p: &str| at.pointer(p).and_then(Value::as_str).map(str::to_owned);
        let metadata = ObjectMeta {
            name: text("/metadata/name"),
            namespace: text("/metadata/namespace"),
            resource_version: text("/metadata/resourceVersion"),
            ..ObjectMeta::default()
        };
        Ok(Self { metadata, object })
    }
}

impl kube::core::Resource for WatchedPlan {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "InstallPlan".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "installplans".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{{}}{}", "{\"f:x\":".repeat(depth), "}".repeat(depth))
    }

    /// Issue 59: a plan nested past serde_json's depth of 128 failed the
    /// whole list. Its managedFields are skipped unread; nesting in what is
    /// read is that one item's error, naming it.
    #[test]
    fn a_list_item_is_read_on_its_own() {
        let deep_fields = format!(
            r#"{{"metadata": {{"name": "p", "namespace": "ops", "resourceVersion": "7",
                "managedFields": [{{"fieldsV1": {}}}]}}, "spec": {{"approved": false}}}}"#,
            nested(200)
        );
        let read = item("InstallPlan", &deep_fields).object.unwrap();
        assert_eq!(read.pointer("/metadata/managedFields"), None);
        assert_eq!(read["spec"]["approved"], false);
        let deep_spec = format!(
            r#"{{"metadata": {{"name": "q", "namespace": "ops"}}, "spec": {}}}"#,
            nested(200)
        );
        let unreadable = item("InstallPlan", &deep_spec).object.unwrap_err();
        assert_eq!(
            (unreadable.namespace.as_str(), unreadable.name.as_str()),
            ("ops", "q")
        );
        assert!(
            unreadable
                .to_string()
                .starts_with("InstallPlan ops/q: cannot read it: recursion limit exceeded"),
            "{unreadable}"
        );
        // A page of both: the list reads, each item as it can.
        let page: Page =
            serde_json::from_str(&format!(r#"{{"items": [{deep_fields}, {deep_spec}]}}"#)).unwrap();
        let items: Vec<Listed> = page
            .items
            .iter()
            .map(|raw| item("InstallPlan", raw.get()))
            .collect();
        assert_eq!(
            items.iter().map(|l| l.object.is_ok()).collect::<Vec<_>>(),
            [true, false]
        );
    }

    /// A watch event of an unreadable plan still names it, so the watch
    /// goes on and resumes from its resource version.
    #[test]
    fn a_watched_plan_that_cannot_be_read_is_still_an_event() {
        let deep_spec = format!(
            r#"{{"metadata": {{"name": "q", "namespace": "ops", "resourceVersion": "9"}}, "spec": {}}}"#,
            nested(200)
        );
        let watched: WatchedPlan = serde_json::from_str(&deep_spec).unwrap();
        assert!(watched.object.is_err());
        assert_eq!(
            (
                watched.metadata.name.as_deref(),
                watched.metadata.resource_version.as_deref()
            ),
            (Some("q"), Some("9"))
        );
    }
}
