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
use crate::report::{ImageReport, ObjectReport};

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

impl Content {
    /// What tells two contents apart: a hash of their results and summary
    /// (maps serialise in key order, so the same content hashes the same).
    fn fingerprint(results: &[Value], summary: &Value) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for r in results {
            r.to_string().hash(&mut h);
        }
        summary.to_string().hash(&mut h);
        h.finish()
    }
}

/// What policy reports will say, gathered object by object while the audit
/// judges, so that no object is kept for them: per namespace (`None`: the
/// ClusterPolicyReport), the results that need action (`fail`, `warn`;
/// every result with `passes`), each kept as compact JSON without its
/// timestamp, and the count of every result for the summary.
#[derive(Debug, Clone, Default)]
pub struct Gathered {
    passes: bool,
    namespaces: BTreeMap<Option<String>, Namespace>,
}

#[derive(Debug, Clone, Default)]
struct Namespace {
    results: Vec<Box<str>>,
    counts: BTreeMap<PolicyResult, u64>,
}

impl Gathered {
    /// Lists passing results too with `passes` (`--policy-reports-passes`).
    pub fn new(passes: bool) -> Self {
        Self {
            passes,
            ..Self::default()
        }
    }

    /// The results of `objects`, as [`Gathered::add`] gathers them.
    pub fn of<'a>(objects: impl IntoIterator<Item = &'a ObjectReport>, passes: bool) -> Self {
        let mut gathered = Self::new(passes);
        for object in objects {
            gathered.add(object);
        }
        gathered
    }

    /// Adds an object's results.
    pub fn add(&mut self, object: &ObjectReport) {
        if object.images.is_empty() {
            return;
        }
        let ns = self.namespaces.entry(object.namespace.clone()).or_default();
        for (result, value) in results_of(object) {
            *ns.counts.entry(result).or_default() += 1;
            if self.passes || result.needs_action() {
                ns.results.push(value.to_string().into());
            }
        }
    }
}

