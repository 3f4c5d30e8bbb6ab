//! `--policy-reports`: the findings gathered per namespace, fitted under
//! etcd's limit, and each report written only when it changed (a result
//! keeps the timestamp of the run that first found it).

use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use kube::core::Request;
use kube::core::params::{ListParams, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use strum::VariantArray;

use super::*;
use crate::audit::{AuditError, Connection, Covered, Page, RequestFailure};
use crate::judge::ImageVerdict;
use crate::policy::{Reason, Verdict};
use crate::published::State;
use crate::report::{ImageReport, ObjectReport, UpgradeChange};

/// One report's content: what is compared with the stored one.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Content {
    pub(super) results: Vec<Value>,
    pub(super) summary: Value,
    /// Whether it has an owner reference: a report the CLI made is owned
    /// once the background audit (which has an owner) writes it.
    pub(super) owned: bool,
}

impl Content {
    /// What tells two contents apart: a hash of their results and summary
    /// (maps serialise in key order, so the same content hashes the same).
    pub(super) fn fingerprint(results: &[Value], summary: &Value) -> u64 {
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
    /// The reports' name: [`POLICY`] for an audit's, a pre-flight's own.
    pub(super) name: String,
    pub(super) passes: bool,
    pub(super) namespaces: BTreeMap<Option<String>, Namespace>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Namespace {
    pub(super) results: Vec<Box<str>>,
    pub(super) counts: BTreeMap<PolicyResult, u64>,
}

impl Gathered {
    /// Lists passing results too with `passes` (`--policy-reports-passes`).
    pub fn new(passes: bool) -> Self {
        Self {
            name: POLICY.to_owned(),
            passes,
            ..Self::default()
        }
    }

    /// A pre-flight's reports, named `digest-gate-preflight-<what>`: never
    /// an audit's, so neither run touches the other's.
    pub fn preflight(what: &str) -> Self {
        Self {
            name: format!("{PREFLIGHT_PREFIX}{what}"),
            ..Self::default()
        }
    }

    /// The reports' name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Adds an object's results as a pre-flight reports them: one per
    /// image the upgrade concerns, its category the rule; `fail` for what
    /// approving leaves stale, `warn` for what is stale either way, `pass`
    /// for what approving fixes. `target` names the CSV.
    pub fn add_upgrade(&mut self, object: &ObjectReport, target: &str) {
        let results = results_of(object);
        for (image, (_, mut value)) in object.images.iter().zip(results) {
            let Some(change) = image.change else { continue };
            let result = match change {
                UpgradeChange::StaleAfterUpgrade => PolicyResult::Fail,
                UpgradeChange::AlreadyStale => PolicyResult::Warn,
                UpgradeChange::FixedByUpgrade => PolicyResult::Pass,
            };
            value["policy"] = PREFLIGHT_POLICY.into();
            value["source"] = PREFLIGHT_POLICY.into();
            value["rule"] = json!(change);
            value["result"] = json!(result);
            value["category"] = "Operator upgrade".into();
            value["properties"]["target"] = target.into();
            self.push(object.namespace.clone(), result, value);
        }
    }

    /// Adds a digest the target promotes that will not (`fails`) or may
    /// not pull, on `resource` (the InstallPlan, or the Subscription of a
    /// target read from a file) in `namespace`.
    pub fn add_pull(&mut self, namespace: &str, resource: Value, pull: PullResult<'_>) {
        let (rule, result) = match pull.fails {
            true => ("unpullable_after_upgrade", PolicyResult::Fail),
            false => ("unverifiable_after_upgrade", PolicyResult::Warn),
        };
        let value = json!({
            "policy": PREFLIGHT_POLICY,
            "rule": rule,
            "result": result,
            "message": format!("{} ({}): {}", pull.reference, pull.state, pull.detail),
            "source": PREFLIGHT_POLICY,
            "category": "Operator upgrade",
            "scored": true,
            "resources": [resource],
            "properties": {"image": pull.reference, "target": pull.target},
        });
        self.push(Some(namespace.to_owned()), result, value);
    }

    fn push(&mut self, namespace: Option<String>, result: PolicyResult, mut value: Value) {
        if let Some(severity) = result.severity() {
            value["severity"] = severity.into();
        } else if let Some(map) = value.as_object_mut() {
            map.remove("severity");
        }
        let ns = self.namespaces.entry(namespace).or_default();
        *ns.counts.entry(result).or_default() += 1;
        if self.passes || result.needs_action() {
            ns.results.push(value.to_string().into());
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

/// A digest a pre-flight's target promotes, as its report lists it.
pub struct PullResult<'a> {
    pub target: &'a str,
    /// `repository@digest`.
    pub reference: &'a str,
    pub state: State,
    pub detail: &'a str,
    /// Whether it will not pull (else: no answer was had).
    pub fails: bool,
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
    let stored = stored_reports(connection, covered, (&gathered.name, gathered.passes)).await?;
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
        let at = (&*gathered.name, ns.as_deref());
        match write_report(connection, at, &content, owner, old.is_some()).await {
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
pub(super) fn stamped(identity: &str, old: Option<&Stored>, seconds: u64) -> Value {
    let mut result: Value = serde_json::from_str(identity).expect("gathered results are JSON");
    result["timestamp"] = old
        .and_then(|o| o.first_seen.get(identity))
        .cloned()
        .unwrap_or_else(|| json!({"seconds": seconds, "nanos": 0}));
    result
}

pub(super) fn covers(covered: &Covered, ns: Option<&str>) -> bool {
    match (ns, &covered.namespaces) {
        (None, _) => covered.cluster,
        (Some(_), None) => true,
        (Some(ns), Some(set)) => set.contains(ns),
    }
}

/// The results for one object, without timestamps: one per image, `rule`
/// its reason code.
pub(super) fn results_of(object: &ObjectReport) -> Vec<(PolicyResult, Value)> {
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
            if let Some(severity) = result.severity() {
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
    pub(super) enum PolicyResult {
        Pass,
        Fail,
        Warn,
        Error,
        Skip,
    }
}

impl PolicyResult {
    /// The result a written report holds.
    pub(super) fn of(result: &Value) -> Option<Self> {
        result["result"].as_str()?.parse().ok()
    }

    /// Whether the result asks for action: what a report lists (passes
    /// only with `--policy-reports-passes`), what a full report drops last,
    /// and what Events are written for.
    pub(super) fn needs_action(self) -> bool {
        !matches!(self, Self::Pass | Self::Skip)
    }

    fn severity(self) -> Option<&'static str> {
        match self {
            Self::Fail => Some("high"),
            Self::Warn => Some("medium"),
            _ => None,
        }
    }
}

/// Whether an object has a finding an Event is written for.
pub fn needs_action(object: &ObjectReport) -> bool {
    object.images.iter().any(|i| result_of(i).needs_action())
}

/// `fail` for what is denied or (stored, so not yet rewritten) off its
/// promoted digest; `warn` for what audit mode would rewrite; `skip` for an
/// exemption; `pass` otherwise.
pub(super) fn result_of(image: &ImageReport) -> PolicyResult {
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

pub(super) fn sort_results(results: &mut [Value]) {
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
pub(super) fn fit(
    mut results: Vec<Value>,
    summary: Value,
    ns: Option<&str>,
    notes: &mut Vec<String>,
) -> Content {
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

pub(super) fn summary(counts: &BTreeMap<PolicyResult, u64>) -> Value {
    let all: BTreeMap<&str, u64> = PolicyResult::VARIANTS
        .iter()
        .map(|o| (o.into(), counts.get(o).copied().unwrap_or(0)))
        .collect();
    json!(all)
}

/// What is kept of a stored report: enough to tell whether this run's
/// content differs, and when each result it lists was first found.
#[derive(Debug)]
pub(super) struct Stored {
    pub(super) fingerprint: u64,
    /// A result's identity (its compact JSON without the timestamp) and
    /// its timestamp; passes only with `--policy-reports-passes`.
    pub(super) first_seen: HashMap<String, Value>,
    pub(super) owned: bool,
}

/// A stored report as listed.
#[derive(Deserialize)]
pub(super) struct StoredItem {
    pub(super) metadata: StoredMeta,
    #[serde(default)]
    pub(super) results: Vec<Value>,
    #[serde(default)]
    pub(super) summary: Value,
}

#[derive(Deserialize)]
pub(super) struct StoredMeta {
    pub(super) name: String,
    pub(super) namespace: Option<String>,
    #[serde(default, rename = "ownerReferences")]
    pub(super) owner_references: Vec<serde::de::IgnoredAny>,
}

impl StoredItem {
    pub(super) fn kept(self, passes: bool) -> Stored {
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
pub(super) const STORED_PAGE: u32 = 4;

/// The reports named `name` with the [`MANAGED_BY`] label, by namespace
/// (`None` for the ClusterPolicyReport).
pub(super) async fn stored_reports(
    connection: &Connection,
    covered: &Covered,
    (name, passes): (&str, bool),
) -> Result<HashMap<Option<String>, Stored>, AuditError> {
    let namespaced = report_resource(true);
    let mut paths = match &covered.namespaces {
        None => vec![collection(&namespaced, None)],
        Some(set) => set.iter().map(|ns| collection(&namespaced, Some(ns))).collect(),
    };
    if covered.cluster {
        paths.push(collection(&report_resource(false), None));
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
                if item.metadata.name != name {
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

pub(super) fn stored_error(connection: &Connection, e: &kube::Error) -> AuditError {
    let message = connection.describe("list policy reports", e).message().to_owned();
    AuditError::Request(match e {
        kube::Error::Api(s) if s.code == 404 => format!(
            "--policy-reports: the cluster does not serve wgpolicyk8s.io/v1alpha2 policy reports: install their CRDs (the chart's audit.policyReports.installCRDs) ({message})"
        ),
        _ => format!("--policy-reports: {message}"),
    })
}

pub(super) async fn write_report(
    connection: &Connection,
    (name, ns): (&str, Option<&str>),
    content: &Content,
    owner: Option<&Value>,
    exists: bool,
) -> Result<(), RequestFailure> {
    let resource = report_resource(ns.is_some());
    let path = collection(&resource, ns);
    let at = match ns {
        Some(ns) => format!("write the {} {name} in namespace \"{ns}\"", resource.kind),
        None => format!("write the {} {name}", resource.kind),
    };
    let request = if exists {
        // A merge patch replaces the arrays whole: the stored report
        // becomes exactly this run's.
        let mut patch = json!({"results": content.results, "summary": content.summary});
        if let Some(owner) = owner {
            patch["metadata"] = json!({"ownerReferences": [owner]});
        }
        Request::new(&path).patch(name, &PatchParams::default(), &Patch::Merge(&patch))
    } else {
        let mut metadata = json!({"name": name, "labels": {MANAGED_BY.0: MANAGED_BY.1}});
        if let Some(ns) = ns {
            metadata["namespace"] = ns.into();
        }
        if let Some(owner) = owner {
            metadata["ownerReferences"] = json!([owner]);
        }
        let body = json!({
            "apiVersion": resource.api_version,
            "kind": resource.kind,
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
