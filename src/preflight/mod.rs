//! `digest-gate preflight`: an operator upgrade judged before it is
//! approved. Read bottom-up: `plan` (an InstallPlan: whether it waits for an
//! approval, and the CSVs approving it would install), `bundle` (the CSV in
//! the ConfigMap OLM unpacked a bundle into), `replaced` (which installed
//! release each target replaces), `files` (a CSV or a bundle directory as
//! the target, before any plan exists), `changes` (what the upgrade
//! changes, per repository), `cluster` (the reads besides the audit's), `assess` (each
//! object before and after), `render` (the report, its exit code); `mod.rs`
//! puts them together: the cluster is read once, every object judged by the
//! allowlist in force and by the one each target would leave.

pub mod annotate;
pub mod assess;
pub mod bundle;
pub mod catalog;
pub mod changes;
pub mod cluster;
pub mod files;
pub mod plan;
pub mod pulls;
pub mod render;
pub mod replaced;
pub mod reports;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::allowlist::{self, Allowlist, Loaded, OpenFile, Source};
use crate::audit::{self, Connection, installed::Csvs};
use crate::judge;
use crate::policy::Policy;
use crate::report::UpgradeChange;
use assess::Concerned;
use changes::Change;
use plan::{Manifest, Plan};
use replaced::{Installed, Why};

/// Which plans to judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plans {
    /// `--installplan NAMESPACE/NAME`.
    Named { namespace: String, name: String },
    /// `--all-pending`, in these namespaces (none: every namespace).
    AllPending { namespaces: Vec<String> },
    /// `--csv FILE`, `--bundle DIR`, `--catalog`: the release a vendor
    /// ships, judged as if a plan installed it where its package's
    /// Subscription is.
    File(files::FileTarget),
}

/// What a run is given.
pub struct Inputs<'a> {
    pub plans: Plans,
    /// The `--allowlist` files.
    pub files: &'a [OpenFile],
    /// `--allowlist-csv`: installed CSVs promoted beside the plan's
    /// namespace's own.
    pub csvs: &'a [Csvs],
    pub policy: &'a Policy,
    /// Where the objects are read.
    pub target: audit::Target,
    /// `--quiet`: no progress on a terminal.
    pub quiet: bool,
    /// `--registry`: also ask whether each target's digests can be pulled.
    pub registry: Option<pulls::Asking>,
    /// `--policy-reports`: write `digest-gate-preflight-<plan or target>`
    /// reports.
    pub policy_reports: bool,
    /// `--annotate`: write each judged plan's judgement on it.
    pub annotate: bool,
    /// The owner reference put on the reports written (the background
    /// audit's ClusterRole, so they go with the release).
    pub owner: Option<&'a Value>,
}

/// One plan, and what became of it.
#[derive(Debug, Clone)]
pub struct PlanOutcome {
    /// What it is, as reports name it: `InstallPlan ns/name`, `CSV file
    /// F`, `bundle D`.
    pub label: String,
    /// How JSON names it: the plan's `namespace/name`, or the file's path.
    pub id: String,
    pub created: Option<String>,
    /// Why it was not judged; `None`: its targets were.
    pub passed_over: Option<String>,
    /// A target of it could not be read or prepared (said in the errors):
    /// what was judged of it is not all that approving it installs.
    pub incomplete: bool,
    /// The packages (else CSVs) of its targets not judged because their
    /// bundle ConfigMap is past [`bundle::MAX_BUNDLE_BYTES`] or their CSV
    /// past [`bundle::MAX_CSV_NODES`]: among what makes it incomplete.
    pub too_large: Vec<String>,
    /// What its policy reports are named after: the plan's name, or a file
    /// target's CSV.
    pub report: String,
    /// The cluster object it is: the InstallPlan, or the Subscription a
    /// file target would upgrade.
    pub object: Option<PlanObject>,
    pub targets: Vec<TargetOutcome>,
    /// The judgement the plan carried when it was read (the annotation's
    /// text).
    pub judged: Option<String>,
}

/// An OLM object a plan's reports and Events are about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanObject {
    /// `InstallPlan` or `Subscription`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

impl PlanOutcome {
    /// The InstallPlan it is (`namespace`, `name`); none for a target read
    /// from a file.
    pub fn installplan(&self) -> Option<(&str, &str)> {
        let object = self.object.as_ref().filter(|o| o.kind == "InstallPlan")?;
        Some((&object.namespace, &object.name))
    }

