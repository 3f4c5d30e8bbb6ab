//! Real TLS: fixtures patched over it, ALPN, garbage on the port, the
//! serving certificate rotated, client certificates, audit mode.

use super::*;

#[tokio::test]
async fn upstream_fixtures_over_tls_patch_and_settle() {
    let h = start("fixtures", Policy::default(), false).await;
    let mut client = h.client().await;
    let mut rewritten = 0;
    for (i, (name, object)) in runtime_reviews().into_iter().enumerate() {
        let uid = format!("fixture-{i}");
        let answer = client
            .review("/mutate", &review(&uid, "CREATE", &object, None))
            .await;
        assert_contract(&answer, &uid);
        let response = &answer["response"];
        if response["allowed"] == false {
            assert_eq!(response["status"]["code"], 403, "{name}");
            let message = response["status"]["message"].as_str().unwrap();
            assert!(message.contains("container \""), "{name}: {message}");
            continue;
        }
        let patched = apply_patch(&answer, &object);
        if response.get("patch").is_some() {
            rewritten += 1;
            assert!(!response["warnings"].as_array().unwrap().is_empty(), "{name}");
        }
        let uid2 = format!("{uid}-again");
        let again = client
            .review("/mutate", &review(&uid2, "CREATE", &patched, None))
            .await;
        assert_contract(&again, &uid2);
        assert!(
            again["response"].get("patch").is_none(),
            "{name}: re-review must not patch"
        );
        let validated = client
            .review("/validate", &review(&uid2, "CREATE", &patched, None))
            .await;
        assert_eq!(validated["response"]["allowed"], true, "{name}: {validated}");
    }
    // The RHODS 1.21 ConfigMap is the one rewrite among the fixtures.
    assert_eq!(rewritten, 1);
    h.running.drain();
    h.running.wait().await;
    std::fs::remove_dir_all(h.dir).unwrap();
}

