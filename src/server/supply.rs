//! The allowlist supply: the one owner of what the server's allowlist is
//! made of (the files, the installed CSVs, the copy kept in `--state-dir`)
//! and of the rules that decide which allowlist is in force.
//!
//! [`Supply::start`] puts the first allowlist in force and [`Supply::poll`]
//! every later one; both go through the same steps, each written once:
//! read (fingerprinting the text without parsing it) → load → [`usable`]
//! unless still waiting for the CSVs → put in force and keep a copy, or
//! keep what is in force. Only start-up, which has nothing in force yet,
//! falls back on the kept copy, or waits unready.
//!
//! Each allowlist put in force is stored for requests (an atomic swap:
//! requests never lock) and published on a `watch` channel for the
//! background tasks that follow it ([`Supply::subscribe`]).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::alloc;
use super::fingerprint::{fingerprint, stat_of};
use super::installed::Installed;
use super::kept::LastGood;
use super::state::{Readiness, WAITING_FOR_ALLOWLIST, WAITING_FOR_CSVS};
use crate::allowlist::{self, Allowlist, Input, LoadErrors, Loaded, OpenFile, Source};
use crate::metrics::{ReloadMetrics, Reloaded};
use crate::policy::{Policy, PromotesNothing};

/// Why an allowlist is not put in force.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SupplyError {
    /// A file cannot be read, or a source does not load: the loader's
    /// `file:line: message`s.
    #[error("{0}")]
    Load(#[from] LoadErrors),
    /// It loads, and would deny every image.
    #[error(transparent)]
    Empty(#[from] PromotesNothing),
}

impl SupplyError {
    /// A stable name for the kind of failure.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Load(_) => "load",
            Self::Empty(_) => "empty",
        }
    }
}

/// Refuses an allowlist that would deny every image: on a reload that is
/// almost always a ConfigMap emptied by mistake. In audit mode nothing is
/// denied, so starting from an empty list (to watch the warnings) is fine.
pub fn usable(loaded: &Loaded, policy: &Policy) -> Result<(), SupplyError> {
    policy.judges_by(&loaded.allowlist)?;
    Ok(())
}

/// Whether an edit of the allowlist (`sources`, the ConfigMap under
/// review) would be put in force, merged with the installed CSVs as the
/// supply merges them.
pub fn check_edit(
    sources: &[Source],
    installed: Option<&Installed>,
    policy: &Policy,
) -> Result<(), SupplyError> {
    let installed = installed.and_then(Installed::sources);
    load(sources, installed.as_deref(), policy, false).map(|_| ())
}

/// The allowlist files, opened and fingerprinted before anything is
/// parsed: an unchanged allowlist is never built a second time beside the
/// one in force.
pub struct Files {
    /// The fingerprint of what was read: the files, and whether (and which)
    /// installed CSVs were merged.
    pub seen: u64,
    files: Result<Vec<OpenFile>, LoadErrors>,
}

/// Opens the allowlist files and fingerprints their text, a chunk at a
/// time, with the installed CSVs to be merged.
pub fn read(paths: &[PathBuf], installed: Option<&[Source]>) -> Files {
    let fingerprinted = allowlist::open_files(paths).and_then(|files| {
        let mut h = DefaultHasher::new();
        for f in &files {
            f.hash_into(&mut h).map_err(|e| LoadErrors(vec![e]))?;
        }
        installed.hash(&mut h);
        Ok((h.finish(), files))
    });
    match fingerprinted {
        Ok((seen, files)) => Files {
            seen,
            files: Ok(files),
        },
        Err(e) => Files {
            seen: fingerprint(&e.to_string()),
            files: Err(e),
        },
    }
}

/// What one attempt made of the files: the files as read (what
/// `--state-dir` keeps when they are put in force) and the allowlist, or
/// why it is not put in force.
pub struct Attempt {
    pub files: Vec<OpenFile>,
    pub loaded: Result<Loaded, SupplyError>,
}

// === impl Files ===

impl Files {
    /// Loads the files, then `installed`, and asks whether the result is
    /// [`usable`], unless the supply is still `waiting` for the CSVs: the
    /// files alone need not promote anything then.
    pub fn attempt(self, installed: Option<&[Source]>, policy: &Policy, waiting: bool) -> Attempt {
        let files = match self.files {
            Ok(files) => files,
            Err(e) => {
                return Attempt {
                    files: Vec::new(),
                    loaded: Err(e.into()),
                };
            }
        };
        let loaded = load(&files, installed, policy, waiting);
        Attempt { files, loaded }
    }
}

