//! What `preflight` reads from the cluster besides the objects the audit
//! reads: InstallPlans, the Subscriptions they belong to, and the bundle
//! ConfigMaps their steps refer to. Each through kube's API with the
//! group, version and kind OLM serves them under. The one write is the
//! judgement's annotation on a plan (`--annotate`).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::plan::{GROUP, VERSION};
use crate::audit::{Connection, Continues, RequestFailure};

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

/// The InstallPlan `namespace/name`, as the API serves it.
pub async fn plan(connection: &Connection, namespace: &str, name: &str) -> Result<Value, RequestFailure> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        connection.client.clone(),
        namespace,
        &resource("InstallPlan", "installplans"),
    );
    let doing = format!("get InstallPlan {namespace}/{name}");
    let object = api
        .get(name)
        .await
        .map_err(|e| describe(connection, &doing, &e))?;
    Ok(serde_json::to_value(object).expect("objects serialise"))
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

/// Every InstallPlan in `namespace` (every namespace: `None`).
pub async fn plans(connection: &Connection, namespace: Option<&str>) -> Result<Vec<Value>, RequestFailure> {
    listed(connection, ("InstallPlan", "installplans"), namespace).await
}

/// The Subscriptions of `namespace` (every namespace: `None`, to find where
/// a package is subscribed).
pub async fn subscriptions(
    connection: &Connection,
    namespace: Option<&str>,
) -> Result<Vec<Value>, RequestFailure> {
    listed(connection, ("Subscription", "subscriptions"), namespace).await
}

/// Every object of OLM's `(kind, plural)` in `namespace`, or in every
/// namespace.
async fn listed(
    connection: &Connection,
    (kind, plural): (&str, &str),
    namespace: Option<&str>,
) -> Result<Vec<Value>, RequestFailure> {
    let resource = resource(kind, plural);
    let client = connection.client.clone();
    let (api, doing): (Api<DynamicObject>, String) = match namespace {
        Some(ns) => (
            Api::namespaced_with(client, ns, &resource),
            format!("list {kind}s in namespace \"{ns}\""),
        ),
        None => (
            Api::all_with(client, &resource),
            format!("list {kind}s in every namespace"),
        ),
    };
    list(connection, &api, &doing).await
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

/// Every page of a list: plans and Subscriptions are few, a page of 500
/// holds a namespace's.
async fn list(
    connection: &Connection,
    api: &Api<DynamicObject>,
    doing: &str,
) -> Result<Vec<Value>, RequestFailure> {
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    let mut continues = Continues::default();
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|e| describe(connection, doing, &e))?;
        out.extend(
            page.items
                .into_iter()
                .map(|o| serde_json::to_value(o).expect("objects serialise")),
        );
        let next = continues
            .next(page.metadata.continue_.as_deref())
            .map_err(|e| RequestFailure::Request(format!("cannot {doing}: {e}")))?;
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
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
