//! Helpers shared by the server tests: a test PKI, an apiserver-like TLS
//! client that verifies the webhook's certificate by name, and AdmissionReview
//! builders. Everything talks to 127.0.0.1 only.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes_compat::Bytes;
use digest_gate::server::tls::{DevCa, Usage};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// axum re-exports the `bytes` crate the body types use.
pub mod bytes_compat {
    pub use axum::body::Bytes;
}

pub const NAMESPACE: &str = "digest-gate-system";

/// The name the apiserver verifies: `<service>.<namespace>.svc`.
pub fn service_name() -> String {
    format!("digest-gate.{NAMESPACE}.svc")
}

/// A loopback port free now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A scratch directory unique to this process and `name`.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("digest-gate-srv-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub use digest_gate::server::tls::Issued;

/// A CA that can issue server and client certificates: the same code as
/// `serve --dev`'s certificates.
pub struct Pki {
    pub ca_pem: String,
    ca: DevCa,
}

impl Pki {
    pub fn new(name: &str) -> Self {
        let ca = DevCa::new(name).unwrap();
        Self {
            ca_pem: ca.ca_pem.clone(),
            ca,
        }
    }

    /// A serving certificate for the webhook's service name, on 127.0.0.1.
    pub fn server(&self) -> Issued {
        self.ca
            .issue(&[&service_name(), "127.0.0.1"], Usage::Server)
            .unwrap()
    }

    /// A client certificate (as the apiserver may present).
    pub fn client(&self, name: &str) -> Issued {
        self.ca.issue(&[name], Usage::Client).unwrap()
    }
}

/// A TLS connection as the apiserver makes it: the CA from `caBundle`, the
/// service DNS name verified, ALPN as given.
pub async fn connect(
    addr: SocketAddr,
    ca_pem: &str,
    alpn: &[&[u8]],
    client: Option<&Issued>,
) -> std::io::Result<TlsStream<TcpStream>> {
    connect_named(addr, ca_pem, &service_name(), alpn, client).await
}

/// [`connect`], verifying the certificate for `server_name`.
pub async fn connect_named(
    addr: SocketAddr,
    ca_pem: &str,
    server_name: &str,
    alpn: &[&[u8]],
    client: Option<&Issued>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    handshake(tcp, ca_pem, server_name, alpn, client).await
}

/// A TLS client handshake on `tcp`, verifying the certificate for
/// `server_name` against `ca_pem`.
pub async fn handshake(
    tcp: TcpStream,
    ca_pem: &str,
    server_name: &str,
    alpn: &[&[u8]],
    client: Option<&Issued>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let builder =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some(c) => {
            let chain = CertificateDer::pem_slice_iter(c.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(c.key_pem.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name = ServerName::try_from(server_name.to_owned()).unwrap();
    TlsConnector::from(Arc::new(config)).connect(name, tcp).await
}

/// An HTTP/1.1 keep-alive client on one connection.
pub struct Client {
    send: http1::SendRequest<Full<Bytes>>,
}

impl Client {
    pub async fn http1(stream: TlsStream<TcpStream>) -> Self {
        let (send, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        Self { send }
    }

    /// A verified HTTP/1.1 connection to the webhook at `addr`, as the
    /// apiserver opens it.
    pub async fn open(addr: SocketAddr, ca_pem: &str) -> Self {
        Self::http1(connect(addr, ca_pem, &[b"http/1.1"], None).await.unwrap()).await
    }

    pub async fn post(&mut self, path: &str, content_type: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
        let request = Request::post(path)
            .header("host", service_name())
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        self.send.ready().await.unwrap();
        let response = tokio::time::timeout(Duration::from_secs(10), self.send.send_request(request))
            .await
            .expect("the webhook answers in time")
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes().to_vec();
        (status, body)
    }

    /// POSTs a review and returns the decoded answer.
    pub async fn review(&mut self, path: &str, review: &Value) -> Value {
        let (status, body) = self
            .post(path, "application/json", serde_json::to_vec(review).unwrap())
            .await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }
}

/// One HTTP/2 request on a fresh connection.
pub async fn post_h2(stream: TlsStream<TcpStream>, path: &str, review: &Value) -> (StatusCode, Value) {
    let (mut send, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let request = Request::post(format!("https://{}{path}", service_name()))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(review).unwrap())))
        .unwrap();
    let response = send.send_request(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

/// An AdmissionReview as the apiserver sends it.
pub fn review(uid: &str, operation: &str, object: &Value, old: Option<&Value>) -> Value {
    let api_version = object["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().unwrap_or("");
    let plural = format!("{}s", kind.to_ascii_lowercase());
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": plural},
            "name": object["metadata"]["name"],
            "namespace": "demo-models",
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:demo-models:deployer"},
            "object": object,
            "oldObject": old.cloned().unwrap_or(Value::Null),
            "dryRun": false
        }
    })
}

/// Checks the parts of an answer the apiserver insists on.
pub fn assert_contract(answer: &Value, uid: &str) {
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(answer["response"]["uid"], uid);
    assert!(answer["response"]["allowed"].is_boolean());
    if let Some(patch) = answer["response"].get("patch") {
        assert!(patch.is_string(), "patch must be a base64 string: {patch}");
        assert_eq!(answer["response"]["patchType"], "JSONPatch");
    } else {
        assert!(answer["response"].get("patchType").is_none());
    }
    for w in answer["response"]["warnings"].as_array().into_iter().flatten() {
        assert!(
            w.as_str().unwrap().chars().count() <= 120,
            "warning too long: {w}"
        );
    }
}

/// Decodes and applies the answer's patch to `object`.
pub fn apply_patch(answer: &Value, object: &Value) -> Value {
    use base64::Engine;
    let mut patched = object.clone();
    if let Some(p) = answer["response"]["patch"].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD.decode(p).unwrap();
        let ops: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut patched, &ops).unwrap();
    }
    patched
}

