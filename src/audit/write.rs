//! What an audit writes, and nothing else: `wgpolicyk8s.io/v1alpha2`
//! policy reports (`--policy-reports`), the format Kyverno and Policy
//! Reporter users already read, and Warning Events (`--events`) on the
//! objects with findings.
//!
//! A rerun that finds the same must change nothing, so a dashboard or an
//! `kubectl get events -w` shows news only: reports have stable names, a
//! result keeps the timestamp of the run that first found it, an unchanged
//! report is not written, and an Event's name is derived from the finding,
//! so creating it again is refused as AlreadyExists.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use kube::core::Request;
use kube::core::params::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use strum::VariantArray;

use super::{AuditError, Connection, Covered, Page, RequestFailure};
use crate::judge::ImageVerdict;
use crate::policy::{Reason, Verdict};
use crate::published::State;
use crate::report::{ImageReport, ObjectReport, Report};

/// The policy name in every result, and the name of every report.
pub const POLICY: &str = "digest-gate";
/// The label on everything an audit writes: what it lists to find its own,
/// and what `helm uninstall` and a person select to remove it.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "digest-gate");
/// The Event reason.
pub const EVENT_REASON: &str = "UnpromotedImage";

const GROUP_PATH: &str = "/apis/wgpolicyk8s.io/v1alpha2";
/// etcd refuses objects over 1.5 MiB; a report stays under this, dropping
/// `pass` results first (the summary still counts them).
const MAX_REPORT_BYTES: usize = 1 << 20;

/// What was written, for the run's notes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Written {
    pub created: usize,
    pub updated: usize,
    pub unchanged: usize,
    /// What a report left out.
    pub notes: Vec<String>,
    /// Writes the cluster refused.
    pub errors: Vec<String>,
}

// === policy reports ===

/// One report's content: what is compared with the stored one.
#[derive(Debug, Clone, PartialEq)]
struct Content {
    results: Vec<Value>,
    summary: Value,
    /// Whether it has an owner reference: a report the CLI made is owned
    /// once the background audit (which has an owner) writes it.
    owned: bool,
}

/// Writes a PolicyReport per namespace with results (and a
/// ClusterPolicyReport for cluster-scoped objects, when they were read), and
/// empties the reports of covered namespaces that no longer have any.
/// `Err` when nothing could be written at all (the CRDs are missing).
pub async fn policy_reports(
    connection: &Connection,
    report: &Report,
    covered: &Covered,
    owner: Option<&Value>,
    now: SystemTime,
) -> Result<Written, AuditError> {
    let seconds = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut wanted: BTreeMap<Option<String>, Vec<Value>> = BTreeMap::new();
    for object in &report.results {
        let results = results_of(object, seconds);
        if !results.is_empty() {
            wanted
                .entry(object.namespace.clone())
                .or_default()
                .extend(results);
        }
    }
    let stored = stored_reports(connection, covered).await?;
    for ns in stored.keys() {
        if covers(covered, ns.as_deref()) {
            wanted.entry(ns.clone()).or_default();
        }
    }
    if covered.cluster {
        wanted.entry(None).or_default();
    }
    let mut written = Written::default();
    for (ns, mut results) in wanted {
        sort_results(&mut results);
        let old = stored.get(&ns);
        if old.is_none() && results.is_empty() {
            continue;
        }
        if let Some(old) = old {
            keep_first_seen(&mut results, &old.results);
        }
        let mut content = fit(results, ns.as_deref(), &mut written.notes);
        content.owned = owner.is_some() || old.is_some_and(|o| o.owned);
        if old == Some(&content) {
            written.unchanged += 1;
            continue;
        }
        match write_report(connection, ns.as_deref(), &content, owner, old.is_some()).await {
            Ok(()) if old.is_some() => written.updated += 1,
            Ok(()) => written.created += 1,
            Err(RequestFailure::Fatal(m)) => return Err(AuditError::Unreachable(m)),
            Err(RequestFailure::Request(m)) => written.errors.push(m),
        }
    }
    Ok(written)
}

fn covers(covered: &Covered, ns: Option<&str>) -> bool {
    match (ns, &covered.namespaces) {
        (None, _) => covered.cluster,
        (Some(_), None) => true,
        (Some(ns), Some(set)) => set.contains(ns),
    }
}

