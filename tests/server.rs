//! The webhook as the apiserver meets it. Many small cases go through the
//! router in-process (`oneshot`); the ones that need it use real TLS on
//! 127.0.0.1 with the certificate verified by name.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use digest_gate::policy::{Mode, Policy};
use digest_gate::server::{self, Inputs, ServerArgs, State};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use digest_gate::testing::{BAD as NEVER_PROMOTED, GOOD as PROMOTED, REPO as OVMS};

fn example_allowlist_path() -> PathBuf {
    root().join("examples/allowlist.yaml")
}

fn state() -> Arc<State> {
    ready_state()
}

fn incident_runtime() -> Value {
    json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
           "metadata": {"name": "ovms", "namespace": "demo-models"},
           "spec": {"containers": [{"name": "ovms", "image": format!("{OVMS}@{NEVER_PROMOTED}")}]}})
}

async fn oneshot(state: &Arc<State>, request: Request<Body>) -> (StatusCode, Value) {
    let response = server::webhook_router(state.clone())
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
    (status, value)
}

fn post(path: &str, content_type: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path)
        .header("content-type", content_type)
        .body(body.into())
        .unwrap()
}

// === in-process cases ===

#[tokio::test]
async fn mutate_and_validate_in_process() {
    let s = state();
    let object = incident_runtime();
    let body = serde_json::to_vec(&review("uid-1", "CREATE", &object, None)).unwrap();
    let (status, answer) = oneshot(&s, post("/mutate", "application/json", body.clone())).await;
    assert_eq!(status, StatusCode::OK);
    assert_contract(&answer, "uid-1");
    let patched = apply_patch(&answer, &object);
    assert_eq!(
        patched["spec"]["containers"][0]["image"],
        format!("{OVMS}@{PROMOTED}")
    );
    let (_, verdict) = oneshot(&s, post("/validate", "application/json", body)).await;
    assert_eq!(verdict["response"]["allowed"], false);
    let again = serde_json::to_vec(&review("uid-2", "CREATE", &patched, None)).unwrap();
    let (_, verdict) = oneshot(&s, post("/validate", "application/json; charset=utf-8", again)).await;
    assert_contract(&verdict, "uid-2");
    assert_eq!(verdict["response"]["allowed"], true);
    assert!(verdict["response"].get("patch").is_none());
}

/// An allowlist ConfigMap as the chart renders it, with `data`.
fn allowlist_configmap(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "dg-digest-gate-allowlist", "namespace": "digest-gate",
                        "labels": {"digest-gate.dev/allowlist": "true"}},
           "data": data})
}

