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
use crate::allowlist::{self, Input, Loaded, OpenFile, Source};
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
    /// Where the last good allowlist files are kept (`--state-dir`).
    last_good: Option<LastGood>,
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

/// The allowlist files, opened and compared with what was seen before
/// anything is parsed.
pub struct Files {
    /// The fingerprint of what was read: the files, and whether (and which)
    /// installed CSVs were merged.
    pub seen: u64,
    files: Result<Vec<OpenFile>, String>,
}

/// What one read of the allowlist found.
pub struct Read {
    /// The files as read: what `--state-dir` keeps when they load.
    pub files: Vec<OpenFile>,
    pub loaded: Result<Loaded, String>,
}

/// [`usable`], unless the allowlist still waits for the installed CSVs:
/// the files alone need not promote anything then.
pub fn usable_unless_waiting(loaded: Loaded, policy: &Policy, waiting: bool) -> Result<Loaded, String> {
    if !waiting {
        usable(&loaded, policy)?;
    }
    Ok(loaded)
}

/// Opens the allowlist files and fingerprints their text, a chunk at a
/// time, without parsing it: a reload compares [`Files::seen`] first, so an
/// unchanged allowlist is never built a second time beside the one in force.
pub fn read_allowlist(paths: &[PathBuf], installed: Option<&[Source]>) -> Files {
    let fingerprinted = allowlist::open_files(paths).and_then(|files| {
        let mut h = DefaultHasher::new();
        for f in &files {
            f.hash_into(&mut h).map_err(|e| allowlist::LoadErrors(vec![e]))?;
        }
        installed.hash(&mut h);
        Ok((h.finish(), files))
    });
    match fingerprinted {
        Ok((seen, files)) => Files {
            seen,
            files: Ok(files),
        },
        Err(e) => {
            let message = e.to_string();
            Files {
                seen: fingerprint(&message),
                files: Err(message),
            }
        }
    }
}

// === impl Files ===

impl Files {
    /// Parses the files, then `installed` (the CSVs of `--allowlist-csv`,
    /// once listed). Whether the result is [`usable`] is the caller's
    /// question: before the CSVs arrive the files alone need not be.
    pub fn load(self, installed: Option<&[Source]>) -> Read {
        match self.files {
            Ok(files) => {
                let loaded = merge(&files, installed);
                Read { files, loaded }
            }
            Err(message) => Read {
                files: Vec::new(),
                loaded: Err(message),
            },
        }
    }
}

/// Loads allowlist sources and then the installed CSVs, as one allowlist:
/// what a reload puts in force (from the files, read as they are parsed),
/// and what `/validate-allowlist` checks an edit by (from the ConfigMap).
pub fn merge<T: Input>(sources: &[T], installed: Option<&[Source]>) -> Result<Loaded, String> {
    allowlist::load_sources(
        allowlist::inputs(sources).chain(allowlist::inputs(installed.unwrap_or_default())),
    )
    .map_err(|e| e.to_string())
}

/// `--state-dir`: the last allowlist files that loaded. The running server
/// keeps them, so that a container restarted with a mounted allowlist that
/// no longer loads (a bad edit, then an OOM kill) serves them instead of
/// exiting: with two replicas restarting, exiting would block every model
/// namespace until someone noticed.
///
/// One file: a line of JSON naming each file and its length in bytes, then
/// the files' text, end to end. It is written and read a chunk at a time,
/// so keeping a copy never holds the allowlist's text.
pub struct LastGood {
    path: PathBuf,
}

/// The first line of the kept copy.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    /// Which layout follows; another is refused, not guessed at.
    format: u32,
    files: Vec<KeptFile>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct KeptFile {
    name: String,
    bytes: u64,
}

const KEPT_FORMAT: u32 = 1;

/// The longest first line read: far more than any list of file names.
const KEPT_HEADER_MAX: u64 = 1024 * 1024;

