//! `serve --audit-preflight`: after each background audit, the leader
//! judges every operator upgrade waiting for an approval in the installed
//! operators' namespaces (`--allowlist-csv`), with `preflight`'s own code
//! (`preflight::run`, pending as it defines it, superseded plans passed
//! over). Each judged plan carries its judgement (`preflight --annotate`'s
//! annotation), which every replica answers the plan's approval from; a
//! plan whose approval would break something gets a Warning Event and, with
//! `--audit-policy-reports`, its PolicyReports, both removed once it stops
//! waiting; what it found is the `digest_gate_pending_upgrade_findings`
//! metric. A watch of the InstallPlans there wakes it as soon as a plan
//! waits unjudged or stops waiting, without waiting for the next audit. Off
//! the admission path: the audit's thread and runtime.

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;

use crate::allowlist;
use crate::audit::{self, Connection, installed::Csvs};
use crate::metrics::{AuditMetrics, Unjudged};
use crate::policy::Policy;
use crate::preflight::cluster::WatchedPlan;
use crate::preflight::{self, Plans, Preflight};
use crate::report::UpgradeChange;

/// What the pre-flight reads besides the cluster: the allowlist files the
/// server loads, the installed operators' namespaces, and with
/// `--verify-registry` how to reach the registries and for which platforms.
#[derive(Debug, Clone)]
pub struct Upgrades {
    pub paths: Vec<PathBuf>,
    pub csvs: Vec<Csvs>,
    pub registry: Option<(crate::registry::RegistryArgs, Vec<crate::published::Platform>)>,
}

impl Upgrades {
    /// The installed operators' namespaces, each once.
    fn namespaces(&self) -> Vec<String> {
        let mut namespaces: Vec<String> = self.csvs.iter().map(|c| c.namespace.clone()).collect();
        namespaces.sort();
        namespaces.dedup();
        namespaces
    }

    /// Wakes `appeared` whenever a plan there comes to wait for an approval
    /// unjudged (a change OLM or a person makes; the annotation a round
    /// writes is a judgement, so it wakes nothing), or stops waiting
    /// (approved, deleted). Until the future is dropped; a failing watch is
    /// logged and retried with kube's backoff. `connection` is a watch's
    /// (no bound on a request's whole time, kube's read timeout longer than
    /// the watch's own), so a quiet watch stays open until the apiserver
    /// ends it and resumes from where it was.
    pub async fn watch_plans(&self, connection: Connection, appeared: Arc<Notify>) {
        let watches = self.namespaces().into_iter().map(|ns| {
            let api: Api<WatchedPlan> = Api::namespaced(connection.client.clone(), &ns);
            watcher(api, watcher::Config::default()).default_backoff().boxed()
        });
        let mut events = futures::stream::select_all(watches);
        // The plans seen waiting: one that stops (approved, gone) wakes a
        // round too, which removes what was written of it.
        let mut waiting = std::collections::HashSet::new();
        while let Some(event) = events.next().await {
            let (plan, listed) = match event {
                Ok(watcher::Event::InitApply(plan)) => (plan, true),
                Ok(watcher::Event::Apply(plan)) => (plan, false),
                Ok(watcher::Event::Delete(plan)) => {
                    if waiting.remove(&(plan.namespace(), plan.name_any())) {
                        appeared.notify_one();
                    }
                    continue;
                }
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "pre-flight: the InstallPlan watch failed; retrying");
                    continue;
                }
            };
            let key = (plan.namespace(), plan.name_any());
            let (waits, judged) = state_of(&plan);
            // The first list is the next round's to judge.
            let wake = match waits {
                true => !waiting.insert(key) || !listed,
                false => waiting.remove(&key) && !listed,
            };
            if wake && (!waits || !judged) {
                appeared.notify_one();
            }
        }
    }

    /// Judges the pending plans, annotates each, and exports what it found.
    /// What could not be read is logged, and counted as a failed run unless
    /// it concerns one plan only; the series of plans no longer pending go
    /// with the next round.
    pub async fn judge(
        &self,
        connection: &Connection,
        (policy, target, writes): (&Policy, audit::Target, &audit::Writes),
        metrics: &AuditMetrics,
    ) {
        let files = match allowlist::open_files(&self.paths) {
            Ok(files) => files,
            Err(e) => {
                metrics.failed();
                tracing::error!(error = %e, "pre-flight: the allowlist files cannot be opened");
                return;
            }
        };
        // The credentials file is read each round: the kubelet swaps a
        // rotated pull secret in place.
        let registry = match &self.registry {
            None => None,
            Some((access, platforms)) => match access.settings() {
                Ok(settings) => Some(preflight::pulls::Asking {
                    settings,
                    platforms: platforms.clone(),
                }),
                Err(e) => {
                    metrics.failed();
                    tracing::warn!(error = %e, "pre-flight: the registry credentials cannot be read; not asking");
                    None
                }
            },
        };
        let inputs = preflight::Inputs {
            plans: Plans::AllPending {
                namespaces: self.namespaces(),
            },
            files: &files,
            // What the webhook merges into the allowlist in force: every
            // installed operator's CSVs, not only the plan's namespace's.
            csvs: &self.csvs,
            policy,
            target,
            quiet: true,
            registry,
            policy_reports: writes.policy_reports,
            annotate: true,
            owner: writes.owner.as_ref(),
        };
        let mut found = preflight::run(connection, &inputs).await;
        if found.complete() {
            let namespaces = self.namespaces();
            let wrote = (
                writes.owner.as_ref(),
                writes.policy_reports,
                namespaces.as_slice(),
            );
            settle(connection, &mut found, wrote).await;
        }
        // A plan OLM is still unpacking, or one that cannot be read, is
        // that plan's error: logged and counted, not a failed round.
        for e in &found.errors {
            tracing::warn!(error = %e, "pre-flight");
        }
        let failures = found.errors.len().saturating_sub(found.plan_errors);
        if failures > 0 {
            metrics.failed();
        }
        metrics.pending_upgrades(&findings(&found));
        metrics.unjudged_upgrades(&unjudged(&found));
        tracing::info!(
            plans = found.plans.len(),
            judged = found.plans.iter().filter(|p| !p.targets.is_empty()).count(),
            failures,
            "pre-flight done"
        );
    }
}