    /// A plan about to be judged; `file`: a target read from a file.
    fn new(label: String, id: String, plan: &Plan, file: bool) -> Self {
        Self {
            label,
            id,
            created: plan.created.clone(),
            passed_over: None,
            incomplete: false,
            too_large: Vec::new(),
            report: match file {
                true => plan.targets.first().map(|t| t.csv.clone()).unwrap_or_default(),
                false => plan.name.clone(),
            },
            object: PlanObject::of(plan, file),
            targets: Vec::new(),
            judged: plan.judged.clone(),
        }
    }
}

/// One CSV a plan would install, judged.
#[derive(Debug, Clone)]
pub struct TargetOutcome {
    pub csv: String,
    pub package: Option<String>,
    /// The installed release it replaces, and how that was learnt.
    pub replaced: Option<(String, Why)>,
    pub changes: Vec<Change>,
    pub concerned: Vec<Concerned>,
    /// With a catalog among the allowlists: its channel head for the
    /// package, when that is not the target (a stale plan: OLM does not
    /// resolve it again until it is deleted), and whether the catalog lists
    /// the target at all.
    pub head: Option<Head>,
    /// With `--registry`: what the registries said of its digests.
    pub pulls: Option<pulls::Pulls>,
}

impl TargetOutcome {
    /// How many of the objects it concerns are in category `change`.
    pub fn count(&self, change: UpgradeChange) -> usize {
        self.concerned.iter().filter(|c| c.change == change).count()
    }

    /// Its digests that will not pull, and those no registry answered for
    /// (none without `--registry`).
    pub fn pull_findings(
        &self,
    ) -> (
        &[crate::registry::verify::Verification],
        &[crate::registry::verify::Verification],
    ) {
        self.pulls
            .as_ref()
            .map_or((&[], &[]), |p| (&p.unpullable, &p.unverifiable))
    }
}

/// A catalog's channel head that is not a plan's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub csv: String,
    /// Whether the catalog lists the target, behind its head.
    pub lists_target: bool,
}

/// The head of `package`'s ordering channel in the catalogs `list` was
/// loaded from, if it is not `target` (the bundle nearest the head, by the
/// graph the catalog reader ordered).
pub fn moved_past(list: &Allowlist, package: &str, target: &str) -> Option<Head> {
    let releases: Vec<&allowlist::Provenance> = list
        .provenances()
        .iter()
        .map(|p| &**p)
        .filter(|p| p.rank.is_some() && p.package.as_deref() == Some(package))
        .collect();
    let head = releases.iter().max_by(|a, b| a.recency().cmp(&b.recency()))?;
    let csv = head.name.clone()?;
    (csv != target).then(|| Head {
        csv,
        lists_target: releases.iter().any(|p| p.name.as_deref() == Some(target)),
    })
}

/// What a run found.
#[derive(Debug, Clone, Default)]
pub struct Preflight {
    pub plans: Vec<PlanOutcome>,
    /// Objects judged (each by every allowlist).
    pub objects: usize,
    /// What could not be read or used: a run with errors is never "safe".
    pub errors: Vec<String>,
    /// How many of the errors concern one plan only (it was passed over,
    /// or is [`PlanOutcome::incomplete`]).
    pub plan_errors: usize,
    pub notes: Vec<String>,
    /// The plans (`namespace`, `name`) that could not be read at all: among
    /// the plan errors, and what nobody can approve judged.
    pub unreadable: Vec<(String, String)>,
    /// Where the objects were read (none: no object was).
    pub covered: Option<audit::Covered>,
}

impl Preflight {
    /// Whether every error concerns one plan only: the objects, the
    /// installed CSVs and the allowlists were all read, so what was judged
    /// of a complete plan may be written down.
    pub fn complete(&self) -> bool {
        self.errors.len() == self.plan_errors
    }
}

/// A target ready to be judged: its plan, its CSV and the two allowlists.
struct Judgeable {
    plan: usize,
    outcome: TargetOutcome,
    before: Loaded,
    after: Loaded,
}

/// One target, prepared: what it replaces and changes, the allowlists
/// before and after it, the policy's warning about them (an allowlist that
/// promotes nothing, where that only reports), and what `--registry` asks
/// of it.
struct Prepared {
    outcome: TargetOutcome,
    before: Loaded,
    after: Loaded,
    warning: Option<&'static str>,
    asks: Vec<crate::registry::verify::Subject>,
}

