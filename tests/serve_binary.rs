//! The real `digest-gate serve` binary: `--dev` on a fresh checkout, JSON
//! logs, and the signal contract (drain and exit 0; a second signal exits at
//! once).

mod common;

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

struct Serve {
    child: Child,
    webhook: SocketAddr,
    admin: SocketAddr,
    ca_pem: String,
    /// Its --dev-dir.
    dir: std::path::PathBuf,
}

fn spawn(name: &str, extra: &[&str]) -> Serve {
    spawn_with(name, extra, Stdio::null())
}

fn spawn_with(name: &str, extra: &[&str], stdout: Stdio) -> Serve {
    let dir = scratch(name);
    let (webhook, admin) = (free_port(), free_port());
    let webhook: SocketAddr = format!("127.0.0.1:{webhook}").parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{admin}").parse().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_digest-gate"));
    cmd.args(["serve", "--dev", "--dev-dir"])
        .arg(&dir)
        .args([
            "--listen",
            &webhook.to_string(),
            "--admin-listen",
            &admin.to_string(),
        ])
        .args(extra)
        .env_remove("DIGEST_GATE_ALLOWLIST")
        .stdout(stdout)
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let ca = dir.join("ca.crt");
    loop {
        let ready = std::net::TcpStream::connect(admin).is_ok() && ca.exists();
        if ready {
            break;
        }
        assert!(Instant::now() < deadline, "serve --dev did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    Serve {
        child,
        webhook,
        admin,
        ca_pem: std::fs::read_to_string(ca).unwrap(),
        dir,
    }
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn wait_exit(child: &mut Child, within: Duration) -> (i32, String) {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            // Empty when the test has taken (and closed) the pipe.
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                pipe.read_to_string(&mut stderr).unwrap();
            }
            return (status.code().unwrap_or(-1), stderr);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process did not exit in {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The first JSON log line whose message is `message`.
fn log_line(stderr: &str, message: &str) -> Value {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["message"] == message)
        .unwrap_or_else(|| panic!("no \"{message}\" line in {stderr}"))
}

#[tokio::test]
async fn dev_mode_serves_a_review_and_drains_on_sigterm() {
    let mut s = spawn("dev", &["--log-format", "json"]);
    let (status, _) = admin_get(s.admin, "/readyz").await;
    assert_eq!(status, 200);
    let review: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("examples/review.json")).unwrap()).unwrap();
    let stream = connect_named(s.webhook, &s.ca_pem, "localhost", &[b"http/1.1"], None)
        .await
        .unwrap();
    let mut client = Client::http1(stream).await;
    let answer = client.review("/mutate", &review).await;
    assert_contract(&answer, review["request"]["uid"].as_str().unwrap());
    assert!(answer["response"]["patch"].is_string());

    signal(&s.child, "-TERM");
    let (code, stderr) = wait_exit(&mut s.child, Duration::from_secs(15));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("development mode: throwaway CA at"), "{stderr}");
    // One JSON line per decision, with what an operator greps for.
    let decision = log_line(&stderr, "review answered");
    for (field, want) in [
        ("kind", "ServingRuntime"),
        ("namespace", "demo-models"),
        ("name", "ovms"),
        ("operation", "CREATE"),
        ("verdict", "rewrite"),
    ] {
        assert_eq!(decision[field], want, "{decision}");
    }
    assert!(decision["latency_us"].is_u64(), "{decision}");
    // Who promoted the digest it was rewritten to: the example allowlist.
    let promoted_by = decision["promoted_by"].as_str().unwrap_or_default();
    assert!(
        promoted_by.starts_with("Allowlist example-rhods-1.21 (") && promoted_by.contains("allowlist.yaml:"),
        "{decision}"
    );
    assert!(!stderr.contains("BEGIN"), "no key material in logs");
}

