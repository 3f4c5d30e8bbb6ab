//! `digest-gate audit`: judges what is already in a cluster, as `check`
//! judges files and the webhook judges what is written. An admission
//! webhook never sees objects stored before it was installed or before the
//! allowlist changed; the incident's stale ConfigMap was such an object.
//!
//! One run: discover which of the [kinds](crate::objects::kinds) the cluster
//! serves, list each (paginated, decoding only what the walkers read, so a
//! big cluster is never in memory at once), judge every object with
//! [`judge`] and report it with [`report`](crate::report),
//! naming each object's owner chain. Nothing is written unless asked:
//! [`write()`] writes policy reports and Events, [`write::remove`] deletes
//! them again.

pub mod bounded;
mod cluster;
pub mod credential;
pub mod installed;
mod judging;
pub mod named;
pub mod nodes;
mod owners;
pub mod write;

use std::collections::{BTreeMap, BTreeSet};

use kube::core::{
    ApiResource, DynamicObject, Request, Resource, discovery::Scope as ApiScope, params::ListParams,
};
use kube::discovery::{ApiCapabilities, Discovery, verbs};
use serde::Deserialize;
use serde_json::Value;

use crate::judge;
use crate::objects::{self, KINDS, Kind, Layout};
use crate::output::Writer;
use crate::policy::Verdict;
use crate::report::{ObjectReport, Report};

pub use cluster::{
    AuditError, CLUSTER_TIMEOUT, ClusterArgs, ClusterSettings, Connection, Context, Continues,
    MAX_RESPONSE_BYTES, RequestFailure, contexts, kubeconfig_notes,
};
use judging::Judging;
pub use judging::{Compared, finding};
pub use write::Written;

/// Which namespaces are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every namespace (`-A`), or those matching a label selector
    /// (`--namespace-selector`). Cluster-scoped kinds are read too.
    All { namespace_selector: Option<String> },
    /// These namespaces (`-n`). Cluster-scoped kinds are read only when
    /// `--kinds` names them.
    Namespaces(Vec<String>),
}

/// What to read.
#[derive(Debug, Clone)]
pub struct Target {
    pub scope: Scope,
    /// `-l`: only objects with these labels.
    pub label_selector: Option<String>,
    /// `--kinds`: only these, and each must be served and readable. `None`
    /// reads every kind the cluster serves.
    pub kinds: Option<Vec<&'static Kind>>,
    /// The namespace label that keeps the webhook away (break glass): the
    /// namespaces read that carry it are named in the report. `None`: not
    /// looked for.
    pub break_glass_label: Option<String>,
}

/// The chart's break-glass namespace label.
pub const BREAK_GLASS_LABEL: &str = "digest-gate.dev/break-glass";

/// What one run read and found.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    /// The objects judged and not written out (with no writer, all of
    /// them), the summary, errors and notes.
    pub report: Report,
    /// Objects read per kind, in table order.
    pub read: Vec<(&'static str, usize)>,
    /// Where everything was read: what a policy report may speak for.
    pub covered: Covered,
    /// Namespaces read that carry the break-glass label, with its value.
    pub break_glass: BTreeMap<String, String>,
    /// With `learn`: every distinct reference a workload will run
    /// (canonical repository, digest), what `--registry` verifies.
    pub will_run: BTreeSet<crate::reference::Pinned>,
    /// Objects with findings per (kind label, verdict); in audit mode the
    /// verdict is what rewrite mode would reach.
    pub findings: Vec<(&'static str, Verdict, usize)>,
    /// With [`Writes::policy_reports`]: the results gathered for them.
    pub gathered: Option<write::Gathered>,
    /// With [`Writes::events`]: the objects an Event is written for.
    pub flagged: Vec<ObjectReport>,
    /// Why the run stopped before reading everything (the cluster became
    /// unreachable): what was judged before stands, nothing is written.
    pub stopped: Option<String>,
    /// With [`compare`]: the objects some judgement has a finding for, by
    /// every rule set (the summary counts them all).
    pub compared: Vec<Compared>,
    /// Pod containers by what they run: `digest_gate_audit_images`.
    pub running: crate::fleet::Running,
}

impl Audit {
    /// Counts `report` in [`Audit::findings`] if it has one.
    pub fn found(&mut self, report: &ObjectReport) {
        let Some(verdict) = finding(report) else {
            return;
        };
        let kind = objects::kinds::kind_label(report.kind.as_deref().unwrap_or_default());
        match self.findings.iter_mut().find(|f| f.0 == kind && f.1 == verdict) {
            Some(f) => f.2 += 1,
            None => self.findings.push((kind, verdict, 1)),
        }
    }
}

/// Where a run read every object digest-gate judges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Covered {
    /// `None`: every namespace.
    pub namespaces: Option<BTreeSet<String>>,
    /// Whether the cluster-scoped kinds were read.
    pub cluster: bool,
}