/// The results for one object: one per image, `rule` its reason code.
fn results_of(object: &ObjectReport, seconds: u64) -> Vec<Value> {
    let mut resource = Map::new();
    for (key, value) in [
        ("apiVersion", &object.api_version),
        ("kind", &object.kind),
        ("namespace", &object.namespace),
        ("name", &object.name),
        ("uid", &object.uid),
    ] {
        if let Some(v) = value {
            resource.insert(key.into(), v.clone().into());
        }
    }
    object
        .images
        .iter()
        .map(|image| {
            let result = result_of(image);
            let mut properties = Map::new();
            properties.insert("path".into(), image.path.clone().into());
            if let Value::String(s) = &image.image {
                properties.insert("image".into(), s.clone().into());
            }
            if let Some(c) = image.container.as_ref().or(image.volume.as_ref()) {
                properties.insert("container".into(), c.clone().into());
            }
            if let Some(to) = &image.rewrite {
                properties.insert("promoted".into(), to.clone().into());
            }
            // With --registry, what the registry said of what will run.
            let message = match image.registry.as_ref().filter(|r| r.state != State::Ok) {
                Some(reg) if image.code != Reason::PromotedUnpullable => {
                    format!(
                        "{}; {}: {}: {}",
                        image.reason, reg.state, reg.reference, reg.detail
                    )
                }
                _ => image.reason.clone(),
            };
            let mut r = json!({
                "policy": POLICY,
                "rule": image.code,
                "result": result,
                "message": message,
                "source": POLICY,
                "category": "Image promotion",
                "scored": true,
                "timestamp": {"seconds": seconds, "nanos": 0},
                "resources": [resource.clone()],
                "properties": properties,
            });
            if let Some(severity) = match result {
                PolicyResult::Fail => Some("high"),
                PolicyResult::Warn => Some("medium"),
                _ => None,
            } {
                r["severity"] = severity.into();
            }
            r
        })
        .collect()
}

vocabulary! {
    "lowercase";
    /// A policy report result's `result`: the wgpolicyk8s.io vocabulary.
    #[derive(PartialOrd, Ord, strum::EnumString)]
    enum PolicyResult {
        Pass,
        Fail,
        Warn,
        Error,
        Skip,
    }
}

impl PolicyResult {
    /// The result a written report holds.
    fn of(result: &Value) -> Option<Self> {
        result["result"].as_str()?.parse().ok()
    }

    /// Whether the result asks for action: what a full report may drop
    /// last, and what Events are written for.
    fn needs_action(self) -> bool {
        !matches!(self, Self::Pass | Self::Skip)
    }
}

/// `fail` for what is denied or (stored, so not yet rewritten) off its
/// promoted digest; `warn` for what audit mode would rewrite; `skip` for an
/// exemption; `pass` otherwise.
fn result_of(image: &ImageReport) -> PolicyResult {
    if image.registry.as_ref().is_some_and(|r| r.state.fails()) {
        return PolicyResult::Fail;
    }
    match (image.verdict, image.would_be) {
        (ImageVerdict::Deny | ImageVerdict::Rewrite, _) | (_, Some(Verdict::Deny)) => PolicyResult::Fail,
        (_, Some(_)) => PolicyResult::Warn,
        (ImageVerdict::Exempt, _) => PolicyResult::Skip,
        _ => PolicyResult::Pass,
    }
}

fn sort_results(results: &mut [Value]) {
    let key = |r: &Value| {
        let res = &r["resources"][0];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        (
            text(&res["kind"]),
            text(&res["name"]),
            text(&r["properties"]["path"]),
        )
    };
    results.sort_by_cached_key(key);
}

/// A result found before keeps the timestamp of the run that found it, so
/// an unchanged finding leaves the report unchanged.
fn keep_first_seen(results: &mut [Value], old: &[Value]) {
    let identity = |r: &Value| {
        let mut r = r.clone();
        if let Some(m) = r.as_object_mut() {
            m.remove("timestamp");
        }
        r.to_string()
    };
    let seen: HashMap<String, &Value> = old.iter().map(|r| (identity(r), &r["timestamp"])).collect();
    for r in results {
        if let Some(t) = seen.get(&identity(r)) {
            r["timestamp"] = (*t).clone();
        }
    }
}

