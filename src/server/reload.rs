//! The reload thread: every interval it asks the allowlist
//! [`Supply`] and the TLS key pair whether their
//! files changed, and puts what changed in force if it loads.
//!
//! Every source is stat'ed on an interval (`fingerprint::stat_of`); only a stat
//! change leads to reading the content, and only a change of content to
//! parsing it. Every few polls the content is compared even without a stat
//! change, in case an edit kept size and mtime. A failure is logged and
//! counted once per distinct content, and readiness stays green: the last
//! good state keeps serving.
//!
//! Polling runs on its own thread: reading a large allowlist never competes
//! with reviews for the runtime's workers.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use tokio_util::sync::CancellationToken;

use super::fingerprint::{fingerprint, stat_of};
use super::supply::Supply;
use super::tls::{self, CertStore, TlsError};
use crate::metrics::{ReloadMetrics, Reloaded};

/// Polls between content checks that no stat change triggered.
const FORCED_CHECK_EVERY: u32 = 30;

/// The TLS files a server watches.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The serving key pair, reloaded when its files change.
pub struct Certificate {
    files: CertFiles,
    store: Arc<CertStore>,
    provider: Arc<CryptoProvider>,
    metrics: ReloadMetrics,
    /// None only if re-reading the key pair right after startup failed
    /// (it had just loaded, so it changed in between); whatever is read
    /// next then counts as new.
    seen: Option<u64>,
    stat: u64,
}

/// Exports when the serving chain expires ([`tls::chain_expiry`]), or says
/// loudly that it cannot tell (the metric is then 0, so an expiry alert fires).
pub fn export_expiry(metrics: &ReloadMetrics, expiry: Option<i64>, cert: &Path) {
    if expiry.is_none() {
        tracing::warn!(cert = %cert.display(), "cannot read the serving certificate's expiry; digest_gate_certificate_expiry_timestamp_seconds is 0");
    }
    metrics.certificate_expiry(expiry);
}

fn read_pair(files: &CertFiles) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    Ok((tls::read(&files.cert)?, tls::read(&files.key)?))
}

// === impl Certificate ===

impl Certificate {
    /// Starts from the key pair `store` serves, loaded from `files`.
    pub fn new(
        files: CertFiles,
        store: Arc<CertStore>,
        provider: Arc<CryptoProvider>,
        metrics: ReloadMetrics,
    ) -> Self {
        let seen = read_pair(&files).ok().map(|pair| fingerprint(&pair));
        let stat = stat_of(&[&files.cert, &files.key]);
        Self {
            files,
            store,
            provider,
            metrics,
            seen,
            stat,
        }
    }

    /// Swaps in the key pair if its files changed and it parses.
    pub fn poll(&mut self, forced: bool) {
        let files = &self.files;
        let stat = stat_of(&[&files.cert, &files.key]);
        if !forced && self.stat == stat {
            return;
        }
        self.stat = stat;
        let (seen, result) = match read_pair(files) {
            Ok(pair) => {
                let seen = fingerprint(&pair);
                let parsed = tls::parse_key_pair(&files.cert, &pair.0, &files.key, &pair.1, &self.provider);
                (seen, parsed)
            }
            Err(e) => (fingerprint(&e.to_string()), Err(e)),
        };
        if self.seen == Some(seen) {
            return;
        }
        self.seen = Some(seen);
        match result {
            Ok(key) => {
                export_expiry(&self.metrics, tls::chain_expiry(&key), &files.cert);
                self.store.swap(key);
                self.metrics.reload(Reloaded::Certificate, true);
                tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded; new handshakes use it");
            }
            Err(error) => {
                self.metrics.reload(Reloaded::Certificate, false);
                tracing::warn!(%error, "TLS certificate reload failed; the last good key pair stays in force");
            }
        }
    }
}

/// What the reload thread polls.
pub struct Reloader {
    pub supply: Supply,
    pub certificate: Certificate,
    polls: u32,
}

// === impl Reloader ===

impl Reloader {
    pub fn new(supply: Supply, certificate: Certificate) -> Self {
        Self {
            supply,
            certificate,
            polls: 0,
        }
    }

    /// Checks every source once.
    pub fn poll(&mut self) {
        self.polls = self.polls.wrapping_add(1);
        let forced = self.polls.is_multiple_of(FORCED_CHECK_EVERY);
        self.supply.poll(forced);
        self.certificate.poll(forced);
    }

    /// Polls every `interval` on a thread of its own until `stop` is
    /// cancelled.
    pub fn spawn(
        mut self,
        interval: Duration,
        stop: CancellationToken,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new()
            .name("digest-gate-reload".into())
            .spawn(move || {
                // Short naps, so a drain stops the thread promptly.
                let nap = interval.min(Duration::from_millis(100));
                let mut slept = Duration::ZERO;
                loop {
                    if stop.is_cancelled() {
                        return;
                    }
                    std::thread::sleep(nap);
                    slept += nap;
                    // A CSV change is merged at once: it arrives by watch,
                    // not by polling.
                    if slept >= interval || self.supply.installed_changed() {
                        slept = Duration::ZERO;
                        self.poll();
                    }
                }
            })
    }
}
