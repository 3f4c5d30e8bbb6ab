//! `digest-gate serve`: the webhook on TLS, the admin endpoints on plain HTTP,
//! hot reloads, and a graceful drain.

pub mod gate;
pub mod http;
pub mod installed;
pub mod reload;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

pub use http::{State, admin_router, webhook_router};
use reload::{CertFiles, Reloader};
use tls::CertStore;

use crate::allowlist::Loaded;
use crate::policy::Policy;

/// Everything `serve` needs. The tunables are `serve`'s own flags, with
/// their defaults declared once here; the inputs (key pair, allowlists,
/// policy) are filled in by the caller, since `--dev` makes them.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Webhook (TLS) address.
    #[arg(long, env = "DIGEST_GATE_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Admin (plain HTTP) address for /healthz, /readyz and /metrics.
    #[arg(long, env = "DIGEST_GATE_ADMIN_LISTEN", default_value = "0.0.0.0:8080")]
    pub admin_listen: SocketAddr,
    #[arg(skip)]
    pub cert: PathBuf,
    #[arg(skip)]
    pub key: PathBuf,
    /// Require client certificates signed by this CA (PEM).
    #[arg(long, env = "DIGEST_GATE_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,
    #[arg(skip)]
    pub allowlists: Vec<PathBuf>,
    /// Keep the last allowlist that loaded in this directory (an emptyDir in
    /// the chart): a restart that finds the mounted allowlist unusable then
    /// serves that copy, or waits unready for a usable one, instead of
    /// exiting.
    #[arg(long, env = "DIGEST_GATE_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    #[command(flatten)]
    pub csvs: crate::audit::installed::CsvArgs,
    #[arg(skip)]
    pub policy: Policy,
    /// Largest AdmissionReview body accepted (bytes).
    #[arg(long, env = "DIGEST_GATE_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Most established webhook connections; at the cap the oldest one that
    /// has not sent a whole request is closed for a new one.
    #[arg(long, env = "DIGEST_GATE_MAX_CONNECTIONS", default_value = "1024", value_parser = parse_connections)]
    pub max_connections: usize,
    /// Most connections whose TLS handshake has not finished; at the cap the
    /// oldest is closed for a new one, so a client that opens sockets and
    /// sends nothing cannot keep others out.
    #[arg(long, env = "DIGEST_GATE_MAX_PENDING_HANDSHAKES", default_value = "256", value_parser = parse_connections)]
    pub max_pending_handshakes: usize,
    /// Most unfinished TLS handshakes from one peer address; at the cap that
    /// peer's oldest is closed. An apiserver's handshakes take milliseconds.
    #[arg(long, env = "DIGEST_GATE_MAX_PENDING_PER_PEER", default_value = "64", value_parser = parse_connections)]
    pub max_pending_per_peer: usize,
    /// Time a client has to send request headers, and a body.
    #[arg(long, env = "DIGEST_GATE_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Time a TLS handshake may take (the apiserver's takes milliseconds).
    #[arg(long, env = "DIGEST_GATE_HANDSHAKE_TIMEOUT", default_value = "3s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,
    /// Time in-flight reviews get to finish on SIGTERM.
    #[arg(long, env = "DIGEST_GATE_GRACE_PERIOD", default_value = "20s", value_parser = parse_duration)]
    pub grace_period: Duration,
    /// Time to keep accepting after readiness turns 503 on SIGTERM, so
    /// endpoints can drop this pod before it stops listening.
    #[arg(long, env = "DIGEST_GATE_DRAIN_DELAY", default_value = "0s", value_parser = parse_duration)]
    pub drain_delay: Duration,
    /// How often the allowlist and certificate files are re-read (at least 100ms).
    #[arg(long, env = "DIGEST_GATE_RELOAD_INTERVAL", default_value = "2s", value_parser = parse_reload_interval)]
    pub reload_interval: Duration,
    #[command(flatten)]
    pub audit: crate::audit::background::Background,
}

