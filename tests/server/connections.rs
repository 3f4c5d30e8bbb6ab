//! Connections held open (idle, slow handshakes, slow headers) do not
//! keep reviews out.

use super::*;

// === clients that hold connections ===

/// How a flooding client holds its connections.
#[derive(Debug, Clone, Copy)]
enum Hold {
    /// TCP open, nothing sent (no ClientHello).
    Idle,
    /// A ClientHello sent a byte a second.
    SlowHandshake,
    /// The TLS handshake done, then request headers a byte a second.
    SlowHeaders,
}

/// Where the flooding client connects from: another address than the
/// well-behaved client's 127.0.0.1 (still loopback, to 127.0.0.1).
const FLOODER: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 2);

async fn connect_from_flooder(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((FLOODER, 0).into())?;
    socket.connect(addr).await
}

/// Holds `n` connections the `hold` way until `stop`, opening a new one a
/// second after the server closes one (the client reopened its
/// sockets every 10 s).
fn flood(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    hold: Hold,
    n: usize,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<usize>> {
    use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
    // A real ClientHello's first bytes: handshake record, TLS 1.0 framing.
    const HELLO: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03];
    const HEADERS: &[u8] =
        b"POST /mutate HTTP/1.1\r\nhost: digest-gate\r\ncontent-type: application/json\r\n";
    async fn dribble(
        io: &mut (impl AsyncWrite + Unpin),
        bytes: &[u8],
        stop: &tokio::sync::watch::Receiver<bool>,
    ) {
        for b in bytes.iter().cycle() {
            if *stop.borrow() || io.write_all(&[*b]).await.is_err() || io.flush().await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    (0..n)
        .map(|_| {
            let ca_pem = ca_pem.to_owned();
            let stop = stop.clone();
            let mut stopped = stop.clone();
            tokio::spawn(async move {
                let mut opened = 0;
                while !*stop.borrow() {
                    opened += 1;
                    let held = async {
                        match hold {
                            Hold::Idle => {
                                let Ok(mut tcp) = connect_from_flooder(addr).await else {
                                    return;
                                };
                                // Ends when the server closes it.
                                let _ = tcp.read(&mut [0u8; 1]).await;
                            }
                            Hold::SlowHandshake => {
                                let Ok(mut tcp) = connect_from_flooder(addr).await else {
                                    return;
                                };
                                let (mut read, mut write) = tcp.split();
                                let mut byte = [0u8; 1];
                                tokio::select! {
                                    () = dribble(&mut write, HELLO, &stop) => {}
                                    _ = read.read(&mut byte) => {}
                                }
                            }
                            Hold::SlowHeaders => {
                                let Ok(tcp) = connect_from_flooder(addr).await else {
                                    return;
                                };
                                let Ok(tls) =
                                    handshake(tcp, &ca_pem, &service_name(), &[b"http/1.1"], None).await
                                else {
                                    return;
                                };
                                let (mut read, mut write) = tokio::io::split(tls);
                                let mut byte = [0u8; 1];
                                tokio::select! {
                                    () = dribble(&mut write, HEADERS, &stop) => {}
                                    _ = read.read(&mut byte) => {}
                                }
                            }
                        }
                    };
                    tokio::select! {
                        () = async { held.await; tokio::time::sleep(Duration::from_secs(1)).await } => {}
                        _ = stopped.wait_for(|s| *s) => {}
                    }
                }
                opened
            })
        })
        .collect()
}

/// Issue 15: one client holding 1,153 idle sockets made the next review
/// wait 7.1 s (past the chart's 5 s `timeoutSeconds`: under `Fail`, a
/// refused Pod). With 2,000 connections held — idle, a byte-a-second
/// ClientHello, or slow headers after the handshake — and reopened when
/// closed, every review from a well-behaved client that opens a
/// new connection each time is answered within the apiserver's timeout, and
/// the gate's evictions are counted. (How fast is measured by
/// `bench/idle_clients.py`, in SECURITY.md.)
#[rstest::rstest]
#[case::idle(Hold::Idle, 2000, None)]
#[case::idle_without_the_peer_cap(Hold::Idle, 2000, Some(100_000))]
#[case::slow_handshakes(Hold::SlowHandshake, 2000, None)]
#[case::slow_headers_after_the_handshake(Hold::SlowHeaders, 300, None)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_connections_do_not_keep_reviews_out(
    #[case] hold: Hold,
    #[case] n: usize,
    #[case] per_peer: Option<usize>,
) {
    let h = start_tuned(
        &format!("flood-{hold:?}-{per_peer:?}"),
        Policy::default(),
        false,
        |c| {
            if let Some(p) = per_peer {
                c.max_pending_per_peer = p;
            }
            // Below the flood, so the established cap is what is tested.
            if matches!(hold, Hold::SlowHeaders) {
                c.max_connections = 64;
            }
        },
    )
    .await;
    let addr = h.running.webhook_addr;
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let flooders = flood(addr, &h.pki.ca_pem, hold, n, &stop);
    // Let the flood reach its size before reviews begin.
    let settle = std::time::Instant::now();
    while settle.elapsed() < Duration::from_secs(20) {
        let (_, metrics) = admin_get(h.running.admin_addr, "/metrics").await;
        let open = metric_value(&metrics, "digest_gate_open_connections ");
        if open >= 64.0 && settle.elapsed() > Duration::from_secs(2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let body = review("flood", "CREATE", &incident_runtime(), None);
    let mut took = Vec::new();
    for _ in 0..50 {
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(5), async {
            let mut client = h.client().await;
            client.review("/mutate", &body).await
        })
        .await
        .expect("a review answered within the apiserver's 5 s timeout");
        assert_contract(&answer, "flood");
        took.push(started.elapsed());
    }
    stop_tx.send(true).unwrap();
    let opened: usize = futures::future::join_all(flooders)
        .await
        .into_iter()
        .map(Result::unwrap)
        .sum();
    took.sort();
    eprintln!(
        "{hold:?} x{n}: reviews p50 {:?}, max {:?}; the flood opened {opened} connections",
        took[took.len() / 2],
        took[took.len() - 1]
    );
    let (_, metrics) = admin_get(h.running.admin_addr, "/metrics").await;
    let reason = match (hold, per_peer) {
        (Hold::SlowHeaders, _) => "unserved",
        (_, None) => "pending-handshakes-per-peer",
        (_, Some(_)) => "pending-handshakes",
    };
    let evicted = metric_value(
        &metrics,
        &format!("digest_gate_connections_evicted_total{{reason=\"{reason}\"}} "),
    );
    assert!(evicted > 0.0, "no eviction by {reason}:\n{metrics}");
    h.running.drain();
    h.running.wait().await;
}
