//! `digest-gate serve`: the webhook on TLS, the admin endpoints on plain
//! HTTP, the allowlist supply and the certificate reloaded in the
//! background, the background tasks that follow the cluster, and a
//! graceful drain.
//!
//! The map, by concern:
//! - [`config`]: the flags, and the [`Inputs`] the command line makes;
//! - [`state`]: what every request shares, and readiness;
//! - [`http`]: the routes;
//! - [`supply`]: which allowlist is in force ([`kept`]: the copy kept for a
//!   restart); [`reload`]: the thread that polls it and the certificate;
//! - [`listen`]: the accept loop, a connection's life, the drain ([`gate`]:
//!   which connections are held; [`tls`]: the key pair and rustls);
//! - [`installed`] (the CSV watch) and [`audit`] (the background audit):
//!   tasks on threads of their own (`tasks`), each taking only the
//!   handles it uses;
//! - [`alloc`]: allocator tuning for reloads.

pub mod alloc;
pub mod audit;
pub mod config;
mod election;
mod fingerprint;
pub mod gate;
pub mod http;
pub mod installed;
pub mod kept;
pub mod listen;
pub mod reload;
pub mod state;
pub mod supply;
mod tasks;
pub mod tls;
pub mod upgrades;
pub mod verify;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

pub use config::{BackgroundArgs, Bound, Inputs, ServerArgs};
pub use http::{admin_router, webhook_router};
pub use listen::serve_tls;
pub use state::{Readiness, State};

use installed::Installed;
use kept::LastGood;
use reload::{CertFiles, Certificate, Reloader};
use supply::{Sources, Supply, SupplyError};
use tls::{CertStore, TlsError};

use crate::metrics::{Metrics, ReloadMetrics, Reloaded};
use crate::published::Published;

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("the allowlist cannot be used:\n{0}")]
    Allowlist(#[from] SupplyError),
    #[error("cannot start a background thread (reload, audit or CSV watch): {source}")]
    Thread {
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

impl ServerError {
    /// A stable name for the kind of failure.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Tls(_) => "tls",
            Self::Allowlist(_) => "allowlist",
            Self::Thread { .. } => "thread",
            Self::Bind { .. } => "bind",
        }
    }
}

fn thread(source: std::io::Error) -> ServerError {
    ServerError::Thread { source }
}