/// What to write after reading.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Writes {
    pub policy_reports: bool,
    /// `--policy-reports-passes`: reports list passing results too (the
    /// summary counts them either way).
    pub passes: bool,
    pub events: bool,
    /// The owner reference put on everything written, so that deleting the
    /// owner (the chart's ClusterRole, on `helm uninstall`) has the garbage
    /// collector delete it.
    pub owner: Option<Value>,
}

/// Objects per page: ConfigMaps and Templates may be up to 1 MiB each, so
/// their pages are small to keep a page's memory bounded.
fn page_size(kind: &Kind) -> u32 {
    match kind.layout {
        Layout::EmbeddedRuntimes | Layout::Template => 20,
        // LLMInferenceServiceConfig presets run to 30 KB each.
        Layout::PodSpecs(_) => 100,
        _ => 500,
    }
}

/// Reads and judges `target` through `connection`. `Err` is a failure that
/// stops the run (unreachable server, refused credentials); anything that
/// could not be read but did not stop it is in the report's errors.
/// Each object's report goes to `out` once its owner chain is known (with
/// no writer, the report keeps them all), and to what `writes` will write.
/// With `learn`, it also collects what each workload will run
/// ([`Audit::will_run`]). `progress` counts the objects read, with the
/// kind and page being read as its message.
pub async fn run(
    connection: &Connection,
    target: &Target,
    rules: judge::Rules<'_>,
    learn: bool,
    writes: &Writes,
    out: Option<&mut Writer<'_>>,
    progress: &indicatif::ProgressBar,
) -> Result<Audit, AuditError> {
    read(connection, target, rules, &[], (learn, writes, out), progress).await
}

/// Reads `target` once and judges every object by `rules` and by each of
/// `also` (an upgrade's before and after): [`Audit::compared`] holds the
/// objects some judgement has a finding for; nothing is written.
/// `progress` counts the objects read, with the kind being read as its
/// message.
pub async fn compare(
    connection: &Connection,
    target: &Target,
    rules: judge::Rules<'_>,
    also: &[judge::Rules<'_>],
    progress: &indicatif::ProgressBar,
) -> Result<Audit, AuditError> {
    read(
        connection,
        target,
        rules,
        also,
        (false, &Writes::default(), None),
        progress,
    )
    .await
}

/// [`run`] and [`compare`]: what is read and judged, and (learn, writes,
/// out) what becomes of it.
async fn read<'r>(
    connection: &Connection,
    target: &Target,
    rules: judge::Rules<'r>,
    also: &'r [judge::Rules<'r>],
    (learn, writes, out): (bool, &Writes, Option<&mut Writer<'_>>),
    progress: &indicatif::ProgressBar,
) -> Result<Audit, AuditError> {
    let mut audit = Audit {
        gathered: writes.policy_reports.then(|| write::Gathered::new(writes.passes)),
        ..Audit::default()
    };
    if rules.published.is_some() {
        audit.report.summary.registry = Some(Default::default());
    }
    let mut served = discover(connection, target, &mut audit.report).await?;
    // Owners before what they own, so that a chain is known when an object
    // is judged and its report can go: Pods, the most and owning nothing,
    // last. An owner of a kind read later (a CronJob's Job) waits.
    served.sort_by_key(|(kind, ..)| kind.name == "Pod");
    let namespaces = namespaces(connection, &target.scope, &mut audit.report).await?;
    audit.covered.namespaces = match &namespaces {
        Namespaces::All => None,
        Namespaces::Selected(set) => Some(set.clone()),
        Namespaces::Given(list) => Some(list.iter().cloned().collect()),
    };
    if let Some(label) = target.break_glass_label.as_deref().filter(|l| !l.is_empty()) {
        audit.break_glass = break_glass(connection, label, &audit.covered, &mut audit.report).await;
    }
    let mut judging = Judging {
        rules,
        also,
        learn,
        events: writes.events,
        source: format!("cluster:{}", connection.context),
        owners: owners::Index::default(),
        pending: Vec::new(),
        out,
        progress,
    };
    let names: Vec<&str> = served.iter().map(|(kind, ..)| kind.name).collect();
    for (at, (kind, resource, caps)) in served.iter().enumerate() {
        let Some(places) = places(kind, &caps.scope, &namespaces, target, &mut audit) else {
            continue;
        };
        progress.set_message(format!("{}s", kind.name));
        let lister = Lister {
            connection,
            resource,
            page: page_size(kind),
            label_selector: target.label_selector.as_deref(),
            progress: Some(progress),
        };
        let listing = Listing {
            kind,
            lister: &lister,
            namespaces: &namespaces,
            to_come: &names[at..],
        };
        // What was judged: with --namespace-selector, objects of other
        // namespaces are listed but not read.
        let read = listing.judge(places, &mut judging, &mut audit).await;
        audit.read.push((kind.name, read));
        if audit.stopped.is_some() {
            break;
        }
    }
    judging.finish(&mut audit);
    audit
        .read
        .sort_by_key(|(name, _)| KINDS.iter().position(|k| k.name == *name));
    Ok(audit)
}

