//! `serve --audit-interval`: the audit of [`audit::run`], in the
//! webhook, on its service account: after the allowlist loads and after
//! every reload (a newly promoted or withdrawn digest changes what is
//! stale), then on the interval. Its findings are metrics; with
//! `--audit-policy-reports` and `--audit-events` it writes those too.
//!
//! It runs on a thread and runtime of its own, so judging a big cluster
//! never holds a worker that admission reviews need. With several replicas
//! only the holder of a Lease audits (`--audit-lease`); the others expose
//! no findings, so a sum over replicas counts each object once.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::config::BackgroundArgs;
use super::election::Election;
use super::tasks;
use crate::allowlist::Allowlist;
use crate::audit::{self, Audit, ClusterSettings, Connection, Scope, Target, Writes};
use crate::metrics::AuditMetrics;
use crate::output::Writer;
use crate::policy::{Policy, Verdict};

/// What the background audit reads and judges with.
pub struct AuditInputs {
    pub flags: BackgroundArgs,
    pub settings: ClusterSettings,
    /// A watch's settings for the same cluster (the InstallPlan watch).
    pub watch_settings: ClusterSettings,
    pub policy: Policy,
    /// Every allowlist the supply puts in force: each one is audited.
    pub allowlists: watch::Receiver<Arc<Allowlist>>,
    pub metrics: AuditMetrics,
    /// With `--audit-preflight`: what the pre-flight after each audit reads.
    pub upgrades: Option<super::upgrades::Upgrades>,
}

/// Starts the background audit if its interval is not zero. It stops
/// (releasing its Lease) when `stop` is cancelled; join the thread before
/// exiting so the release reaches the apiserver.
pub fn spawn(
    inputs: AuditInputs,
    stop: CancellationToken,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    if inputs.flags.interval.is_zero() {
        return Ok(None);
    }
    let metrics = inputs.metrics.clone();
    let failed = move |e: &std::io::Error| {
        metrics.failed();
        tracing::error!(error = %e, "background audit: cannot start its runtime");
    };
    tasks::spawn("audit", move || run(inputs, stop), failed).map(Some)
}

async fn run(inputs: AuditInputs, stop: CancellationToken) {
    let AuditInputs {
        flags,
        settings,
        watch_settings,
        policy,
        allowlists,
        metrics,
        upgrades,
    } = inputs;
    let failed = |e: &crate::audit::AuditError| {
        metrics.failed();
        tracing::error!(error = %e, "background audit: no cluster connection; retrying");
    };
    let Some(connection) = tasks::connect(&settings, flags.interval, &stop, failed).await else {
        return;
    };
    // Without a Lease nothing elects: this replica always audits, and the
    // sender is kept so the channel never closes.
    let (_always, always) = watch::channel(true);
    let (leader, election) = match &flags.lease {
        None => (always, None),
        Some(name) => {
            let election = Election::start(&settings, name, metrics.clone(), stop.clone());
            (election.leader.clone(), Some(election))
        }
    };
    tracing::info!(
        interval = ?flags.interval,
        server = %connection.server,
        lease = flags.lease.as_deref().unwrap_or("none"),
        "background audit started"
    );
    let mut auditor = Auditor {
        connection: &connection,
        flags: &flags,
        writes: Writes {
            policy_reports: flags.policy_reports,
            passes: flags.policy_reports_passes,
            events: flags.events,
            owner: None,
        },
        policy: &policy,
        metrics: &metrics,
        upgrades: upgrades.as_ref(),
    };
    // With --audit-preflight, a plan that comes to wait wakes a round.
    let appeared = Arc::new(tokio::sync::Notify::new());
    let watch = match (upgrades.as_ref(), Connection::open(&watch_settings).await) {
        (None, _) => None,
        (Some(u), Ok(watching)) => {
            let (u, appeared) = (u.clone(), appeared.clone());
            Some(tokio::spawn(
                async move { u.watch_plans(watching, appeared).await },
            ))
        }
        // The same kubeconfig opened the audit's: rounds still run on the
        // interval, only not woken at once.
        (Some(_), Err(e)) => {
            metrics.failed();
            tracing::error!(error = %e, "pre-flight: cannot open the InstallPlan watch; judging on the interval only");
            None
        }
    };
    // Takes the leader channel: when it returns, the channel is closed.
    auditor.follow(allowlists, leader, (&appeared, &stop)).await;
    if let Some(watch) = watch {
        watch.abort();
    }
    metrics.leader(false);
    if let Some(election) = election {
        election.finish().await;
    }
}

