//! The installed operators' ClusterServiceVersions as an allowlist source:
//! `audit --allowlist-csv NAMESPACE[/NAME-PREFIX]` reads them once, `serve`
//! follows them with a watch. The incident happened because two copies of
//! "what is promoted" drifted: the operator's CSV listed the promoted digest,
//! a ConfigMap kept the old one. Reading the CSV the cluster runs removes
//! one copy.
//!
//! Only what the allowlist reads of a CSV is kept (its name, version,
//! `replaces`, `relatedImages` and deployments), so a large CSV's CRD
//! descriptions never sit in memory. OLM's copies of a CSV in other
//! namespaces (label `olm.copiedFrom`) are never even sent.

use std::borrow::Cow;
use std::collections::BTreeMap;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::core::{ApiResource, NamespaceResourceScope, Resource};
use kube::runtime::watcher;
use serde::Deserialize;
use serde_json::Value;

use super::{Connection, ListedAs, Lister, RequestFailure};
use crate::allowlist::Source;
use crate::objects::{Pruned, Shape};

/// Leaves out OLM's copies: an operator installed for all namespaces has its
/// CSV copied into every one, and the copy says nothing the original does not.
const NOT_COPIED: &str = "!olm.copiedFrom";

/// CSVs per list page: a CSV can be megabytes of CRD descriptions, and a
/// page is held whole before it is pruned.
const PAGE: u32 = 20;

/// Where to read CSVs: a namespace, and optionally a name prefix
/// (`redhat-ods-operator/rhods-operator`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Csvs {
    pub namespace: String,
    pub prefix: Option<String>,
}

impl std::str::FromStr for Csvs {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (namespace, prefix) = match s.split_once('/') {
            Some((ns, p)) => (ns, Some(p.to_owned()).filter(|p| !p.is_empty())),
            None => (s, None),
        };
        if namespace.is_empty() {
            return Err(format!("'{s}' names no namespace; write NAMESPACE[/NAME-PREFIX]"));
        }
        Ok(Self {
            namespace: namespace.to_owned(),
            prefix,
        })
    }
}

/// `--allowlist-csv`, as `audit` (read once) and `serve` (watched) take it.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct CsvArgs {
    /// Also promote what the installed operators' ClusterServiceVersions in
    /// NAMESPACE (with names starting NAME-PREFIX) list, read from the
    /// cluster and merged with the allowlist files (repeatable), e.g.
    /// redhat-ods-operator/rhods-operator. `serve` watches them and is not
    /// ready until each namespace has been read.
    #[arg(
        long = "allowlist-csv",
        env = "DIGEST_GATE_ALLOWLIST_CSV",
        value_delimiter = ',',
        value_name = "NAMESPACE[/NAME-PREFIX]"
    )]
    pub allowlist_csv: Vec<Csvs>,
}

impl std::fmt::Display for Csvs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.prefix {
            Some(p) => write!(f, "{}/{p}", self.namespace),
            None => f.write_str(&self.namespace),
        }
    }
}

static KEEP: Shape = Shape::Keep;
static METADATA: Shape = Shape::Object(&[("name", &KEEP), ("namespace", &KEEP), ("resourceVersion", &KEEP)]);
static SPEC: Shape = Shape::Object(&[
    ("version", &KEEP),
    ("replaces", &KEEP),
    ("relatedImages", &KEEP),
    ("install", &KEEP),
]);
static CSV: Shape = Shape::Object(&[
    ("apiVersion", &KEEP),
    ("kind", &KEEP),
    ("metadata", &METADATA),
    ("spec", &SPEC),
]);

/// An installed CSV as a list or a watch hands it out: the metadata the
/// watch resumes from, and what the allowlist reads.
#[derive(Debug, Clone)]
pub struct InstalledCsv {
    metadata: ObjectMeta,
    /// The pruned object without its resource version, so that OLM's
    /// status updates read as no change.
    value: Value,
}