#[tokio::test]
async fn http2_is_negotiated_by_alpn() {
    let h = start("h2", Policy::default(), false).await;
    let stream = connect(h.running.webhook_addr, &h.pki.ca_pem, &[b"h2", b"http/1.1"], None)
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (status, answer) = post_h2(
        stream,
        "/mutate",
        &review("h2", "CREATE", &incident_runtime(), None),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_contract(&answer, "h2");
    assert!(answer["response"]["patch"].is_string());
    h.running.drain();
    h.running.wait().await;
}

#[tokio::test]
async fn garbage_on_the_tls_port_does_not_hurt_the_next_review() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = start("garbage", Policy::default(), false).await;
    let addr = h.running.webhook_addr;
    // Plain HTTP on the TLS port.
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        .await
        .unwrap();
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut sink)).await;
    // Random bytes.
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3, 4, 5])
        .await
        .unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut sink)).await;
    // A client that does not trust the server's CA.
    let other = Pki::new("someone else");
    assert!(connect(addr, &other.ca_pem, &[b"http/1.1"], None).await.is_err());

    let mut client = h.client().await;
    let answer = client
        .review("/mutate", &review("ok", "CREATE", &incident_runtime(), None))
        .await;
    assert_contract(&answer, "ok");
    let (status, ready) = admin_get(h.running.admin_addr, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    let (_, metrics) = admin_get(h.running.admin_addr, "/metrics").await;
    let failures: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("digest_gate_tls_handshake_failures_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(failures >= 2.0, "{metrics}");
    h.running.drain();
    h.running.wait().await;
}

fn peer_cert_der(stream: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> Vec<u8> {
    stream.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

#[tokio::test]
async fn certificate_rotation_by_symlink_swap_keeps_open_connections() {
    let h = start("rotate-cert", Policy::default(), false).await;
    let tls_dir = h.dir.join("tls");
    let first = connect(h.running.webhook_addr, &h.pki.ca_pem, &[b"http/1.1"], None)
        .await
        .unwrap();
    let first_cert = peer_cert_der(&first);
    let mut open = Client::http1(first).await;
    open.review("/mutate", &review("open-1", "CREATE", &incident_runtime(), None))
        .await;

    let next = h.pki.server();
    kubelet_write(
        &tls_dir,
        &[("tls.crt", &next.cert_pem), ("tls.key", &next.key_pem)],
        1,
    );
    let mut rotated = None;
    eventually(
        "new handshakes to get the new certificate",
        Duration::from_secs(10),
        async || {
            let s = connect(h.running.webhook_addr, &h.pki.ca_pem, &[b"http/1.1"], None)
                .await
                .unwrap();
            let der = peer_cert_der(&s);
            let changed = der != first_cert;
            if changed {
                rotated = Some(der);
            }
            changed
        },
    )
    .await;
    // The connection opened before the swap still answers.
    let answer = open
        .review("/mutate", &review("open-2", "CREATE", &incident_runtime(), None))
        .await;
    assert_contract(&answer, "open-2");

    // A garbage key pair keeps the last good one.
    kubelet_write(
        &tls_dir,
        &[("tls.crt", "not a certificate"), ("tls.key", "not a key")],
        2,
    );
    eventually(
        "the failed certificate reload to be counted",
        Duration::from_secs(10),
        async || {
            admin_get(h.running.admin_addr, "/metrics")
                .await
                .1
                .contains("digest_gate_reloads_total{source=\"certificate\",result=\"failure\"} 1")
        },
    )
    .await;
    let s = connect(h.running.webhook_addr, &h.pki.ca_pem, &[b"http/1.1"], None)
        .await
        .unwrap();
    assert_eq!(Some(peer_cert_der(&s)), rotated);
    assert_eq!(admin_get(h.running.admin_addr, "/readyz").await.0, StatusCode::OK);
    // The expiry exported is the one of the certificate served.
    let (_, served) = x509_parser::parse_x509_certificate(rotated.as_deref().unwrap()).unwrap();
    let expiry = format!(
        "digest_gate_certificate_expiry_timestamp_seconds {}\n",
        served.validity().not_after.timestamp()
    );
    let metrics = admin_get(h.running.admin_addr, "/metrics").await.1;
    assert!(metrics.contains(&expiry), "{expiry} not in:\n{metrics}");
    h.running.drain();
    h.running.wait().await;
}

#[tokio::test]
async fn client_certificates_when_required() {
    let h = start("client-ca", Policy::default(), true).await;
    let addr = h.running.webhook_addr;
    let trusted = h.pki.client("kube-apiserver");
    let stream = connect(addr, &h.pki.ca_pem, &[b"http/1.1"], Some(&trusted))
        .await
        .unwrap();
    let mut client = Client::http1(stream).await;
    assert_contract(
        &client
            .review("/mutate", &review("mtls", "CREATE", &incident_runtime(), None))
            .await,
        "mtls",
    );

    // Without a certificate, or with one from another CA, no review is answered.
    let stranger = Pki::new("other").client("intruder");
    for (name, cert) in [
        ("no certificate", None),
        ("untrusted certificate", Some(&stranger)),
    ] {
        let result = async {
            let stream = connect(addr, &h.pki.ca_pem, &[b"http/1.1"], cert).await?;
            let (mut send, conn) = hyper::client::conn::http1::handshake::<
                _,
                http_body_util::Full<axum::body::Bytes>,
            >(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
            tokio::spawn(conn);
            let request = hyper::Request::post("/mutate")
                .header("content-type", "application/json")
                .body(http_body_util::Full::new(axum::body::Bytes::from_static(b"{}")))
                .unwrap();
            send.send_request(request).await.map_err(std::io::Error::other)
        }
        .await;
        assert!(result.is_err(), "{name}: the server must refuse the handshake");
    }
    h.running.drain();
    h.running.wait().await;
}

#[tokio::test]
async fn audit_mode_allows_with_warnings_over_tls() {
    let h = start(
        "audit",
        Policy {
            mode: Mode::Audit,
            ..Policy::default()
        },
        false,
    )
    .await;
    let mut client = h.client().await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "ovms", "image": "ovms-1:replace"}]}});
    let answer = client
        .review("/mutate", &review("audit", "CREATE", &pod, None))
        .await;
    assert_contract(&answer, "audit");
    assert_eq!(answer["response"]["allowed"], true);
    assert!(
        answer["response"]["warnings"][0]
            .as_str()
            .unwrap()
            .contains("would be denied")
    );
    assert!(answer["response"]["auditAnnotations"]["would-deny"].is_string());
    h.running.drain();
    h.running.wait().await;
}