/// Issue 58: a container runtime's log pipe can close under a running
/// server. Before, the next log line panicked whichever task wrote it
/// (tracing `eprintln!`s its own write error): reviews went unanswered
/// while `/readyz` said ready, and SIGTERM did nothing.
#[tokio::test]
async fn a_closed_log_pipe_costs_lines_not_reviews_or_signals() {
    let mut s = spawn_with("closed-pipe", &["--log-format", "json"], Stdio::piped());
    // Both ends the server writes to, closed as `| head` closes them.
    let mut stderr = std::io::BufReader::new(s.child.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut first).unwrap();
    assert!(first.contains("development mode"), "{first}");
    drop(stderr);
    drop(s.child.stdout.take());
    let review: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("examples/review.json")).unwrap()).unwrap();
    for _ in 0..3 {
        // A new connection each time: the accept loop logs as well.
        let stream = connect_named(s.webhook, &s.ca_pem, "localhost", &[b"http/1.1"], None)
            .await
            .unwrap();
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            Client::http1(stream).await.review("/mutate", &review),
        )
        .await
        .expect("a review is answered with the log pipe closed");
        assert!(answer["response"]["patch"].is_string(), "{answer}");
    }
    assert_eq!(admin_get(s.admin, "/readyz").await.0, 200);
    let metrics = admin_get(s.admin, "/metrics").await.1;
    let failed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("digest_gate_log_write_errors_total{reason=\"write_failed\"} "))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no write_failed count in {metrics}"));
    assert!(failed >= 3, "each decision line lost is counted: {failed}");
    signal(&s.child, "-TERM");
    let (code, _) = wait_exit(&mut s.child, Duration::from_secs(15));
    assert_eq!(code, 0, "the drain ends as usual");
}

#[tokio::test]
async fn a_second_signal_exits_at_once() {
    let mut s = spawn("second-signal", &["--drain-delay", "60s"]);
    signal(&s.child, "-TERM");
    let started = Instant::now();
    loop {
        let (status, _) = admin_get(s.admin, "/readyz").await;
        if status == 503 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "readiness never failed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal(&s.child, "-INT");
    let (code, stderr) = wait_exit(&mut s.child, Duration::from_secs(5));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("second signal"), "{stderr}");
}

#[test]
fn startup_fails_fast_on_unusable_inputs() {
    let dir = scratch("startup");
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "# nothing promoted\n").unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_digest-gate"))
            .args(args)
            .env_remove("DIGEST_GATE_ALLOWLIST")
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let empty = empty.display().to_string();
    let (code, err) = run(&[
        "serve",
        "--dev",
        "--dev-dir",
        &dir.display().to_string(),
        "--allowlist",
        &empty,
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("promotes no repository"), "{err}");
    let (code, err) = run(&[
        "serve",
        "--tls-cert",
        "/nonexistent/tls.crt",
        "--tls-key",
        "/nonexistent/tls.key",
        "--allowlist",
        &empty,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot read /nonexistent/tls.crt"), "{err}");
    let (code, err) = run(&["serve", "--allowlist", &empty]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--tls-cert"), "{err}");
}

#[tokio::test]
async fn audit_mode_may_start_from_an_empty_allowlist_and_exemptions_apply() {
    let dir = scratch("audit-empty");
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "# nothing promoted yet\n").unwrap();
    let empty = empty.display().to_string();
    let mut s = spawn(
        "audit-empty-run",
        &[
            "--allowlist",
            &empty,
            "--mode",
            "audit",
            "--exempt-image",
            "quay.io/platform/**",
            "--log-format",
            "json",
        ],
    );
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "tools", "image": "quay.io/platform/tools/shell:1"},
        {"name": "app", "image": "quay.io/team/app:1"}]}});
    let stream = connect_named(s.webhook, &s.ca_pem, "localhost", &[b"http/1.1"], None)
        .await
        .unwrap();
    let mut client = Client::http1(stream).await;
    let answer = client
        .review("/mutate", &review("audit-empty", "CREATE", &pod, None))
        .await;
    assert_contract(&answer, "audit-empty");
    assert_eq!(answer["response"]["allowed"], true);
    let warnings = answer["response"]["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "only the unexempted image warns: {warnings:?}");
    assert!(warnings[0].as_str().unwrap().contains("\"app\" would be denied"));
    signal(&s.child, "-TERM");
    let (code, stderr) = wait_exit(&mut s.child, Duration::from_secs(15));
    assert_eq!(code, 0, "{stderr}");
    // Issue 58: the decision line says what enforce would have done, in
    // the warning's words; before, it said only `"verdict":"allow"`.
    let decision = log_line(&stderr, "review answered");
    assert_eq!(decision["verdict"], "allow", "{decision}");
    assert_eq!(decision["would_enforce"], "deny", "{decision}");
    assert_eq!(decision["would_rewrite"], "deny", "{decision}");
    assert_eq!(decision["would"], warnings[0], "{decision}");
}