/// One kind's listing.
struct Listing<'a> {
    kind: &'static Kind,
    lister: &'a Lister<'a>,
    namespaces: &'a Namespaces,
    /// The kinds not read yet, this one included.
    to_come: &'a [&'a str],
}

impl Listing<'_> {
    /// Lists and judges the kind in each of `places`; the number judged.
    async fn judge(
        &self,
        places: Vec<Option<&String>>,
        judging: &mut Judging<'_, '_>,
        audit: &mut Audit,
    ) -> usize {
        let mut read = 0;
        let to_come = |k: &str| self.to_come.contains(&k);
        for namespace in places {
            let judged = self.lister.list(namespace.map(String::as_str), |object| {
                if let Namespaces::Selected(set) = self.namespaces {
                    let ns = object.pointer("/metadata/namespace").and_then(Value::as_str);
                    if ns.is_some_and(|ns| !set.contains(ns)) {
                        return;
                    }
                }
                read += 1;
                judging.object(audit, self.kind, &self.lister.resource.group, &object, &to_come);
            });
            match judged.await {
                Ok(()) => {}
                // Reports of what was read may have gone out already: the
                // run ends with them, and with this as its error.
                Err(RequestFailure::Fatal(m)) => {
                    audit.report.errors.push(m.clone());
                    audit.stopped = Some(m);
                    break;
                }
                Err(RequestFailure::Request(m)) => audit.report.errors.push(m),
            }
        }
        read
    }
}

/// Where `kind` is listed: once across the cluster, or once in each
/// namespace given; `None` (noted) for a cluster-scoped kind that `-n`
/// leaves out.
fn places<'n>(
    kind: &Kind,
    scope: &ApiScope,
    namespaces: &'n Namespaces,
    target: &Target,
    audit: &mut Audit,
) -> Option<Vec<Option<&'n String>>> {
    match (scope, namespaces) {
        (ApiScope::Cluster, Namespaces::Given(_))
            if !target
                .kinds
                .as_ref()
                .is_some_and(|ks| ks.iter().any(|k| std::ptr::eq(*k, kind))) =>
        {
            audit.report.notes.push(format!(
                "{}s are cluster-scoped: not read with -n (use -A, or --kinds {})",
                kind.name, kind.name
            ));
            None
        }
        (ApiScope::Cluster, _) => {
            audit.covered.cluster = true;
            Some(vec![None])
        }
        (_, Namespaces::All | Namespaces::Selected(_)) => Some(vec![None]),
        (ApiScope::Namespaced, Namespaces::Given(list)) => Some(list.iter().map(Some).collect()),
    }
}