impl Config {
    /// The flags' defaults around the inputs.
    pub fn new(cert: PathBuf, key: PathBuf, allowlists: Vec<PathBuf>, policy: Policy) -> Self {
        use clap::{Args, FromArgMatches};
        // The declared defaults only: a library caller's environment
        // (DIGEST_GATE_LISTEN, ...) is not this constructor's input.
        let matches = Self::augment_args(clap::Command::new("serve"))
            .mut_args(|arg| arg.env(None::<&str>))
            .try_get_matches_from(["serve"])
            .expect("every flag has a default");
        let mut config = Self::from_arg_matches(&matches).expect("the defaults parse");
        config.cert = cert;
        config.key = key;
        config.allowlists = allowlists;
        config.policy = policy;
        config
    }
}

/// `500ms`, `10s`, `2m`, `1h 30m` (humantime), or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse()
            .map(Duration::from_secs)
            .map_err(|e| format!("'{s}': {e}"));
    }
    humantime::parse_duration(s).map_err(|e| format!("'{s}' is not a duration (e.g. 500ms, 10s, 2m): {e}"))
}

/// At least one: a limit of none would accept nothing.
fn parse_connections(s: &str) -> Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .map(|n| n.max(1))
        .map_err(|e| format!("'{s}': {e}"))
}

/// Polling faster than this only burns CPU on stat calls.
fn parse_reload_interval(s: &str) -> Result<Duration, String> {
    parse_duration(s).map(|d| d.max(Duration::from_millis(100)))
}

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("the allowlist cannot be used:\n{0}")]
    Allowlist(String),
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