#[tokio::test]
async fn logs_show_failed_reloads_but_never_request_bodies() {
    let dir = scratch("logs-list");
    std::fs::copy(root().join("examples/allowlist.yaml"), dir.join("allowlist.yaml")).unwrap();
    let list = dir.display().to_string();
    let mut s = spawn("logs", &["--allowlist", &list, "--reload-interval", "100ms"]);
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "app", "image": "quay.io/team/app:1",
         "env": [{"name": "API_TOKEN", "value": "s3cr3t-token-value"}]}]}});
    let stream = connect_named(s.webhook, &s.ca_pem, "localhost", &[b"http/1.1"], None)
        .await
        .unwrap();
    let mut client = Client::http1(stream).await;
    let answer = client
        .review("/mutate", &review("logs", "CREATE", &pod, None))
        .await;
    assert_eq!(answer["response"]["allowed"], false);
    std::fs::write(
        dir.join("allowlist.yaml"),
        "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nspec: [\n",
    )
    .unwrap();
    let mut failed = false;
    eventually(
        "the failed reload to be counted",
        Duration::from_secs(10),
        async || {
            failed = admin_get(s.admin, "/metrics")
                .await
                .1
                .contains("digest_gate_reloads_total{source=\"allowlist\",result=\"failure\"} 1");
            failed
        },
    )
    .await;
    signal(&s.child, "-TERM");
    let (code, stderr) = wait_exit(&mut s.child, Duration::from_secs(15));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("allowlist reload failed; the last good allowlist stays in force"),
        "{stderr}"
    );
    assert!(
        stderr.contains("not valid YAML"),
        "the reason is logged: {stderr}"
    );
    assert!(
        stderr.contains("quay.io/team/app:1"),
        "the decision names the image: {stderr}"
    );
    assert!(
        !stderr.contains("s3cr3t-token-value"),
        "request bodies are not logged"
    );
    assert!(!stderr.contains("API_TOKEN"), "request bodies are not logged");
}

/// Issue 41: a second `serve --dev` whose ports are taken fails before it
/// writes anything, so the running server's CA, key pair and allowlist
/// are as they were; the running one still answers with its own CA.
#[tokio::test]
async fn a_dev_start_that_cannot_listen_changes_no_file_of_the_running_one() {
    let mut first = spawn("dev-first", &[]);
    let dir = first.dir.clone();
    let files = ["ca.crt", "tls.crt", "tls.key", "allowlist.yaml"];
    let before: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(dir.join(f)).unwrap())
        .collect();
    let second = Command::new(env!("CARGO_BIN_EXE_digest-gate"))
        .args(["serve", "--dev", "--dev-dir"])
        .arg(&dir)
        .args(["--listen", &first.webhook.to_string()])
        .args([
            "--admin-listen",
            &SocketAddr::from(([127, 0, 0, 1], free_port())).to_string(),
        ])
        .env_remove("DIGEST_GATE_ALLOWLIST")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {}", first.webhook)),
        "{stderr}"
    );
    let after: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(dir.join(f)).unwrap())
        .collect();
    assert!(
        before == after,
        "a failed start rewrote the running server's files"
    );
    let stream = connect_named(first.webhook, &first.ca_pem, "localhost", &[b"http/1.1"], None).await;
    assert!(stream.is_ok(), "the running server's CA still verifies it");
    signal(&first.child, "-TERM");
    let (code, _) = wait_exit(&mut first.child, Duration::from_secs(15));
    assert_eq!(code, 0);
}

/// Issue 41: `serve --dev` listened on 0.0.0.0. The webhook address left
/// to its default is loopback (the log line names it); an admin address
/// given stands as given.
#[test]
fn dev_mode_listens_on_loopback_by_default() {
    let dir = scratch("dev-loopback");
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_digest-gate"))
        .args(["serve", "--dev", "--dev-dir"])
        .arg(&dir)
        .args(["--admin-listen", &admin.to_string(), "--log-format", "json"])
        .env_remove("DIGEST_GATE_ALLOWLIST")
        .env_remove("DIGEST_GATE_LISTEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(admin).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            let (_, stderr) = wait_exit(&mut child, Duration::from_secs(1));
            panic!("serve --dev exited ({status}): {stderr}");
        }
        assert!(Instant::now() < deadline, "serve --dev did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(&child, "-TERM");
    let (code, stderr) = wait_exit(&mut child, Duration::from_secs(15));
    assert_eq!(code, 0, "{stderr}");
    let serving = log_line(&stderr, "digest-gate serving");
    assert_eq!(serving["webhook"], "127.0.0.1:8443", "{serving}");
    assert_eq!(serving["admin"], admin.to_string(), "{serving}");
}
