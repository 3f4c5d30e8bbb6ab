//! The webhook as the apiserver meets it, by concern: `routes` (the
//! router in-process, and the early errors over real HTTP), `tls` (real
//! TLS on 127.0.0.1 with the certificate verified by name: ALPN, rotation,
//! client certificates), `reload` (the allowlist rotated, broken, kept
//! across restarts), `drain` (shutdown with connections open) and
//! `connections` (held connections do not keep reviews out). What they
//! share is here.

#[path = "../common/mod.rs"]
mod common;

mod connections;
mod drain;
mod reload;
mod routes;
mod tls;

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

async fn metric_line(running: &server::Running, prefix: &str) -> String {
    let (_, text) = admin_get(running.admin_addr, "/metrics").await;
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or("")
        .to_owned()
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
