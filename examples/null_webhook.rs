//! The load benchmark's baseline: a webhook on digest-gate's own stack (tokio,
//! rustls with ring, hyper-util HTTP/1.1 + h2, axum, and digest-gate's accept
//! loop) that decodes the AdmissionReview and allows it. What digest-gate
//! costs above this is the price of its decisions.
//!
//! By default it decodes the whole review, object included, as a webhook that
//! looks at the object must. `--uid-only` skips the object unread: the floor
//! of TLS + HTTP + JSON scanning, which no real webhook reaches.
//!
//!   cargo run --release --example null_webhook -- --tls-cert tls.crt --tls-key tls.key --listen 127.0.0.1:9443 [--uid-only]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use digest_gate::metrics::Metrics;
use digest_gate::server::{self, ServerArgs, tls};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

#[derive(Deserialize)]
struct ReviewIn {
    request: RequestIn,
}

#[derive(Deserialize)]
struct ReviewUidOnly {
    request: RequestUidOnly,
}

#[derive(Deserialize)]
struct RequestUidOnly {
    uid: String,
}

#[derive(Deserialize)]
struct RequestIn {
    uid: String,
    // Decoded like digest-gate decodes it, then ignored.
    #[allow(dead_code)]
    object: Option<Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
}

fn allowed(uid: &str) -> Response {
    let out = ReviewOut {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response: ResponseOut { uid, allowed: true },
    };
    let json = serde_json::to_vec(&out).expect("serialises");
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        json,
    )
        .into_response()
}

async fn allow(body: Bytes) -> Response {
    match serde_json::from_slice::<ReviewIn>(&body) {
        Ok(review) => allowed(&review.request.uid),
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}

async fn allow_uid_only(body: Bytes) -> Response {
    match serde_json::from_slice::<ReviewUidOnly>(&body) {
        Ok(review) => allowed(&review.request.uid),
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cert = PathBuf::from(arg(&args, "--tls-cert").expect("--tls-cert"));
    let key = PathBuf::from(arg(&args, "--tls-key").expect("--tls-key"));
    let listen: SocketAddr = arg(&args, "--listen")
        .unwrap_or_else(|| "127.0.0.1:9443".into())
        .parse()
        .expect("--listen ADDR");

    let provider = tls::provider();
    let store = Arc::new(tls::CertStore::new(
        tls::load_key_pair(&cert, &key, &provider).expect("key pair"),
    ));
    let tls_config = tls::server_config(store, None, provider).expect("TLS config");
    // The very listener `serve` runs, with serve's defaults.
    let settings = server::listen::ListenSettings::of(&ServerArgs::default());
    let metrics = Metrics::new();
    let router = if args.iter().any(|a| a == "--uid-only") {
        Router::new()
            .route("/mutate", post(allow_uid_only))
            .route("/validate", post(allow_uid_only))
    } else {
        Router::new()
            .route("/mutate", post(allow))
            .route("/validate", post(allow))
    };
    let listener = tokio::net::TcpListener::bind(listen).await.expect("bind");
    eprintln!("null webhook on {listen}");
    server::serve_tls(
        listener,
        tokio_rustls::TlsAcceptor::from(Arc::new(tls_config)),
        router,
        metrics.connections.clone(),
        &settings,
        CancellationToken::new(),
    )
    .await;
}
