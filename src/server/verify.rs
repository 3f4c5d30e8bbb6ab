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

use crate::allowlist::Allowlist;
use crate::published::{Counts, Known, Platform, Published};
use crate::registry::{RegistryArgs, client, verify};

/// `serve`'s verification flags.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct VerifyFlags {
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
    /// Verify everything again this often.
    #[arg(long = "verify-interval", env = "DIGEST_GATE_VERIFY_INTERVAL", default_value = "6h",
          value_parser = crate::flags::parse_duration)]
    pub verify_interval: Duration,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Promoted images by state, for the metrics.
pub type Gauge = Arc<dyn Fn(Counts) + Send + Sync>;

/// Starts the verification thread.
pub fn spawn(
    flags: VerifyFlags,
    allowlists: watch::Receiver<Arc<Allowlist>>,
    published: Arc<ArcSwap<Published>>,
    gauge: Gauge,
    stop: CancellationToken,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    super::tasks::spawn(
        "digest-gate-verify",
        move || run(flags, allowlists, published, gauge, stop),
        |e| tracing::error!(error = %e, "registry verification cannot start its runtime"),
    )
}

async fn run(
    flags: VerifyFlags,
    mut allowlists: watch::Receiver<Arc<Allowlist>>,
    published: Arc<ArcSwap<Published>>,
    gauge: Gauge,
    stop: CancellationToken,
) {
    let mut known: HashMap<(String, String), Known> = HashMap::new();
    let mut everything = true;
    loop {
        let list = allowlists.borrow_and_update().clone();
        round(&flags, &list, &mut known, everything).await;
        published.store(Arc::new(publish(&list, &known)));
        gauge(counts(&list, &known));
        everything = tokio::select! {
            changed = allowlists.changed() => {
                if changed.is_err() {
                    return;
                }
                false
            }
            () = tokio::time::sleep(flags.verify_interval) => true,
            () = stop.cancelled() => return,
        };
    }
}

/// Verifies the promoted digests not verified yet, or all of them. The
/// credentials file and CA are read anew each round, so a rotated pull
/// secret is used without a restart.
async fn round(
    flags: &VerifyFlags,
    list: &Allowlist,
    known: &mut HashMap<(String, String), Known>,
    everything: bool,
) {
    let subjects: Vec<verify::Subject> = verify::subjects(list)
        .into_iter()
        .filter(|s| everything || !known.contains_key(&(s.repository.clone(), s.digest.clone())))
        .collect();
    if subjects.is_empty() {
        return;
    }
    let registries = match flags
        .registry
        .settings()
        .map_err(|e| e.to_string())
        .and_then(|settings| client::Registries::new(settings).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "registry verification cannot start; what was known stays known");
            return;
        }
    };
    let options = verify::Options {
        platforms: flags.verify_platforms.clone(),
        mirrors_only: false,
        blobs: verify::Blobs::Config,
    };
    let count = subjects.len();
    let started = std::time::Instant::now();
    let in_flight = usize::from(flags.registry.registry_concurrency) * 2;
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
        known.insert(
            (v.repository, v.digest),
            Known {
                state,
                detail: v.detail,
                checked_at: v.checked_at,
            },
        );
    }
    tracing::info!(
        digests = count,
        seconds = started.elapsed().as_secs_f64(),
        "registry verification done"
    );
}

/// What the request path reads: each promoted digest still in the
/// allowlist that cannot be pulled — the only ones a review acts on, so a
/// healthy allowlist publishes nothing and reviews cost what they did —
/// under its own repository and under every name a mirror rule gives it (a
/// rewrite keeps the repository the workload wrote).
fn publish(list: &Allowlist, known: &HashMap<(String, String), Known>) -> Published {
    let mut out = Published::default();
    for s in verify::subjects(list) {
        let Some(k) = known
            .get(&(s.repository.clone(), s.digest.clone()))
            .filter(|k| k.state.fails())
        else {
            continue;
        };
        out.insert(&s.repository, &s.digest, k.clone());
        for location in verify::locations(list.mirror_rules(), &s.repository, false) {
            out.insert(&location, &s.digest, k.clone());
        }
    }
    out
}

fn counts(list: &Allowlist, known: &HashMap<(String, String), Known>) -> Counts {
    let mut c = Counts::default();
    for s in verify::subjects(list) {
        if let Some(k) = known.get(&(s.repository, s.digest)) {
            c.add(k.state);
        }
    }
    c
}