/// The report's content within [`MAX_REPORT_BYTES`]: `pass` and `skip`
/// results go first, then findings past the budget, each drop noted.
fn fit(mut results: Vec<Value>, ns: Option<&str>, notes: &mut Vec<String>) -> Content {
    let summary = summary(&results);
    let size = |rs: &[Value]| rs.iter().map(|r| r.to_string().len() + 1).sum::<usize>();
    let at = ns.map_or("the ClusterPolicyReport".to_owned(), |ns| {
        format!("the PolicyReport in namespace \"{ns}\"")
    });
    if size(&results) > MAX_REPORT_BYTES {
        let before = results.len();
        results.retain(|r| PolicyResult::of(r).is_none_or(PolicyResult::needs_action));
        notes.push(format!(
            "{at} lists findings only: its {} passing results would not fit (the summary counts them)",
            before - results.len()
        ));
    }
    if size(&results) > MAX_REPORT_BYTES {
        let mut total = 0;
        let keep = results
            .iter()
            .take_while(|r| {
                total += r.to_string().len() + 1;
                total <= MAX_REPORT_BYTES
            })
            .count();
        notes.push(format!(
            "{at} lists {keep} of {} findings: the rest would not fit (see `digest-gate audit` output)",
            results.len()
        ));
        results.truncate(keep);
    }
    Content {
        results,
        summary,
        owned: false,
    }
}

fn summary(results: &[Value]) -> Value {
    let mut counts: BTreeMap<&str, u64> = PolicyResult::VARIANTS.iter().map(|o| (o.into(), 0)).collect();
    for o in results.iter().filter_map(PolicyResult::of) {
        *counts.entry(o.into()).or_default() += 1;
    }
    json!(counts)
}

/// The reports named [`POLICY`] with the [`MANAGED_BY`] label, by namespace
/// (`None` for the ClusterPolicyReport).
async fn stored_reports(
    connection: &Connection,
    covered: &Covered,
) -> Result<HashMap<Option<String>, Content>, AuditError> {
    let mut paths = match &covered.namespaces {
        None => vec![format!("{GROUP_PATH}/policyreports")],
        Some(set) => set
            .iter()
            .map(|ns| format!("{GROUP_PATH}/namespaces/{ns}/policyreports"))
            .collect(),
    };
    if covered.cluster {
        paths.push(format!("{GROUP_PATH}/clusterpolicyreports"));
    }
    let params = ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
    let mut stored = HashMap::new();
    for path in paths {
        let request = Request::new(&path)
            .list(&params)
            .map_err(|e| AuditError::Request(e.to_string()))?;
        let list: Value = connection.client.request(request).await.map_err(|e| {
            let message = connection.describe("list policy reports", &e).message().to_owned();
            AuditError::Request(match e {
                kube::Error::Api(s) if s.code == 404 => format!(
                    "--policy-reports: the cluster does not serve wgpolicyk8s.io/v1alpha2 policy reports: install their CRDs (the chart's audit.policyReports.installCRDs) ({message})"
                ),
                _ => format!("--policy-reports: {message}"),
            })
        })?;
        for item in list["items"].as_array().into_iter().flatten() {
            if item.pointer("/metadata/name").and_then(Value::as_str) != Some(POLICY) {
                continue;
            }
            let ns = item
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let results = item["results"].as_array().cloned().unwrap_or_default();
            let summary = item.get("summary").cloned().unwrap_or(Value::Null);
            let owned = item
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| !refs.is_empty());
            stored.insert(
                ns,
                Content {
                    results,
                    summary,
                    owned,
                },
            );
        }
    }
    Ok(stored)
}

async fn write_report(
    connection: &Connection,
    ns: Option<&str>,
    content: &Content,
    owner: Option<&Value>,
    exists: bool,
) -> Result<(), RequestFailure> {
    let (path, kind, at) = match ns {
        Some(ns) => (
            format!("{GROUP_PATH}/namespaces/{ns}/policyreports"),
            "PolicyReport",
            format!("write the PolicyReport in namespace \"{ns}\""),
        ),
        None => (
            format!("{GROUP_PATH}/clusterpolicyreports"),
            "ClusterPolicyReport",
            "write the ClusterPolicyReport".to_owned(),
        ),
    };
    let request = if exists {
        // A merge patch replaces the arrays whole: the stored report
        // becomes exactly this run's.
        let mut patch = json!({"results": content.results, "summary": content.summary});
        if let Some(owner) = owner {
            patch["metadata"] = json!({"ownerReferences": [owner]});
        }
        Request::new(&path).patch(POLICY, &PatchParams::default(), &Patch::Merge(&patch))
    } else {
        let mut metadata = json!({"name": POLICY, "labels": {MANAGED_BY.0: MANAGED_BY.1}});
        if let Some(ns) = ns {
            metadata["namespace"] = ns.into();
        }
        if let Some(owner) = owner {
            metadata["ownerReferences"] = json!([owner]);
        }
        let body = json!({
            "apiVersion": "wgpolicyk8s.io/v1alpha2",
            "kind": kind,
            "metadata": metadata,
            "results": content.results,
            "summary": content.summary,
        });
        Request::new(&path).create(&PostParams::default(), body.to_string().into_bytes())
    }
    .map_err(|e| RequestFailure::Request(format!("cannot {at}: {e}")))?;
    connection
        .client
        .request::<serde::de::IgnoredAny>(request)
        .await
        .map(|_| ())
        .map_err(|e| connection.describe(&at, &e))
}