/// Issue 15: an allowlist edit that would not load is refused before any
/// replica reads it, with the loader's `key:line: message`; one that loads
/// is admitted; deleting one is not this check's business.
#[tokio::test]
async fn allowlist_configmaps_are_checked_as_the_server_loads_them() {
    let s = state();
    let example = std::fs::read_to_string(example_allowlist_path()).unwrap();
    let ask = async |operation: &str, object: Value| {
        let body = serde_json::to_vec(&review("cm", operation, &object, None)).unwrap();
        let (status, answer) = oneshot(&s, post("/validate-allowlist", "application/json", body)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_contract(&answer, "cm");
        answer["response"].clone()
    };
    let good = allowlist_configmap(json!({"allowlist.yaml": example}));
    assert_eq!(ask("CREATE", good.clone()).await["allowed"], true);

    // A bad digest on line 3 of the second key (keys load in name order).
    let broken = allowlist_configmap(json!({
        "allowlist.yaml": example,
        "more.txt": "# promoted by hand\n\nquay.io/org/tool@sha256:abc\n",
        "..data": "hidden files are not read",
    }));
    let denied = ask("UPDATE", broken.clone()).await;
    assert_eq!(denied["allowed"], false);
    assert_eq!(denied["status"]["code"], 403);
    let message = denied["status"]["message"].as_str().unwrap();
    assert!(message.contains("\nmore.txt:3: "), "{message}");
    assert!(
        message.contains("a sha256 digest has 64 hex characters"),
        "{message}"
    );
    assert!(!message.contains("..data"), "{message}");

    // Promoting nothing would deny every image: refused too.
    let empty = allowlist_configmap(json!({"allowlist.yaml": "# nothing yet\n"}));
    let denied = ask("CREATE", empty).await;
    assert!(
        denied["status"]["message"]
            .as_str()
            .unwrap()
            .contains("promotes no repository"),
        "{denied}"
    );
    // In audit mode an empty first allowlist is fine.
    let audit = Arc::new({
        let allowlist = digest_gate::testing::incident_allowlist();
        State::new(
            allowlist,
            Policy {
                mode: Mode::Audit,
                ..Policy::default()
            },
        )
    });
    let body = serde_json::to_vec(&review(
        "cm",
        "CREATE",
        &allowlist_configmap(json!({"a.txt": ""})),
        None,
    ))
    .unwrap();
    let (_, answer) = oneshot(&audit, post("/validate-allowlist", "application/json", body)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");

    // binaryData is a file too; the server reads only UTF-8 text.
    let mut binary = good.clone();
    binary["binaryData"] = json!({"blob.bin": "/w=="});
    let denied = ask("CREATE", binary).await;
    assert!(
        denied["status"]["message"]
            .as_str()
            .unwrap()
            .contains("blob.bin: is not UTF-8 text"),
        "{denied}"
    );

    assert_eq!(ask("DELETE", broken).await["allowed"], true);
}

fn too_large() -> Vec<u8> {
    vec![b' '; state().max_body_bytes + 1]
}

/// Each class is its own test: the status, a JSON error, the counter by
/// reason, and a good review answered after it.
#[rstest::rstest]
#[case::get(Request::get("/mutate").body(Body::empty()).unwrap(), StatusCode::METHOD_NOT_ALLOWED, "method")]
#[case::put(Request::put("/validate").body(Body::empty()).unwrap(), StatusCode::METHOD_NOT_ALLOWED, "method")]
#[case::unknown_path(post("/admit", "application/json", "{}"), StatusCode::NOT_FOUND, "path")]
#[case::text_plain(
    post("/mutate", "text/plain", "{}"),
    StatusCode::UNSUPPORTED_MEDIA_TYPE,
    "content_type"
)]
#[case::no_content_type(Request::post("/mutate").body(Body::from("{}")).unwrap(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "content_type")]
#[case::yaml(
    post("/mutate", "application/yaml", "a: 1"),
    StatusCode::UNSUPPORTED_MEDIA_TYPE,
    "content_type"
)]
#[case::too_large(
    post("/mutate", "application/json", too_large()),
    StatusCode::PAYLOAD_TOO_LARGE,
    "too_large"
)]
#[case::too_large_streamed_without_a_length(
    post("/mutate", "application/json", Body::new(Chunks(too_large()))),
    StatusCode::PAYLOAD_TOO_LARGE,
    "too_large"
)]
#[case::truncated_json(
    post("/mutate", "application/json", "{\"apiVersion\": \"admission.k8s.io/v1\", "),
    StatusCode::BAD_REQUEST,
    "undecodable"
)]
#[case::not_utf_8(post("/mutate", "application/json", vec![0xff, 0xfe, 0x00]), StatusCode::BAD_REQUEST, "undecodable")]
#[case::empty_body(
    post("/mutate", "application/json", ""),
    StatusCode::BAD_REQUEST,
    "undecodable"
)]
#[case::no_request(
    post(
        "/mutate",
        "application/json",
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#
    ),
    StatusCode::BAD_REQUEST,
    "no_request"
)]
#[case::v1beta1(
    post(
        "/mutate",
        "application/json",
        r#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
    ),
    StatusCode::BAD_REQUEST,
    "wrong_version"
)]
#[tokio::test]
async fn each_bad_request_class_gets_its_status_and_a_json_error(
    #[case] request: Request<Body>,
    #[case] want: StatusCode,
    #[case] reason: &str,
) {
    let s = state();
    let (status, body) = oneshot(&s, request).await;
    assert_eq!(status, want, "{body}");
    assert_eq!(body["code"], want.as_u16(), "{body}");
    assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "{body}");
    let metrics = s.metrics.encode();
    assert!(
        metrics.contains(&format!(
            "digest_gate_bad_requests_total{{reason=\"{reason}\"}} 1"
        )),
        "{reason}: {metrics}"
    );
    // Still serving.
    let body = serde_json::to_vec(&review("after", "CREATE", &incident_runtime(), None)).unwrap();
    assert_eq!(
        oneshot(&s, post("/mutate", "application/json", body)).await.0,
        StatusCode::OK
    );
}