/// [`allowlist::load_with_installed`], then [`usable`] unless still
/// `waiting` for the CSVs.
fn load<T: Input>(
    files: &[T],
    installed: Option<&[Source]>,
    policy: &Policy,
    waiting: bool,
) -> Result<Loaded, SupplyError> {
    let loaded = allowlist::load_with_installed(files, installed.unwrap_or_default(), &policy.catalog)?;
    if !waiting {
        usable(&loaded, policy)?;
    }
    Ok(loaded)
}

/// Identity, size and times of the allowlist files, or of why they
/// cannot be listed.
fn stat(paths: &[PathBuf]) -> u64 {
    match allowlist::source_files(paths) {
        Ok(files) => stat_of(&files.iter().map(PathBuf::as_path).collect::<Vec<_>>()),
        Err(e) => fingerprint(&e.to_string()),
    }
}

/// The allowlist supply of one server.
pub struct Supply {
    paths: Vec<PathBuf>,
    policy: Policy,
    /// The installed CSVs (`--allowlist-csv`), merged after the files.
    installed: Option<Arc<Installed>>,
    /// The generation of `installed` last merged.
    installed_seen: u64,
    /// Where the last good allowlist files are kept (`--state-dir`).
    kept: Option<LastGood>,
    /// The fingerprint of the text last read, and the stat of the files.
    seen: u64,
    stat: u64,
    in_force: Arc<ArcSwap<Allowlist>>,
    published: watch::Sender<Arc<Allowlist>>,
    metrics: ReloadMetrics,
    ready: Arc<Readiness>,
}

/// What a supply is made of.
pub struct Sources {
    pub paths: Vec<PathBuf>,
    pub policy: Policy,
    /// The installed CSVs, when `--allowlist-csv` names some: until they
    /// are listed the server is not ready.
    pub installed: Option<Arc<Installed>>,
    /// The kept copy (`--state-dir`).
    pub kept: Option<LastGood>,
}

// === impl Supply ===

impl Supply {
    /// Puts the first allowlist in force: the files (the CSVs are not
    /// listed yet), else the kept copy, else none and unready. Without a
    /// kept copy to fall back on (a developer's run) an unusable allowlist
    /// is an error: a webhook that starts without one would deny everything.
    pub fn start(
        sources: Sources,
        metrics: ReloadMetrics,
        ready: Arc<Readiness>,
    ) -> Result<Self, SupplyError> {
        let Sources {
            paths,
            policy,
            installed,
            kept,
        } = sources;
        // With --allowlist-csv the files are only part of the allowlist:
        // whether it is usable is asked once the CSVs are merged in, and
        // until then the server is not ready.
        let waiting = installed.is_some();
        let stat = stat(&paths);
        let files = read(&paths, None);
        let seen = files.seen;
        let attempt = files.attempt(None, &policy, waiting);
        let mut unready = waiting.then_some(WAITING_FOR_CSVS);
        let (loaded, stale) = match attempt.loaded {
            Ok(loaded) => {
                keep(kept.as_ref(), &attempt.files);
                (loaded, false)
            }
            Err(error) => match &kept {
                None => return Err(error),
                Some(kept) => match fall_back(kept, &error, &policy, waiting) {
                    Some(loaded) => (loaded, true),
                    None => {
                        tracing::error!(%error, "the allowlist cannot be used and no last good copy was kept; not ready until it can be");
                        unready = Some(WAITING_FOR_ALLOWLIST);
                        (Loaded::default(), true)
                    }
                },
            },
        };
        if let Some(why) = unready {
            ready.wait(why);
        }
        let supply = Self {
            paths,
            policy,
            installed,
            installed_seen: 0,
            kept,
            seen,
            stat,
            // Empty only until the first is put in force, below.
            in_force: Arc::default(),
            published: watch::Sender::new(Arc::default()),
            metrics,
            ready,
        };
        supply.metrics.reload(Reloaded::Allowlist, !stale);
        supply.put_in_force(Arc::new(loaded.allowlist), &loaded.warnings, stale);
        Ok(supply)
    }

