//! `serve --audit-interval`: the audit of [`run`](super::run), in the
//! webhook, on its service account: after the allowlist loads and after
//! every reload (a newly promoted or withdrawn digest changes what is
//! stale), then on the interval. Its findings are metrics; with
//! `--audit-policy-reports` and `--audit-events` it writes those too.
//!
//! It runs on a thread and runtime of its own, so judging a big cluster
//! never holds a worker that admission reviews need. With several replicas
//! only the holder of a Lease audits (`--audit-lease`); the others expose
//! no findings, so a sum over replicas counts each object once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_lease_manager::{LeaseCreateMode, LeaseManagerBuilder};
use serde_json::Value;
use tokio::sync::watch;

use super::{Audit, Connection, Scope, Settings, Target, Writes};
use crate::judge::ObjectVerdict;
use crate::objects::kind_label;
use crate::server::State;

/// Seconds a Lease holds without renewal, and how long before expiry the
/// holder renews it (the values kube-controller-manager uses, 15 s / 10 s).
const LEASE_SECONDS: u64 = 15;
const LEASE_GRACE_SECONDS: u64 = 5;

/// The background audit's flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Background {
    /// Audit the cluster this often in the background, e.g. 10m; also after
    /// every allowlist reload. 0 turns it off.
    #[arg(long = "audit-interval", env = "DIGEST_GATE_AUDIT_INTERVAL", default_value = "0s",
          value_parser = crate::server::parse_duration)]
    pub interval: Duration,
    /// Only namespaces matching this label selector (default: all).
    #[arg(
        long = "audit-namespace-selector",
        env = "DIGEST_GATE_AUDIT_NAMESPACE_SELECTOR",
        value_name = "SELECTOR"
    )]
    pub namespace_selector: Option<String>,
    /// The namespace label that keeps the webhook away (break glass): each
    /// run names the namespaces carrying it and counts them. Empty: none.
    #[arg(
        long = "audit-break-glass-label",
        env = "DIGEST_GATE_AUDIT_BREAK_GLASS_LABEL",
        value_name = "LABEL",
        default_value = super::BREAK_GLASS_LABEL
    )]
    pub break_glass_label: String,
    /// Write the findings as wgpolicyk8s.io PolicyReports.
    #[arg(long = "audit-policy-reports", env = "DIGEST_GATE_AUDIT_POLICY_REPORTS")]
    pub policy_reports: bool,
    /// Write a Warning Event on each object with a finding.
    #[arg(long = "audit-events", env = "DIGEST_GATE_AUDIT_EVENTS")]
    pub events: bool,
    /// Audit only while holding this coordination.k8s.io Lease (NAME, or
    /// NAMESPACE/NAME; default namespace: the pod's). Without it every
    /// replica audits.
    #[arg(long = "audit-lease", env = "DIGEST_GATE_AUDIT_LEASE", value_name = "LEASE")]
    pub lease: Option<String>,
    /// The ClusterRole that owns what the audit writes, so Kubernetes'
    /// garbage collector deletes reports and Events with it.
    #[arg(
        long = "audit-owner",
        env = "DIGEST_GATE_AUDIT_OWNER",
        value_name = "CLUSTERROLE"
    )]
    pub owner: Option<String>,
    /// Kubeconfig for the audit and --allowlist-csv (default: the pod's
    /// service account, or $KUBECONFIG and ~/.kube/config outside a pod).
    #[arg(long, env = "DIGEST_GATE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context for the audit and --allowlist-csv.
    #[arg(long, env = "DIGEST_GATE_CONTEXT")]
    pub context: Option<String>,
}

/// Starts the background audit if `config.interval` is not zero. It stops
/// (releasing its Lease) when `stop` turns true; join the thread before
/// exiting so the release reaches the apiserver.
pub fn spawn(
    config: Background,
    state: Arc<State>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    if config.interval.is_zero() {
        return Ok(None);
    }
    let thread = std::thread::Builder::new().name("audit".into()).spawn(move || {
        match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime.block_on(run(config, state, stop)),
            Err(e) => {
                state.metrics.audit_failed();
                tracing::error!(error = %e, "background audit: cannot start its runtime");
            }
        }
    })?;
    Ok(Some(thread))
}