/// A body that arrives in 64 KiB chunks, with no Content-Length.
struct Chunks(Vec<u8>);

impl http_body::Body for Chunks {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.0.is_empty() {
            return std::task::Poll::Ready(None);
        }
        let at = self.0.len().min(64 * 1024);
        let rest = self.0.split_off(at);
        let chunk = std::mem::replace(&mut self.0, rest);
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(chunk.into()))))
    }
}

#[tokio::test]
async fn admin_routes_report_health_readiness_and_metrics() {
    let s = state();
    let router = server::admin_router(s.clone());
    let get = |path: &str| Request::get(path).body(Body::empty()).unwrap();
    assert_eq!(
        router.clone().oneshot(get("/healthz")).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        router.clone().oneshot(get("/readyz")).await.unwrap().status(),
        StatusCode::OK
    );
    let metrics = router.clone().oneshot(get("/metrics")).await.unwrap();
    assert!(
        metrics.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = String::from_utf8(metrics.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(text.contains("digest_gate_allowlist_repositories 5"), "{text}");
    s.ready.drain();
    assert_eq!(
        router.oneshot(get("/readyz")).await.unwrap().status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
}

// === real TLS ===

struct Harness {
    dir: PathBuf,
    pki: Pki,
    running: server::Running,
}

/// Writes `content` under a kubelet-style layout: `dir/<name>` is a symlink
/// into `..data`, itself a symlink to a timestamped directory. Calling it
/// again swaps `..data` atomically, as the kubelet does.
fn kubelet_write(dir: &Path, files: &[(&str, &str)], generation: u32) {
    let stamp = format!("..2026_12_02_00_00_{generation:02}.000000001");
    let real = dir.join(&stamp);
    std::fs::create_dir_all(&real).unwrap();
    for (name, content) in files {
        std::fs::write(real.join(name), content).unwrap();
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), &link).unwrap();
        }
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
}

async fn start(name: &str, policy: Policy, client_ca: bool) -> Harness {
    start_tuned(name, policy, client_ca, |_| {}).await
}

/// [`start`], with `tune` changing the server's settings last.
async fn start_tuned(
    name: &str,
    policy: Policy,
    client_ca: bool,
    tune: impl FnOnce(&mut ServerArgs),
) -> Harness {
    let dir = scratch(name);
    let pki = Pki::new("test CA");
    let tls_dir = dir.join("tls");
    let list_dir = dir.join("allowlist");
    std::fs::create_dir_all(&tls_dir).unwrap();
    std::fs::create_dir_all(&list_dir).unwrap();
    let server_cert = pki.server();
    kubelet_write(
        &tls_dir,
        &[
            ("tls.crt", &server_cert.cert_pem),
            ("tls.key", &server_cert.key_pem),
        ],
        0,
    );
    let example = std::fs::read_to_string(example_allowlist_path()).unwrap();
    kubelet_write(&list_dir, &[("allowlist.yaml", &example)], 0);
    let inputs = Inputs {
        cert: tls_dir.join("tls.crt"),
        key: tls_dir.join("tls.key"),
        allowlists: vec![list_dir],
        policy,
        bound: None,
    };
    let mut config = loopback_config();
    config.reload_interval = Duration::from_millis(100);
    config.grace_period = Duration::from_secs(5);
    if client_ca {
        let ca = dir.join("client-ca.crt");
        std::fs::write(&ca, &pki.ca_pem).unwrap();
        config.client_ca = Some(ca);
    }
    tune(&mut config);
    let running = server::start(config, inputs).await.unwrap();
    Harness { dir, pki, running }
}

impl Harness {
    async fn client(&self) -> Client {
        Client::open(self.running.webhook_addr, &self.pki.ca_pem).await
    }
}

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

#[tokio::test]
async fn allowlist_rotation_by_symlink_swap_and_a_broken_reload() {
    let h = start("rotate-allowlist", Policy::default(), false).await;
    let list_dir = h.dir.join("allowlist");
    let mut client = h.client().await;
    let object = incident_runtime();
    let verdict = async |client: &mut Client, uid: &str| {
        let a = client
            .review("/validate", &review(uid, "CREATE", &object, None))
            .await;
        a["response"]["allowed"].as_bool().unwrap()
    };
    assert!(!verdict(&mut client, "before").await);

    // Promote the "never promoted" digest too; the same keep-alive connection
    // sees the new allowlist.
    let widened = format!("{OVMS}@{NEVER_PROMOTED}\n{OVMS}@{PROMOTED}\n");
    kubelet_write(&list_dir, &[("allowlist.yaml", &widened)], 1);
    let mut n = 0;
    eventually(
        "the swapped allowlist to take effect",
        Duration::from_secs(10),
        async || {
            n += 1;
            verdict(&mut client, &format!("poll-{n}")).await
        },
    )
    .await;

    // Garbage, then an emptied allowlist: both refused, the last good one stays.
    for (generation, content) in [
        (
            2,
            "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nspec: [\n",
        ),
        (3, ""),
    ] {
        kubelet_write(&list_dir, &[("allowlist.yaml", content)], generation);
        let want = format!(
            "digest_gate_reloads_total{{source=\"allowlist\",result=\"failure\"}} {}",
            generation - 1
        );
        eventually(
            "the failed reload to be counted",
            Duration::from_secs(10),
            async || {
                admin_get(h.running.admin_addr, "/metrics")
                    .await
                    .1
                    .contains(&want)
            },
        )
        .await;
        assert!(verdict(&mut client, &format!("after-bad-{generation}")).await);
        assert_eq!(admin_get(h.running.admin_addr, "/readyz").await.0, StatusCode::OK);
    }
    // A deleted allowlist file is refused too.
    std::fs::remove_file(list_dir.join("allowlist.yaml")).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(verdict(&mut client, "after-delete").await);
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

/// A server on `list_dir` and `state_dir` with fresh certificates, as a
/// container (re)starting in the same pod: the emptyDir survives.
async fn start_in(dir: &Path, list_dir: &Path, state_dir: &Path) -> Result<(Pki, server::Running), String> {
    let pki = Pki::new("test CA");
    let tls_dir = dir.join("tls");
    std::fs::create_dir_all(&tls_dir).unwrap();
    let issued = pki.server();
    std::fs::write(tls_dir.join("tls.crt"), &issued.cert_pem).unwrap();
    std::fs::write(tls_dir.join("tls.key"), &issued.key_pem).unwrap();
    let inputs = Inputs {
        cert: tls_dir.join("tls.crt"),
        key: tls_dir.join("tls.key"),
        allowlists: vec![list_dir.to_owned()],
        policy: Policy::default(),
        bound: None,
    };
    let mut config = loopback_config();
    config.reload_interval = Duration::from_millis(100);
    config.state_dir = Some(state_dir.to_owned());
    server::start(config, inputs)
        .await
        .map(|r| (pki, r))
        .map_err(|e| e.to_string())
}

/// A pod's directories: scratch, the mounted allowlist, the emptyDir; and
/// the example allowlist's text.
fn pod_dirs(name: &str) -> (PathBuf, PathBuf, PathBuf, String) {
    let dir = scratch(name);
    let (list_dir, state_dir) = (dir.join("allowlist"), dir.join("state"));
    std::fs::create_dir_all(&list_dir).unwrap();
    std::fs::create_dir_all(&state_dir).unwrap();
    let example = std::fs::read_to_string(example_allowlist_path()).unwrap();
    (dir, list_dir, state_dir, example)
}

async fn metric_line(running: &server::Running, prefix: &str) -> String {
    let (_, text) = admin_get(running.admin_addr, "/metrics").await;
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or("")
        .to_owned()
}

/// Issue 15: a bad allowlist edit followed by a container restart (node
/// drain, OOM) must not take admission down. The running server keeps the
/// last allowlist that loaded in --state-dir; the restarted one serves it,
/// ready, and says loudly that it does; a good edit puts things right.
#[tokio::test]
async fn a_restart_with_a_broken_allowlist_serves_the_last_good_one() {
    let (dir, list_dir, state_dir, example) = pod_dirs("last-good");
    kubelet_write(&list_dir, &[("allowlist.yaml", &example)], 0);
    let (_, first) = start_in(&dir, &list_dir, &state_dir).await.unwrap();
    first.drain();
    first.wait().await;

    // The bad edit lands while no container runs; then it restarts.
    let broken = example.replace(PROMOTED, "sha256:abc");
    kubelet_write(&list_dir, &[("allowlist.yaml", &broken)], 1);
    let (pki, second) = start_in(&dir, &list_dir, &state_dir)
        .await
        .expect("starts on the last good copy");
    assert_eq!(admin_get(second.admin_addr, "/readyz").await.0, StatusCode::OK);
    assert_eq!(
        metric_line(&second, "digest_gate_allowlist_stale").await,
        "digest_gate_allowlist_stale 1"
    );
    assert!(
        metric_line(
            &second,
            "digest_gate_reloads_total{source=\"allowlist\",result=\"failure\"}"
        )
        .await
        .ends_with(" 1")
    );
    // It judges with what it kept: the incident's digest is rewritten.
    let mut client = Client::open(second.webhook_addr, &pki.ca_pem).await;
    let answer = client
        .review("/mutate", &review("kept", "CREATE", &incident_runtime(), None))
        .await;
    let patched = apply_patch(&answer, &incident_runtime());
    assert_eq!(
        patched["spec"]["containers"][0]["image"],
        format!("{OVMS}@{PROMOTED}")
    );

    // The fix arrives: in force, and no longer stale.
    kubelet_write(&list_dir, &[("allowlist.yaml", &example)], 2);
    eventually(
        "the fixed allowlist to load",
        Duration::from_secs(10),
        async || metric_line(&second, "digest_gate_allowlist_stale").await == "digest_gate_allowlist_stale 0",
    )
    .await;
    second.drain();
    second.wait().await;
}

/// A brand-new pod (nothing kept) with a broken allowlist neither exits
/// (a crash loop) nor serves: it is not ready, says why, and becomes ready
/// when the allowlist is fixed. Services keep routing to healthy replicas.
#[tokio::test]
async fn a_new_pod_with_a_broken_allowlist_waits_unready() {
    let (dir, list_dir, state_dir, example) = pod_dirs("no-last-good");
    kubelet_write(
        &list_dir,
        &[("allowlist.yaml", &example.replace(PROMOTED, "sha256:abc"))],
        0,
    );
    let (_, running) = start_in(&dir, &list_dir, &state_dir)
        .await
        .expect("waits instead of exiting");
    let (status, body) = admin_get(running.admin_addr, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("no last good copy"), "{body}");
    assert_eq!(
        metric_line(&running, "digest_gate_allowlist_stale").await,
        "digest_gate_allowlist_stale 1"
    );

    kubelet_write(&list_dir, &[("allowlist.yaml", &example)], 1);
    eventually(
        "ready once the allowlist loads",
        Duration::from_secs(10),
        async || admin_get(running.admin_addr, "/readyz").await.0 == StatusCode::OK,
    )
    .await;
    assert!(state_dir.join("last-good-allowlist").exists());
    running.drain();
    running.wait().await;

    // Without --state-dir (a developer's run) a broken allowlist still stops
    // the server with the loader's message.
    kubelet_write(
        &list_dir,
        &[("allowlist.yaml", &example.replace(PROMOTED, "sha256:abc"))],
        2,
    );
    let pki = Pki::new("test CA");
    let issued = pki.server();
    std::fs::write(dir.join("tls.crt"), &issued.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &issued.key_pem).unwrap();
    let inputs = Inputs {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
        allowlists: vec![list_dir],
        policy: Policy::default(),
        bound: None,
    };
    let config = loopback_config();
    let error = server::start(config, inputs)
        .await
        .err()
        .expect("no state dir: exits")
        .to_string();
    assert!(
        error.contains("allowlist.yaml:") && error.contains("64 hex characters"),
        "{error}"
    );
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
/// second after the server closes one (the issue's client reopened its
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

fn metric_value(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in:\n{metrics}"))
        .trim()
        .parse()
        .unwrap()
}

/// One request by curl, the client people try the webhook with, on a
/// fresh TLS connection (`--http1.1` or `--http2`), with `size` bytes of
/// body and the headers given: the status and the JSON error body, or
/// what curl said instead.
fn curl(
    addr: std::net::SocketAddr,
    ca: &Path,
    version: &str,
    method: &str,
    path: &str,
    headers: &[&str],
    size: usize,
) -> Result<(u16, Value), String> {
    let dir = ca.parent().unwrap();
    let (body, answer) = (
        dir.join(format!("body-{size}")),
        dir.join(format!("answer-{version}")),
    );
    std::fs::write(&body, vec![b' '; size]).unwrap();
    let name = service_name();
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sS", "--max-time", "10", version, "-X", method, "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("{name}:{}:127.0.0.1", addr.port())])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .arg("-o")
        .arg(&answer)
        .args(["-w", "%{http_code}"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd
        .arg(format!("https://{name}:{}{path}", addr.port()))
        .output()
        .expect("curl runs (Debian's curl package)");
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let status = String::from_utf8_lossy(&out.stdout)
        .parse()
        .map_err(|e| format!("{e}"))?;
    let text = std::fs::read(&answer).unwrap();
    let json =
        serde_json::from_slice(&text).map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&text)))?;
    Ok((status, json))
}

