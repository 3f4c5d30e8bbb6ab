//! `serve --audit-preflight`: after each background audit, the leader
//! judges every operator upgrade waiting for an approval in the installed
//! operators' namespaces (`--allowlist-csv`), with `preflight`'s own code
//! (`preflight::run`, pending as it defines it, superseded plans passed
//! over). Each judged plan carries its judgement (`preflight --annotate`'s
//! annotation), which every replica answers the plan's approval from, and
//! what it found is the `digest_gate_pending_upgrade_findings` metric.
//! A watch of the InstallPlans there wakes it as soon as a plan waits
//! unjudged, without waiting for the next audit. Off the admission path:
//! the audit's thread and runtime.

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;

use crate::allowlist;
use crate::audit::{self, Connection, installed::Csvs};
use crate::metrics::AuditMetrics;
use crate::policy::Policy;
use crate::preflight::{self, Plans, Preflight};
use crate::report::UpgradeChange;

/// What the pre-flight reads besides the cluster: the allowlist files the
/// server loads, and the installed operators' namespaces.
#[derive(Debug, Clone)]
pub struct Upgrades {
    pub paths: Vec<PathBuf>,
    pub csvs: Vec<Csvs>,
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
    /// writes is a judgement, so it wakes nothing). Until the future is
    /// dropped; a failing watch is logged and retried with kube's backoff.
    pub async fn watch_plans(&self, client: kube::Client, appeared: Arc<Notify>) {
        let gvk = GroupVersionKind::gvk(preflight::plan::GROUP, preflight::plan::VERSION, "InstallPlan");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "installplans");
        let watches = self.namespaces().into_iter().map(|ns| {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
            watcher(api, watcher::Config::default()).default_backoff().boxed()
        });
        let mut events = futures::stream::select_all(watches);
        while let Some(event) = events.next().await {
            match event {
                // The first list is the next round's to judge.
                Ok(watcher::Event::Apply(plan)) if waits_unjudged(&plan) => appeared.notify_one(),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "pre-flight: the InstallPlan watch failed; retrying"),
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
        policy: &Policy,
        target: audit::Target,
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
            registry: None,
            policy_reports: false,
            annotate: true,
        };
        let found = preflight::run(connection, &inputs).await;
        // "Nothing waits for an approval" is the usual answer, and a plan
        // OLM is still unpacking a passing state: logged, not failures.
        let idle = |e: &String| e.ends_with(": nothing was judged");
        for e in found.errors.iter().filter(|e| !idle(e)) {
            tracing::warn!(error = %e, "pre-flight");
        }
        let idle = found.errors.iter().filter(|e| idle(e)).count();
        let failures = found.errors.len().saturating_sub(found.plan_errors + idle);
        if failures > 0 {
            metrics.failed();
        }
        metrics.pending_upgrades(&findings(&found));
        tracing::info!(
            plans = found.plans.len(),
            judged = found.plans.iter().filter(|p| !p.targets.is_empty()).count(),
            failures,
            "pre-flight done"
        );
    }
}

/// Whether `plan` waits for an approval and carries no judgement yet.
fn waits_unjudged(plan: &DynamicObject) -> bool {
    let judged = plan
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(crate::admission::approval::JUDGED_ANNOTATION));
    !judged
        && serde_json::to_value(plan)
            .ok()
            .and_then(|v| preflight::plan::Plan::read(&v).ok())
            .is_some_and(|p| p.state == preflight::plan::State::Pending)
}

/// What the metric says: per plan's namespace and target package, the
/// objects in each category and the digests that will not pull.
pub fn findings(found: &Preflight) -> Vec<(String, String, &'static str, usize)> {
    let mut out = Vec::new();
    for plan in &found.plans {
        let Some((namespace, _)) = plan.installplan() else {
            continue;
        };
        for t in &plan.targets {
            let package = t.package.clone().unwrap_or_else(|| t.csv.clone());
            let count = |change: UpgradeChange| t.concerned.iter().filter(|c| c.change == change).count();
            for change in [UpgradeChange::StaleAfterUpgrade, UpgradeChange::AlreadyStale] {
                out.push((
                    namespace.to_owned(),
                    package.clone(),
                    change.into(),
                    count(change),
                ));
            }
            let (unpullable, _) = t.pull_findings();
            out.push((
                namespace.to_owned(),
                package,
                "unpullable_after_upgrade",
                unpullable.len(),
            ));
        }
    }
    out
}