async fn run(config: Background, state: Arc<State>, mut stop: watch::Receiver<bool>) {
    let settings = Settings {
        kubeconfig: config.kubeconfig.clone(),
        context: config.context.clone(),
        timeout: Some(Duration::from_secs(30)),
    };
    let failed = |e: &str| {
        state.metrics.audit_failed();
        tracing::error!(error = %e, "background audit: no cluster connection; retrying");
    };
    let Some(connection) =
        Connection::open_until_stopped(&settings, config.interval, &mut stop, failed).await
    else {
        return;
    };
    // Without a Lease nothing elects: this replica always audits, and the
    // sender is kept so the channel never closes.
    let (_always, always) = watch::channel(true);
    let (mut leader, lease) = match &config.lease {
        None => (always, None),
        Some(name) => match elect(&connection, name).await {
            Ok((leader, task)) => (leader, Some(task)),
            Err(e) => {
                state.metrics.audit_failed();
                tracing::error!(error = %e, lease = %name, "background audit: cannot use its Lease; not auditing");
                return;
            }
        },
    };
    tracing::info!(
        interval = ?config.interval,
        server = %connection.server,
        lease = config.lease.as_deref().unwrap_or("none"),
        "background audit started"
    );
    let mut writes = Writes {
        policy_reports: config.policy_reports,
        events: config.events,
        owner: None,
    };
    loop {
        let is_leader = *leader.borrow_and_update();
        state.metrics.audit_leader(is_leader);
        if is_leader {
            if writes.owner.is_none()
                && let Some(name) = &config.owner
            {
                writes.owner = owner_reference(&connection, name, &state).await;
            }
            tokio::select! {
                () = audit_once(&connection, &config, &writes, &state) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        tokio::select! {
            () = tokio::time::sleep(config.interval) => {}
            () = state.allowlist_changed.notified() => {
                tracing::info!("background audit: the allowlist changed; auditing again");
            }
            changed = leader.changed() => if changed.is_err() {
                tracing::error!("background audit: leader election stopped; not auditing");
                state.metrics.audit_leader(false);
                return;
            },
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    state.metrics.audit_leader(false);
    // The lease task releases the Lease when its channel closes, so the
    // next replica need not wait for it to expire.
    drop(leader);
    if let Some(task) = lease {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
}

type LeaseTask =
    tokio::task::JoinHandle<Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>>;

/// Joins the election for Lease `name` (`ns/name` or `name` in the
/// connection's namespace; the chart creates it, so it must exist).
async fn elect(connection: &Connection, name: &str) -> Result<(watch::Receiver<bool>, LeaseTask), String> {
    let (namespace, name) = match name.split_once('/') {
        Some((ns, n)) => (ns.to_owned(), n.to_owned()),
        None => (connection.namespace.clone(), name.to_owned()),
    };
    // The pod's name: what `kubectl get lease` shows as the holder.
    let identity = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("digest-gate-{}", std::process::id()));
    let manager = LeaseManagerBuilder::new(connection.client.clone(), &name)
        .with_namespace(&namespace)
        .with_create_mode(LeaseCreateMode::UseExistent)
        .with_identity(identity)
        .with_duration(LEASE_SECONDS)
        .with_grace(LEASE_GRACE_SECONDS)
        .build()
        .await
        .map_err(|e| format!("Lease {namespace}/{name}: {e}"))?;
    Ok(manager.watch().await)
}

/// The owner reference of ClusterRole `name`, or `None` (logged, counted,
/// retried next run) when it cannot be read.
async fn owner_reference(connection: &Connection, name: &str, state: &State) -> Option<Value> {
    match super::write::cluster_role_uid(connection, name).await {
        Ok(uid) => Some(super::write::cluster_role_owner(name, &uid)),
        Err(e) => {
            state.metrics.audit_failed();
            tracing::warn!(error = %e.message(), "background audit: what it writes has no owner this run");
            None
        }
    }
}

async fn audit_once(connection: &Connection, config: &Background, writes: &Writes, state: &State) {
    let started = Instant::now();
    let target = Target {
        scope: Scope::All {
            namespace_selector: config.namespace_selector.clone(),
        },
        label_selector: None,
        kinds: None,
        break_glass_label: Some(config.break_glass_label.clone()),
    };
    // A snapshot: a reload during the run wakes the next one.
    let allowlist = state.allowlist.load_full();
    let result = match super::run(connection, &target, &state.policy, &allowlist).await {
        Ok(mut audit) => super::write(connection, &mut audit, writes).await.map(|()| audit),
        Err(e) => Err(e),
    };
    let seconds = started.elapsed().as_secs_f64();
    match result {
        Ok(audit) => {
            let counts = findings(&audit);
            let errors = audit.report.errors.len();
            state.metrics.audit_run(&counts, seconds, errors);
            state.metrics.break_glass_namespaces(audit.break_glass.len());
            for e in &audit.report.errors {
                tracing::warn!(error = %e, "background audit");
            }
            for note in &audit.report.notes {
                tracing::debug!(%note, "background audit");
            }
            for (namespace, value) in &audit.break_glass {
                tracing::warn!(
                    namespace,
                    label = %config.break_glass_label,
                    value,
                    "break glass: the webhook does not review this namespace"
                );
            }
            let s = &audit.report.summary;
            tracing::info!(
                objects = s.objects,
                findings = counts.iter().map(|c| c.2).sum::<usize>(),
                errors,
                seconds,
                "background audit done"
            );
        }
        Err(e) => {
            state.metrics.audit_failed();
            tracing::error!(error = %e, seconds, "background audit failed");
        }
    }
}

/// Objects with findings per (kind, verdict), each kind read with both
/// verdicts (0 when none). In audit mode the verdict is what rewrite mode
/// would reach.
fn findings(audit: &Audit) -> Vec<(&'static str, &'static str, usize)> {
    let mut counts: Vec<(&'static str, &'static str, usize)> = audit
        .read
        .iter()
        .flat_map(|&(kind, _)| [(kind, "rewrite", 0), (kind, "deny", 0)])
        .collect();
    for r in &audit.report.results {
        let verdict = match r.verdict {
            ObjectVerdict::Deny => "deny",
            ObjectVerdict::Rewrite => "rewrite",
            _ if r.images.iter().any(|i| i.would_be == Some("deny")) => "deny",
            _ if r.images.iter().any(|i| i.would_be.is_some()) => "rewrite",
            _ => continue,
        };
        let kind = kind_label(r.kind.as_deref().unwrap_or_default());
        if let Some(c) = counts.iter_mut().find(|c| c.0 == kind && c.1 == verdict) {
            c.2 += 1;
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
            audit
                .report
                .push(ObjectReport::new("cluster:x".into(), &pod, &j, &list, |_| None));
        }
        let counts = findings(&audit);
        assert!(counts.contains(&("Pod", "rewrite", 1)), "{counts:?}");
        assert!(counts.contains(&("ServingRuntime", "rewrite", 0)), "{counts:?}");
        let denied: usize = counts.iter().filter(|c| c.1 == "deny").map(|c| c.2).sum();
        assert_eq!(denied, 1, "{counts:?}");
    }
}