/// A started server.
pub struct Running {
    /// Where the webhook listens (useful with port 0).
    pub webhook_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub state: Arc<State>,
    /// Cancelled to drain: the listener, the reload thread and the
    /// background tasks all stop on it.
    stop: CancellationToken,
    /// Cancelled once the webhook listener has stopped.
    stopped: CancellationToken,
    admin: tokio::task::AbortHandle,
    /// The background audit's thread, if it runs.
    audit: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Running {
    /// Starts the drain: readiness fails at once, the listener closes after
    /// the drain delay, in-flight reviews get the grace period.
    pub fn drain(&self) {
        self.state.ready.drain();
        self.stop.cancel();
    }

    /// Stops the admin listener only (probes and metrics go dark; reviews go
    /// on). For fault injection: the webhook must not depend on it.
    pub fn stop_admin(&self) {
        self.admin.abort();
    }

    /// Waits until the server has stopped, and the background audit (which
    /// stops with the drain, releasing its Lease) too, for a few seconds at
    /// most.
    pub async fn wait(&self) {
        self.stopped.cancelled().await;
        let audit = self.audit.lock().ok().and_then(|mut a| a.take());
        if let Some(thread) = audit {
            let joined = tokio::task::spawn_blocking(move || thread.join());
            if tokio::time::timeout(Duration::from_secs(6), joined)
                .await
                .is_err()
            {
                tracing::warn!("the background audit did not stop in time");
            }
        }
    }
}

/// `digest-gate serve` to the end: a runtime, [`start`], and the signals
/// (SIGTERM or SIGINT drains; a second one exits at once with 1). Returns
/// the process exit code.
pub fn run(config: ServerArgs, inputs: Inputs) -> u8 {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return 1;
        }
    };
    runtime.block_on(async move {
        let running = match start(config, inputs).await {
            Ok(r) => Arc::new(r),
            Err(e) => {
                tracing::error!(error = %e, "cannot start");
                eprintln!("error: {e}");
                return 1;
            }
        };
        let signals = running.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("signal received: draining (a second signal exits at once)");
            signals.drain();
            wait_for_signal().await;
            tracing::warn!("second signal: exiting now");
            std::process::exit(1);
        });
        running.wait().await;
        if running.state.ready.stopped_unasked() {
            tracing::error!("the webhook listener stopped unasked; exiting so the Pod is restarted");
            return 1;
        }
        tracing::info!("stopped");
        0
    })
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Loads the certificate and the allowlist, binds both ports, and starts
/// serving and the background tasks. Fails fast on anything unusable: a
/// webhook that starts without its inputs would only deny everything.
pub async fn start(config: ServerArgs, inputs: Inputs) -> Result<Running, ServerError> {
    alloc::map_large_blocks();
    let metrics = if config.verify.verify_registry {
        Metrics::verifying()
    } else {
        Metrics::new()
    };
    let ready = Arc::new(Readiness::default());
    let (certificate, acceptor) = serving_key(&config, &inputs, &metrics.reloads)?;
    let installed = (!config.csvs.allowlist_csv.is_empty()).then(|| Arc::new(Installed::default()));
    let upgrades = upgrades_of(&config, &inputs);
    let sources = Sources {
        paths: inputs.allowlists,
        policy: inputs.policy.clone(),
        installed: installed.clone(),
        kept: config.state_dir.as_deref().map(LastGood::in_dir),
    };
    let supply = Supply::start(sources, metrics.reloads.clone(), ready.clone())?;
    metrics.reloads.reload(Reloaded::Certificate, true);
    let mut state = State::serving(supply.in_force(), inputs.policy, metrics, ready);
    state.max_body_bytes = config.max_body_bytes;
    state.request_timeout = config.request_timeout;
    state.installed = installed;
    state.judgement_writers = config.judgement_writers.clone();
    let published = config
        .verify
        .verify_registry
        .then(|| Arc::new(ArcSwap::from_pointee(Published::default())));
    state.published = published.clone();
    let state = Arc::new(state);

    let ((webhook, webhook_addr), (admin, admin_addr)) = match inputs.bound {
        Some(bound) => (adopt(bound.webhook)?, adopt(bound.admin)?),
        None => (bind(config.listen).await?, bind(config.admin_listen).await?),
    };
    announce(&state, webhook_addr, admin_addr);

    let stop = CancellationToken::new();
    let audit = spawn_background(&config, &state, (&supply, upgrades), &stop)?;
    if let (Some(published), Some(metrics)) = (published, state.metrics.verify.clone()) {
        verify::spawn(
            config.verify.clone(),
            supply.subscribe(),
            published,
            metrics,
            config.reload_interval,
            stop.clone(),
        )
        .map_err(thread)?;
    }
    Reloader::new(supply, certificate)
        .spawn(config.reload_interval, stop.clone())
        .map_err(thread)?;
    let admin_task = tokio::spawn(listen::serve_admin(admin, admin_router(state.clone())));
    let admin = admin_task.abort_handle();
    let stopped = CancellationToken::new();
    let (settings, drain, done) = (listen::ListenSettings::of(&config), stop.clone(), stopped.clone());
    let (router, connections) = (webhook_router(state.clone()), state.metrics.connections.clone());
    let ended = Ended {
        ready: state.ready.clone(),
        done,
    };
    tokio::spawn(async move {
        let _ended = ended;
        serve_tls(webhook, acceptor, router, connections, &settings, drain).await;
        admin_task.abort();
    });
    Ok(Running {
        webhook_addr,
        admin_addr,
        state,
        stop,
        stopped,
        admin,
        audit: std::sync::Mutex::new(audit),
    })
}

