//! `cleanup`: deleting what audits wrote (everything labelled as theirs,
//! or only what a release's ClusterRole owns), and that owner's reference.

use kube::core::Request;
use kube::core::params::{DeleteParams, ListParams, Preconditions};
use serde::Deserialize;
use serde_json::{Value, json};

use super::*;
use crate::audit::{AuditError, Connection, Continues, Page, RequestFailure};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use kube::core::ApiResource;

/// What [`remove`] deleted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Removed {
    pub reports: usize,
    pub events: usize,
    /// Deletions the cluster refused.
    pub errors: Vec<String>,
}

/// The kinds an audit writes.
pub(super) fn written() -> [ApiResource; 3] {
    [
        report_resource(true),
        report_resource(false),
        ApiResource::erase::<Event>(&()),
    ]
}

/// Deletes what audits and pre-flights wrote: the policy reports named
/// [`POLICY`] or [`PREFLIGHT_PREFIX`]`…` and the
/// [`EVENT_REASON`] Events, found by the [`MANAGED_BY`] label; with
/// `owner_uid`, only those that owner owns (what one release's background
/// audit wrote). The chart's pre-delete hook runs this on `helm uninstall`:
/// the garbage collector deletes owned reports with their owner, but has
/// ignored Events in every API group since Kubernetes 1.25.
pub async fn remove(connection: &Connection, owner_uid: Option<&str>) -> Result<Removed, AuditError> {
    let everywhere = written().map(|resource| (resource, None));
    remove_but(connection, owner_uid, everywhere, &|_, _| false).await
}

/// What a pre-flight in the webhook wrote of plans that no longer wait:
/// with `reports`, its reports named after none of `waiting`'s plans, and
/// its Events on none of them in `namespaces` (`waiting`: namespace and
/// name of each plan that waits). Only what `owner_uid` owns: a person's
/// `preflight --policy-reports` is theirs to remove.
pub async fn remove_settled(
    connection: &Connection,
    owner_uid: &str,
    (reports, namespaces): (bool, &[String]),
    waiting: &std::collections::BTreeSet<(String, String)>,
) -> Result<Removed, AuditError> {
    let keep = |kind: &str, item: &Item| match kind {
        "Event" if item.reason.as_deref() == Some(PREFLIGHT_EVENT_REASON) => {
            let on = item
                .involved_object
                .as_ref()
                .map(|o| o.name.clone())
                .unwrap_or_default();
            waiting.contains(&(item.metadata.namespace.clone().unwrap_or_default(), on))
        }
        "Event" => true,
        _ => match item.metadata.name.strip_prefix(PREFLIGHT_PREFIX) {
            Some(plan) => waiting.iter().any(|(_, name)| name == plan),
            None => true,
        },
    };
    let [namespaced, cluster, events] = written();
    let mut listed: Vec<(ApiResource, Option<&str>)> = Vec::new();
    if reports {
        listed.extend([(namespaced, None), (cluster, None)]);
    }
    listed.extend(namespaces.iter().map(|ns| (events.clone(), Some(ns.as_str()))));
    remove_but(connection, Some(owner_uid), listed, &keep).await
}

/// Deletes what [`ours`] lists of each `(resource, namespace)` but what
/// `keep` keeps.
async fn remove_but(
    connection: &Connection,
    owner_uid: Option<&str>,
    listed: impl IntoIterator<Item = (ApiResource, Option<&str>)>,
    keep: &(dyn Fn(&str, &Item) -> bool + Sync),
) -> Result<Removed, AuditError> {
    let mut removed = Removed::default();
    for (resource, namespace) in listed {
        let kind = resource.kind.as_str();
        let found = match ours(connection, (&resource, namespace), owner_uid).await {
            Ok(found) => found,
            // The CRDs are not installed: no report was ever written.
            Err(None) => continue,
            Err(Some(RequestFailure::Fatal(m))) => return Err(AuditError::Unreachable(m)),
            Err(Some(RequestFailure::Request(m))) => {
                removed.errors.push(m);
                continue;
            }
        };
        for meta in found
            .into_iter()
            .filter(|item| !keep(kind, item))
            .map(|item| item.metadata)
        {
            let collection = collection(&resource, meta.namespace.as_deref());
            let doing = match &meta.namespace {
                Some(ns) => format!("delete {kind} \"{}\" in namespace \"{ns}\"", meta.name),
                None => format!("delete {kind} \"{}\"", meta.name),
            };
            // The uid precondition: an object recreated under the same name
            // since the list is not ours to delete.
            let params = DeleteParams::default().preconditions(Preconditions {
                uid: Some(meta.uid.clone()),
                resource_version: None,
            });
            let request = Request::new(&collection)
                .delete(&meta.name, &params)
                .map_err(|e| AuditError::Request(format!("cannot {doing}: {e}")))?;
            match connection.client.request::<serde::de::IgnoredAny>(request).await {
                Ok(_) if kind == "Event" => removed.events += 1,
                Ok(_) => removed.reports += 1,
                // Gone already, or no longer the object listed.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => match connection.describe(&doing, &e) {
                    RequestFailure::Fatal(m) => return Err(AuditError::Unreachable(m)),
                    RequestFailure::Request(m) => removed.errors.push(m),
                },
            }
        }
    }
    Ok(removed)
}