/// After a round read whole: a Warning Event on each waiting plan whose
/// approval would break something, and, with an owner, what was written of
/// plans that no longer wait (approved, superseded, gone) removed.
async fn settle(
    connection: &Connection,
    found: &mut Preflight,
    (owner, reports, namespaces): (Option<&serde_json::Value>, bool, &[String]),
) {
    let now = std::time::SystemTime::now();
    let mut breaking = Vec::new();
    let mut waiting = std::collections::BTreeSet::new();
    for plan in found.plans.iter().filter(|p| p.passed_over.is_none()) {
        let (Some((namespace, name)), Some(object)) = (plan.installplan(), &plan.object) else {
            continue;
        };
        waiting.insert((namespace.to_owned(), name.to_owned()));
        let judged = preflight::annotate::judged(plan, now);
        if !plan.incomplete && judged.blocks() {
            let message = format!("digest-gate: approving it {}", judged.what_it_breaks());
            breaking.push((object.resource(), message));
        }
    }
    match audit::write::plan_events(connection, &breaking, owner, now).await {
        Ok(w) => found.errors.extend(w.errors),
        Err(e) => found.errors.push(e.to_string()),
    }
    let Some(uid) = owner.and_then(|o| o["uid"].as_str()) else {
        return;
    };
    match audit::write::remove_settled(connection, uid, (reports, namespaces), &waiting).await {
        Ok(removed) => {
            if removed.reports + removed.events > 0 {
                tracing::info!(
                    reports = removed.reports,
                    events = removed.events,
                    "pre-flight: removed what concerned plans that no longer wait"
                );
            }
            found.errors.extend(removed.errors);
        }
        Err(e) => found.errors.push(e.to_string()),
    }
}

/// Whether `plan` waits for an approval, and whether it carries a
/// judgement. One that cannot be read is taken to wait unjudged: the round
/// it wakes says why.
fn state_of(plan: &WatchedPlan) -> (bool, bool) {
    let Ok(object) = &plan.object else {
        return (true, false);
    };
    let judged = object
        .pointer("/metadata/annotations")
        .is_some_and(|a| a.get(crate::admission::approval::JUDGED_ANNOTATION).is_some());
    let waits = preflight::plan::Plan::read(object).is_ok_and(|p| p.state == preflight::plan::State::Pending);
    (waits, judged)
}

/// The waiting plans a round could not judge, per plan namespace and why:
/// a plan it could not read, and a pending plan a target of which it could
/// not (its bundle past what is read, or unreadable).
pub fn unjudged(found: &Preflight) -> Vec<((String, Unjudged), usize)> {
    let mut counted: std::collections::BTreeMap<(String, Unjudged), usize> = Default::default();
    let unreadable = found
        .unreadable
        .iter()
        .map(|(ns, _)| (ns.clone(), Unjudged::PlanUnreadable));
    let incomplete = found
        .plans
        .iter()
        .filter(|p| p.incomplete && p.passed_over.is_none())
        .filter_map(|p| {
            let reason = match p.too_large.is_empty() {
                true => Unjudged::BundleUnreadable,
                false => Unjudged::TooLarge,
            };
            p.installplan().map(|(ns, _)| (ns.to_owned(), reason))
        });
    for key in unreadable.chain(incomplete) {
        *counted.entry(key).or_default() += 1;
    }
    counted.into_iter().collect()
}

/// What the metric says: per plan's namespace, target package and reason,
/// the objects in each category and the digests that will not pull; of
/// several plans of one package waiting there, the worst.
pub fn findings(found: &Preflight) -> Vec<(String, String, &'static str, usize)> {
    let mut worst: std::collections::BTreeMap<(String, String, &'static str), usize> = Default::default();
    for plan in &found.plans {
        let Some((namespace, _)) = plan.installplan() else {
            continue;
        };
        // A release whose bundle is too large to read: judged nothing, and
        // somebody has to look.
        for package in &plan.too_large {
            worst.insert((namespace.to_owned(), package.clone(), "not_judged"), 1);
        }
        for t in &plan.targets {
            let package = t.package.clone().unwrap_or_else(|| t.csv.clone());
            let counts = [
                (
                    UpgradeChange::StaleAfterUpgrade.into(),
                    t.count(UpgradeChange::StaleAfterUpgrade),
                ),
                (
                    UpgradeChange::AlreadyStale.into(),
                    t.count(UpgradeChange::AlreadyStale),
                ),
                ("unpullable_after_upgrade", t.pull_findings().0.len()),
            ];
            for (reason, n) in counts {
                let at = worst
                    .entry((namespace.to_owned(), package.clone(), reason))
                    .or_default();
                *at = (*at).max(n);
            }
        }
    }
    worst
        .into_iter()
        .map(|((namespace, package, reason), n)| (namespace, package, reason, n))
        .collect()
}