impl<'de> Deserialize<'de> for InstalledCsv {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::DeserializeSeed;
        let mut value = Pruned(&CSV).deserialize(deserializer)?;
        let mut metadata = ObjectMeta::default();
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
            metadata.name = text(meta.get("name"));
            metadata.namespace = text(meta.get("namespace"));
            metadata.resource_version = text(meta.remove("resourceVersion").as_ref());
        }
        // The allowlist tells a CSV by its kind.
        if let Some(map) = value.as_object_mut() {
            map.entry("apiVersion")
                .or_insert_with(|| "operators.coreos.com/v1alpha1".into());
            map.entry("kind")
                .or_insert_with(|| "ClusterServiceVersion".into());
        }
        Ok(Self { metadata, value })
    }
}

impl Resource for InstalledCsv {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "ClusterServiceVersion".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "operators.coreos.com".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "clusterserviceversions".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl ListedAs for InstalledCsv {
    fn into_value(self) -> Value {
        self.value
    }
}

impl InstalledCsv {
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    fn source(&self, csvs: &Csvs) -> Option<Source> {
        source_of(csvs, &self.value)
    }
}

/// The allowlist source a pruned CSV is, if `csvs` wants it (by name).
fn source_of(csvs: &Csvs, csv: &Value) -> Option<Source> {
    let name = csv
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    csvs.prefix
        .as_deref()
        .is_none_or(|p| name.starts_with(p))
        .then(|| Source::installed_csv(&csvs.namespace, csv))
}

/// The CSVs `csvs` names, each an allowlist source.
pub async fn read(connection: &Connection, csvs: &Csvs) -> Result<Vec<Source>, RequestFailure> {
    let resource = ApiResource::erase::<InstalledCsv>(&());
    let lister = Lister {
        connection,
        resource: &resource,
        page: PAGE,
        label_selector: Some(NOT_COPIED),
        progress: None,
    };
    let mut sources = Vec::new();
    lister
        .list_as::<InstalledCsv>(Some(&csvs.namespace), |csv| {
            sources.extend(source_of(csvs, &csv));
        })
        .await?;
    Ok(sources)
}

/// What following the installed CSVs tells its caller.
#[derive(Debug)]
pub enum Followed {
    /// Every namespace has been listed whole (and again after each change):
    /// the CSVs installed now, as allowlist sources, sorted by name.
    Installed(Vec<Source>),
    /// A list or watch failed. The watch retries with backoff; what was
    /// installed before stays as it was.
    Failed(String),
    /// After failures, every namespace's watch works again (each listed
    /// anew, or reporting changes).
    Back,
}

/// The CSV watch's backoff. One list and one watch per named namespace, a
/// few kilobytes each, is cheap enough to retry every few seconds, and
/// every second it is down an operator upgrade may be judged by the
/// previous release's promotions. kube's default (client-go's: 0.8 s
/// doubling to 30 s, a jitter that may double each wait) left them in
/// force up to a minute after an apiserver restart. This one waits 0.5 s,
/// doubling to 4 s, each wait spread by up to a quarter either way so
/// that replicas do not retry in step; any event resets it.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: std::time::Duration,
    /// xorshift state for the spread: no randomness crate for this.
    state: u64,
}

impl WatchBackoff {
    /// The first wait.
    pub const FIRST: std::time::Duration = std::time::Duration::from_millis(500);
    /// The longest wait, before the spread.
    pub const MOST: std::time::Duration = std::time::Duration::from_secs(4);