// === events ===

/// Creates a Warning Event for each finding of each object; a finding that
/// already has one (its name is derived from the object's uid and the
/// finding) is counted as unchanged, not repeated.
pub async fn events(
    connection: &Connection,
    report: &Report,
    owner: Option<&Value>,
    now: SystemTime,
) -> Result<Written, AuditError> {
    let time = humantime::format_rfc3339_seconds(now).to_string();
    let mut written = Written::default();
    let mut seen = BTreeSet::new();
    for object in &report.results {
        for image in object.images.iter().filter(|i| result_of(i).needs_action()) {
            let (Some(kind), Some(name)) = (&object.kind, &object.name) else {
                continue;
            };
            let event_name = event_name(object, image);
            // Cluster-scoped objects' Events go to "default", as kubectl
            // looks for them there.
            let ns = object.namespace.as_deref().unwrap_or("default");
            if !seen.insert((ns.to_owned(), event_name.clone())) {
                continue;
            }
            let mut metadata =
                json!({"name": event_name, "namespace": ns, "labels": {MANAGED_BY.0: MANAGED_BY.1}});
            if let Some(owner) = owner {
                metadata["ownerReferences"] = json!([owner]);
            }
            let mut involved =
                json!({"apiVersion": object.api_version, "kind": kind, "name": name, "uid": object.uid});
            if let Some(ns) = &object.namespace {
                involved["namespace"] = ns.clone().into();
            }
            let body = json!({
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": metadata,
                "involvedObject": involved,
                "reason": EVENT_REASON,
                "message": format!("digest-gate: {}", image.reason),
                "type": "Warning",
                "source": {"component": POLICY},
                "reportingComponent": POLICY,
                "reportingInstance": POLICY,
                "firstTimestamp": time,
                "lastTimestamp": time,
                "count": 1,
            });
            let at = format!("create an Event for {kind} \"{name}\"");
            let request = Request::new(format!("/api/v1/namespaces/{ns}/events"))
                .create(&PostParams::default(), body.to_string().into_bytes())
                .map_err(|e| AuditError::Request(format!("cannot {at}: {e}")))?;
            match connection.client.request::<serde::de::IgnoredAny>(request).await {
                Ok(_) => written.created += 1,
                Err(kube::Error::Api(s)) if s.code == 409 => written.unchanged += 1,
                Err(e) => match connection.describe(&at, &e) {
                    RequestFailure::Fatal(m) => return Err(AuditError::Unreachable(m)),
                    RequestFailure::Request(m) => written.errors.push(m),
                },
            }
        }
    }
    Ok(written)
}

/// `<object>.<16 hex digits>`: the digits hash the object's uid and the
/// finding (path, code, message), so the same finding on the same object
/// always names the same Event, and a new one (another digest promoted,
/// the object recreated) a new Event.
fn event_name(object: &ObjectReport, image: &ImageReport) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [
        object.uid.as_deref().unwrap_or_default(),
        object.kind.as_deref().unwrap_or_default(),
        object.name.as_deref().unwrap_or_default(),
        &image.path,
        image.code.into(),
        &image.reason,
    ] {
        ctx.update(part.as_bytes());
        ctx.update(&[0]);
    }
    let digest = ctx.finish();
    let hex: String = digest.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect();
    let name = object.name.as_deref().unwrap_or("object");
    // A name is a DNS subdomain (≤ 253); object names can be that long too.
    let cut = name.char_indices().nth(200).map_or(name.len(), |(i, _)| i);
    format!("{}.{hex}", name[..cut].trim_end_matches('.'))
}

// === cleanup ===

