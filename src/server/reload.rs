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
use super::installed::Installed;
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
    /// The installed CSVs (`--allowlist-csv`), merged after the files.
    installed: Option<Arc<Installed>>,
    /// The generation of `installed` last merged.
    installed_seen: u64,
    /// Whether an allowlist with every source (the installed CSVs too) is
    /// in force; until then the server is not ready.
    complete: bool,
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

/// Reads and parses the allowlist files, then `installed` (the CSVs of
/// `--allowlist-csv`), with the fingerprint of what was read. Whether the
/// result is [`usable`] is the caller's question: before the CSVs arrive
/// the files alone need not be.
pub fn load_allowlist(paths: &[PathBuf], installed: &[Source]) -> (u64, Result<Loaded, String>) {
    let mut sources = match allowlist::read_sources(paths) {
        Ok(s) => s,
        Err(e) => {
            let message = e.to_string();
            return (fingerprint(&message), Err(message));
        }
    };
    sources.extend_from_slice(installed);
    let seen = fingerprint(&sources);
    (seen, allowlist::load_sources(&sources).map_err(|e| e.to_string()))
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
        installed: Option<Arc<Installed>>,
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
            complete: installed.is_none(),
            installed,
            installed_seen: 0,
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

    /// Whether the installed CSVs changed since they were last merged.
    fn installed_changed(&self) -> bool {
        self.installed
            .as_ref()
            .is_some_and(|i| i.generation() != self.installed_seen)
    }

    fn poll_allowlist(&mut self, forced: bool) {
        if self.allowlists.is_empty() && self.installed.is_none() {
            return;
        }
        let stat = allowlist_stat(&self.allowlists);
        if !forced && self.allowlist_stat == stat && !self.installed_changed() {
            return;
        }
        self.allowlist_stat = stat;
        let installed = match &self.installed {
            None => None,
            Some(i) => {
                self.installed_seen = i.generation();
                // Not listed yet: nothing complete to put in force.
                let Some(sources) = i.sources() else { return };
                Some(sources)
            }
        };
        let (seen, result) = load_allowlist(&self.allowlists, installed.as_deref().unwrap_or_default());
        if self.allowlist_seen == seen && self.complete {
            return;
        }
        self.allowlist_seen = seen;
        match result.and_then(|loaded| usable(&loaded, &self.state.policy).map(|()| loaded)) {
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
                if !self.complete {
                    // The first allowlist with the installed CSVs in it.
                    self.complete = true;
                    self.state.ready.complete();
                }
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
                    // A CSV change is merged at once: it arrives by watch,
                    // not by polling.
                    if slept >= interval || self.installed_changed() {
                        slept = Duration::ZERO;
                        self.poll();
                    }
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::tls::{DevCa, Usage};

    const REPOSITORY: &str = "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8";
    const DIGEST_1_20_1: &str = "sha256:1201000000000000000000000000000000000000000000000000000000000000";
    const DIGEST_1_21_0: &str = "sha256:8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6";

    fn csv(file: &str, name: &str) -> Source {
        let path = format!("{}/tests/data/allowlists/{file}", env!("CARGO_MANIFEST_DIR"));
        Source {
            name: format!("{}redhat-ods-operator/{name}", crate::audit::installed::INSTALLED),
            text: std::fs::read_to_string(path).unwrap(),
        }
    }

    /// A reloader over one allowlist file (`text`) and the installed CSVs,
    /// as `start` makes it when `--allowlist-csv` is given.
    fn reloader(name: &str, text: &str, policy: Policy) -> (Reloader, Arc<State>, Arc<Installed>) {
        let dir = std::env::temp_dir().join(format!("digest-gate-reload-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let issued = DevCa::new("test CA")
            .unwrap()
            .issue(&["localhost"], Usage::Server)
            .unwrap();
        let files = CertFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        std::fs::write(&files.cert, &issued.cert_pem).unwrap();
        std::fs::write(&files.key, &issued.key_pem).unwrap();
        let list = dir.join("allowlist.txt");
        std::fs::write(&list, text).unwrap();
        let provider = tls::provider();
        let key = tls::load_key_pair(&files.cert, &files.key, &provider).unwrap();
        let (seen, loaded) = load_allowlist(std::slice::from_ref(&list), &[]);
        let state = Arc::new(State::new(loaded.unwrap().allowlist, policy));
        state.ready.wait_for_sources();
        let installed = Arc::new(Installed::default());
        let reloader = Reloader::new(
            state.clone(),
            vec![list],
            Some(installed.clone()),
            seen,
            files,
            Arc::new(CertStore::new(key)),
            provider,
        );
        (reloader, state, installed)
    }

    fn promoted(state: &State, digest: &str) -> bool {
        state.allowlist.load().candidates(REPOSITORY).is_promoted(digest)
    }

    #[test]
    fn installed_csvs_merge_with_the_files_and_follow_an_upgrade() {
        let (mut reloader, state, installed) = reloader(
            "merge",
            "quay.io/org/other@sha256:00000000000000000000000000000000000000000000000000000000000000aa\n",
            Policy::default(),
        );
        // Not listed yet: nothing to merge, and not ready.
        reloader.poll();
        assert!(state.ready.check().is_err());
        assert!(!promoted(&state, DIGEST_1_21_0));

        // During the upgrade both releases are installed.
        installed.publish(vec![
            csv("rhods-operator.1.20.1.csv.yaml", "rhods-operator.1.20.1"),
            csv("rhods-operator.csv.yaml", "rhods-operator.1.21.0"),
        ]);
        assert!(
            reloader.installed_changed(),
            "the reloader must notice without waiting for a stat change"
        );
        reloader.poll();
        assert_eq!(state.ready.check(), Ok(()));
        assert!(promoted(&state, DIGEST_1_20_1) && promoted(&state, DIGEST_1_21_0));
        let allowlist = state.allowlist.load();
        assert!(
            allowlist.repository("quay.io/org/other").is_some(),
            "the file stays merged"
        );
        let (newest, by) = allowlist.candidates(REPOSITORY).newest_release().unwrap();
        assert_eq!(newest.digest.as_ref(), DIGEST_1_21_0);
        assert_eq!(
            by.origin,
            "ClusterServiceVersion rhods-operator.1.21.0 (installed)"
        );

        // OLM deletes the old release: one candidate.
        installed.publish(vec![csv("rhods-operator.csv.yaml", "rhods-operator.1.21.0")]);
        reloader.poll();
        assert!(!promoted(&state, DIGEST_1_20_1) && promoted(&state, DIGEST_1_21_0));
        assert!(!reloader.installed_changed());
    }

    /// Files and CSVs that promote nothing: refused like an emptied file,
    /// and the server stays unready rather than deny everything.
    #[test]
    fn an_empty_merge_is_refused_and_leaves_the_server_unready() {
        let (mut reloader, state, installed) = reloader("empty", "", Policy::default());
        installed.publish(Vec::new());
        reloader.poll();
        assert!(state.ready.check().is_err());
        let metrics = state.metrics.encode();
        assert!(
            metrics.contains("digest_gate_reloads_total{source=\"allowlist\",result=\"failure\"} 1"),
            "{metrics}"
        );
        installed.publish(vec![csv("rhods-operator.csv.yaml", "rhods-operator.1.21.0")]);
        reloader.poll();
        assert_eq!(state.ready.check(), Ok(()));
    }
}