/// Writes a PolicyReport per namespace with results (and a
/// ClusterPolicyReport for cluster-scoped objects, when they were read), and
/// empties the reports of covered namespaces that no longer have any.
/// `Err` when nothing could be written at all (the CRDs are missing).
pub async fn policy_reports(
    connection: &Connection,
    gathered: &Gathered,
    covered: &Covered,
    owner: Option<&Value>,
    now: SystemTime,
) -> Result<Written, AuditError> {
    let seconds = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let stored = stored_reports(connection, covered, gathered.passes).await?;
    let mut wanted: BTreeMap<Option<String>, Option<&Namespace>> = gathered
        .namespaces
        .iter()
        .map(|(ns, g)| (ns.clone(), Some(g)))
        .collect();
    for ns in stored.keys() {
        if covers(covered, ns.as_deref()) {
            wanted.entry(ns.clone()).or_default();
        }
    }
    if covered.cluster {
        wanted.entry(None).or_default();
    }
    let mut written = Written::default();
    for (ns, found) in wanted {
        let old = stored.get(&ns);
        let empty = Namespace::default();
        let found = found.unwrap_or(&empty);
        if old.is_none() && found.counts.values().sum::<u64>() == 0 {
            continue;
        }
        let mut results: Vec<Value> = found.results.iter().map(|r| stamped(r, old, seconds)).collect();
        sort_results(&mut results);
        let mut content = fit(results, summary(&found.counts), ns.as_deref(), &mut written.notes);
        content.owned = owner.is_some() || old.is_some_and(|o| o.owned);
        if old.is_some_and(|o| {
            o.owned == content.owned
                && o.fingerprint == Content::fingerprint(&content.results, &content.summary)
        }) {
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

/// A gathered result with its timestamp: that of the run that first found
/// it, so an unchanged finding leaves the report unchanged, else now.
fn stamped(identity: &str, old: Option<&Stored>, seconds: u64) -> Value {
    let mut result: Value = serde_json::from_str(identity).expect("gathered results are JSON");
    result["timestamp"] = old
        .and_then(|o| o.first_seen.get(identity))
        .cloned()
        .unwrap_or_else(|| json!({"seconds": seconds, "nanos": 0}));
    result
}

fn covers(covered: &Covered, ns: Option<&str>) -> bool {
    match (ns, &covered.namespaces) {
        (None, _) => covered.cluster,
        (Some(_), None) => true,
        (Some(ns), Some(set)) => set.contains(ns),
    }
}

/// The results for one object, without timestamps: one per image, `rule`
/// its reason code.
fn results_of(object: &ObjectReport) -> Vec<(PolicyResult, Value)> {
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
            (result, r)
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

    /// Whether the result asks for action: what a report lists (passes
    /// only with `--policy-reports-passes`), what a full report drops last,
    /// and what Events are written for.
    fn needs_action(self) -> bool {
        !matches!(self, Self::Pass | Self::Skip)
    }
}

/// Whether an object has a finding an Event is written for.
pub fn needs_action(object: &ObjectReport) -> bool {
    object.images.iter().any(|i| result_of(i).needs_action())
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

/// The report's content within [`MAX_REPORT_BYTES`]: `pass` and `skip`
/// results (listed with `--policy-reports-passes`) go first, then findings
/// past the budget, each drop noted. The summary counts them all.
fn fit(mut results: Vec<Value>, summary: Value, ns: Option<&str>, notes: &mut Vec<String>) -> Content {
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

fn summary(counts: &BTreeMap<PolicyResult, u64>) -> Value {
    let all: BTreeMap<&str, u64> = PolicyResult::VARIANTS
        .iter()
        .map(|o| (o.into(), counts.get(o).copied().unwrap_or(0)))
        .collect();
    json!(all)
}

/// What is kept of a stored report: enough to tell whether this run's
/// content differs, and when each result it lists was first found.
#[derive(Debug)]
struct Stored {
    fingerprint: u64,
    /// A result's identity (its compact JSON without the timestamp) and
    /// its timestamp; passes only with `--policy-reports-passes`.
    first_seen: HashMap<String, Value>,
    owned: bool,
}

/// A stored report as listed.
#[derive(Deserialize)]
struct StoredItem {
    metadata: StoredMeta,
    #[serde(default)]
    results: Vec<Value>,
    #[serde(default)]
    summary: Value,
}

#[derive(Deserialize)]
struct StoredMeta {
    name: String,
    namespace: Option<String>,
    #[serde(default, rename = "ownerReferences")]
    owner_references: Vec<serde::de::IgnoredAny>,
}

impl StoredItem {
    fn kept(self, passes: bool) -> Stored {
        let fingerprint = Content::fingerprint(&self.results, &self.summary);
        let first_seen = self
            .results
            .into_iter()
            .filter(|r| passes || PolicyResult::of(r).is_none_or(PolicyResult::needs_action))
            .map(|mut r| {
                let timestamp = r.as_object_mut().and_then(|m| m.remove("timestamp"));
                (r.to_string(), timestamp.unwrap_or(Value::Null))
            })
            .collect();
        Stored {
            fingerprint,
            first_seen,
            owned: !self.metadata.owner_references.is_empty(),
        }
    }
}

/// Reports listed a few at a time: each may hold up to a MiB of results
/// (those an earlier release wrote list every pass).
const STORED_PAGE: u32 = 4;

/// The reports named [`POLICY`] with the [`MANAGED_BY`] label, by namespace
/// (`None` for the ClusterPolicyReport).
async fn stored_reports(
    connection: &Connection,
    covered: &Covered,
    passes: bool,
) -> Result<HashMap<Option<String>, Stored>, AuditError> {
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
    let mut params = ListParams::default()
        .labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1))
        .limit(STORED_PAGE);
    let mut stored = HashMap::new();
    for path in paths {
        loop {
            let request = Request::new(&path)
                .list(&params)
                .map_err(|e| AuditError::Request(e.to_string()))?;
            let mut page: Page<StoredItem> = connection
                .client
                .request(request)
                .await
                .map_err(|e| stored_error(connection, &e))?;
            let next = page.next();
            for item in page.items {
                if item.metadata.name != POLICY {
                    continue;
                }
                stored.insert(item.metadata.namespace.clone(), item.kept(passes));
            }
            match next {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        params.continue_token = None;
    }
    Ok(stored)
}

fn stored_error(connection: &Connection, e: &kube::Error) -> AuditError {
    let message = connection.describe("list policy reports", e).message().to_owned();
    AuditError::Request(match e {
        kube::Error::Api(s) if s.code == 404 => format!(
            "--policy-reports: the cluster does not serve wgpolicyk8s.io/v1alpha2 policy reports: install their CRDs (the chart's audit.policyReports.installCRDs) ({message})"
        ),
        _ => format!("--policy-reports: {message}"),
    })
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
    objects: &[ObjectReport],
    owner: Option<&Value>,
    now: SystemTime,
) -> Result<Written, AuditError> {
    let time = humantime::format_rfc3339_seconds(now).to_string();
    let mut written = Written::default();
    let mut seen = BTreeSet::new();
    for object in objects {
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
        let object = stale_pod(&Default::default());
        let results = results_of(&object);
        assert_eq!(results.len(), 2);
        let r = &results[0].1;
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
        let gathered = Gathered::of([&object], false);
        assert_eq!(
            summary(&gathered.namespaces[&Some("models".into())].counts)["fail"],
            2
        );
    }

    #[test]
    fn audit_mode_would_rewrite_is_a_warning() {
        let policy = crate::policy::Policy {
            mode: crate::policy::Mode::Audit,
            ..Default::default()
        };
        let results = results_of(&stale_pod(&policy));
        assert_eq!(results[0].1["result"], "warn");
    }

    #[test]
    fn passes_are_counted_and_listed_only_when_asked() {
        let stale = stale_pod(&Default::default());
        let mut fine = stale.clone();
        for image in &mut fine.images {
            image.verdict = ImageVerdict::Allow;
            image.rewrite = None;
        }
        for (passes, listed) in [(false, 2), (true, 4)] {
            let gathered = Gathered::of([&stale, &fine], passes);
            let ns = &gathered.namespaces[&Some("models".into())];
            assert_eq!(ns.results.len(), listed, "passes listed: {passes}");
            let summary = summary(&ns.counts);
            assert_eq!((&summary["fail"], &summary["pass"]), (&json!(2), &json!(2)));
        }
    }

    #[test]
    fn a_finding_seen_before_keeps_its_first_timestamp() {
        let object = stale_pod(&Default::default());
        let gathered = Gathered::of([&object], false);
        let identities = &gathered.namespaces[&Some("models".into())].results;
        let old: Vec<Value> = identities.iter().map(|r| stamped(r, None, 7)).collect();
        let stored = StoredItem {
            metadata: StoredMeta {
                name: POLICY.into(),
                namespace: Some("models".into()),
                owner_references: Vec::new(),
            },
            results: old.clone(),
            summary: Value::Null,
        }
        .kept(false);
        let new: Vec<Value> = identities.iter().map(|r| stamped(r, Some(&stored), 99)).collect();
        assert_eq!(new, old);
        assert_eq!(stored.fingerprint, Content::fingerprint(&new, &Value::Null));
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
        let fail = results_of(&object).remove(0).1;
        let mut pass = fail.clone();
        pass["result"] = "pass".into();
        pass["message"] = "x".repeat(4096).into();
        let mut results = vec![pass; 300];
        results.push(fail);
        let mut notes = Vec::new();
        let counts = [(PolicyResult::Pass, 300), (PolicyResult::Fail, 1)].into();
        let content = fit(results, summary(&counts), Some("models"), &mut notes);
        assert_eq!(content.results.len(), 1);
        assert_eq!(
            (content.summary["pass"].clone(), content.summary["fail"].clone()),
            (json!(300), json!(1))
        );
        assert!(notes[0].contains("300 passing results"), "{notes:?}");
    }
}
