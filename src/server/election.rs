//! The background audit's leader election on a `coordination.k8s.io`
//! Lease (`--audit-lease`), on kube-lease-manager's `changed()`, with what
//! its own `watch()` loop lacks:
//!
//! - **Joining never gives up**: a Lease that cannot be used at start-up
//!   (the apiserver away, the Lease missing or forbidden) is tried again,
//!   1 s doubling to 30 s apart, each failure counted by reason.
//! - **A leader that cannot renew steps down** at once: `watch()` keeps
//!   saying "leader" through failed renewals, so a replica cut off from
//!   the apiserver went on exposing findings (and, back on the network,
//!   auditing) while another held the Lease. The manager's requests are
//!   bounded, so a renewal that fails does so before the Lease expires;
//!   then the manager is built anew, which reads the Lease as it stands.
//! - **A released Lease is taken at once**: a follower sleeps until the
//!   expiry it last read; a watch of the Lease wakes it when the holder
//!   releases it (on shutdown), and a manager built anew takes it: a
//!   rolling restart hands over in about a second, not the Lease's 15.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::audit::{ClusterSettings, Connection};
use crate::metrics::{AuditMetrics, LeaseTrouble};

/// Seconds a Lease holds without renewal, and how long before expiry the
/// holder renews it (the values kube-controller-manager uses, 15 s / 10 s).
const LEASE_SECONDS: u64 = 15;
const LEASE_GRACE_SECONDS: u64 = 5;

/// The first wait before trying the Lease again, and the longest: a
/// replica that cannot use its Lease does not audit, so it keeps trying,
/// but a Lease missing or forbidden is not fixed in seconds.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MOST: Duration = Duration::from_secs(30);

/// The election this replica takes part in: `leader` says whether it
/// holds the Lease, as far as it knows.
pub struct Election {
    pub leader: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

// === impl Election ===

impl Election {
    /// Joins the election for Lease `name` (`ns/name`, or `name` in the
    /// context's namespace; the chart creates it).
    pub fn start(
        settings: &ClusterSettings,
        name: &str,
        metrics: AuditMetrics,
        stop: CancellationToken,
    ) -> Self {
        let (sender, leader) = watch::channel(false);
        let (settings, name) = (settings.clone(), name.to_owned());
        let task = tokio::spawn(async move { run(&settings, &name, &metrics, &sender, &stop).await });
        Self { leader, task }
    }