/// A listed object's identity: all that deleting it needs.
#[derive(Debug, Deserialize)]
pub(super) struct Meta {
    pub(super) name: String,
    pub(super) namespace: Option<String>,
    pub(super) uid: String,
    #[serde(rename = "ownerReferences", default)]
    pub(super) owners: Vec<OwnerUid>,
}

#[derive(Debug, Deserialize)]
pub(super) struct OwnerUid {
    pub(super) uid: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct Item {
    pub(super) metadata: Meta,
    /// An Event's reason; reports have none.
    pub(super) reason: Option<String>,
    /// What an Event is about.
    #[serde(rename = "involvedObject")]
    pub(super) involved_object: Option<Involved>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Involved {
    #[serde(default)]
    pub(super) name: String,
}

impl Item {
    /// Whether an audit wrote this `kind` of object (the label selected it;
    /// the name or reason says it is an audit's) and `owner_uid` owns it.
    pub(super) fn ours(&self, kind: &str, owner_uid: Option<&str>) -> bool {
        let wrote = if kind == "Event" {
            matches!(
                self.reason.as_deref(),
                Some(EVENT_REASON | PREFLIGHT_EVENT_REASON)
            )
        } else {
            self.metadata.name == POLICY || self.metadata.name.starts_with(PREFLIGHT_PREFIX)
        };
        wrote && owner_uid.is_none_or(|uid| self.metadata.owners.iter().any(|o| o.uid == uid))
    }
}

/// The objects of `resource` in `namespace` (every one: `None`) that an
/// audit wrote (and `owner_uid` owns). `Err(None)`: the cluster does not
/// serve them.
pub(super) async fn ours(
    connection: &Connection,
    (resource, namespace): (&ApiResource, Option<&str>),
    owner_uid: Option<&str>,
) -> Result<Vec<Item>, Option<RequestFailure>> {
    let (path, kind) = (collection(resource, namespace), resource.kind.as_str());
    let mut params = ListParams::default()
        .labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1))
        .limit(500);
    let mut found = Vec::new();
    let mut continues = Continues::default();
    loop {
        let request = Request::new(&path)
            .list(&params)
            .map_err(|e| Some(RequestFailure::Request(format!("cannot list {kind}s: {e}"))))?;
        let mut page: Page<Item> = match connection.client.request(request).await {
            Ok(page) => page,
            Err(kube::Error::Api(s)) if s.code == 404 && kind != "Event" => return Err(None),
            Err(e) => return Err(Some(connection.describe(&format!("list {kind}s"), &e))),
        };
        let next = continues
            .next(page.next().as_deref())
            .map_err(|e| Some(RequestFailure::Request(format!("cannot list {kind}s: {e}"))))?;
        found.extend(page.items.into_iter().filter(|item| item.ours(kind, owner_uid)));
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(found),
        }
    }
}

/// The uid of ClusterRole `name`: what owns everything the background audit
/// writes, and what `cleanup --owner` deletes by.
pub async fn cluster_role_uid(connection: &Connection, name: &str) -> Result<String, RequestFailure> {
    let doing = format!("get ClusterRole \"{name}\"");
    let roles: Api<ClusterRole> = Api::all(connection.client.clone());
    let role = roles
        .get_metadata(name)
        .await
        .map_err(|e| connection.describe(&doing, &e))?;
    role.metadata
        .uid
        .filter(|uid| !uid.is_empty())
        .ok_or_else(|| RequestFailure::Request(format!("ClusterRole \"{name}\" has no uid")))
}

/// The owner reference put on what the background audit writes.
pub fn cluster_role_owner(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": name, "uid": uid})
}