/// Dropped when the webhook listener's task ends, however it ends (a panic
/// unwinds through it): readiness fails and the process stops, rather than
/// staying up, ready, with nothing answering reviews.
struct Ended {
    ready: Arc<Readiness>,
    done: CancellationToken,
}

impl Drop for Ended {
    fn drop(&mut self) {
        self.ready.listener_stopped();
        self.done.cancel();
    }
}

/// With `--audit-preflight`, what the background pre-flight reads.
fn upgrades_of(config: &ServerArgs, inputs: &Inputs) -> Option<upgrades::Upgrades> {
    config.audit.preflight.then(|| upgrades::Upgrades {
        paths: inputs.allowlists.clone(),
        csvs: config.csvs.allowlist_csv.clone(),
        // The waiting plans' new digests are verified as the allowlist's are.
        registry: config.verify.verify_registry.then(|| {
            (
                config.verify.registry.clone(),
                config.verify.verify_platforms.clone(),
            )
        }),
    })
}

/// Starts the CSV watch (with `--allowlist-csv`) and the background audit
/// (with `--audit-interval`), each with the handles it uses; returns the
/// audit's thread, which a stop joins.
fn spawn_background(
    config: &ServerArgs,
    state: &State,
    (supply, upgrades): (&Supply, Option<upgrades::Upgrades>),
    stop: &CancellationToken,
) -> Result<Option<std::thread::JoinHandle<()>>, ServerError> {
    let context = config.audit.context.clone();
    if let Some(installed) = &state.installed {
        let settings = config.cluster.watch_settings(context.clone());
        let (specs, metrics) = (config.csvs.allowlist_csv.clone(), state.metrics.reloads.clone());
        installed::spawn(specs, settings, installed.clone(), metrics, stop.clone()).map_err(thread)?;
    }
    let inputs = audit::AuditInputs {
        flags: config.audit.clone(),
        settings: config.cluster.settings(context.clone()),
        watch_settings: config.cluster.watch_settings(context),
        policy: state.policy.clone(),
        allowlists: supply.subscribe(),
        metrics: state.metrics.audit.clone(),
        upgrades,
    };
    audit::spawn(inputs, stop.clone()).map_err(thread)
}

/// The serving key pair, loaded and exported (its expiry), the reloader
/// that keeps it current, and the TLS acceptor that serves it.
fn serving_key(
    config: &ServerArgs,
    inputs: &Inputs,
    metrics: &ReloadMetrics,
) -> Result<(Certificate, TlsAcceptor), ServerError> {
    let provider: Arc<CryptoProvider> = tls::provider();
    let key = tls::load_key_pair(&inputs.cert, &inputs.key, &provider)?;
    reload::export_expiry(metrics, tls::chain_expiry(&key), &inputs.cert);
    let store = Arc::new(CertStore::new(key));
    let tls_config = tls::server_config(store.clone(), config.client_ca.as_deref(), provider.clone())?;
    let files = CertFiles {
        cert: inputs.cert.clone(),
        key: inputs.key.clone(),
    };
    let certificate = Certificate::new(files, store, provider, metrics.clone());
    Ok((certificate, TlsAcceptor::from(Arc::new(tls_config))))
}

/// A listener on `addr`, and the address it got (port 0 picks one).
async fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), ServerError> {
    listen::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// A socket bound before the start, served by tokio.
fn adopt(listener: std::net::TcpListener) -> Result<(tokio::net::TcpListener, SocketAddr), ServerError> {
    let addr = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source,
    })?;
    tokio::net::TcpListener::from_std(listener)
        .map(|l| (l, addr))
        .map_err(|source| ServerError::Bind { addr, source })
}

/// The start-up line: where it listens, what it serves, how.
fn announce(state: &State, webhook: SocketAddr, admin: SocketAddr) {
    let a = state.allowlist.load();
    tracing::info!(
        %webhook,
        %admin,
        repositories = a.repository_count(),
        digests = a.digest_count(),
        mode = %state.policy.mode,
        "digest-gate serving"
    );
}
