//! `serve --verify-registry`: the allowlist's promoted digests verified in
//! the background, for the request path to read.
//!
//! Nothing here is on the request path. After every allowlist the supply
//! puts in force, the digests not verified yet are asked about; on the
//! interval, all of them again. What the registries said is published whole
//! (an `ArcSwap`): a review loads it without a lock, and a rewrite to a
//! digest known not to be pullable is denied. A registry that is slow or
//! down delays only this task; what was known stays known, and what was
//! never verified changes nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::fingerprint::fingerprint;
use crate::allowlist::Allowlist;
use crate::metrics::VerifyMetrics;
use crate::published::{Counts, Known, Platform, Published, State, Trouble};
use crate::reference::Pinned;
use crate::registry::{RegistryArgs, client, verify};

/// `serve`'s verification flags.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct BackgroundVerifyArgs {
    /// Verify the allowlist's promoted digests against their registries in
    /// the background, and deny a rewrite to one that cannot be pulled.
    #[arg(long = "verify-registry", env = "DIGEST_GATE_VERIFY_REGISTRY")]
    pub verify_registry: bool,
    /// A platform the nodes run, OS/ARCH[/VARIANT] (repeatable).
    #[arg(
        long = "verify-platform",
        env = "DIGEST_GATE_VERIFY_PLATFORM",
        value_delimiter = ','
    )]
    pub verify_platforms: Vec<Platform>,
    /// Verify everything again this often (at least 1m).
    #[arg(long = "verify-interval", env = "DIGEST_GATE_VERIFY_INTERVAL", default_value = "6h",
          value_parser = parse_interval)]
    pub verify_interval: Duration,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Every replica asks every registry about every promoted digest each
/// interval: under a minute, that is a load on the registries (and their
/// rate limits) that buys nothing, since new digests are verified as soon
/// as their allowlist is in force anyway.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = crate::flags::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(60) {
        return Err(format!(
            "'{s}' is too short: registries are asked about every promoted digest each interval; use 1m or more"
        ));
    }
    Ok(d)
}

/// Starts the verification thread. `poll` is how often the credentials
/// and CA files are looked at (the reload interval).
pub fn spawn(
    flags: BackgroundVerifyArgs,
    allowlists: watch::Receiver<Arc<Allowlist>>,
    published: Arc<ArcSwap<Published>>,
    metrics: VerifyMetrics,
    poll: Duration,
    stop: CancellationToken,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let verifier = BackgroundVerifier {
        flags,
        metrics,
        known: HashMap::new(),
        files: 0,
    };
    super::tasks::spawn(
        "digest-gate-verify",
        move || verifier.run(allowlists, published, poll, stop),
        |e| tracing::error!(error = %e, "registry verification cannot start its runtime"),
    )
}

/// Why a round is run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Round {
    /// An allowlist was put in force: its digests not verified yet.
    New,
    /// The interval passed, or the credentials or CA changed: all of them.
    Everything,
}

struct BackgroundVerifier {
    flags: BackgroundVerifyArgs,
    metrics: VerifyMetrics,
    known: HashMap<Pinned, Known>,
    /// The contents of the credentials and CA files the last round used.
    files: u64,
}

