//! `serve --allowlist-csv`: the installed operators' ClusterServiceVersions,
//! followed with a watch on a thread of its own, as allowlist sources the
//! supply merges with the files.
//!
//! Until every namespace named has been listed whole the server is not
//! ready: an allowlist without the operator's digests would deny (or
//! rewrite) what the operator promotes. After that a failing watch keeps the
//! CSVs last seen, as a failing reload keeps the last good allowlist.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::tasks;
use crate::allowlist::Source;
use crate::audit::ClusterSettings;
use crate::audit::installed::{self, Csvs, Followed};
use crate::metrics::{ReloadMetrics, Reloaded};

/// The CSVs installed now, as the watch last saw them complete. Written by
/// the watch thread, read by the reloader.
#[derive(Debug, Default)]
pub struct Installed {
    /// Bumped on every change, so the reloader notices one without a lock.
    generation: AtomicU64,
    /// None until every namespace has been listed.
    sources: Mutex<Option<Arc<[Source]>>>,
}

impl Installed {
    /// Puts a complete set in force.
    pub fn publish(&self, sources: Vec<Source>) {
        *self.sources.lock().unwrap_or_else(|p| p.into_inner()) = Some(sources.into());
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Counts changes; 0 until the first complete set.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The set in force, once there is one.
    pub fn sources(&self) -> Option<Arc<[Source]>> {
        self.sources.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// How long to wait before connecting again after the kubeconfig could not
/// be used.
const RETRY: Duration = Duration::from_secs(5);

/// Follows `specs` into `installed` until `stop` is cancelled, on a thread
/// and runtime of its own (a relist of large CSVs never holds a worker
/// reviews need).
pub fn spawn(
    specs: Vec<Csvs>,
    settings: ClusterSettings,
    installed: Arc<Installed>,
    metrics: ReloadMetrics,
    stop: CancellationToken,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let failed_metrics = metrics.clone();
    let failed = move |e: &std::io::Error| {
        failed_metrics.reload(Reloaded::InstalledCsvs, false);
        tracing::error!(error = %e, "installed ClusterServiceVersions: cannot start the watch's runtime");
    };
    tasks::spawn(
        "csv-watch",
        move || watch(specs, settings, installed, metrics, stop),
        failed,
    )
}

async fn watch(
    specs: Vec<Csvs>,
    settings: ClusterSettings,
    installed: Arc<Installed>,
    metrics: ReloadMetrics,
    stop: CancellationToken,
) {
    let failed = |error: &crate::audit::AuditError| {
        metrics.reload(Reloaded::InstalledCsvs, false);
        tracing::error!(%error, "installed ClusterServiceVersions: no cluster connection; retrying");
    };
    let Some(connection) = tasks::connect(&settings, RETRY, &stop, failed).await else {
        return;
    };
    let named: Vec<String> = specs.iter().map(Csvs::to_string).collect();
    tracing::info!(server = %connection.server, csvs = %named.join(","), "watching the installed ClusterServiceVersions");
    // Since when the watch has been failing, if it is.
    let mut down: Option<std::time::SystemTime> = None;
    let tell = |followed| match followed {
        Followed::Installed(sources) => {
            let names: Vec<_> = sources.iter().map(Source::short_name).collect();
            tracing::info!(csvs = %names.join(","), "installed ClusterServiceVersions changed");
            metrics.reload(Reloaded::InstalledCsvs, true);
            installed.publish(sources);
        }
        Followed::Failed(error) => {
            metrics.reload(Reloaded::InstalledCsvs, false);
            let since = *down.get_or_insert_with(std::time::SystemTime::now);
            metrics.csv_watch_down(Some(since));
            let down_since = humantime::format_rfc3339_seconds(since).to_string();
            if installed.generation() == 0 {
                tracing::warn!(%error, %down_since, "installed ClusterServiceVersions: cannot read them; retrying, not ready until they are read");
            } else {
                tracing::warn!(%error, %down_since, "installed ClusterServiceVersions: the watch failed; retrying, the CSVs read last stay in force");
            }
        }
        Followed::Back => {
            if let Some(since) = down.take() {
                let down_seconds = since.elapsed().map_or(0.0, |d| d.as_secs_f64());
                tracing::info!(
                    down_seconds,
                    "installed ClusterServiceVersions: the watch works again, every namespace listed anew"
                );
            }
            metrics.csv_watch_down(None);
        }
    };
    tokio::select! {
        () = installed::follow(&connection, &specs, tell) => {}
        () = stop.cancelled() => {}
    }
}