/// What [`remove`] deleted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Removed {
    pub reports: usize,
    pub events: usize,
    /// Deletions the cluster refused.
    pub errors: Vec<String>,
}

/// What an audit writes, by API prefix and plural.
const WRITTEN: [(&str, &str, &str); 3] = [
    (GROUP_PATH, "policyreports", "PolicyReport"),
    (GROUP_PATH, "clusterpolicyreports", "ClusterPolicyReport"),
    ("/api/v1", "events", "Event"),
];

/// Deletes what audits wrote: the policy reports named [`POLICY`] and the
/// [`EVENT_REASON`] Events, found by the [`MANAGED_BY`] label; with
/// `owner_uid`, only those that owner owns (what one release's background
/// audit wrote). The chart's pre-delete hook runs this on `helm uninstall`:
/// the garbage collector deletes owned reports with their owner, but has
/// ignored Events in every API group since Kubernetes 1.25.
pub async fn remove(connection: &Connection, owner_uid: Option<&str>) -> Result<Removed, AuditError> {
    let mut removed = Removed::default();
    for (prefix, plural, kind) in WRITTEN {
        let found = match ours(connection, prefix, plural, kind, owner_uid).await {
            Ok(found) => found,
            // The CRDs are not installed: no report was ever written.
            Err(None) => continue,
            Err(Some(RequestFailure::Fatal(m))) => return Err(AuditError::Unreachable(m)),
            Err(Some(RequestFailure::Request(m))) => {
                removed.errors.push(m);
                continue;
            }
        };
        for meta in found {
            let collection = match &meta.namespace {
                Some(ns) => format!("{prefix}/namespaces/{ns}/{plural}"),
                None => format!("{prefix}/{plural}"),
            };
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
struct Meta {
    name: String,
    namespace: Option<String>,
    uid: String,
    #[serde(rename = "ownerReferences", default)]
    owners: Vec<OwnerUid>,
}

#[derive(Debug, Deserialize)]
struct OwnerUid {
    uid: String,
}

#[derive(Debug, Deserialize)]
struct Item {
    metadata: Meta,
    /// An Event's reason; reports have none.
    reason: Option<String>,
}

impl Item {
    /// Whether an audit wrote this `kind` of object (the label selected it;
    /// the name or reason says it is an audit's) and `owner_uid` owns it.
    fn ours(&self, kind: &str, owner_uid: Option<&str>) -> bool {
        let wrote = if kind == "Event" {
            self.reason.as_deref() == Some(EVENT_REASON)
        } else {
            self.metadata.name == POLICY
        };
        wrote && owner_uid.is_none_or(|uid| self.metadata.owners.iter().any(|o| o.uid == uid))
    }
}

/// The objects of `plural` in every namespace that an audit wrote (and
/// `owner_uid` owns). `Err(None)`: the cluster does not serve them.
async fn ours(
    connection: &Connection,
    prefix: &str,
    plural: &str,
    kind: &str,
    owner_uid: Option<&str>,
) -> Result<Vec<Meta>, Option<RequestFailure>> {
    let path = format!("{prefix}/{plural}");
    let mut params = ListParams::default()
        .labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1))
        .limit(500);
    let mut found = Vec::new();
    loop {
        let request = Request::new(&path)
            .list(&params)
            .map_err(|e| Some(RequestFailure::Request(format!("cannot list {kind}s: {e}"))))?;
        let mut page: Page<Item> = match connection.client.request(request).await {
            Ok(page) => page,
            Err(kube::Error::Api(s)) if s.code == 404 && kind != "Event" => return Err(None),
            Err(e) => return Err(Some(connection.describe(&format!("list {kind}s"), &e))),
        };
        let next = page.next();
        found.extend(
            page.items
                .into_iter()
                .filter(|item| item.ours(kind, owner_uid))
                .map(|item| item.metadata),
        );
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
    let request = Request::new("/apis/rbac.authorization.k8s.io/v1/clusterroles")
        .get(name, &Default::default())
        .map_err(|e| RequestFailure::Request(format!("cannot {doing}: {e}")))?;
    let role: Value = connection
        .client
        .request(request)
        .await
        .map_err(|e| connection.describe(&doing, &e))?;
    role.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| RequestFailure::Request(format!("ClusterRole \"{name}\" has no uid")))
}

/// The owner reference put on what the background audit writes.
pub fn cluster_role_owner(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": name, "uid": uid})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{BAD, REPO, incident_allowlist};

    fn stale_pod(policy: &crate::policy::Policy) -> ObjectReport {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "models", "uid": "u-1"},
            "spec": {"containers": [{"name": "ovms", "image": format!("{REPO}@{BAD}")},
                                    {"name": "sidecar", "image": format!("{REPO}@{BAD}")}]}});
        let list = incident_allowlist();
        let j = crate::judge::judge(&pod, None, policy, &list);
        ObjectReport::new("cluster:e2e".into(), &pod, &j, &list, |_| None)
    }

    #[test]
    fn a_stale_image_fails_and_names_its_object() {
        let results = results_of(&stale_pod(&Default::default()), 7);
        assert_eq!(results.len(), 2);
        let r = &results[0];
        assert_eq!(
            (&r["policy"], &r["rule"], &r["result"], &r["severity"]),
            (
                &json!("digest-gate"),
                &json!("digest_not_promoted"),
                &json!("fail"),
                &json!("high")
            )
        );
        assert_eq!(
            r["resources"][0],
            json!({"apiVersion": "v1", "kind": "Pod", "namespace": "models", "name": "p", "uid": "u-1"})
        );
        assert_eq!(r["properties"]["container"], "ovms");
        assert_eq!(summary(&results)["fail"], 2);
    }

    #[test]
    fn audit_mode_would_rewrite_is_a_warning() {
        let policy = crate::policy::Policy {
            mode: crate::policy::Mode::Audit,
            ..Default::default()
        };
        let results = results_of(&stale_pod(&policy), 7);
        assert_eq!(results[0]["result"], "warn");
    }

    #[test]
    fn a_finding_seen_before_keeps_its_first_timestamp() {
        let object = stale_pod(&Default::default());
        let old = results_of(&object, 7);
        let mut new = results_of(&object, 99);
        keep_first_seen(&mut new, &old);
        assert_eq!(new, old);
    }

    #[test]
    fn event_names_are_the_findings_own() {
        let object = stale_pod(&Default::default());
        let (a, b) = (&object.images[0], &object.images[1]);
        assert_eq!(event_name(&object, a), event_name(&object, a));
        assert_ne!(event_name(&object, a), event_name(&object, b));
        assert!(event_name(&object, a).starts_with("p."));
        let mut long = object.clone();
        long.name = Some("x".repeat(253));
        assert!(event_name(&long, a).len() <= 253);
    }

    #[test]
    fn cleanup_deletes_only_what_an_audit_wrote_and_the_owner_owns() {
        let item = |v: Value| serde_json::from_value::<Item>(v).unwrap();
        let owned = json!({"name": "p.0123", "namespace": "m", "uid": "e",
                           "ownerReferences": [{"uid": "role-1", "kind": "ClusterRole"}]});
        let event = item(json!({"metadata": owned, "reason": EVENT_REASON}));
        assert!(event.ours("Event", None));
        assert!(event.ours("Event", Some("role-1")));
        assert!(!event.ours("Event", Some("role-2")), "another release's");
        let other =
            item(json!({"metadata": {"name": "p.1", "namespace": "m", "uid": "f"}, "reason": "Pulled"}));
        assert!(
            !other.ours("Event", None),
            "labelled by someone else, not an audit's reason"
        );
        let report = item(json!({"metadata": {"name": POLICY, "namespace": "m", "uid": "r"}}));
        assert!(report.ours("PolicyReport", None));
        assert!(
            !report.ours("PolicyReport", Some("role-1")),
            "written by the CLI, owned by no release"
        );
        let kyverno =
            item(json!({"metadata": {"name": "cpol-require-labels", "namespace": "m", "uid": "k"}}));
        assert!(!kyverno.ours("PolicyReport", None));
    }

    #[test]
    fn passing_results_give_way_when_a_report_would_not_fit() {
        let object = stale_pod(&Default::default());
        let fail = results_of(&object, 7).remove(0);
        let mut pass = fail.clone();
        pass["result"] = "pass".into();
        pass["message"] = "x".repeat(4096).into();
        let mut results = vec![pass; 300];
        results.push(fail);
        let mut notes = Vec::new();
        let content = fit(results, Some("models"), &mut notes);
        assert_eq!(content.results.len(), 1);
        assert_eq!(
            (content.summary["pass"].clone(), content.summary["fail"].clone()),
            (json!(300), json!(1))
        );
        assert!(notes[0].contains("300 passing results"), "{notes:?}");
    }
}