impl BackgroundVerifier {
    async fn run(
        mut self,
        mut allowlists: watch::Receiver<Arc<Allowlist>>,
        published: Arc<ArcSwap<Published>>,
        poll: Duration,
        stop: CancellationToken,
    ) {
        let mut round = Round::Everything;
        let mut next = tokio::time::Instant::now() + self.flags.verify_interval;
        loop {
            let list = allowlists.borrow_and_update().clone();
            let subjects = verify::subjects(&list);
            if round == Round::Everything {
                next = tokio::time::Instant::now() + self.flags.verify_interval;
            }
            // A round against a slow registry may take minutes: a stop
            // does not wait for it.
            tokio::select! {
                () = self.round(&list, &subjects, round) => {}
                () = stop.cancelled() => return,
            }
            let (learned, counts) = learned(&list, &subjects, &self.known);
            published.store(Arc::new(learned));
            self.metrics.set(counts);
            round = loop {
                tokio::select! {
                    changed = allowlists.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        break Round::New;
                    }
                    () = tokio::time::sleep_until(next) => break Round::Everything,
                    () = tokio::time::sleep(poll) => {
                        // A rotated pull secret or CA: what was unverifiable
                        // (or even missing, to a registry that hides
                        // what a credential may not see) is asked again.
                        if self.files_changed() {
                            tracing::info!("the registry credentials or CA changed: verifying everything again");
                            break Round::Everything;
                        }
                    }
                    () = stop.cancelled() => return,
                }
            };
        }
    }

    /// Whether the credentials or CA files differ from what the last round
    /// read. They are small: their contents are compared, not their stat,
    /// so a Secret's symlink swap and an edit in place are both seen.
    fn files_changed(&self) -> bool {
        files_fingerprint(&self.flags) != self.files
    }

    /// Verifies the promoted digests not verified yet, or all of them. The
    /// credentials file and CA are read anew each round.
    async fn round(&mut self, list: &Allowlist, subjects: &[verify::Subject], round: Round) {
        let known = &self.known;
        let subjects: Vec<verify::Subject> = subjects
            .iter()
            .filter(|s| round == Round::Everything || !known.contains_key(&pinned(s)))
            .cloned()
            .collect();
        self.files = files_fingerprint(&self.flags);
        if subjects.is_empty() {
            return;
        }
        let registries = match self
            .flags
            .registry
            .settings()
            .map_err(|e| e.to_string())
            .and_then(|settings| client::Registries::new(settings).map_err(|e| e.to_string()))
        {
            Ok(r) => r,
            Err(e) => {
                self.metrics.errors(Trouble::Setup, 1);
                tracing::error!(error = %e, "registry verification cannot start; what was known stays known");
                self.not_asked(subjects, &e);
                return;
            }
        };
        let options = verify::Options {
            platforms: self.flags.verify_platforms.clone(),
            mirrors_only: false,
            blobs: verify::Blobs::Config,
        };
        let count = subjects.len();
        let started = std::time::Instant::now();
        let in_flight = usize::from(self.flags.registry.registry_concurrency) * 2;
        let found = verify::verify(
            &registries,
            list.mirror_rules(),
            subjects,
            &options,
            in_flight,
            &|_| {},
        )
        .await;
        for v in found {
            if v.state.fails() {
                tracing::warn!(repository = %v.repository, digest = %v.digest, state = %v.state, detail = %v.detail,
                               "a promoted digest cannot be pulled: rewrites to it are denied");
            }
            let state = v.state;
            self.known.insert(
                Pinned {
                    repository: v.repository,
                    digest: v.digest,
                },
                Known {
                    state,
                    detail: v.detail,
                    checked_at: v.checked_at,
                },
            );
        }
        let seconds = started.elapsed().as_secs_f64();
        self.metrics.round(seconds);
        for (reason, n) in registries.troubles() {
            self.metrics.errors(reason, n);
        }
        tracing::info!(digests = count, seconds, "registry verification done");
    }

    /// The digests a round could not ask about at all are unverifiable —
    /// those not known yet; what was known stays known (a broken rotation
    /// must not forget that a digest is missing).
    fn not_asked(&mut self, subjects: Vec<verify::Subject>, why: &str) {
        let now = std::time::SystemTime::now();
        for s in subjects {
            self.known
                .entry(Pinned {
                    repository: s.repository,
                    digest: s.digest,
                })
                .or_insert_with(|| Known {
                    state: State::Unverifiable,
                    detail: format!("not asked: {why}"),
                    checked_at: now,
                });
        }
    }
}

/// What the credentials and CA files hold now (an unreadable one counts as
/// its error, so its return is a change too).
fn files_fingerprint(flags: &BackgroundVerifyArgs) -> u64 {
    let contents: Vec<_> = flags
        .registry
        .files()
        .into_iter()
        .map(|path| {
            let read = std::fs::read(&path).map_err(|e| e.kind());
            (path, read)
        })
        .collect();
    fingerprint(&contents)
}

/// What the request path reads, and the counts by state, in one pass over
/// the allowlist's `subjects`. Published are the promoted digests that
/// cannot be pulled — the only ones a review acts on, so a healthy
/// allowlist publishes nothing and reviews cost what they did — under their
/// own repository and under every name a mirror rule gives it (a rewrite
/// keeps the repository the workload wrote).
fn learned(
    list: &Allowlist,
    subjects: &[verify::Subject],
    known: &HashMap<Pinned, Known>,
) -> (Published, Counts) {
    let mut out = Published::default();
    let mut counts = Counts::default();
    for s in subjects {
        let Some(k) = known.get(&pinned(s)) else {
            continue;
        };
        counts.add(k.state);
        if !k.state.fails() {
            continue;
        }
        out.insert(&s.repository, &s.digest, k.clone());
        for location in verify::locations(list.mirror_rules(), &s.repository, false) {
            out.insert(&location, &s.digest, k.clone());
        }
    }
    (out, counts)
}

/// The key a subject is known by.
fn pinned(s: &verify::Subject) -> Pinned {
    Pinned {
        repository: s.repository.clone(),
        digest: s.digest.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_a_minute_or_more() {
        assert_eq!(parse_interval("6h"), Ok(Duration::from_secs(6 * 3600)));
        assert_eq!(parse_interval("1m"), Ok(Duration::from_secs(60)));
        let short = parse_interval("59s").unwrap_err();
        assert!(short.contains("1m or more"), "{short}");
        assert!(parse_interval("often").is_err());
    }
}