/// The owner reference of ClusterRole `name`, or `None` (logged, counted,
/// retried next run) when it cannot be read.
async fn owner_reference(connection: &Connection, name: &str, metrics: &AuditMetrics) -> Option<Value> {
    match audit::write::cluster_role_uid(connection, name).await {
        Ok(uid) => Some(audit::write::cluster_role_owner(name, &uid)),
        Err(e) => {
            metrics.failed();
            tracing::warn!(error = %e.message(), "background audit: what it writes has no owner this run");
            None
        }
    }
}

/// What every run reads and writes with.
struct Auditor<'a> {
    connection: &'a Connection,
    flags: &'a BackgroundArgs,
    writes: Writes,
    policy: &'a Policy,
    metrics: &'a AuditMetrics,
    upgrades: Option<&'a super::upgrades::Upgrades>,
}

impl Auditor<'_> {
    /// Audits while this replica leads: at once, after every allowlist put
    /// in force, and on the interval; until `stop`, or until the election
    /// stops. A plan that comes to wait or stops waiting (`appeared`) wakes
    /// a pre-flight alone.
    async fn follow(
        &mut self,
        mut allowlists: watch::Receiver<Arc<Allowlist>>,
        mut leader: watch::Receiver<bool>,
        (appeared, stop): (&tokio::sync::Notify, &CancellationToken),
    ) {
        let mut wake = Wake::Audit;
        loop {
            let is_leader = *leader.borrow_and_update();
            self.metrics.leader(is_leader);
            if is_leader {
                if self.writes.owner.is_none()
                    && let Some(name) = &self.flags.owner
                {
                    self.writes.owner = owner_reference(self.connection, name, self.metrics).await;
                }
                // A snapshot: a reload during the run wakes the next one.
                let allowlist = allowlists.borrow_and_update().clone();
                // A run, and what it writes, needs the Lease to the end:
                // one that loses it stops where it is.
                let mut lost = leader.clone();
                tokio::select! {
                    () = self.wakened(wake, &allowlist) => {}
                    _ = lost.wait_for(|leading| !leading) => {
                        tracing::warn!("background audit: the Lease was lost during a run; stopped it");
                        continue;
                    }
                    () = stop.cancelled() => return,
                }
            }
            wake = tokio::select! {
                () = tokio::time::sleep(self.flags.interval) => Wake::Audit,
                changed = allowlists.changed() => match changed {
                    Ok(()) => {
                        tracing::info!("background audit: the allowlist changed; auditing again");
                        Wake::Audit
                    }
                    // The supply has stopped: the server is stopping.
                    Err(_) => return,
                },
                changed = leader.changed() => match changed {
                    Ok(()) => Wake::Audit,
                    Err(_) => {
                        tracing::error!("background audit: leader election stopped; not auditing");
                        return;
                    }
                },
                () = appeared.notified() => {
                    tracing::info!("pre-flight: an InstallPlan came to wait or stopped waiting; judging again");
                    Wake::Plans
                }
                () = stop.cancelled() => return,
            }
        }
    }

    /// What a wake-up runs: the audit (and the pre-flight after it), or
    /// the pre-flight alone.
    async fn wakened(&self, wake: Wake, allowlist: &Allowlist) {
        match (wake, self.upgrades) {
            (Wake::Plans, Some(upgrades)) => {
                upgrades
                    .judge(
                        self.connection,
                        (self.policy, self.target(), &self.writes),
                        self.metrics,
                    )
                    .await
            }
            _ => self.audit(allowlist).await,
        }
    }

    /// What an audit reads.
    fn target(&self) -> Target {
        Target {
            scope: Scope::All {
                namespace_selector: self.flags.namespace_selector.clone(),
            },
            label_selector: None,
            kinds: None,
            break_glass_label: Some(self.flags.break_glass_label.clone()),
        }
    }

    async fn audit(&self, allowlist: &Allowlist) {
        let started = Instant::now();
        let target = self.target();
        let rules = crate::judge::Rules {
            policy: self.policy,
            allowlist,
            published: None,
        };
        // Each object's report is counted and gathered, then dropped: the
        // pod's memory does not grow with the cluster.
        let mut nowhere = Writer::discard();
        let audited = audit::run(
            self.connection,
            &target,
            rules,
            false,
            &self.writes,
            Some(&mut nowhere),
            &indicatif::ProgressBar::hidden(),
        )
        .await;
        let result = match audited {
            Ok(mut found) => audit::write(self.connection, &mut found, &self.writes)
                .await
                .map(|()| found),
            Err(e) => Err(e),
        };
        let seconds = started.elapsed().as_secs_f64();
        self.check_named().await;
        match result {
            Ok(found) => self.report(&found, seconds),
            Err(e) => {
                self.metrics.failed();
                tracing::error!(error = %e, seconds, "background audit failed");
            }
        }
        if let Some(upgrades) = self.upgrades {
            upgrades
                .judge(self.connection, (self.policy, target, &self.writes), self.metrics)
                .await;
        }
    }

    /// Checks that the namespaces the webhook's entries name carry their
    /// name label, and says which do not.
    async fn check_named(&self) {
        let names = &self.flags.named_namespaces;
        if names.is_empty() {
            return;
        }
        match audit::named::without_name_label(self.connection, names).await {
            Ok(missing) => {
                self.metrics.without_name_label(missing.len());
                for namespace in &missing {
                    tracing::warn!(
                        namespace,
                        label = audit::named::NAME_LABEL,
                        "namespace without its name label: the webhook entries that select or exclude it by name miss it (Kubernetes sets the label from 1.21 only); label it: kubectl label namespace {namespace} {}={namespace}",
                        audit::named::NAME_LABEL
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot check the namespaces the webhook selects by name"),
        }
    }

    /// Exports and logs what a run found.
    fn report(&self, found: &Audit, seconds: f64) {
        let counts = findings(found);
        let errors = found.report.errors.len();
        self.metrics.run(&counts, seconds, errors);
        self.metrics
            .images(&found.running.series(crate::fleet::SERIES_LIMIT));
        self.metrics.break_glass_namespaces(found.break_glass.len());
        for e in &found.report.errors {
            tracing::warn!(error = %e, "background audit");
        }
        for note in &found.report.notes {
            tracing::debug!(%note, "background audit");
        }
        for (namespace, value) in &found.break_glass {
            tracing::warn!(
                namespace,
                label = %self.flags.break_glass_label,
                value,
                "break glass: the webhook does not review this namespace"
            );
        }
        let s = &found.report.summary;
        tracing::info!(
            objects = s.objects,
            findings = counts.iter().map(|c| c.2).sum::<usize>(),
            errors,
            seconds,
            "background audit done"
        );
    }
}

/// Why the background task woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// The interval, a new allowlist, leadership: audit (and judge the
    /// waiting plans after).
    Audit,
    /// A plan came to wait: judge the waiting plans alone.
    Plans,
}

/// Objects with findings per (kind, verdict), each kind read with both
/// verdicts (0 when none). In audit mode the verdict is what rewrite mode
/// would reach.
fn findings(audit: &Audit) -> Vec<(&'static str, Verdict, usize)> {
    let mut counts: Vec<(&'static str, Verdict, usize)> = audit
        .read
        .iter()
        .flat_map(|&(kind, _)| [(kind, Verdict::Rewrite, 0), (kind, Verdict::Deny, 0)])
        .collect();
    for &(kind, verdict, n) in &audit.findings {
        if let Some(c) = counts.iter_mut().find(|c| c.0 == kind && c.1 == verdict) {
            c.2 += n;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ObjectReport;
    use crate::testing::{BAD, REPO, incident_allowlist};
    use serde_json::json;

    #[test]
    fn findings_count_objects_per_kind_read() {
        let mut audit = Audit {
            read: vec![("Pod", 2), ("ServingRuntime", 0)],
            ..Audit::default()
        };
        for (name, image) in [
            ("stale", format!("{REPO}@{BAD}")),
            ("fine", format!("{REPO}:latest-not-promoted")),
        ] {
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "m"},
                             "spec": {"containers": [{"name": "c", "image": image}]}});
            let list = incident_allowlist();
            let j = crate::judge::judge(&pod, None, &Default::default(), &list);
            audit.found(&ObjectReport::new("cluster:x".into(), &pod, &j, &list, |_| None));
        }
        let counts = findings(&audit);
        assert!(counts.contains(&("Pod", Verdict::Rewrite, 1)), "{counts:?}");
        assert!(
            counts.contains(&("ServingRuntime", Verdict::Rewrite, 0)),
            "{counts:?}"
        );
        let denied: usize = counts.iter().filter(|c| c.1 == Verdict::Deny).map(|c| c.2).sum();
        assert_eq!(denied, 1, "{counts:?}");
    }
}