/// Polls `f` until it returns true or the time is up.
pub async fn eventually(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if f().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Router state with the example allowlist (ready: it is not draining), for in-process
/// (`oneshot`) tests.
pub fn ready_state() -> Arc<digest_gate::server::State> {
    let loaded = digest_gate::allowlist::load_paths(&[root().join("examples/allowlist.yaml")]).unwrap();
    let state = digest_gate::server::State::new(loaded.allowlist, digest_gate::policy::Policy::default());
    Arc::new(state)
}

/// `serve`'s defaults, listening on ephemeral loopback ports.
pub fn loopback_config() -> digest_gate::server::ServerArgs {
    digest_gate::server::ServerArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    }
}

/// Starts the server in-process on ephemeral loopback ports with a fresh
/// PKI and the example allowlist; `tune` adjusts the configuration.
pub async fn start_server(
    name: &str,
    tune: impl FnOnce(&mut digest_gate::server::ServerArgs),
) -> (digest_gate::server::Running, Pki) {
    let dir = scratch(name);
    let pki = Pki::new(&format!("{name} CA"));
    let issued = pki.server();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, &issued.cert_pem).unwrap();
    std::fs::write(&key, &issued.key_pem).unwrap();
    let inputs = digest_gate::server::Inputs {
        cert,
        key,
        allowlists: vec![root().join("examples/allowlist.yaml")],
        policy: digest_gate::policy::Policy::default(),
        bound: None,
    };
    let mut config = loopback_config();
    tune(&mut config);
    (digest_gate::server::start(config, inputs).await.unwrap(), pki)
}

/// A plain-HTTP GET to the admin port.
pub async fn admin_get(addr: SocketAddr, path: &str) -> (StatusCode, String) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = http1::handshake::<_, Full<Bytes>>(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let request = Request::get(path)
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = send.send_request(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Every object of the upstream ServingRuntime fixtures (runtimes,
/// ConfigMaps, Templates), with the file it came from, in file order.
pub fn runtime_reviews() -> Vec<(String, serde_json::Value)> {
    let dir = root().join("tests/fixtures/upstream/servingruntimes");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for doc in digest_gate::yaml::parse_stream(&text).unwrap() {
            if doc.value.is_object() {
                out.push((f.file_name().unwrap().to_string_lossy().into_owned(), doc.value));
            }
        }
    }
    out
}