    /// Starts over from the first wait: the watch works again.
    pub fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

impl Default for WatchBackoff {
    fn default() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Self {
            next: Self::FIRST,
            state: u64::from(nanos) | 1,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<std::time::Duration> {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        // A factor in [0.75, 1.25).
        let spread = 0.75 + (self.state % 1000) as f64 / 2000.0;
        let wait = self.next.mul_f64(spread);
        self.next = (self.next * 2).min(Self::MOST);
        Some(wait)
    }
}

/// Follows the CSVs `specs` name, with one watch per namespace, until the
/// future is dropped. `tell` hears the whole set once every namespace has
/// been listed, then after every change of what the allowlist reads (a
/// status update of a CSV is no change), and every failure.
pub async fn follow(connection: &Connection, specs: &[Csvs], mut tell: impl FnMut(Followed)) {
    use watcher::Event;
    let watches = specs.iter().enumerate().map(|(i, spec)| {
        let api: Api<InstalledCsv> = Api::namespaced(connection.client.clone(), &spec.namespace);
        relisting(api).map(move |e| (i, e)).boxed()
    });
    let mut events = futures::stream::select_all(watches);
    // Per spec: the set in force (None until its first complete list), and
    // the list being read (a watch that lost its place lists again).
    let mut listed: Vec<Option<BTreeMap<String, Source>>> = vec![None; specs.len()];
    let mut listing: Vec<BTreeMap<String, Source>> = vec![BTreeMap::new(); specs.len()];
    // Per spec: failed, and not yet listed or watching again since.
    let mut failing = vec![false; specs.len()];
    while let Some((i, event)) = events.next().await {
        let spec = &specs[i];
        let working = matches!(&event, Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)));
        if working && std::mem::take(&mut failing[i]) && !failing.contains(&true) {
            tell(Followed::Back);
        }
        let changed = match event {
            Ok(Event::Init) => {
                listing[i].clear();
                false
            }
            Ok(Event::InitApply(csv)) => {
                if let Some(source) = csv.source(spec) {
                    listing[i].insert(source.name.clone(), source);
                }
                false
            }
            Ok(Event::InitDone) => {
                let now = std::mem::take(&mut listing[i]);
                let changed = listed[i].as_ref() != Some(&now);
                listed[i] = Some(now);
                changed
            }
            Ok(Event::Apply(csv)) => match (listed[i].as_mut(), csv.source(spec)) {
                (Some(set), Some(source)) => {
                    let changed = set.get(&source.name) != Some(&source);
                    set.insert(source.name.clone(), source);
                    changed
                }
                _ => false,
            },
            Ok(Event::Delete(csv)) => listed[i]
                .as_mut()
                .and_then(|set| set.remove(&Source::installed_csv_name(&spec.namespace, csv.name())))
                .is_some(),
            Err(e) => {
                failing[i] = true;
                tell(Followed::Failed(failure(connection, spec, &e)));
                false
            }
        };
        if changed && listed.iter().all(Option::is_some) {
            let installed = listed.iter().flatten().flat_map(|set| set.values().cloned());
            tell(Followed::Installed(installed.collect()));
        }
    }
}

/// A namespace's CSVs, listed and then watched; after a failure, listed
/// anew once [`WatchBackoff`] has waited. kube's watcher would watch again
/// from the version it saw last, and an apiserver that just restarted
/// holds such a watch until its cache is ready, then answers `410 Gone`
/// (seen: 10 s): a list is answered at once, and costs a few kilobytes.
fn relisting(
    api: Api<InstalledCsv>,
) -> BoxStream<'static, Result<watcher::Event<InstalledCsv>, watcher::Error>> {
    type Watch = BoxStream<'static, Result<watcher::Event<InstalledCsv>, watcher::Error>>;
    // The watch (none after a failure) and the wait before the next.
    let start: (Option<Watch>, WatchBackoff, Option<std::time::Duration>) =
        (None, WatchBackoff::default(), None);
    futures::stream::unfold(start, move |(watch, mut backoff, wait)| {
        let api = api.clone();
        async move {
            if let Some(wait) = wait {
                tokio::time::sleep(wait).await;
            }
            let new = || {
                let config = watcher::Config::default().labels(NOT_COPIED).page_size(PAGE);
                watcher(api.clone(), config).boxed()
            };
            let mut watch = watch.unwrap_or_else(new);
            loop {
                match watch.next().await {
                    Some(Ok(event)) => {
                        backoff.reset();
                        return Some((Ok(event), (Some(watch), backoff, None)));
                    }
                    Some(Err(e)) => {
                        let wait = backoff.next();
                        return Some((Err(e), (None, backoff, wait)));
                    }
                    // kube's watcher does not end; if it did, list again.
                    None => {
                        tokio::time::sleep(WatchBackoff::FIRST).await;
                        watch = new();
                    }
                }
            }
        }
    })
    .boxed()
}