/// Writes what `writes` asks for about `audit`, and notes what was written.
/// Policy reports are written only from a complete read: a report written
/// from a partial one would drop the results of what could not be read.
pub async fn write(connection: &Connection, audit: &mut Audit, writes: &Writes) -> Result<(), AuditError> {
    if let Some(why) = &audit.stopped {
        return Err(AuditError::Unreachable(why.clone()));
    }
    let now = std::time::SystemTime::now();
    let mut done = Vec::new();
    if let (true, Some(gathered)) = (writes.policy_reports, &audit.gathered) {
        if audit.report.errors.is_empty() {
            let w = write::policy_reports(connection, gathered, &audit.covered, writes.owner.as_ref(), now)
                .await?;
            done.push(("policy reports", w));
        } else {
            audit
                .report
                .notes
                .push("policy reports not written: not everything could be read (see the errors)".into());
        }
    }
    if writes.events {
        done.push((
            "events",
            write::events(connection, &audit.flagged, writes.owner.as_ref(), now).await?,
        ));
    }
    for (what, w) in done {
        audit.report.notes.push(format!(
            "{what}: {} created, {} updated, {} unchanged",
            w.created, w.updated, w.unchanged
        ));
        audit.report.notes.extend(w.notes);
        audit.report.errors.extend(w.errors);
    }
    Ok(())
}

/// The kinds to read that the cluster serves, each with the resource it is
/// listed as (the first of its groups served, in its most stable version).
async fn discover(
    connection: &Connection,
    target: &Target,
    report: &mut Report,
) -> Result<Vec<(&'static Kind, ApiResource, ApiCapabilities)>, AuditError> {
    // An InstallPlan holds no image: its approval is the webhook's to review.
    let wanted: Vec<&'static Kind> = target
        .kinds
        .clone()
        .unwrap_or_else(|| KINDS.iter().filter(|k| k.layout != Layout::Approval).collect());
    let groups: BTreeSet<&str> = wanted.iter().flat_map(|k| k.groups.iter().copied()).collect();
    let groups: Vec<&str> = groups.into_iter().collect();
    let discovery = Discovery::new(connection.client.clone())
        .filter(&groups)
        .run()
        .await
        .map_err(|e| connection.describe("discover the cluster's APIs", &e))?;
    let mut served = Vec::new();
    for kind in wanted {
        let found = kind.groups.iter().find_map(|g| {
            discovery
                .get(g)?
                .resources_by_stability()
                .into_iter()
                .find(|(r, _)| r.kind == kind.name)
        });
        match found {
            Some((resource, caps)) if caps.supports_operation(verbs::LIST) => {
                served.push((kind, resource, caps));
            }
            Some((resource, _)) => report.notes.push(format!(
                "{}s ({}) cannot be listed on this cluster: not read",
                kind.name, resource.api_version
            )),
            None if target.kinds.is_some() => report.errors.push(format!(
                "the cluster does not serve {}s (API group {}): is its CRD installed?",
                kind.name,
                groups_text(kind)
            )),
            None => report.notes.push(format!(
                "the cluster does not serve {}s (API group {}): not read",
                kind.name,
                groups_text(kind)
            )),
        }
    }
    Ok(served)
}

fn groups_text(kind: &Kind) -> String {
    let names: Vec<&str> = kind
        .groups
        .iter()
        .map(|g| if g.is_empty() { "core" } else { g })
        .collect();
    names.join(" or ")
}

/// Namespaces, as the lister asks for them.
fn namespace_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Namespace".into(),
        plural: "namespaces".into(),
    }
}