/// Issue 41: an error answered before the request's body had all arrived
/// reached HTTP/2 clients as a reset stream that curl reports as "Stream
/// error in the HTTP/2 framing layer" (hyper's own client takes the
/// answer, so curl is the peer here); and HTTP/1.1 clients still sending
/// as a closed connection ("Send failure: Broken pipe"), now and then. Each early error,
/// with a body over HTTP/2's first flow-control window, over both.
#[rstest::rstest]
#[case::wrong_method_405("GET", "/mutate", "Content-Type: application/json", 300_000, 405)]
#[case::unknown_path_404("POST", "/admit", "Content-Type: application/json", 300_000, 404)]
#[case::curls_default_content_type_415("POST", "/mutate", "X-Case: 415", 300_000, 415)]
#[case::declared_length_over_the_limit_413("POST", "/mutate", "Content-Type: application/json", 600_000, 413)]
#[case::not_a_review_400("POST", "/validate", "Content-Type: application/json", 300_000, 400)]
#[tokio::test]
async fn early_errors_arrive_whole_over_http1_and_http2(
    #[case] method: &'static str,
    #[case] path: &'static str,
    #[case] header: &'static str,
    #[case] size: usize,
    #[case] want: u16,
) {
    let name = format!("early-errors-{want}");
    let (running, pki) = start_server(&name, |c| c.max_body_bytes = 512 * 1024).await;
    let ca = scratch(&format!("{name}-client")).join("ca.crt");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let addr = running.webhook_addr;
    let answers = tokio::task::spawn_blocking(move || {
        let mut answers = Vec::new();
        // The race lost an HTTP/1.1 answer about one run in eight at 3
        // requests: 8 each make a run that would lose one likely to.
        for version in ["--http1.1", "--http2"] {
            for _ in 0..8 {
                answers.push((version, curl(addr, &ca, version, method, path, &[header], size)));
            }
        }
        answers
    })
    .await
    .unwrap();
    for (version, answer) in answers {
        let (status, body) = answer.unwrap_or_else(|e| panic!("{version}: no answer: {e}"));
        assert_eq!(status, want, "{version}: {body}");
        assert_eq!(body["code"], want, "{body}");
        assert!(body["error"].is_string(), "{body}");
    }
    running.drain();
}
