//! Hot reloads of the allowlist and the TLS key pair.
//!
//! Mounted ConfigMaps and Secrets change by an atomic swap of the `..data`
//! symlink, not by a write to the file, so watching the file's inode misses
//! updates. Instead every source is re-read on an interval and compared by
//! content; only a change is parsed, and only a parse that succeeds replaces
//! what is in force. A failure is logged and counted once per distinct
//! content, and readiness stays green: the last good state keeps serving.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;

use super::http::State;
use super::tls::{self, CertStore};
use crate::allowlist::{self, Loaded, Source};
use crate::policy::{Policy, Unlisted};

/// The TLS files a server watches.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Remembers what was last seen of each source.
pub struct Reloader {
    state: Arc<State>,
    allowlists: Vec<PathBuf>,
    certs: Option<(CertFiles, Arc<CertStore>, Arc<CryptoProvider>)>,
    allowlist_seen: Option<u64>,
    cert_seen: Option<u64>,
}

fn fingerprint<T: Hash>(value: &T) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// Refuses an allowlist that would deny every image: on a reload that is
/// almost always a ConfigMap emptied by mistake. In audit mode nothing is
/// denied, so starting from an empty list (to watch the warnings) is fine.
pub fn usable(loaded: &Loaded, policy: &Policy) -> Result<(), String> {
    if loaded.allowlist.repository_count() == 0 && policy.unlisted == Unlisted::Deny && policy.can_deny() {
        return Err("the allowlist promotes no repository, so every image would be denied".into());
    }
    Ok(())
}

/// Reads and parses allowlist sources, with the fingerprint of what was read.
pub fn load_allowlist(paths: &[PathBuf], policy: &Policy) -> (u64, Result<Loaded, String>) {
    let sources = match allowlist::read_sources(paths) {
        Ok(s) => s,
        Err(e) => {
            let message = e.to_string();
            return (fingerprint(&message), Err(message));
        }
    };
    let seen = fingerprint(&sources);
    (seen, parse(&sources, policy))
}

fn parse(sources: &[Source], policy: &Policy) -> Result<Loaded, String> {
    let loaded = allowlist::load_sources(sources).map_err(|e| e.to_string())?;
    usable(&loaded, policy)?;
    Ok(loaded)
}

/// Reads the key pair files, with the fingerprint of what was read.
fn read_certs(files: &CertFiles) -> Result<(Vec<u8>, Vec<u8>), String> {
    let cert =
        std::fs::read(&files.cert).map_err(|e| format!("cannot read {}: {e}", files.cert.display()))?;
    let key = std::fs::read(&files.key).map_err(|e| format!("cannot read {}: {e}", files.key.display()))?;
    Ok((cert, key))
}

// === impl Reloader ===

impl Reloader {
    /// Starts from what the server loaded at startup.
    pub fn new(
        state: Arc<State>,
        allowlists: Vec<PathBuf>,
        allowlist_seen: u64,
        certs: Option<(CertFiles, Arc<CertStore>, Arc<CryptoProvider>)>,
    ) -> Self {
        let cert_seen = certs
            .as_ref()
            .and_then(|(files, _, _)| read_certs(files).ok())
            .map(|pair| fingerprint(&pair));
        Self {
            state,
            allowlists,
            certs,
            allowlist_seen: Some(allowlist_seen),
            cert_seen,
        }
    }

    /// Checks every source once.
    pub fn poll(&mut self) {
        self.poll_allowlist();
        self.poll_certificate();
    }

    fn poll_allowlist(&mut self) {
        if self.allowlists.is_empty() {
            return;
        }
        let (seen, result) = load_allowlist(&self.allowlists, &self.state.policy);
        if self.allowlist_seen == Some(seen) {
            return;
        }
        self.allowlist_seen = Some(seen);
        match result {
            Ok(loaded) => {
                let (repos, digests) = (
                    loaded.allowlist.repository_count(),
                    loaded.allowlist.digest_count(),
                );
                for w in &loaded.warnings {
                    tracing::warn!(warning = %w, "allowlist entry skipped");
                }
                self.state.swap_allowlist(loaded.allowlist);
                self.state.metrics.reload("allowlist", true);
                tracing::info!(repositories = repos, digests, "allowlist reloaded");
            }
            Err(error) => {
                self.state.metrics.reload("allowlist", false);
                tracing::warn!(%error, "allowlist reload failed; the last good allowlist stays in force");
            }
        }
    }

    fn poll_certificate(&mut self) {
        let Some((files, store, provider)) = &self.certs else {
            return;
        };
        let (seen, result) = match read_certs(files) {
            Ok(pair) => {
                let seen = fingerprint(&pair);
                let parsed = tls::parse_key_pair(&files.cert, &pair.0, &files.key, &pair.1, provider)
                    .map_err(|e| e.to_string());
                (seen, parsed)
            }
            Err(e) => (fingerprint(&e), Err(e)),
        };
        if self.cert_seen == Some(seen) {
            return;
        }
        self.cert_seen = Some(seen);
        match result {
            Ok(key) => {
                store.swap(key);
                self.state.metrics.reload("certificate", true);
                tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded; new handshakes use it");
            }
            Err(error) => {
                self.state.metrics.reload("certificate", false);
                tracing::warn!(%error, "TLS certificate reload failed; the last good key pair stays in force");
            }
        }
    }

    /// Polls every `interval` until `stop` fires.
    pub async fn run(mut self, interval: Duration, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.changed() => return,
            }
            // File reads and parsing block; keep them off the request threads.
            self = match tokio::task::spawn_blocking(move || {
                self.poll();
                self
            })
            .await
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, "reload task failed; reloads stop");
                    return;
                }
            };
        }
    }
}