/// Reads the plans `inputs` names, and judges every object of the cluster
/// by the allowlist in force and by the one each pending target leaves.
pub async fn run(connection: &Connection, inputs: &Inputs<'_>) -> Preflight {
    let mut found = Preflight::default();
    let plans = match &inputs.plans {
        Plans::File(target) => files::plan(connection, target, &mut found).await,
        plans => cluster::read_plans(connection, plans, &mut found)
            .await
            .into_iter()
            .map(|p| (format!("InstallPlan {}", p.at()), p.at(), p))
            .collect(),
    };
    let extra = extra_csvs(connection, inputs.csvs, &mut found).await;
    let mut judgeable = Vec::new();
    let mut asks = pulls::Asks::default();
    let mut namespaces = Namespaces::default();
    let mut bundles = Bundles::new();
    let none = Namespace::default();
    // Plans are superseded; a file target is the one the person named.
    let file = matches!(inputs.plans, Plans::File(_));
    for (label, id, plan) in plans {
        let at = found.plans.len();
        found.plans.push(PlanOutcome::new(label, id, &plan, file));
        if !file && let Some(why) = superseded(connection, &plan, &mut namespaces, &mut found).await {
            found.plans[at].passed_over = Some(why);
            continue;
        }
        // A file target of a package nobody subscribed to has no namespace.
        let context = match plan.namespace.as_str() {
            "" => &none,
            ns => namespaces.get(connection, ns, &mut found).await,
        };
        for target in &plan.targets {
            let Some(csv) = target_csv(connection, (&plan, at), target, &mut bundles, &mut found).await
            else {
                continue;
            };
            let by = found.plans[at].label.clone();
            let mut prepared = match prepare(inputs, context, &extra, (&plan, &by), target, &csv) {
                Ok(p) => p,
                Err(e) => {
                    found.errors.push(e);
                    continue;
                }
            };
            // What loading skipped too, said once (ended() drops repeats).
            let loading = prepared.before.warnings.iter().map(ToString::to_string);
            found
                .notes
                .extend(prepared.warning.map(str::to_owned).into_iter().chain(loading));
            if inputs.registry.is_some() {
                asks.add(at, &mut prepared);
            }
            // A fresh install only adds to what is promoted: no object the
            // cluster runs changes its verdict, only the change list
            // applies.
            if prepared.outcome.replaced.is_none() {
                found.plans[at].targets.push(prepared.outcome);
            } else {
                judgeable.push(Judgeable {
                    plan: at,
                    outcome: prepared.outcome,
                    before: prepared.before,
                    after: prepared.after,
                });
            }
        }
    }
    judge_all(connection, inputs, judgeable, &mut found).await;
    if let Some(asking) = &inputs.registry {
        asks.ask(connection, asking, inputs.quiet, &mut found).await;
    }
    if inputs.policy_reports {
        reports::write(connection, &mut found, inputs.owner).await;
    }
    if inputs.annotate {
        annotate::write(connection, &mut found).await;
    }
    ended(&inputs.plans, &mut found);
    found
}

/// The CSVs `--allowlist-csv` names, promoted beside each plan's
/// namespace's own.
async fn extra_csvs(connection: &Connection, named: &[Csvs], found: &mut Preflight) -> Vec<Source> {
    let mut extra = Vec::new();
    for csvs in named {
        match audit::installed::read(connection, csvs).await {
            Ok(sources) => extra.extend(sources),
            Err(e) => found.errors.push(e.message().to_owned()),
        }
    }
    extra
}

/// One target, ready to be judged. `by` names the plan as reports do.
fn prepare(
    inputs: &Inputs<'_>,
    context: &Namespace,
    extra: &[Source],
    (plan, by): (&Plan, &str),
    target: &plan::Target,
    csv: &Value,
) -> Result<Prepared, String> {
    let subscription = context.installed_by(plan);
    let replaced = replaced::replaced(target, csv, subscription, &context.installed)
        .map(|(i, why)| (i.name.clone(), why));
    let planned = Source::planned_csv(by, csv);
    // The target's own promotions: what changes, and what --registry asks.
    let own = release(&planned.name, csv);
    let (before, after, warning) = allowlists(
        inputs,
        &context.sources,
        extra,
        (&plan.namespace, planned),
        replaced.as_ref(),
    )?;
    let package = target.package.clone().or_else(|| replaced::package(csv));
    let outcome = TargetOutcome {
        csv: target.csv.clone(),
        head: package
            .as_deref()
            .and_then(|p| moved_past(&before.allowlist, p, &target.csv)),
        package,
        changes: own
            .as_ref()
            .map(|own| release_changes(context, replaced.as_ref(), (own, csv)))
            .unwrap_or_default(),
        replaced,
        concerned: Vec::new(),
        pulls: None,
    };
    Ok(Prepared {
        outcome,
        before,
        after,
        warning,
        asks: own
            .as_ref()
            .map(crate::registry::verify::subjects)
            .unwrap_or_default(),
    })
}

