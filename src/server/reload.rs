//! Hot reloads of the allowlist and the TLS key pair.
//!
//! Mounted ConfigMaps and Secrets change by an atomic swap of the `..data`
//! symlink, not by a write to the file, so watching the file's inode misses
//! updates. Instead every source is stat'ed on an interval, following
//! symlinks: a swap shows up as a new inode, an edit as a new size or mtime.
//! Only then is the content read, and only a change of content is parsed; only
//! a parse that succeeds replaces what is in force. Every few polls the content
//! is compared even without a stat change, in case an edit kept size and mtime.
//! A failure is logged and counted once per distinct content, and readiness
//! stays green: the last good state keeps serving.
//!
//! Polling runs on its own thread: reading a large allowlist never competes
//! with reviews for the runtime's workers.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;

use super::http::State;
use super::tls::{self, CertStore};
use crate::allowlist::{self, Loaded, Source};
use crate::policy::{Policy, Unlisted};

/// Polls between content checks that no stat change triggered.
const FORCED_CHECK_EVERY: u32 = 30;

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
    cert_files: CertFiles,
    cert_store: Arc<CertStore>,
    provider: Arc<CryptoProvider>,
    allowlist_seen: u64,
    allowlist_stat: u64,
    /// None only if re-reading the key pair right after startup failed
    /// (it had just loaded, so it changed in between); whatever is read
    /// next then counts as new.
    cert_seen: Option<u64>,
    cert_stat: u64,
    polls: u32,
}

fn fingerprint<T: Hash>(value: &T) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// Identity, size and modification time of each file, symlinks followed; or
/// the error, so a missing file is a state of its own.
fn stat_of(files: &[&Path]) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut h = DefaultHasher::new();
    for f in files {
        f.hash(&mut h);
        match std::fs::metadata(f) {
            Ok(m) => (
                m.dev(),
                m.ino(),
                m.len(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            )
                .hash(&mut h),
            Err(e) => e.kind().hash(&mut h),
        }
    }
    h.finish()
}

fn allowlist_stat(paths: &[PathBuf]) -> u64 {
    match allowlist::source_files(paths) {
        Ok(files) => stat_of(&files.iter().map(PathBuf::as_path).collect::<Vec<_>>()),
        Err(e) => fingerprint(&e.to_string()),
    }
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
        cert_files: CertFiles,
        cert_store: Arc<CertStore>,
        provider: Arc<CryptoProvider>,
    ) -> Self {
        let cert_seen = read_certs(&cert_files).ok().map(|pair| fingerprint(&pair));
        let cert_stat = stat_of(&[&cert_files.cert, &cert_files.key]);
        let allowlist_stat = allowlist_stat(&allowlists);
        Self {
            state,
            allowlists,
            cert_files,
            cert_store,
            provider,
            allowlist_seen,
            allowlist_stat,
            cert_seen,
            cert_stat,
            polls: 0,
        }
    }

    /// Checks every source once.
    pub fn poll(&mut self) {
        self.polls = self.polls.wrapping_add(1);
        let forced = self.polls.is_multiple_of(FORCED_CHECK_EVERY);
        self.poll_allowlist(forced);
        self.poll_certificate(forced);
    }

    fn poll_allowlist(&mut self, forced: bool) {
        if self.allowlists.is_empty() {
            return;
        }
        let stat = allowlist_stat(&self.allowlists);
        if !forced && self.allowlist_stat == stat {
            return;
        }
        self.allowlist_stat = stat;
        let (seen, result) = load_allowlist(&self.allowlists, &self.state.policy);
        if self.allowlist_seen == seen {
            return;
        }
        self.allowlist_seen = seen;
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

    fn poll_certificate(&mut self, forced: bool) {
        let files = &self.cert_files;
        let stat = stat_of(&[&files.cert, &files.key]);
        if !forced && self.cert_stat == stat {
            return;
        }
        self.cert_stat = stat;
        let (seen, result) = match read_certs(files) {
            Ok(pair) => {
                let seen = fingerprint(&pair);
                let parsed = tls::parse_key_pair(&files.cert, &pair.0, &files.key, &pair.1, &self.provider)
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
                self.cert_store.swap(key);
                self.state.metrics.reload("certificate", true);
                tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded; new handshakes use it");
            }
            Err(error) => {
                self.state.metrics.reload("certificate", false);
                tracing::warn!(%error, "TLS certificate reload failed; the last good key pair stays in force");
            }
        }
    }

    /// Polls every `interval` on a thread of its own until `stop` turns true.
    pub fn spawn(
        mut self,
        interval: Duration,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new()
            .name("digest-gate-reload".into())
            .spawn(move || {
                // Short naps, so a drain stops the thread promptly.
                let nap = interval.min(Duration::from_millis(100));
                let mut slept = Duration::ZERO;
                loop {
                    if *stop.borrow() {
                        return;
                    }
                    std::thread::sleep(nap);
                    slept += nap;
                    if slept >= interval {
                        slept = Duration::ZERO;
                        self.poll();
                    }
                }
            })
    }
}