/// A watch failure worded as `audit`'s are, with what the cluster lacks
/// when it does not serve CSVs at all.
fn failure(connection: &Connection, spec: &Csvs, e: &watcher::Error) -> String {
    let doing = format!(
        "watch ClusterServiceVersions (operators.coreos.com/v1alpha1) in namespace \"{}\"",
        spec.namespace
    );
    let cause = match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        other => return format!("cannot {doing}: {other}"),
    };
    match cause {
        kube::Error::Api(status) if status.code == 404 => format!(
            "cannot {doing}: the cluster does not serve ClusterServiceVersions; is OLM installed? ({})",
            status.message
        ),
        _ => connection.describe(&doing, cause).message().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_retries_within_seconds_and_starts_over_after_an_event() {
        let mut backoff = WatchBackoff::default();
        let waits: Vec<f64> = backoff.by_ref().take(8).map(|d| d.as_secs_f64()).collect();
        // 0.5, 1, 2, then 4 s at most, each spread by a quarter either way.
        for (wait, base) in waits.iter().zip([0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]) {
            assert!(*wait >= base * 0.75 && *wait < base * 1.25, "{waits:?}");
        }
        assert!(waits.iter().sum::<f64>() < 30.0, "{waits:?}");
        backoff.reset();
        assert!(backoff.next().unwrap() < WatchBackoff::FIRST * 2);
    }

    #[test]
    fn specs_parse_and_print_back() {
        let spec = "redhat-ods-operator/rhods-operator".parse::<Csvs>();
        assert_eq!(
            spec,
            Ok(Csvs {
                namespace: "redhat-ods-operator".into(),
                prefix: Some("rhods-operator".into())
            })
        );
        assert_eq!(spec.unwrap().to_string(), "redhat-ods-operator/rhods-operator");
        assert_eq!("ns".parse::<Csvs>().map(|c| c.prefix), Ok(None));
        assert_eq!("ns/".parse::<Csvs>().map(|c| c.to_string()), Ok("ns".into()));
        assert!("/x".parse::<Csvs>().is_err());
    }

    /// A watch event's CSV: the resource version is kept for the watch and
    /// left out of the source, so a status update is no change; the CRD
    /// descriptions are never kept; the name prefix selects.
    #[test]
    fn a_csv_is_read_as_its_allowlist_source() {
        let event = |rv: &str, phase: &str| {
            serde_json::json!({
                "apiVersion": "operators.coreos.com/v1alpha1",
                "kind": "ClusterServiceVersion",
                "metadata": {"name": "rhods-operator.1.21.0", "namespace": "ops", "resourceVersion": rv,
                             "annotations": {"alm-examples": "[...]"}},
                "spec": {"version": "1.21.0", "relatedImages": [{"name": "a", "image": "r/a@sha256:00"}],
                         "customresourcedefinitions": {"owned": [{"description": "long"}]}},
                "status": {"phase": phase}
            })
        };
        let first: InstalledCsv = serde_json::from_value(event("1", "Installing")).unwrap();
        let second: InstalledCsv = serde_json::from_value(event("2", "Succeeded")).unwrap();
        assert_eq!(kube::ResourceExt::resource_version(&first).as_deref(), Some("1"));
        let spec = Csvs {
            namespace: "ops".into(),
            prefix: Some("rhods-operator".into()),
        };
        let source = first.source(&spec).unwrap();
        assert_eq!(source, second.source(&spec).unwrap());
        assert_eq!(source.name, "cluster:ops/rhods-operator.1.21.0");
        let text: Value = serde_json::from_str(&source.text).unwrap();
        assert!(text.pointer("/metadata/resourceVersion").is_none(), "{text}");
        assert!(
            text.pointer("/spec/customresourcedefinitions").is_none(),
            "{text}"
        );
        assert_eq!(text["spec"]["relatedImages"][0]["image"], "r/a@sha256:00");
        let other = Csvs {
            namespace: "ops".into(),
            prefix: Some("odh-".into()),
        };
        assert_eq!(first.source(&other), None);
    }
}
