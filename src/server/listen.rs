//! The webhook listener: the accept loop, one TLS connection's life, and a
//! drain that never drops a review.
//!
//! The apiserver keeps idle connections and does not retry a POST that
//! fails on one, so no connection may close under a client that has just
//! sent on it. On a drain:
//! - during the drain delay (readiness 503, the listener still accepting)
//!   every HTTP/1.1 answer carries `Connection: close` (the client knows
//!   not to reuse the connection, and hyper closes it after that answer),
//!   and each HTTP/2 connection gets a GOAWAY (the client opens new streams
//!   elsewhere; those in flight finish);
//! - when the delay ends the listener closes, and connections still open —
//!   idle since the drain began — close with a TLS close_notify, so a
//!   client sees a clean end rather than a reset; in-flight reviews get the
//!   grace period.
//!
//! A `TaskTracker` counts the connections the grace period waits for; two
//! `CancellationToken`s tell them the drain began and the listener closed.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::config::ServerArgs;
use super::gate::{Gate, Limits, Ticket};
use crate::metrics::{ConnectionMetrics, Eviction};

/// How the webhook port treats connections: `serve`'s flags for it.
#[derive(Debug, Clone)]
pub struct ListenSettings {
    /// Time a client has to send request headers.
    pub request_timeout: Duration,
    pub handshake_timeout: Duration,
    pub grace_period: Duration,
    pub drain_delay: Duration,
    pub limits: Limits,
}

impl ListenSettings {
    pub fn of(config: &ServerArgs) -> Self {
        Self {
            request_timeout: config.request_timeout,
            handshake_timeout: config.handshake_timeout,
            grace_period: config.grace_period,
            drain_delay: config.drain_delay,
            limits: Limits {
                pending: config.max_pending_handshakes,
                per_peer: config.max_pending_per_peer,
                established: config.max_connections,
            },
        }
    }
}

/// A listener on `addr`, and the address it got (port 0 picks one).
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

/// The admin port: it keeps answering during the drain so probes see 503,
/// and stops with the process.
pub async fn serve_admin(listener: TcpListener, router: axum::Router) {
    let _ = axum::serve(listener, router).await;
}

/// What every connection shares.
struct Shared {
    acceptor: TlsAcceptor,
    /// The protocol is known from ALPN once the handshake is done: serving
    /// it directly (not auto-detected) puts a connection that sends nothing
    /// under the header read timeout from its start, where detection would
    /// wait for a first byte with no timer at all.
    http1: auto::Builder<TokioExecutor>,
    http2: auto::Builder<TokioExecutor>,
    service: TowerToHyperService<axum::Router>,
    gate: Arc<Gate>,
    metrics: ConnectionMetrics,
    handshake_timeout: Duration,
    /// The drain began: HTTP/2 connections get their GOAWAY.
    draining: CancellationToken,
    /// The same, read by every HTTP/1.1 answer: a token's state is behind
    /// a mutex, an atomic load is all an answer should pay.
    draining_now: Arc<AtomicBool>,
    /// The listener closed: idle HTTP/1.1 connections close.
    closing: CancellationToken,
}

/// HTTP/1.1 and HTTP/2 (the apiserver speaks either), with the request
/// header timeout and a stream cap per connection.
fn http_builder(settings: &ListenSettings) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.request_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256);
    builder
}

/// Serves `router` over TLS on `listener` until `drain` is cancelled, then
/// drains as the module says. Public so the load benchmark's baseline
/// webhook runs the very same connection handling.
pub async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: axum::Router,
    metrics: ConnectionMetrics,
    settings: &ListenSettings,
    drain: CancellationToken,
) {
    let builder = http_builder(settings);
    let shared = Arc::new(Shared {
        acceptor,
        http1: builder.clone().http1_only(),
        http2: builder.http2_only(),
        service: TowerToHyperService::new(router),
        gate: Gate::new(settings.limits),
        metrics,
        handshake_timeout: settings.handshake_timeout,
        draining: drain.clone(),
        draining_now: Arc::new(AtomicBool::new(false)),
        closing: CancellationToken::new(),
    });
    let connections = TaskTracker::new();
    let draining_now = shared.draining_now.clone();
    let stopping = async {
        drain.cancelled().await;
        draining_now.store(true, Ordering::Release);
        tokio::time::sleep(settings.drain_delay).await;
    };
    accept(&listener, &shared, &connections, stopping).await;
    drop(listener);
    connections.close();
    shared.closing.cancel();
    tracing::info!(grace_period = ?settings.grace_period, "stopped accepting; finishing in-flight reviews");
    match tokio::time::timeout(settings.grace_period, connections.wait()).await {
        Ok(()) => tracing::info!("all connections closed"),
        Err(_) => tracing::warn!("grace period over; closing the remaining connections"),
    }
}

