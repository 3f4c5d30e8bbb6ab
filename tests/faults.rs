//! Faults injected into a running server: the admin port going away, and a
//! drain under sustained load. (Certificate and allowlist rotation, garbage
//! and deleted files are in tests/server/tls.rs and reload.rs.)

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use digest_gate::server;
use serde_json::{Value, json};

use digest_gate::testing::BAD as NEVER_PROMOTED;

fn runtime() -> Value {
    json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
           "metadata": {"name": "ovms", "namespace": "demo-models"},
           "spec": {"containers": [{"name": "ovms",
               "image": format!("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@{NEVER_PROMOTED}")}]}})
}

async fn start(name: &str) -> (server::Running, Pki) {
    start_server(name, |c| c.grace_period = Duration::from_secs(10)).await
}

#[tokio::test]
async fn the_webhook_does_not_depend_on_the_admin_port() {
    let (running, pki) = start("admin-down").await;
    let mut client = Client::open(running.webhook_addr, &pki.ca_pem).await;
    client
        .review("/mutate", &review("before", "CREATE", &runtime(), None))
        .await;
    running.stop_admin();
    let mut down = false;
    eventually("the admin port to go away", Duration::from_secs(5), async || {
        down = tokio::net::TcpStream::connect(running.admin_addr).await.is_err();
        down
    })
    .await;
    // Existing and new webhook connections still work.
    let answer = client
        .review("/mutate", &review("after", "CREATE", &runtime(), None))
        .await;
    assert_contract(&answer, "after");
    let mut fresh = Client::open(running.webhook_addr, &pki.ca_pem).await;
    assert_contract(
        &fresh
            .review("/validate", &review("fresh", "CREATE", &runtime(), None))
            .await,
        "fresh",
    );
    running.drain();
    running.wait().await;
}

/// Clients hammer the webhook on keep-alive connections while it drains. The
/// invariant: every review the server answered reached its client whole — no
/// answer is lost or cut — and every answer is a valid AdmissionReview.
#[tokio::test]
async fn sigterm_under_load_loses_no_in_flight_review() {
    let (running, pki) = start("drain-load").await;
    let running = Arc::new(running);
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let (running, pki_ca, received, stop) = (
            running.clone(),
            pki.ca_pem.clone(),
            received.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A refused or dropped connection is where a client retries
                // against another replica; what must never happen is a
                // malformed or partial answer.
                let Ok(stream) = connect(running.webhook_addr, &pki_ca, &[b"http/1.1"], None).await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let (mut send, conn) = hyper::client::conn::http1::handshake::<
                    _,
                    http_body_util::Full<axum::body::Bytes>,
                >(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
                tokio::spawn(conn);
                loop {
                    seq += 1;
                    let uid = format!("w{worker}-{seq}");
                    let body = serde_json::to_vec(&review(&uid, "CREATE", &runtime(), None)).unwrap();
                    let request = hyper::Request::post("/mutate")
                        .header("host", service_name())
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(axum::body::Bytes::from(body)))
                        .unwrap();
                    if send.ready().await.is_err() {
                        break;
                    }
                    let Ok(response) = send.send_request(request).await else {
                        break;
                    };
                    use http_body_util::BodyExt;
                    let status = response.status();
                    let bytes = response
                        .into_body()
                        .collect()
                        .await
                        .expect("an answer that started arrives whole")
                        .to_bytes();
                    assert_eq!(status, 200);
                    let answer: Value = serde_json::from_slice(&bytes).expect("a whole JSON answer");
                    assert_contract(&answer, &uid);
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    eventually("load to build up", Duration::from_secs(20), async || {
        received.load(Ordering::Relaxed) > 300
    })
    .await;
    running.drain();
    tokio::time::timeout(Duration::from_secs(20), running.wait())
        .await
        .expect("drained within the grace period");
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let metrics = running.state.metrics.encode();
    let answered: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("digest_gate_admission_requests_total"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    let received = received.load(Ordering::Relaxed) as f64;
    assert!(received > 300.0);
    assert_eq!(answered, received, "every answered review reached its client");
}

/// At the connection limit the server keeps accepting: a connection that
/// has not sent a request is closed for the new one, served connections
/// keep theirs, and once every connection has been served the newcomer is
/// the one closed. Open connections never exceed the limit for long.
#[tokio::test]
async fn connections_are_bounded() {
    use tokio::io::AsyncReadExt;
    let (running, pki) = start_server("bounded", |c| c.max_connections = 2).await;
    let addr = running.webhook_addr;
    // Established, never sends a request.
    let mut silent = connect(addr, &pki.ca_pem, &[b"http/1.1"], None).await.unwrap();
    let mut second = Client::open(addr, &pki.ca_pem).await;
    second
        .review("/mutate", &review("second", "CREATE", &runtime(), None))
        .await;
    // The third is served at once: the silent one made room.
    let mut third = tokio::time::timeout(Duration::from_secs(5), Client::open(addr, &pki.ca_pem))
        .await
        .expect("accepted at the limit");
    assert_contract(
        &third
            .review("/mutate", &review("third", "CREATE", &runtime(), None))
            .await,
        "third",
    );
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut [0u8; 1]))
        .await
        .expect("the silent connection was closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // Both served: a fourth is closed, and the two keep being served.
    let fourth = connect(addr, &pki.ca_pem, &[b"http/1.1"], None).await;
    if let Ok(mut stream) = fourth {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut [0u8; 1])).await;
        assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
    }
    for (client, uid) in [(&mut second, "second-again"), (&mut third, "third-again")] {
        let answer = client
            .review("/mutate", &review(uid, "CREATE", &runtime(), None))
            .await;
        assert_contract(&answer, uid);
    }
    let metrics = running.state.metrics.encode();
    for reason in ["unserved", "full"] {
        assert!(
            metrics.contains(&format!(
                "digest_gate_connections_evicted_total{{reason=\"{reason}\"}} 1"
            )),
            "{reason}:\n{metrics}"
        );
    }
    running.drain();
    running.wait().await;
}