/// A release's promotions, read on their own (a CSV it cannot load as
/// fails to load in the allowlists too, and is said there).
fn release(name: &str, csv: &Value) -> Option<Allowlist> {
    allowlist::load_text(name, &csv.to_string())
        .ok()
        .map(|l| l.allowlist)
}

/// The end of a run: an error or a note the targets' allowlists share said
/// once, and a run that judged nothing never a pass — except
/// `--all-pending` finding nothing that waits, which is an answer (most
/// clusters, most days): a note, and exit 0.
fn ended(plans: &Plans, found: &mut Preflight) {
    let mut said = std::collections::HashSet::new();
    found.errors.retain(|e| said.insert(e.clone()));
    found.notes.retain(|n| said.insert(n.clone()));
    if !found.errors.is_empty() || found.plans.iter().any(|p| !p.targets.is_empty()) {
        return;
    }
    let unjudged = match plans {
        Plans::AllPending { namespaces } => {
            let within = match namespaces.is_empty() {
                true => String::new(),
                false => format!(" in {}", namespaces.join(", ")),
            };
            let passed = found.plans.len();
            found.notes.push(match passed {
                0 => format!("no InstallPlan waits for an approval{within}"),
                n => format!(
                    "no InstallPlan waiting for an approval{within} was judged: {n} passed over (see above)"
                ),
            });
            return;
        }
        Plans::Named { namespace, name } => format!("InstallPlan {namespace}/{name} was not judged"),
        Plans::File(target) => format!("{} was not judged", target.label()),
    };
    found.errors.push(format!("{unjudged}: nothing was judged"));
}

/// Reads every object once and judges it by each target's two allowlists.
async fn judge_all(
    connection: &Connection,
    inputs: &Inputs<'_>,
    judgeable: Vec<Judgeable>,
    found: &mut Preflight,
) {
    if judgeable.is_empty() {
        return;
    }
    let rules: Vec<judge::Rules<'_>> = judgeable
        .iter()
        .flat_map(|j| [&j.before.allowlist, &j.after.allowlist])
        .map(|allowlist| judge::Rules {
            policy: inputs.policy,
            allowlist,
            published: None,
        })
        .collect();
    let progress = progress(inputs.quiet);
    let read = audit::compare(connection, &inputs.target, rules[0], &rules[1..], &progress).await;
    progress.finish_and_clear();
    match read {
        Ok(audited) => {
            found.objects = audited.report.summary.objects;
            found.covered = Some(audited.covered);
            found.errors.extend(audited.report.errors);
            found.notes.extend(audited.report.notes);
            for (i, mut j) in judgeable.into_iter().enumerate() {
                j.outcome.concerned = assess::concerned(&audited.compared, 2 * i, 2 * i + 1);
                found.plans[j.plan].targets.push(j.outcome);
            }
        }
        Err(e) => found.errors.push(e.to_string()),
    }
}

/// A count of the objects read on standard error, drawn only when it is a
/// terminal, as `allowlist verify` draws its bar.
fn progress(quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} {pos} objects read and judged, reading {msg}")
    {
        bar.set_style(style);
    }
    bar
}

/// What `preflight` knows of a plan's namespace: its Subscriptions and its
/// installed CSVs, read once however many plans it holds.
#[derive(Default)]
struct Namespaces {
    read: BTreeMap<String, Namespace>,
}

#[derive(Default)]
struct Namespace {
    subscriptions: Vec<Value>,
    sources: Vec<Source>,
    installed: Vec<Installed>,
}

impl Namespaces {
    async fn get(&mut self, connection: &Connection, namespace: &str, found: &mut Preflight) -> &Namespace {
        let vacant = match self.read.entry(namespace.to_owned()) {
            std::collections::btree_map::Entry::Occupied(read) => return read.into_mut(),
            std::collections::btree_map::Entry::Vacant(vacant) => vacant,
        };
        let mut ns = Namespace::default();
        match cluster::subscriptions(connection, Some(namespace)).await {
            Ok(s) => ns.subscriptions = s,
            Err(e) => found.errors.push(e.message().to_owned()),
        }
        let csvs = Csvs {
            namespace: namespace.to_owned(),
            prefix: None,
        };
        match audit::installed::read(connection, &csvs).await {
            Ok(sources) => ns.sources = sources,
            Err(e) => found.errors.push(e.message().to_owned()),
        }
        ns.installed = ns
            .sources
            .iter()
            .filter_map(|s| serde_json::from_str::<Value>(&s.text).ok())
            .map(|csv| Installed {
                name: csv
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                package: replaced::package(&csv),
            })
            .collect();
        vacant.insert(ns)
    }
}