/// A started server.
pub struct Running {
    /// Where the webhook listens (useful with port 0).
    pub webhook_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub state: Arc<State>,
    drain: watch::Sender<bool>,
    done: watch::Receiver<bool>,
    admin: tokio::task::AbortHandle,
    /// The background audit's thread, if it runs.
    audit: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Running {
    /// Starts the drain: readiness fails at once, the listener closes after
    /// the drain delay, in-flight reviews get the grace period.
    pub fn drain(&self) {
        self.state.ready.drain();
        let _ = self.drain.send(true);
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
        let mut done = self.done.clone();
        let _ = done.wait_for(|d| *d).await;
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
pub fn run(config: Config) -> u8 {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return 1;
        }
    };
    runtime.block_on(async move {
        let running = match start(config).await {
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

/// Loads certificate and allowlist, binds both ports, and starts serving.
/// Fails fast on anything unusable: a webhook that starts without its inputs
/// would only deny everything.
pub async fn start(config: Config) -> Result<Running, ServerError> {
    reload::map_large_blocks();
    let provider = tls::provider();
    let key = tls::load_key_pair(&config.cert, &config.key, &provider)?;
    let expiry = tls::chain_expiry(&key);
    let store = Arc::new(CertStore::new(key));
    let tls_config = tls::server_config(store.clone(), config.client_ca.as_deref(), provider.clone())?;

    // With --allowlist-csv the files are only part of the allowlist: whether
    // it is usable is asked once the CSVs are merged in, and until then the
    // server is not ready.
    let waiting = !config.csvs.allowlist_csv.is_empty();
    let last_good = config.state_dir.as_deref().map(reload::LastGood::in_dir);
    let files = reload::read_allowlist(&config.allowlists, None);
    let allowlist_seen = files.seen;
    let read = files.load(None);
    let checked = read
        .loaded
        .and_then(|l| reload::usable_unless_waiting(l, &config.policy, waiting));
    let mut unready = waiting.then_some(http::WAITING_FOR_CSVS);
    let (loaded, stale) = match checked {
        Ok(loaded) => {
            if let Some(last_good) = &last_good {
                last_good.keep(&read.files);
            }
            (loaded, false)
        }
        // Without --state-dir (a developer's run): say so and stop.
        Err(error) if last_good.is_none() => return Err(ServerError::Allowlist(error)),
        Err(error) => match last_good
            .as_ref()
            .and_then(|l| fall_back(l, &error, &config.policy, waiting))
        {
            Some(loaded) => (loaded, true),
            None => {
                tracing::error!(%error, "the allowlist cannot be used and no last good copy was kept; not ready until it can be");
                unready = Some(http::WAITING_FOR_ALLOWLIST);
                (Loaded::default(), true)
            }
        },
    };
    for w in &loaded.warnings {
        tracing::warn!(warning = %w, "allowlist entry skipped");
    }
    let installed = waiting.then(|| Arc::new(installed::Installed::default()));
    let mut state = State::new(loaded.allowlist, config.policy.clone());
    state.max_body_bytes = config.max_body_bytes;
    state.request_timeout = config.request_timeout;
    state.installed = installed.clone();
    if let Some(why) = unready {
        state.ready.wait(why);
    }
    let state = Arc::new(state);
    state.metrics.reload("allowlist", !stale);
    state.metrics.allowlist_stale(stale);
    state.metrics.reload("certificate", true);
    reload::export_expiry(&state.metrics, expiry, &config.cert);

    let (webhook, webhook_addr) = bind(config.listen).await?;
    let (admin, admin_addr) = bind(config.admin_listen).await?;
    {
        let a = state.allowlist.load();
        tracing::info!(
            webhook = %webhook_addr,
            admin = %admin_addr,
            repositories = a.repository_count(),
            digests = a.digest_count(),
            mode = %config.policy.mode,
            "digest-gate serving"
        );
    }

    let (drain_tx, drain_rx) = watch::channel(false);
    if let Some(installed) = &installed {
        let settings = crate::audit::Settings {
            kubeconfig: config.audit.kubeconfig.clone(),
            context: config.audit.context.clone(),
            // A watch waits minutes for an event: kube's read timeout (longer
            // than the watch's own) applies, not the audit's 30 s.
            timeout: None,
        };
        installed::spawn(
            config.csvs.allowlist_csv.clone(),
            settings,
            installed.clone(),
            state.clone(),
            drain_rx.clone(),
        )
        .map_err(|source| ServerError::Thread { source })?;
    }
    let reloader = Reloader::new(
        state.clone(),
        config.allowlists.clone(),
        installed,
        last_good,
        allowlist_seen,
        CertFiles {
            cert: config.cert.clone(),
            key: config.key.clone(),
        },
        store,
        provider,
    );
    reloader
        .spawn(config.reload_interval, drain_rx.clone())
        .map_err(|source| ServerError::Thread { source })?;

    let audit = crate::audit::background::spawn(config.audit.clone(), state.clone(), drain_rx.clone())
        .map_err(|source| ServerError::Thread { source })?;

    let admin_task = tokio::spawn(serve_admin(admin, admin_router(state.clone()), drain_rx.clone()));
    let admin_abort = admin_task.abort_handle();
    let acceptor = TlsAcceptor::from(Arc::new(tls_config));
    let webhook_state = state.clone();
    let (done_tx, done) = watch::channel(false);
    tokio::spawn(async move {
        let router = webhook_router(webhook_state.clone());
        serve_tls(webhook, acceptor, router, webhook_state, &config, drain_rx).await;
        admin_task.abort();
        let _ = done_tx.send(true);
    });
    Ok(Running {
        webhook_addr,
        admin_addr,
        state,
        drain: drain_tx,
        done,
        admin: admin_abort,
        audit: std::sync::Mutex::new(audit),
    })
}

/// The allowlist kept in `--state-dir`, when the mounted one cannot be used
/// at startup (`error`); `None` when there is none that loads.
fn fall_back(last_good: &reload::LastGood, error: &str, policy: &Policy, waiting: bool) -> Option<Loaded> {
    let (files, saved) = match last_good.load() {
        Ok(Some(kept)) => kept,
        Ok(None) => return None,
        Err(e) => {
            tracing::error!(error = %e, "the last good allowlist cannot be read");
            return None;
        }
    };
    let loaded = crate::allowlist::load_sources(crate::allowlist::inputs(&files))
        .map_err(|e| e.to_string())
        .and_then(|l| reload::usable_unless_waiting(l, policy, waiting));
    match loaded {
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

/// A listener on `addr`, and the address it got (port 0 picks one).
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), ServerError> {
    let bind_error = |source| ServerError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

async fn serve_admin(listener: TcpListener, router: axum::Router, mut drain: watch::Receiver<bool>) {
    // The admin port keeps answering during the drain so probes see 503,
    // and stops with the process.
    let _ = axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = drain.wait_for(|d| *d).await;
            std::future::pending::<()>().await;
        })
        .await;
}

/// HTTP/1.1 and HTTP/2 (the apiserver speaks either), with the request
/// header timeout and a stream cap per connection.
fn http_builder(config: &Config) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.request_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256);
    builder
}

/// Where a drain is, as each connection sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Serving,
    /// Readiness is 503 and the listener still accepts (`--drain-delay`):
    /// every connection is told to go elsewhere at its next chance.
    Draining,
    /// The listener is closed; what is left has the grace period.
    Closing,
}

/// Serves `router` over TLS on `listener` until `drain` fires, then drains
/// without dropping a review. The apiserver keeps idle connections and does
/// not retry a POST that fails on one, so no connection may close under a
/// client that has just sent on it:
/// - during the drain delay every HTTP/1.1 answer carries `Connection:
///   close` (the client knows not to reuse the connection, and hyper closes
///   it after that answer), and each HTTP/2 connection gets a GOAWAY (the
///   client opens new streams elsewhere; those in flight finish);
/// - when the delay ends, connections still open — idle since the drain
///   began — close with a TLS close_notify, so a client sees a clean end
///   rather than a reset, and in-flight reviews get the grace period.
///
/// Public so the load benchmark's baseline webhook runs the very same
/// connection handling.
pub async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: axum::Router,
    state: Arc<State>,
    config: &Config,
    mut drain: watch::Receiver<bool>,
) {
    // The protocol is known from ALPN once the handshake is done: serving it
    // directly (not auto-detected) puts a connection that sends nothing
    // under the header read timeout from its start, where detection would
    // wait for a first byte with no timer at all.
    let builder = http_builder(config);
    let builders = Arc::new((builder.clone().http1_only(), builder.http2_only()));
    let (phase_tx, phase) = watch::channel(Phase::Serving);
    let service = TowerToHyperService::new(router);
    // Read by every answer (a watch borrow would take a lock per request).
    let draining = Arc::new(AtomicBool::new(false));
    // Each established connection holds a sender; when all are dropped the
    // receiver sees the end.
    let (open_tx, mut all_closed) = tokio::sync::mpsc::channel::<()>(1);
    let gate = gate::Gate::new(gate::Limits {
        pending: config.max_pending_handshakes,
        per_peer: config.max_pending_per_peer,
        established: config.max_connections,
    });

    let stopping = async {
        let _ = drain.wait_for(|d| *d).await;
        draining.store(true, Ordering::Release);
        let _ = phase_tx.send(Phase::Draining);
        tokio::time::sleep(config.drain_delay).await;
    };
    let mut stopping = std::pin::pin!(stopping);
    loop {
        // Never waits for a slot: the gate makes room (see gate.rs).
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stopping => break,
        };
        let _ = tcp.set_nodelay(true);
        let mut ticket = gate.admit(peer.ip());
        let acceptor = acceptor.clone();
        let builders = builders.clone();
        let service = service.clone();
        let state = state.clone();
        let gate = gate.clone();
        let handshake_timeout = config.handshake_timeout;
        let mut phase = phase.clone();
        let draining = draining.clone();
        let open = open_tx.clone();
        tokio::spawn(async move {
            state.metrics.connection_opened();
            let handshake = tokio::select! {
                done = tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)) => Some(done),
                Ok(why) = &mut ticket.evicted => {
                    state.metrics.connection_evicted(why);
                    tracing::debug!(%peer, reason = why.as_str(), "pending TLS handshake closed to make room");
                    None
                }
            };
            match handshake {
                None => {}
                // Moving to the established may find no room.
                Some(Ok(Ok(_))) if ticket.established().is_err() => {
                    state.metrics.connection_evicted(gate::Eviction::Full);
                    // Counted, not logged at warn: a client could make
                    // every new connection a log line.
                    tracing::debug!(%peer, "connection closed: --max-connections reached and every connection is serving");
                }
                Some(Ok(Ok(stream))) => {
                    let _open = open;
                    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                    // A connection that has not sent its first request yet
                    // was opened to send one: closing it would fail that
                    // request. It is left to be answered (with `Connection:
                    // close`), or to the header read timeout.
                    let served = Arc::new(AtomicBool::new(false));
                    let seen = served.clone();
                    let (id, client) = ticket.key();
                    let service = hyper::service::service_fn(move |request| {
                        if !seen.swap(true, Ordering::Relaxed) {
                            gate.served(id, client);
                        }
                        let answer = hyper::service::Service::call(&service, request);
                        let draining = draining.clone();
                        async move {
                            let mut response = answer.await?;
                            // Asked once the answer is ready: a review that
                            // began before the drain and ends during it is
                            // the connection's last. (HTTP/2 got its GOAWAY.)
                            if !h2 && draining.load(Ordering::Acquire) {
                                response.headers_mut().insert(
                                    axum::http::header::CONNECTION,
                                    axum::http::HeaderValue::from_static("close"),
                                );
                            }
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    });
                    // HTTP/2 is told at once (GOAWAY); an HTTP/1.1 connection
                    // is told by its next answer, and closed here only once
                    // the listener is.
                    let told_at = if h2 { Phase::Draining } else { Phase::Closing };
                    let builder = if h2 { &builders.1 } else { &builders.0 };
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    let mut conn = std::pin::pin!(conn);
                    let mut told = false;
                    // Until served, the gate may close the connection for a
                    // newer one; serving closes that channel.
                    let mut evictable = true;
                    let ended = loop {
                        tokio::select! {
                            ended = conn.as_mut() => break ended,
                            _ = phase.wait_for(|p| *p >= told_at), if !told => {
                                told = true;
                                if h2 || served.load(Ordering::Relaxed) {
                                    conn.as_mut().graceful_shutdown();
                                }
                            }
                            evicted = &mut ticket.evicted, if evictable => {
                                evictable = false;
                                if let Ok(why) = evicted {
                                    state.metrics.connection_evicted(why);
                                    tracing::debug!(%peer, reason = why.as_str(), "idle connection closed to make room");
                                    break Ok(());
                                }
                            }
                        }
                    };
                    if let Err(e) = ended {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                }
                Some(Ok(Err(e))) => {
                    state.metrics.tls_handshake_failed();
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                }
                Some(Err(_)) => {
                    state.metrics.tls_handshake_failed();
                    tracing::debug!(%peer, "TLS handshake timed out");
                }
            }
            drop(ticket);
            state.metrics.connection_closed();
        });
    }
    drop(listener);
    drop(open_tx);
    let _ = phase_tx.send(Phase::Closing);
    tracing::info!(grace_period = ?config.grace_period, "stopped accepting; finishing in-flight reviews");
    match tokio::time::timeout(config.grace_period, all_closed.recv()).await {
        Ok(_) => tracing::info!("all connections closed"),
        Err(_) => tracing::warn!("grace period over; closing the remaining connections"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_or_as_bare_seconds() {
        for (text, want) in [
            ("500ms", Duration::from_millis(500)),
            ("10s", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("1h 30m", Duration::from_secs(5400)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5s", Duration::from_millis(1500)),
            ("0s", Duration::ZERO),
            ("15", Duration::from_secs(15)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in ["", "soon", "-1s", "1.5.2s", "10 parsecs"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(
                err.contains("is not a duration") || err.contains(bad),
                "{bad}: {err}"
            );
        }
        assert_eq!(parse_reload_interval("1ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_connections("0"), Ok(1));
    }

    #[test]
    fn config_new_has_the_flags_defaults() {
        // SAFETY: no other test in this binary reads or writes this variable.
        unsafe { std::env::set_var("DIGEST_GATE_GRACE_PERIOD", "1s") };
        let c = Config::new(
            "c.pem".into(),
            "k.pem".into(),
            vec!["a".into()],
            Policy::default(),
        );
        assert_eq!(c.listen, SocketAddr::from(([0, 0, 0, 0], 8443)));
        assert_eq!(c.admin_listen, SocketAddr::from(([0, 0, 0, 0], 8080)));
        assert_eq!((c.max_body_bytes, c.max_connections), (8 * 1024 * 1024, 1024));
        assert_eq!(c.request_timeout, Duration::from_secs(10));
        assert_eq!(c.handshake_timeout, Duration::from_secs(3));
        assert_eq!((c.max_pending_handshakes, c.max_pending_per_peer), (256, 64));
        assert_eq!(c.grace_period, Duration::from_secs(20));
        assert_eq!(c.drain_delay, Duration::ZERO);
        assert_eq!(c.reload_interval, Duration::from_secs(2));
        assert_eq!(
            (c.cert, c.key, c.allowlists),
            ("c.pem".into(), "k.pem".into(), vec!["a".into()])
        );
        assert!(c.client_ca.is_none());
    }
}