    /// Waits (5 s at most) for the election to end, which releases the
    /// Lease so that the next replica need not wait for it to expire. The
    /// election ends when every receiver of `leader` is dropped.
    pub async fn finish(self) {
        drop(self.leader);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

/// Why the background audit cannot take part in its election.
#[derive(Debug, thiserror::Error)]
#[error("Lease {namespace}/{name}: {source}")]
pub struct LeaseError {
    namespace: String,
    name: String,
    #[source]
    source: LeaseManagerError,
}

// === impl LeaseError ===

impl LeaseError {
    /// Why, as the metric's `reason` label says it.
    fn reason(&self) -> LeaseTrouble {
        use LeaseManagerError as E;
        match &self.source {
            E::NonexistentLease(_) => LeaseTrouble::Missing,
            E::KubeError(kube::Error::Api(status)) => match status.code {
                401 | 403 => LeaseTrouble::Forbidden,
                404 => LeaseTrouble::Missing,
                _ => LeaseTrouble::Other,
            },
            E::KubeError(kube::Error::HyperError(_) | kube::Error::Service(_)) => LeaseTrouble::Unreachable,
            _ => LeaseTrouble::Other,
        }
    }
}

/// Where the Lease is, and who this replica is.
struct Place {
    namespace: String,
    name: String,
    /// The pod's name: what `kubectl get lease` shows as the holder.
    identity: String,
}

/// Takes part until `stop`, or until `leader` has no receiver left; then
/// releases the Lease if it holds it.
async fn run(
    settings: &ClusterSettings,
    name: &str,
    metrics: &AuditMetrics,
    sender: &watch::Sender<bool>,
    stop: &CancellationToken,
) {
    let Some((manager_connection, watch_connection)) = connections(settings, metrics).await else {
        return;
    };
    let (namespace, name) = match name.split_once('/') {
        Some((ns, n)) => (ns.to_owned(), n.to_owned()),
        None => (manager_connection.namespace.clone(), name.to_owned()),
    };
    let place = Place {
        namespace,
        name,
        identity: std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| format!("digest-gate-{}", std::process::id())),
    };
    let leases: Api<Lease> = Api::namespaced(watch_connection.client.clone(), &place.namespace);
    let mut wait = RETRY_FIRST;
    loop {
        let failure = match manager(&manager_connection, &place).await {
            Ok(manager) => match take_part(&manager, &leases, &place, sender, stop, &mut wait).await {
                Ended::Done => {
                    let _ = manager.release().await;
                    return;
                }
                // A manager built now reads the Lease free, and takes it.
                Ended::Released => continue,
                Ended::Failed(source) => LeaseError {
                    namespace: place.namespace.clone(),
                    name: place.name.clone(),
                    source,
                },
            },
            Err(e) => e,
        };
        if sender.send_replace(false) {
            tracing::warn!(lease = %place.name, "background audit: cannot renew its Lease; stepping down");
        }
        let reason = failure.reason();
        metrics.lease_failed(reason);
        tracing::error!(error = %failure, reason = <&str>::from(reason), retry_in = ?wait,
            "background audit: cannot use its Lease; not auditing until it can");
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => return,
            () = sender.closed() => return,
        }
        wait = (wait * 2).min(RETRY_MOST);
    }
}

/// What one request of the manager may take: the holder renews 5 s
/// before its Lease expires, so a renewal that fails does so, and the
/// holder steps down, 2 s before another replica may take the Lease.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(LEASE_GRACE_SECONDS - 2);

/// The manager's connection, each request bounded by [`REQUEST_TIMEOUT`],
/// and the watch's, with kube's read timeout (it waits minutes for an
/// event).
async fn connections(settings: &ClusterSettings, metrics: &AuditMetrics) -> Option<(Connection, Connection)> {
    let bounded = ClusterSettings {
        timeout: Some(REQUEST_TIMEOUT),
        own_retries: true,
        ..settings.clone()
    };
    let watching = ClusterSettings {
        timeout: None,
        own_retries: true,
        ..settings.clone()
    };
    match (
        Connection::open(&bounded).await,
        Connection::open(&watching).await,
    ) {
        (Ok(a), Ok(b)) => Some((a, b)),
        (Err(e), _) | (_, Err(e)) => {
            // The kubeconfig that served the audit's own connection does
            // not change in between: this is not retried.
            metrics.failed();
            tracing::error!(error = %e, "background audit: no connection for its Lease; not auditing");
            None
        }
    }
}

/// A manager for the Lease, which reads it as it stands.
async fn manager(connection: &Connection, place: &Place) -> Result<LeaseManager, LeaseError> {
    LeaseManagerBuilder::new(connection.client.clone(), &place.name)
        .with_namespace(&place.namespace)
        .with_create_mode(LeaseCreateMode::UseExistent)
        .with_identity(&place.identity)
        .with_duration(LEASE_SECONDS)
        .with_grace(LEASE_GRACE_SECONDS)
        .build()
        .await
        .map_err(|source| LeaseError {
            namespace: place.namespace.clone(),
            name: place.name.clone(),
            source,
        })
}

/// How taking part with one manager ended.
enum Ended {
    /// `stop`, or no receiver left: release the Lease and end.
    Done,
    /// The Lease was released while this replica followed: the manager
    /// believes it held until the expiry it read, so a new one is built.
    Released,
    /// A request of the manager failed: step down, and try again.
    Failed(LeaseManagerError),
}

/// Leads or follows, telling `sender` every change, until it [`Ended`].
async fn take_part(
    manager: &LeaseManager,
    leases: &Api<Lease>,
    place: &Place,
    sender: &watch::Sender<bool>,
    stop: &CancellationToken,
    wait: &mut Duration,
) -> Ended {
    let config = watcher::Config::default().fields(&format!("metadata.name={}", place.name));
    // A release is a holder seen, then none: the Lease as first listed (or
    // listed again after an error) only sets what was seen, so a free
    // Lease does not rebuild the manager over and over while it takes it.
    let mut released = watcher(leases.clone(), config)
        .default_backoff()
        .applied_objects()
        .scan(None::<bool>, |held, lease| {
            let released = match lease {
                Ok(lease) => {
                    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
                    let now = !holder.is_none_or(str::is_empty);
                    held.replace(now) == Some(true) && !now
                }
                Err(_) => false,
            };
            std::future::ready(Some(released))
        })
        .filter_map(|released| std::future::ready(released.then_some(())))
        .boxed();
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return Ended::Done,
            () = sender.closed() => return Ended::Done,
            changed = manager.changed() => {
                let leading = match changed {
                    Ok(leading) => leading,
                    Err(e) => return Ended::Failed(e),
                };
                *wait = RETRY_FIRST;
                if sender.send_replace(leading) != leading {
                    tracing::info!(lease = %place.name, identity = %place.identity, leading, "background audit: leadership changed");
                }
            }
            // The pending `changed()` sleeps until the expiry it read.
            Some(()) = released.next(), if !*sender.borrow() => return Ended::Released,
        }
    }
}