impl Namespace {
    /// The Subscriptions `plan` belongs to (its owners).
    fn owners<'s>(&'s self, plan: &'s Plan) -> impl Iterator<Item = &'s Value> + 's {
        self.subscriptions.iter().filter(|s| {
            let name = s.pointer("/metadata/name").and_then(Value::as_str);
            plan.owners.iter().any(|o| Some(o.as_str()) == name)
        })
    }

    /// `status.installedCSV` of the Subscription the plan belongs to.
    fn installed_by<'s>(&'s self, plan: &'s Plan) -> Option<&'s str> {
        self.owners(plan)
            .find_map(|s| s.pointer("/status/installedCSV").and_then(Value::as_str))
            .filter(|s| !s.is_empty())
    }

    /// The installed CSV named `name`.
    fn csv(&self, name: &str) -> Option<Value> {
        self.sources.iter().find_map(|s| match &s.kind {
            allowlist::SourceKind::InstalledCsv { name: n, .. } if n == name => {
                serde_json::from_str(&s.text).ok()
            }
            _ => None,
        })
    }
}

/// Why `plan` is not judged: a Subscription it belongs to now points at
/// another plan (OLM resolved again; approving this one installs nothing
/// the Subscription wants).
async fn superseded(
    connection: &Connection,
    plan: &Plan,
    namespaces: &mut Namespaces,
    found: &mut Preflight,
) -> Option<String> {
    let ns = namespaces.get(connection, &plan.namespace, found).await;
    ns.owners(plan).find_map(|s| {
        let current = s.pointer("/status/installPlanRef/name").and_then(Value::as_str)?;
        let subscription = s
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        (current != plan.name).then(|| {
            format!("superseded: Subscription {subscription} now points at InstallPlan {current}; not judged")
        })
    })
}

/// The bundle ConfigMaps a round read, each read and parsed once however
/// many steps name it, by namespace and name.
type Bundles = BTreeMap<(String, String), Result<bundle::Bundle, Unread>>;

/// Why a bundle ConfigMap gave no CSVs.
#[derive(Debug, Clone)]
enum Unread {
    Request(String),
    Bundle(bundle::BundleError),
}

/// The CSV a target installs: in its step, or in the bundle ConfigMap it
/// refers to (which must be there and readable, or the run says so and the
/// plan, `found.plans[at]`, is incomplete).
async fn target_csv(
    connection: &Connection,
    (plan, at): (&Plan, usize),
    target: &plan::Target,
    bundles: &mut Bundles,
    found: &mut Preflight,
) -> Option<Value> {
    match &target.manifest {
        Manifest::Inline(csv) => Some((**csv).clone()),
        Manifest::Unpacked { namespace, name } => {
            let key = (namespace.clone(), name.clone());
            if !bundles.contains_key(&key) {
                let read = match cluster::bundle(connection, namespace, name).await {
                    Ok(cm) => bundle::read(&cm).map_err(Unread::Bundle),
                    Err(e) => Err(Unread::Request(e.message().to_owned())),
                };
                bundles.insert(key.clone(), read);
            }
            let csv = match &bundles[&key] {
                Ok(read) => read.csv(&target.csv).map_err(|e| e.to_string()),
                Err(Unread::Request(e)) => Err(e.clone()),
                Err(Unread::Bundle(e)) => Err(e.to_string()),
            };
            let too_large = matches!(
                bundles[&key],
                Err(Unread::Bundle(bundle::BundleError::TooLarge { .. }))
            );
            csv.map_err(|e| {
                found.errors.push(format!(
                    "InstallPlan {}: the bundle of {} cannot be read: {e}",
                    plan.at(),
                    target.csv
                ));
                found.plan_errors += 1;
                let outcome = &mut found.plans[at];
                outcome.incomplete = true;
                if too_large {
                    let package = target.package.clone().unwrap_or(target.csv.clone());
                    outcome.too_large.push(package);
                }
            })
            .ok()
        }
    }
}