/// Accepts until `stopping` is done, each connection a task of its own in
/// a span naming its peer. Never waits for a slot: the gate makes room.
async fn accept(
    listener: &TcpListener,
    shared: &Arc<Shared>,
    connections: &TaskTracker,
    stopping: impl Future<Output = ()>,
) {
    let mut stopping = std::pin::pin!(stopping);
    loop {
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
            () = &mut stopping => return,
        };
        let _ = tcp.set_nodelay(true);
        let ticket = shared.gate.admit(peer.ip());
        let shared = shared.clone();
        let span = tracing::debug_span!("connection", %peer);
        connections.spawn(
            async move {
                let _open = shared.metrics.open();
                connection(&shared, tcp, ticket).await;
            }
            .instrument(span),
        );
    }
}

/// One connection: the TLS handshake (unless the gate makes room for a
/// newer one first), a place among the established, then HTTP.
async fn connection(shared: &Shared, tcp: TcpStream, mut ticket: Ticket) {
    let handshake = tokio::select! {
        done = tokio::time::timeout(shared.handshake_timeout, shared.acceptor.accept(tcp)) => done,
        Ok(why) = &mut ticket.evicted => {
            shared.metrics.evicted(why);
            tracing::debug!(reason = why.as_str(), "pending TLS handshake closed to make room");
            return;
        }
    };
    let stream = match handshake {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            shared.metrics.tls_handshake_failed();
            tracing::debug!(error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            shared.metrics.tls_handshake_failed();
            tracing::debug!("TLS handshake timed out");
            return;
        }
    };
    // Moving to the established may find no room.
    if ticket.established().is_err() {
        shared.metrics.evicted(Eviction::Full);
        // Counted, not logged at warn: a client could make every new
        // connection a log line.
        tracing::debug!("connection closed: --max-connections reached and every connection is serving");
        return;
    }
    serve(shared, stream, &mut ticket).await;
}

/// HTTP on an established connection until it ends, the drain closes it,
/// or the gate makes room for a newer one before it sent a request.
async fn serve(shared: &Shared, stream: TlsStream<TcpStream>, ticket: &mut Ticket) {
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    // A connection that has not sent its first request yet was opened to
    // send one: closing it would fail that request. It is left to be
    // answered (with `Connection: close`), or to the header read timeout.
    let served = Arc::new(AtomicBool::new(false));
    let seen = served.clone();
    let (id, client) = ticket.key();
    let gate = shared.gate.clone();
    let inner = shared.service.clone();
    let draining = shared.draining_now.clone();
    let service = hyper::service::service_fn(move |request| {
        if !seen.swap(true, Ordering::Relaxed) {
            gate.served(id, client);
        }
        let answer = hyper::service::Service::call(&inner, request);
        let draining = draining.clone();
        async move {
            let mut response = answer.await?;
            // Asked once the answer is ready: a review that began before
            // the drain and ends during it is the connection's last.
            // (HTTP/2 got its GOAWAY.)
            if !h2 && draining.load(Ordering::Acquire) {
                response.headers_mut().insert(
                    axum::http::header::CONNECTION,
                    axum::http::HeaderValue::from_static("close"),
                );
            }
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    // HTTP/2 is told at once (GOAWAY); an HTTP/1.1 connection is told by
    // its next answer, and closed here only once the listener is.
    let told = if h2 { &shared.draining } else { &shared.closing };
    let builder = if h2 { &shared.http2 } else { &shared.http1 };
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let mut was_told = false;
    // Until served, the gate may close the connection for a newer one;
    // serving closes that channel.
    let mut evictable = true;
    let ended = loop {
        tokio::select! {
            ended = conn.as_mut() => break ended,
            () = told.cancelled(), if !was_told => {
                was_told = true;
                if h2 || served.load(Ordering::Relaxed) {
                    conn.as_mut().graceful_shutdown();
                }
            }
            evicted = &mut ticket.evicted, if evictable => {
                evictable = false;
                if let Ok(why) = evicted {
                    shared.metrics.evicted(why);
                    tracing::debug!(reason = why.as_str(), "idle connection closed to make room");
                    break Ok(());
                }
            }
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}
