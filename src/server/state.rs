//! What every request shares: the allowlist in force, the decision
//! settings, the metrics, and readiness.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

use super::installed::Installed;
use crate::allowlist::Allowlist;
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::published::Published;

/// Whether the server takes new reviews. A [`State`] always holds an
/// allowlist and is served only once its certificate is loaded; what makes
/// a running server unready is draining, an allowlist that is not yet the
/// one it should serve (a source still to be read, or none usable), or a
/// webhook listener that has stopped (its task marks it as it ends, by a
/// panic too). `/readyz` is answered by the same runtime workers that
/// answer reviews, and nothing there waits on the log (`logsink`): an
/// answer at all says they run.
#[derive(Debug, Default)]
pub struct Readiness {
    draining: AtomicBool,
    listener_stopped: AtomicBool,
    waiting: Mutex<Option<&'static str>>,
}

/// Why a server waits: the installed CSVs of `--allowlist-csv` not read yet.
pub const WAITING_FOR_CSVS: &str =
    "waiting for the installed operators' ClusterServiceVersions (--allowlist-csv)";
/// Why a server waits: its allowlist does not load and no last good copy
/// was kept.
pub const WAITING_FOR_ALLOWLIST: &str =
    "the allowlist cannot be used and no last good copy was kept; waiting for a usable one (see the log)";

// === impl Readiness ===

impl Readiness {
    /// Starts draining: readiness fails from now on.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// The webhook listener has ended: no review is answered any more.
    pub fn listener_stopped(&self) {
        self.listener_stopped.store(true, Ordering::Release);
    }

    /// Whether the listener ended without a drain asking it to.
    pub fn stopped_unasked(&self) -> bool {
        self.listener_stopped.load(Ordering::Acquire) && !self.draining.load(Ordering::Acquire)
    }

    /// Marks the allowlist in force as not the one to serve, and why, until
    /// [`Self::complete`].
    pub fn wait(&self, why: &'static str) {
        *self.waiting.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    /// The allowlist in force is the one to serve.
    pub fn complete(&self) {
        *self.waiting.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Whether [`Self::wait`] is in effect.
    pub fn waiting(&self) -> bool {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// `Ok` when ready, else why not.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.draining.load(Ordering::Acquire) {
            return Err("shutting down");
        }
        if self.listener_stopped.load(Ordering::Acquire) {
            return Err("the webhook listener has stopped");
        }
        match *self.waiting.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }
}

/// Everything a request needs, shared by all connections.
pub struct State {
    /// The allowlist in force: the supply swaps it whole, a request loads
    /// it without a lock.
    pub allowlist: Arc<ArcSwap<Allowlist>>,
    pub policy: Policy,
    /// With `--verify-registry`: what the registries said of the promoted
    /// digests, swapped whole by the background verification.
    pub published: Option<Arc<ArcSwap<Published>>>,
    pub metrics: Metrics,
    pub ready: Arc<Readiness>,
    /// Largest review body accepted.
    pub max_body_bytes: usize,
    /// Longest a client may take to send a body.
    pub request_timeout: Duration,
    /// The installed operators' CSVs (`--allowlist-csv`), which an edited
    /// allowlist ConfigMap is checked merged with.
    pub installed: Option<Arc<Installed>>,
    /// `--judgement-writers`.
    pub judgement_writers: Vec<String>,
}

// === impl State ===

impl State {
    /// State around an allowlist, with default limits: for tests and
    /// in-process callers that serve one allowlist and never reload it.
    pub fn new(allowlist: Allowlist, policy: Policy) -> Self {
        let metrics = Metrics::new();
        metrics
            .reloads
            .allowlist_size(allowlist.repository_count(), allowlist.digest_count());
        Self::serving(
            Arc::new(ArcSwap::from_pointee(allowlist)),
            policy,
            metrics,
            Arc::default(),
        )
    }

    /// State around the allowlist a supply keeps in force.
    pub fn serving(
        allowlist: Arc<ArcSwap<Allowlist>>,
        policy: Policy,
        metrics: Metrics,
        ready: Arc<Readiness>,
    ) -> Self {
        Self {
            allowlist,
            policy,
            published: None,
            metrics,
            ready,
            max_body_bytes: 8 * 1024 * 1024,
            request_timeout: Duration::from_secs(10),
            installed: None,
            judgement_writers: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener that ended makes the replica unready, and a stop that
    /// nobody asked for is told apart from a drain.
    #[test]
    fn a_stopped_listener_is_not_ready() {
        let ready = Readiness::default();
        assert_eq!(ready.check(), Ok(()));
        ready.listener_stopped();
        assert_eq!(ready.check(), Err("the webhook listener has stopped"));
        assert!(ready.stopped_unasked());
        ready.drain();
        assert!(!ready.stopped_unasked(), "a drain stops the listener on purpose");
    }
}