/// The namespaces among those read that carry `label`, each noted in the
/// report: the webhook's entries skip them, so only an audit still sees
/// what runs there. A client that may not list Namespaces gets a note, not
/// an error: the objects were still read.
async fn break_glass(
    connection: &Connection,
    label: &str,
    covered: &Covered,
    report: &mut Report,
) -> BTreeMap<String, String> {
    let core = namespace_resource();
    let mut found = BTreeMap::new();
    let lister = Lister {
        connection,
        resource: &core,
        page: 500,
        label_selector: Some(label),
        progress: None,
    };
    // Decoded whole: the walkers' shape has no labels, and a Namespace is small.
    let listed = lister.list_as::<Whole>(None, |ns| {
        let name = ns.pointer("/metadata/name").and_then(Value::as_str);
        let value = ns
            .pointer("/metadata/labels")
            .and_then(|l| l.get(label))
            .and_then(Value::as_str);
        if let (Some(name), Some(value)) = (name, value)
            && covered.namespaces.as_ref().is_none_or(|set| set.contains(name))
        {
            found.insert(name.to_owned(), value.to_owned());
        }
    });
    if let Err(f) = listed.await {
        report.notes.push(format!(
            "could not look for break-glass namespaces (label {label}): {}",
            f.message()
        ));
    }
    for (name, value) in &found {
        report.notes.push(format!(
            "namespace \"{name}\" has {label}={value}: break glass, the webhook does not review it; what runs there is audited here"
        ));
    }
    found
}

/// The namespaces to read, resolved.
enum Namespaces {
    All,
    /// Those matching `--namespace-selector`.
    Selected(BTreeSet<String>),
    /// Those given with `-n`, each checked to exist.
    Given(Vec<String>),
}

async fn namespaces(
    connection: &Connection,
    scope: &Scope,
    report: &mut Report,
) -> Result<Namespaces, AuditError> {
    let core = namespace_resource();
    match scope {
        Scope::All {
            namespace_selector: None,
        } => Ok(Namespaces::All),
        Scope::All {
            namespace_selector: Some(selector),
        } => {
            let mut set = BTreeSet::new();
            let lister = Lister {
                connection,
                resource: &core,
                page: 500,
                label_selector: Some(selector),
                progress: None,
            };
            let listed = lister.list(None, |ns| {
                if let Some(name) = ns.pointer("/metadata/name").and_then(Value::as_str) {
                    set.insert(name.to_owned());
                }
            });
            match listed.await {
                Ok(()) if set.is_empty() => Err(AuditError::Request(format!(
                    "no namespace matches --namespace-selector '{selector}'"
                ))),
                Ok(()) => Ok(Namespaces::Selected(set)),
                Err(f) => Err(f.into()),
            }
        }
        Scope::Namespaces(list) => {
            let mut given = Vec::new();
            for ns in list {
                let request = Request::new(k8s_openapi::api::core::v1::Namespace::url_path(&(), None))
                    .get(ns, &Default::default())
                    .map_err(|e| AuditError::Request(format!("namespace \"{ns}\": {e}")))?;
                match connection.client.request::<serde::de::IgnoredAny>(request).await {
                    Ok(_) => given.push(ns.clone()),
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        report.errors.push(format!("namespace \"{ns}\" does not exist"));
                    }
                    // A namespaced role may not read Namespace objects; the
                    // lists below still say whether it can read inside.
                    Err(kube::Error::Api(s)) if s.code == 403 => given.push(ns.clone()),
                    Err(e) => match connection.describe(&format!("get namespace \"{ns}\""), &e) {
                        RequestFailure::Fatal(m) => return Err(AuditError::Unreachable(m)),
                        RequestFailure::Request(m) => report.errors.push(m),
                    },
                }
            }
            Ok(Namespaces::Given(given))
        }
    }
}

/// Lists one kind page by page.
struct Lister<'a> {
    connection: &'a Connection,
    resource: &'a ApiResource,
    /// Objects per page.
    page: u32,
    label_selector: Option<&'a str>,
    /// Shows the page being read.
    progress: Option<&'a indicatif::ProgressBar>,
}

/// One page of a list: its items, decoded as `T` decodes them (the
/// walkers' pruned shape, or only what identifies an object), and the
/// token of the next page.
#[derive(Deserialize)]
struct Page<T> {
    #[serde(default)]
    metadata: PageMeta,
    #[serde(default = "Vec::new")]
    items: Vec<T>,
}

#[derive(Default, Deserialize)]
struct PageMeta {
    #[serde(rename = "continue", default)]
    next: Option<String>,
}

