//! Shutdown: in-flight reviews finish, keep-alive connections are
//! answered, idle HTTP/2 ones get GOAWAY and close cleanly.

use super::*;

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_reviews() {
    use tokio::io::AsyncWriteExt;
    let h = start("shutdown", Policy::default(), false).await;
    let addr = h.running.webhook_addr;
    let body = serde_json::to_vec(&review("in-flight", "CREATE", &incident_runtime(), None)).unwrap();
    // Send the headers and half the body, then start the drain.
    let mut stream = connect(addr, &h.pki.ca_pem, &[b"http/1.1"], None).await.unwrap();
    let head = format!(
        "POST /mutate HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        service_name(),
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (first, second) = body.split_at(body.len() / 2);
    stream.write_all(first).await.unwrap();
    stream.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    h.running.drain();
    assert_eq!(
        admin_get(h.running.admin_addr, "/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    // New connections are no longer accepted...
    eventually("the listener to close", Duration::from_secs(5), async || {
        connect(addr, &h.pki.ca_pem, &[b"http/1.1"], None).await.is_err()
    })
    .await;
    // ...but the review in flight completes.
    stream.write_all(second).await.unwrap();
    stream.flush().await.unwrap();
    let response = read_http_response(&mut stream).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let json_start = response.find("\r\n\r\n").unwrap() + 4;
    let answer: Value = serde_json::from_str(&response[json_start..]).unwrap();
    assert_contract(&answer, "in-flight");
    tokio::time::timeout(Duration::from_secs(10), h.running.wait())
        .await
        .expect("the server stops after draining");
}

/// What one keep-alive client saw across a drain.
#[derive(Debug, Default)]
struct Tally {
    answered: usize,
    answered_while_draining: usize,
    /// Answers that said `Connection: close`.
    told_to_close: usize,
    /// Requests sent that got no answer: what the apiserver would refuse.
    failed: Vec<String>,
    /// New connections refused (or cut in the handshake) once the drain began.
    refused: usize,
}

/// Sends `body` back to back over one keep-alive HTTP/1.1 connection at a
/// time, as the apiserver's pool does: a connection is reused until an
/// answer says `Connection: close` or the server is seen to close it while
/// idle, then a new one is opened. Stops at the first refused connection
/// after `draining` turns true.
async fn keep_alive_client(
    addr: std::net::SocketAddr,
    ca_pem: String,
    body: axum::body::Bytes,
    draining: tokio::sync::watch::Receiver<bool>,
) -> Tally {
    use http_body_util::Full;
    use hyper::client::conn::http1;
    use hyper_util::rt::TokioIo;
    let mut tally = Tally::default();
    loop {
        let stream = match connect(addr, &ca_pem, &[b"http/1.1"], None).await {
            Ok(s) => s,
            Err(e) => {
                assert!(*draining.borrow(), "a connection refused before the drain: {e}");
                tally.refused += 1;
                return tally;
            }
        };
        let (mut send, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        loop {
            // Closed while idle, and seen before sending: nothing lost.
            if send.ready().await.is_err() {
                break;
            }
            let was_draining = *draining.borrow();
            let request = Request::post("/mutate")
                .header("host", service_name())
                .header("content-type", "application/json")
                .body(Full::new(body.clone()))
                .unwrap();
            let response =
                match tokio::time::timeout(Duration::from_secs(10), send.send_request(request)).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => {
                        tally.failed.push(format!("sent, no answer: {e}"));
                        break;
                    }
                    Err(_) => {
                        tally.failed.push("no answer in 10 s".into());
                        break;
                    }
                };
            let close = response
                .headers()
                .get("connection")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
            let status = response.status();
            match response.into_body().collect().await {
                Ok(_) if status == StatusCode::OK => {
                    tally.answered += 1;
                    tally.answered_while_draining += usize::from(was_draining);
                }
                Ok(_) => tally.failed.push(format!("HTTP {status}")),
                Err(e) => tally.failed.push(format!("answer cut: {e}")),
            }
            if close {
                tally.told_to_close += 1;
                break;
            }
        }
    }
}

/// Issue 15: a SIGTERM must not cost a review. Eight clients send back to
/// back on keep-alive connections across a drain with a drain delay; every
/// request sent gets its answer, the only errors are new connections
/// refused once the listener has closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_answers_every_review_sent_on_keep_alive_connections() {
    let h = start_tuned("drain-keep-alive", Policy::default(), false, |c| {
        c.drain_delay = Duration::from_millis(1500);
    })
    .await;
    let body = axum::body::Bytes::from(
        serde_json::to_vec(&review("drain", "CREATE", &incident_runtime(), None)).unwrap(),
    );
    let (draining_tx, draining) = tokio::sync::watch::channel(false);
    let clients: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(keep_alive_client(
                h.running.webhook_addr,
                h.pki.ca_pem.clone(),
                body.clone(),
                draining.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    draining_tx.send(true).unwrap();
    h.running.drain();
    let mut tallies = Vec::new();
    for c in clients {
        tallies.push(
            tokio::time::timeout(Duration::from_secs(30), c)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    tokio::time::timeout(Duration::from_secs(10), h.running.wait())
        .await
        .unwrap();
    for t in &tallies {
        assert!(t.failed.is_empty(), "{tallies:#?}");
        assert!(
            t.answered_while_draining > 0 && t.told_to_close > 0,
            "{tallies:#?}"
        );
        assert_eq!(t.refused, 1, "{tallies:#?}");
    }
    let answered: usize = tallies.iter().map(|t| t.answered).sum();
    let closes: usize = tallies.iter().map(|t| t.told_to_close).sum();
    eprintln!("answered {answered} reviews, {closes} connections told to close during the drain");
}

/// During the drain delay an HTTP/2 connection gets a GOAWAY (the client
/// opens its next streams elsewhere) while a review in flight on it still
/// gets its answer; an idle keep-alive HTTP/1.1 connection stays open until
/// the listener closes, then ends with a TLS close_notify, not a bare EOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_sends_goaway_then_closes_idle_connections_cleanly() {
    use futures::SinkExt;
    use http_body::Frame;
    use hyper::client::conn::http2;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tokio::io::AsyncReadExt;
    type Chunk = Result<Frame<axum::body::Bytes>, std::convert::Infallible>;
    let h = start_tuned("drain-h2", Policy::default(), false, |c| {
        c.drain_delay = Duration::from_secs(2);
    })
    .await;
    let addr = h.running.webhook_addr;
    // A keep-alive connection that has served a review and then idles.
    let mut idle = connect(addr, &h.pki.ca_pem, &[b"http/1.1"], None).await.unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let body = serde_json::to_vec(&review("idle", "CREATE", &incident_runtime(), None)).unwrap();
        let head = format!(
            "POST /mutate HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            service_name(),
            body.len()
        );
        idle.write_all(head.as_bytes()).await.unwrap();
        idle.write_all(&body).await.unwrap();
        let response = read_http_response(&mut idle).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(
            !response.to_ascii_lowercase().contains("connection: close"),
            "{response}"
        );
    }
    let stream = connect(addr, &h.pki.ca_pem, &[b"h2"], None).await.unwrap();
    let (mut send, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
    let h2_conn = tokio::spawn(conn);
    // A review that is still being sent when the drain begins.
    let body = serde_json::to_vec(&review("h2-in-flight", "CREATE", &incident_runtime(), None)).unwrap();
    let (mut body_tx, body_rx) = futures::channel::mpsc::channel::<Chunk>(4);
    let request = Request::post(format!("https://{}/mutate", service_name()))
        .header("content-type", "application/json")
        .body(http_body_util::StreamBody::new(body_rx))
        .unwrap();
    let in_flight = tokio::spawn(send.send_request(request));
    let (first, second) = body.split_at(body.len() / 2);
    let chunk = |bytes: &[u8]| -> Chunk { Ok(Frame::data(axum::body::Bytes::copy_from_slice(bytes))) };
    body_tx.send(chunk(first)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let drained_at = std::time::Instant::now();
    h.running.drain();
    tokio::time::sleep(Duration::from_millis(200)).await;
    body_tx.send(chunk(second)).await.unwrap();
    drop(body_tx);
    let response = in_flight.await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_contract(&answer, "h2-in-flight");
    // GOAWAY: the HTTP/2 connection ends well before the listener closes.
    tokio::time::timeout(Duration::from_millis(1500), h2_conn)
        .await
        .expect("the HTTP/2 connection ends during the drain delay")
        .unwrap()
        .unwrap();
    assert!(drained_at.elapsed() < Duration::from_secs(2));

    // The idle HTTP/1.1 connection: open through the delay, then a clean end.
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(10), idle.read(&mut byte))
        .await
        .unwrap();
    assert!(
        drained_at.elapsed() >= Duration::from_secs(2),
        "closed before the delay ended"
    );
    assert_eq!(
        read.map_err(|e| e.kind()),
        Ok(0),
        "a close_notify, not a bare EOF or reset"
    );
    tokio::time::timeout(Duration::from_secs(10), h.running.wait())
        .await
        .unwrap();
}

async fn read_http_response(stream: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> String {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .unwrap()
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end].lines().find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(|v| v.trim().parse::<usize>().unwrap())
            });
            if length.is_some_and(|len| buf.len() >= end + 4 + len) {
                break;
            }
        }
    }
    String::from_utf8(buf).unwrap()
}