    /// The allowlist in force, as requests read it.
    pub fn in_force(&self) -> Arc<ArcSwap<Allowlist>> {
        self.in_force.clone()
    }

    /// Every allowlist put in force from now on.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Allowlist>> {
        self.published.subscribe()
    }

    /// Whether the installed CSVs changed since they were last merged:
    /// they arrive by watch, so a change is merged at once, not on the
    /// next interval.
    pub fn installed_changed(&self) -> bool {
        self.installed
            .as_ref()
            .is_some_and(|i| i.generation() != self.installed_seen)
    }

    /// Reads the sources again if they may have changed (their stat
    /// changed, the CSVs changed, or `forced`), and puts what they hold in
    /// force if it changed and is usable.
    pub fn poll(&mut self, forced: bool) {
        if self.paths.is_empty() && self.installed.is_none() {
            return;
        }
        let stat = stat(&self.paths);
        if !forced && self.stat == stat && !self.installed_changed() {
            return;
        }
        self.stat = stat;
        let installed = match &self.installed {
            None => None,
            Some(i) => {
                self.installed_seen = i.generation();
                // Not listed yet: nothing complete to put in force.
                let Some(sources) = i.sources() else { return };
                Some(sources)
            }
        };
        let files = read(&self.paths, installed.as_deref());
        if self.seen == files.seen {
            return;
        }
        self.seen = files.seen;
        let attempt = files.attempt(installed.as_deref(), &self.policy, false);
        match attempt.loaded {
            Ok(loaded) => {
                let repositories = loaded.allowlist.repository_count();
                let digests = loaded.allowlist.digest_count();
                self.put_in_force(Arc::new(loaded.allowlist), &loaded.warnings, false);
                if repositories == 0 {
                    // Accepted only where nothing is denied (audit mode),
                    // but almost always a ConfigMap emptied by mistake.
                    self.metrics.reload_empty(Reloaded::Allowlist);
                    tracing::warn!(
                        "allowlist reloaded, and it promotes nothing: every image will be reported"
                    );
                } else {
                    self.metrics.reload(Reloaded::Allowlist, true);
                    tracing::info!(repositories, digests, "allowlist reloaded");
                }
                keep(self.kept.as_ref(), &attempt.files);
                // Usable, with every source (the installed CSVs too): ready.
                self.ready.complete();
            }
            Err(error) => {
                self.metrics.reload(Reloaded::Allowlist, false);
                self.metrics.allowlist_stale(true);
                if !self.ready.waiting() {
                    tracing::warn!(%error, "allowlist reload failed; the last good allowlist stays in force");
                } else {
                    tracing::error!(%error, "the allowlist cannot be used; still not ready");
                }
            }
        }
        // Whichever was dropped (the allowlist replaced, or one that failed
        // half-built), and the files' read buffers.
        drop(attempt.files);
        alloc::return_freed_memory();
    }

    /// Puts `allowlist` in force for requests and subscribers.
    fn put_in_force(&self, allowlist: Arc<Allowlist>, warnings: &[allowlist::LoadError], stale: bool) {
        for w in warnings {
            tracing::warn!(warning = %w, "allowlist entry skipped");
        }
        self.metrics
            .allowlist_size(allowlist.repository_count(), allowlist.digest_count());
        self.metrics.allowlist_stale(stale);
        self.in_force.store(allowlist.clone());
        self.published.send_replace(allowlist);
    }
}

/// Keeps the files just put in force for a restart (`--state-dir`); a
/// failure is logged: the allowlist is in force either way, only a restart
/// could not fall back on it.
fn keep(kept: Option<&LastGood>, files: &[OpenFile]) {
    if let Some(kept) = kept
        && let Err(error) = kept.save(files)
    {
        tracing::warn!(%error, "the allowlist loaded but could not be kept for a restart");
    }
}