impl LastGood {
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            path: dir.join("last-good-allowlist"),
        }
    }

    /// [`Self::save`], a failure logged: the allowlist is in force either
    /// way, only a restart could not fall back on it.
    pub fn keep(&self, files: &[OpenFile]) {
        if let Err(error) = self.save(files) {
            tracing::warn!(%error, "the allowlist loaded but could not be kept for a restart");
        }
    }

    /// Keeps `files`, replacing the previous copy whole (written beside it,
    /// then renamed), so a crash mid-write leaves the old copy.
    pub fn save(&self, files: &[OpenFile]) -> Result<(), String> {
        use std::io::Write;
        let partial = self.path.with_extension("partial");
        let write = || -> std::io::Result<()> {
            let mut out = std::io::BufWriter::new(std::fs::File::create(&partial)?);
            let kept = Kept {
                format: KEPT_FORMAT,
                files: files
                    .iter()
                    .map(|f| KeptFile {
                        name: f.name().to_owned(),
                        bytes: f.bytes(),
                    })
                    .collect(),
            };
            serde_json::to_writer(&mut out, &kept)?;
            out.write_all(b"\n")?;
            for f in files {
                let copied = std::io::copy(&mut f.open()?, &mut out)?;
                if copied != f.bytes() {
                    return Err(std::io::Error::other(format!(
                        "{} was cut short while it was copied",
                        f.name()
                    )));
                }
            }
            out.flush()?;
            std::fs::rename(&partial, &self.path)
        };
        write().map_err(|e| {
            format!(
                "cannot keep the last good allowlist in {}: {e}",
                self.path.display()
            )
        })
    }

    /// The copy kept, and when it was written; `None` when there is none.
    pub fn load(&self) -> Result<Option<(Vec<OpenFile>, String)>, String> {
        use std::io::BufRead;
        let at = |e: &dyn std::fmt::Display| format!("{}: {e}", self.path.display());
        let file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", self.path.display())),
        };
        let meta = file.metadata().map_err(|e| at(&e))?;
        let mut header = Vec::new();
        std::io::BufReader::new(std::io::Read::take(&file, KEPT_HEADER_MAX))
            .read_until(b'\n', &mut header)
            .map_err(|e| at(&e))?;
        let kept: Kept = serde_json::from_slice(&header).map_err(|e| at(&e))?;
        if kept.format != KEPT_FORMAT {
            return Err(at(&format!(
                "written in layout {}, which this version does not read",
                kept.format
            )));
        }
        let file = Arc::new(file);
        let mut offset = header.len() as u64;
        let mut files = Vec::new();
        for f in kept.files {
            files.push(OpenFile::part(f.name, file.clone(), offset, f.bytes));
            offset = offset.saturating_add(f.bytes);
        }
        if offset != meta.len() {
            return Err(at(&format!(
                "holds {} bytes where its first line names {offset}: it is damaged",
                meta.len()
            )));
        }
        let saved = meta
            .modified()
            .map(|t| humantime::format_rfc3339_seconds(t).to_string())
            .unwrap_or_else(|_| "an unknown time".into());
        Ok(Some((files, saved)))
    }
}

/// Makes every large block (an allowlist's tables and text, a file read)
/// a mapping of its own, whatever was freed before. glibc otherwise raises
/// its mapping threshold to the size of the largest mapped block freed, so
/// after the first reload the next allowlist's tables would be carved from
/// the heap, copied as they grow and left fragmented when freed; as
/// mappings they grow in place and go back to the kernel whole.
pub fn map_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a glibc tunable, under glibc's own arena
    // lock; any thread may call it at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Gives the pages the previous allowlist and the files' text occupied back
/// to the kernel. glibc returns memory only from the top of a heap; the old
/// allowlist sits in the middle of one (the new one was built in the
/// reload thread's arena), so without this every reload would leave its
/// predecessor's pages resident and the pod would grow toward its limit.
/// A request still holding the old snapshot frees it later; the next
/// reload's trim returns that.
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas, under their locks,
    // and may be called from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Exports when the serving chain expires ([`tls::chain_expiry`]), or says