impl<T> Page<T> {
    /// The next page's token; `None` on the last page.
    fn next(&mut self) -> Option<String> {
        self.metadata.next.take().filter(|t| !t.is_empty())
    }
}

/// A list item decoded as a shape keeps it.
trait ListedAs: for<'de> Deserialize<'de> {
    fn into_value(self) -> Value;
}

/// An object as the apiserver sent it.
#[derive(Deserialize)]
#[serde(transparent)]
struct Whole(Value);

impl ListedAs for Whole {
    fn into_value(self) -> Value {
        self.0
    }
}

/// An object as the walkers read it.
struct Listed(Value);

impl<'de> Deserialize<'de> for Listed {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::DeserializeSeed;
        objects::Pruned(&objects::LISTED)
            .deserialize(deserializer)
            .map(Listed)
    }
}

impl ListedAs for Listed {
    fn into_value(self) -> Value {
        self.0
    }
}

impl Lister<'_> {
    /// Calls `each` with every object in `namespace` (all with `None`), its
    /// `apiVersion` and `kind` set (list items of built-in kinds omit them).
    async fn list(&self, namespace: Option<&str>, each: impl FnMut(Value)) -> Result<(), RequestFailure> {
        self.list_as::<Listed>(namespace, each).await
    }

    /// [`Lister::list`], each item decoded as `T` keeps it.
    async fn list_as<T: ListedAs>(
        &self,
        namespace: Option<&str>,
        mut each: impl FnMut(Value),
    ) -> Result<(), RequestFailure> {
        let r = self.resource;
        let path = DynamicObject::url_path(r, namespace);
        let doing = match namespace {
            Some(ns) => format!("list {}s ({}) in namespace \"{ns}\"", r.kind, r.api_version),
            None => format!("list {}s ({})", r.kind, r.api_version),
        };
        let mut params = ListParams::default().limit(self.page);
        if let Some(selector) = self.label_selector {
            params = params.labels(selector);
        }
        let mut continues = Continues::default();
        for page in 1u64.. {
            if let Some(bar) = self.progress.filter(|_| page > 1) {
                bar.set_message(format!("{}s, page {page}", r.kind));
            }
            let request = Request::new(&path)
                .list(&params)
                .map_err(|e| RequestFailure::Request(format!("cannot {doing}: {e}")))?;
            let mut page: Page<T> = self
                .connection
                .client
                .request(request)
                .await
                .map_err(|e| self.connection.describe(&doing, &e))?;
            let next = continues
                .next(page.next().as_deref())
                .map_err(|e| RequestFailure::Request(format!("cannot {doing}: {e}")))?;
            for item in page.items {
                let mut object = item.into_value();
                if let Some(map) = object.as_object_mut() {
                    map.entry("apiVersion")
                        .or_insert_with(|| r.api_version.clone().into());
                    map.entry("kind").or_insert_with(|| r.kind.clone().into());
                }
                each(object);
            }
            match next {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(()),
            }
        }
        unreachable!("pages are counted without end")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_objects_come_in_small_pages() {
        let cm = objects::kinds::find("", "ConfigMap").unwrap();
        let pod = objects::kinds::find("", "Pod").unwrap();
        assert!(page_size(cm) < page_size(pod));
    }

    #[test]
    fn list_items_keep_what_names_their_owners() {
        let mut page: Page<Listed> = serde_json::from_str(
            r#"{"metadata": {"continue": "abc"}, "items": [{"metadata": {"name": "p", "uid": "u",
                "ownerReferences": [{"kind": "ReplicaSet", "name": "r", "uid": "v", "controller": true}],
                "managedFields": [{"manager": "x"}]}, "spec": {"containers": [{"name": "c", "image": "i", "env": []}]}}]}"#,
        )
        .unwrap();
        assert_eq!(page.next().as_deref(), Some("abc"));
        let object = &page.items[0].0;
        assert_eq!(owners::controller_uid(object).as_deref(), Some("v"));
        assert!(object.pointer("/metadata/managedFields").is_none());
        assert!(object.pointer("/spec/containers/0/env").is_none());
    }
}