/// The allowlist kept in `--state-dir`, when the mounted one cannot be used
/// at start-up (`error`); `None` when there is none that loads.
fn fall_back(kept: &LastGood, error: &SupplyError, policy: &Policy, waiting: bool) -> Option<Loaded> {
    let (files, saved) = match kept.load() {
        Ok(Some(copy)) => copy,
        Ok(None) => return None,
        Err(e) => {
            tracing::error!(error = %e, "the last good allowlist cannot be read");
            return None;
        }
    };
    match load(&files, None, policy, waiting) {
        Ok(loaded) => {
            tracing::error!(%error, saved = %saved, "the allowlist cannot be used; serving the last good copy kept in --state-dir until it can");
            Some(loaded)
        }
        Err(e) => {
            tracing::error!(error = %e, "the last good allowlist no longer loads");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    const REPOSITORY: &str = "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8";
    const DIGEST_1_20_1: &str = "sha256:1201000000000000000000000000000000000000000000000000000000000000";
    const DIGEST_1_21_0: &str = "sha256:8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6";

    fn csv(file: &str, name: &str) -> Source {
        let path = format!("{}/tests/data/allowlists/{file}", env!("CARGO_MANIFEST_DIR"));
        Source {
            name: Source::installed_csv_name("redhat-ods-operator", name),
            text: std::fs::read_to_string(path).unwrap(),
            kind: crate::allowlist::SourceKind::InstalledCsv {
                namespace: "redhat-ods-operator".into(),
                name: name.into(),
            },
        }
    }

    #[test]
    fn a_catalog_is_filtered_by_the_policys_packages_wherever_the_supply_loads() {
        let olm = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/olm");
        let files = allowlist::open_files(&[format!("{olm}/rhods"), format!("{olm}/foo.yaml")]).unwrap();
        let with = |packages: &[&str]| Policy {
            catalog: allowlist::CatalogOptions {
                packages: packages.iter().map(|p| (*p).to_owned()).collect(),
                channel: None,
            },
            ..Policy::default()
        };
        let all = allowlist::load_with_installed(&files, &[], &with(&[]).catalog).unwrap();
        assert_eq!(all.allowlist.repository_count(), 107);
        // Another package (foo lists its images by tag only): nothing
        // promoted, which a reload refuses; a package no catalog has is an
        // error of the allowlist.
        assert!(allowlist::load_with_installed(&files, &[], &with(&["bar"]).catalog).is_err());
        let other = with(&["foo"]);
        assert_eq!(
            allowlist::load_with_installed(&files, &[], &other.catalog)
                .unwrap()
                .allowlist
                .repository_count(),
            0
        );
        assert!(matches!(
            load(&files, None, &other, false),
            Err(SupplyError::Empty(_))
        ));
    }

    /// A supply as `serve` starts it, over one allowlist file (`text`), and
    /// the installed CSVs if `csvs`.
    struct Started {
        supply: Supply,
        metrics: Metrics,
        ready: Arc<Readiness>,
        installed: Option<Arc<Installed>>,
        list: PathBuf,
    }

    fn started(name: &str, text: &str, policy: Policy, csvs: bool) -> Started {
        let dir = std::env::temp_dir().join(format!("digest-gate-supply-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let list = dir.join("allowlist.txt");
        std::fs::write(&list, text).unwrap();
        let metrics = Metrics::new();
        let ready = Arc::new(Readiness::default());
        let installed = csvs.then(|| Arc::new(Installed::default()));
        let sources = Sources {
            paths: vec![list.clone()],
            policy,
            installed: installed.clone(),
            kept: None,
        };
        let supply = Supply::start(sources, metrics.reloads.clone(), ready.clone()).unwrap();
        Started {
            supply,
            metrics,
            ready,
            installed,
            list,
        }
    }

    fn promoted(supply: &Supply, digest: &str) -> bool {
        supply
            .in_force()
            .load()
            .candidates(REPOSITORY)
            .is_promoted(digest)
    }

    #[test]
    fn installed_csvs_merge_with_the_files_and_follow_an_upgrade() {
        let Started {
            mut supply,
            ready,
            installed,
            ..
        } = started(
            "merge",
            "quay.io/org/other@sha256:00000000000000000000000000000000000000000000000000000000000000aa\n",
            Policy::default(),
            true,
        );
        let installed = installed.unwrap();
        let mut published = supply.subscribe();
        // Not listed yet: nothing to merge, and not ready.
        supply.poll(false);
        assert_eq!(ready.check(), Err(WAITING_FOR_CSVS));
        assert!(!promoted(&supply, DIGEST_1_21_0));
        assert!(!published.has_changed().unwrap());

        // During the upgrade both releases are installed.
        installed.publish(vec![
            csv("rhods-operator.1.20.1.csv.yaml", "rhods-operator.1.20.1"),
            csv("rhods-operator.csv.yaml", "rhods-operator.1.21.0"),
        ]);
        assert!(
            supply.installed_changed(),
            "the supply must notice without waiting for a stat change"
        );
        supply.poll(false);
        assert_eq!(ready.check(), Ok(()));
        assert!(promoted(&supply, DIGEST_1_20_1) && promoted(&supply, DIGEST_1_21_0));
        let allowlist = supply.in_force().load_full();
        assert!(
            allowlist.repository("quay.io/org/other").is_some(),
            "the file stays merged"
        );
        // Subscribers get what requests get.
        assert!(published.has_changed().unwrap());
        assert!(Arc::ptr_eq(&published.borrow_and_update(), &allowlist));
        let (newest, by) = crate::policy::newest_release(&allowlist.candidates(REPOSITORY)).unwrap();
        assert_eq!(newest.digest(), DIGEST_1_21_0);
        assert_eq!(
            by.origin,
            "ClusterServiceVersion rhods-operator.1.21.0 (installed)"
        );

        // OLM deletes the old release: one candidate.
        installed.publish(vec![csv("rhods-operator.csv.yaml", "rhods-operator.1.21.0")]);
        supply.poll(false);
        assert!(!promoted(&supply, DIGEST_1_20_1) && promoted(&supply, DIGEST_1_21_0));
        assert!(!supply.installed_changed());
    }

    /// Files and CSVs that promote nothing: refused like an emptied file,
    /// and the server stays unready rather than deny everything.
    #[test]
    fn an_empty_merge_is_refused_and_leaves_the_server_unready() {
        let Started {
            mut supply,
            metrics,
            ready,
            installed,
            ..
        } = started("empty", "", Policy::default(), true);
        let installed = installed.unwrap();
        installed.publish(Vec::new());
        supply.poll(false);
        assert!(ready.check().is_err());
        let text = metrics.encode();
        assert!(
            text.contains("digest_gate_reloads_total{source=\"allowlist\",result=\"failure\"} 1"),
            "{text}"
        );
        installed.publish(vec![csv("rhods-operator.csv.yaml", "rhods-operator.1.21.0")]);
        supply.poll(false);
        assert_eq!(ready.check(), Ok(()));
    }

    /// Without a kept copy to fall back on, an allowlist that would deny
    /// everything stops the start, with the rule's own error.
    #[test]
    fn an_unusable_start_without_a_kept_copy_is_an_error() {
        let metrics = Metrics::new();
        let dir = std::env::temp_dir().join(format!("digest-gate-supply-unusable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("empty.txt"), "# nothing\n").unwrap();
        let sources = |kept| Sources {
            paths: vec![dir.join("empty.txt")],
            policy: Policy::default(),
            installed: None,
            kept,
        };
        let error = Supply::start(sources(None), metrics.reloads.clone(), Arc::default()).err();
        assert_eq!(error, Some(SupplyError::Empty(PromotesNothing)));
        // With --state-dir and nothing kept: unready, not an error.
        let ready = Arc::new(Readiness::default());
        let kept = Some(LastGood::in_dir(&dir));
        let supply = Supply::start(sources(kept), metrics.reloads.clone(), ready.clone()).unwrap();
        assert_eq!(ready.check(), Err(WAITING_FOR_ALLOWLIST));
        assert_eq!(supply.in_force().load().repository_count(), 0);
        assert!(metrics.encode().contains("digest_gate_allowlist_stale 1"));
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
        let Started {
            mut supply,
            metrics,
            ready,
            list,
            ..
        } = started(
            "audit-empty",
            "quay.io/org/a@sha256:00000000000000000000000000000000000000000000000000000000000000aa\n",
            audit,
            false,
        );
        std::fs::write(&list, "# emptied\n").unwrap();
        supply.poll(true);
        assert_eq!(supply.in_force().load().repository_count(), 0);
        let text = metrics.encode();
        assert!(
            text.contains("digest_gate_reloads_total{source=\"allowlist\",result=\"empty\"} 1"),
            "{text}"
        );
        // The start's load is the one success.
        assert!(
            text.contains("digest_gate_reloads_total{source=\"allowlist\",result=\"success\"} 1"),
            "{text}"
        );
        assert_eq!(ready.check(), Ok(()));
    }
}