/// The allowlists before and after approving `plan`'s target `csv`: the
/// files, the namespace's installed CSVs and `--allowlist-csv`'s; after,
/// without the replaced CSV and with the target.
fn allowlists(
    inputs: &Inputs<'_>,
    installed: &[Source],
    extra: &[Source],
    (namespace, planned): (&str, Source),
    replaced: Option<&(String, Why)>,
) -> Result<(Loaded, Loaded, Option<&'static str>), String> {
    // The one rule for an allowlist that promotes nothing, as `audit`
    // asks it: an error where it would deny everything, else a warning.
    let load = |sources: &[Source]| {
        let loaded = allowlist::load_with_installed(inputs.files, sources, &inputs.policy.catalog)
            .map_err(|e| format!("the allowlist cannot be used:\n{e}"))?;
        let warning = inputs
            .policy
            .judges_by(&loaded.allowlist)
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((loaded, warning))
    };
    // --allowlist-csv may name the plan's namespace too: each CSV once.
    let more = extra
        .iter()
        .filter(|s| !installed.iter().any(|i| i.name == s.name));
    let before: Vec<Source> = installed.iter().chain(more).cloned().collect();
    let gone = |s: &Source| {
        matches!((&s.kind, replaced), (allowlist::SourceKind::InstalledCsv { name, namespace: ns }, Some((r, _)))
            if name == r && ns == namespace)
    };
    let after: Vec<Source> = before
        .iter()
        .filter(|s| !gone(s))
        .cloned()
        .chain([planned])
        .collect();
    let ((before, was), (after, will)) = (load(&before)?, load(&after)?);
    Ok((before, after, was.or(will)))
}

/// What the target CSV `csv` changes against the release it replaces (an
/// installed CSV of `context`), each release's promotions read on their own.
fn release_changes(
    context: &Namespace,
    replaced: Option<&(String, Why)>,
    target: (&Allowlist, &Value),
) -> Vec<Change> {
    let old_csv = replaced.and_then(|(name, _)| context.csv(name));
    let old: Option<(Allowlist, &Value)> = old_csv
        .as_ref()
        .and_then(|v| Some((release("release.json", v)?, v)));
    changes::between(old.as_ref().map(|(l, v)| (l, *v)), target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allowlist::{CatalogOptions, load_paths_with};

    /// Issue 60: nothing waiting is an answer (exit 0, a note); a plan
    /// named or a file not judged is still an error.
    #[test]
    fn nothing_waiting_is_an_answer_and_nothing_judged_is_not() {
        let all = Plans::AllPending {
            namespaces: vec!["redhat-ods-operator".into()],
        };
        let mut found = Preflight::default();
        ended(&all, &mut found);
        assert_eq!(
            (found.errors.len(), found.notes.as_slice()),
            (
                0,
                &["no InstallPlan waits for an approval in redhat-ods-operator".to_owned()][..]
            )
        );
        assert_eq!(render::exit_code(&found), 0);
        let named = Plans::Named {
            namespace: "ops".into(),
            name: "install-x".into(),
        };
        let mut found = Preflight::default();
        ended(&named, &mut found);
        assert_eq!(
            found.errors,
            ["InstallPlan ops/install-x was not judged: nothing was judged"]
        );
        assert_eq!(render::exit_code(&found), 2);
    }

    /// The real RHOAI catalog fragment: fast-3.x runs 3.0.0 → 3.2.0 →
    /// 3.3.0 → 3.3.1, ordered by the catalog reader.
    fn catalog(channel: &str) -> Allowlist {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/olm/rhods");
        let options = CatalogOptions {
            packages: vec!["rhods-operator".into()],
            channel: Some(channel.into()),
        };
        load_paths_with(&[dir.to_owned()], &options).unwrap().allowlist
    }

    #[test]
    fn a_plan_behind_the_catalogs_head_is_told_and_one_at_it_is_not() {
        let list = catalog("fast-3.x");
        assert_eq!(
            moved_past(&list, "rhods-operator", "rhods-operator.3.3.0"),
            Some(Head {
                csv: "rhods-operator.3.3.1".into(),
                lists_target: true
            })
        );
        assert_eq!(moved_past(&list, "rhods-operator", "rhods-operator.3.3.1"), None);
        assert_eq!(
            moved_past(&list, "rhods-operator", "rhods-operator.1.21.0").map(|h| h.lists_target),
            Some(false)
        );
        // No catalog of the package: nothing to say.
        assert_eq!(moved_past(&list, "other-operator", "other-operator.2.0.0"), None);
    }
}