/// loudly that it cannot tell (the metric is then 0, so an expiry alert fires).
pub fn export_expiry(metrics: &crate::metrics::Metrics, expiry: Option<i64>, cert: &Path) {
    if expiry.is_none() {
        tracing::warn!(cert = %cert.display(), "cannot read the serving certificate's expiry; digest_gate_certificate_expiry_timestamp_seconds is 0");
    }
    metrics.certificate_expiry(expiry);
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
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        state: Arc<State>,
        allowlists: Vec<PathBuf>,
        installed: Option<Arc<Installed>>,
        last_good: Option<LastGood>,
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
            last_good,
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
        let files = read_allowlist(&self.allowlists, installed.as_deref());
        if self.allowlist_seen == files.seen {
            return;
        }
        self.allowlist_seen = files.seen;
        let read = files.load(installed.as_deref());
        let metrics = &self.state.metrics;
        match read
            .loaded
            .and_then(|loaded| usable(&loaded, &self.state.policy).map(|()| loaded))
        {
            Ok(loaded) => {
                let (repos, digests) = (
                    loaded.allowlist.repository_count(),
                    loaded.allowlist.digest_count(),
                );
                for w in &loaded.warnings {
                    tracing::warn!(warning = %w, "allowlist entry skipped");
                }
                self.state.swap_allowlist(loaded.allowlist);
                metrics.allowlist_stale(false);
                if repos == 0 {
                    // Accepted only where nothing is denied (audit mode),
                    // but almost always a ConfigMap emptied by mistake.
                    metrics.reload_empty("allowlist");
                    tracing::warn!(
                        "allowlist reloaded, and it promotes nothing: every image will be reported"
                    );
                } else {
                    metrics.reload("allowlist", true);
                    tracing::info!(repositories = repos, digests, "allowlist reloaded");
                }
                if let Some(last_good) = &self.last_good {
                    last_good.keep(&read.files);
                }
                // Usable, with every source (the installed CSVs too): ready.
                self.state.ready.complete();
            }
            Err(error) => {
                metrics.reload("allowlist", false);
                metrics.allowlist_stale(true);
                if !self.state.ready.waiting() {
                    tracing::warn!(%error, "allowlist reload failed; the last good allowlist stays in force");
                } else {
                    tracing::error!(%error, "the allowlist cannot be used; still not ready");
                }
            }
        }
        // Whichever was dropped (the allowlist replaced, or one that failed
        // half-built), and the files' read buffers.
        drop(read.files);
        return_freed_memory();
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
                export_expiry(&self.state.metrics, tls::chain_expiry(&key), &files.cert);
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
        let (reloader, state, installed, _) = reloader_with(name, text, policy, true);
        (reloader, state, installed.expect("with CSVs"))
    }

    /// [`reloader`], with or without `--allowlist-csv`, and the allowlist
    /// file's path.
    fn reloader_with(
        name: &str,
        text: &str,
        policy: Policy,
        csvs: bool,
    ) -> (Reloader, Arc<State>, Option<Arc<Installed>>, PathBuf) {
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
        let read = read_allowlist(std::slice::from_ref(&list), None);
        let seen = read.seen;
        let state = Arc::new(State::new(read.load(None).loaded.unwrap().allowlist, policy));
        let installed = csvs.then(|| Arc::new(Installed::default()));
        if csvs {
            state.ready.wait(crate::server::http::WAITING_FOR_CSVS);
        }
        let reloader = Reloader::new(
            state.clone(),
            vec![list.clone()],
            installed.clone(),
            None,
            seen,
            files,
            Arc::new(CertStore::new(key)),
            provider,
        );
        (reloader, state, installed, list)
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
        assert_eq!(newest.digest(), DIGEST_1_21_0);
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

    /// Issue 15: audit mode accepts an allowlist that promotes nothing (a
    /// first install), but a reload to one is almost always a ConfigMap
    /// emptied by mistake: a warning, counted as `empty`, not `success`.
    #[test]
    fn a_reload_to_an_empty_allowlist_in_audit_mode_is_counted_as_empty() {
        let audit = Policy {
            mode: crate::policy::Mode::Audit,
            ..Policy::default()
        };
        let (mut reloader, state, _, list) = reloader_with(
            "audit-empty",
            "quay.io/org/a@sha256:00000000000000000000000000000000000000000000000000000000000000aa\n",
            audit,
            false,
        );
        std::fs::write(&list, "# emptied\n").unwrap();
        reloader.poll_allowlist(true);
        assert_eq!(state.allowlist.load().repository_count(), 0);
        let metrics = state.metrics.encode();
        assert!(
            metrics.contains("digest_gate_reloads_total{source=\"allowlist\",result=\"empty\"} 1"),
            "{metrics}"
        );
        assert!(!metrics.contains("result=\"success\"} 1"), "{metrics}");
        assert_eq!(state.ready.check(), Ok(()));
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("digest-gate-reload-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// What the kept copy holds is the text that was opened and loaded,
    /// even when the mount is swapped before it is written; it reads back
    /// as the same allowlist.
    #[test]
    fn the_kept_copy_is_the_text_that_loaded_and_reads_back_as_it() {
        let dir = scratch("keep");
        let (plain, native) = (dir.join("a.txt"), dir.join("b.yaml"));
        std::fs::write(
            &plain,
            format!("# ünïcode comment\n{REPOSITORY}:1.21@{DIGEST_1_21_0}\n"),
        )
        .unwrap();
        std::fs::write(
            &native,
            format!("apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nspec:\n  repositories:\n    - name: quay.io/org/x\n      digests: [{DIGEST_1_20_1}]\n"),
        )
        .unwrap();
        let read = read_allowlist(std::slice::from_ref(&dir), None);
        let seen = read.seen;
        let read = read.load(None);
        let loaded = read.loaded.unwrap();
        // The kubelet swaps in a new version before the copy is written.
        let swapped = dir.join("a.txt.new");
        std::fs::write(
            &swapped,
            "quay.io/org/other@sha256:00000000000000000000000000000000000000000000000000000000000000aa\n",
        )
        .unwrap();
        std::fs::rename(&swapped, &plain).unwrap();
        let state = scratch("keep-state");
        let last_good = LastGood::in_dir(&state);
        last_good.save(&read.files).unwrap();

        let (kept, _) = last_good.load().unwrap().expect("kept");
        let names: Vec<&str> = kept.iter().map(Input::name).collect();
        assert_eq!(names, [plain.display().to_string(), native.display().to_string()]);
        let again = merge(&kept, None).unwrap();
        assert!(again.allowlist.candidates(REPOSITORY).is_promoted(DIGEST_1_21_0));
        assert!(again.allowlist.repository("quay.io/org/other").is_none());
        assert_eq!(
            (again.allowlist.repository_count(), again.allowlist.digest_count()),
            (
                loaded.allowlist.repository_count(),
                loaded.allowlist.digest_count()
            )
        );
        // Its lines are the files' own.
        assert_eq!(
            again.allowlist.candidates(REPOSITORY).promoted()[0]
                .promotions()
                .next()
                .unwrap()
                .line,
            2
        );
        // Kept again, it is the same text: nothing changed.
        let mut h = DefaultHasher::new();
        for f in &kept {
            f.hash_into(&mut h).unwrap();
        }
        None::<&[Source]>.hash(&mut h);
        assert_eq!(h.finish(), seen);
    }

    /// A copy cut short (a full disk), or written by a later layout, is
    /// refused whole, never half read; no copy is no copy.
    #[test]
    fn a_damaged_kept_copy_is_refused() {
        let dir = scratch("damaged");
        let list = dir.join("a.txt");
        std::fs::write(&list, format!("{REPOSITORY}@{DIGEST_1_21_0}\n")).unwrap();
        let last_good = LastGood::in_dir(&dir.join("state"));
        std::fs::create_dir_all(dir.join("state")).unwrap();
        assert!(last_good.load().unwrap().is_none());
        last_good.save(&allowlist::open_files(&[&list]).unwrap()).unwrap();
        let path = dir.join("state/last-good-allowlist");
        let whole = std::fs::read(&path).unwrap();

        std::fs::write(&path, &whole[..whole.len() - 5]).unwrap();
        let error = last_good.load().expect_err("cut short");
        assert!(error.contains("it is damaged"), "{error}");

        let later = String::from_utf8(whole.clone())
            .unwrap()
            .replacen("\"format\":1", "\"format\":2", 1);
        std::fs::write(&path, later).unwrap();
        let error = last_good.load().expect_err("a later layout");
        assert!(error.contains("layout 2"), "{error}");

        std::fs::write(&path, b"not json\n").unwrap();
        assert!(last_good.load().is_err());
        std::fs::write(&path, &whole).unwrap();
        assert_eq!(last_good.load().unwrap().unwrap().0.len(), 1);
    }
}
