//! Hostile inputs against the memory the chart gives a replica (issue 57).
//!
//! Each case is a real process: `digest-gate serve` answering one review, or
//! `digest-gate check` reading one file. The serving process runs in a memory
//! cgroup at the chart's `resources.limits.memory` where this machine lets a
//! test make one (cgroup v1 or v2 with the memory controller, as root), so an
//! input that needs more is killed as the kubelet's would be; everywhere the
//! peak is read from the kernel (`VmHWM` of the live server, `ru_maxrss` of
//! the finished `check`) and held to the budget SECURITY.md states. Nothing
//! is timed: a case that is slow is still bounded by the test's own timeout.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// The chart's `resources.limits.memory` (charts/digest-gate/values.yaml;
/// `tests/chart` holds the two together).
const CHART_LIMIT_MIB: u64 = 128;
/// What one review may add to a warm server's peak (SECURITY.md).
const REVIEW_BUDGET_MIB: u64 = 48;
/// What `check` may take on one hostile file, over its own start.
const CHECK_BUDGET_MIB: u64 = 64;

/// A memory cgroup of this test's own, removed on drop; `None` where the
/// machine offers none (not root, no memory controller).
struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    fn new(name: &str, limit: u64) -> Option<Self> {
        let name = format!("digest-gate-bounds-{}-{name}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (dir, file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), "memory.limit_in_bytes")
        } else {
            let v2 = Path::new("/sys/fs/cgroup");
            let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).ok()?;
            if !controllers.split_whitespace().any(|c| c == "memory") {
                return None;
            }
            (v2.join(&name), "memory.max")
        };
        std::fs::create_dir(&dir).ok()?;
        if std::fs::write(dir.join(file), limit.to_string()).is_err() {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        // Without swap accounting the limit is on memory alone; with it, no
        // swap either, so the limit is the pod's.
        let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
        let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        Some(Self { dir })
    }

    /// `argv` started inside the cgroup (the shell joins, then execs it).
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
            .arg(&self.dir)
            .arg(program);
        cmd
    }
}

impl Cgroup {
    /// The most memory the cgroup's processes held at once, in KiB.
    fn peak_kib(&self) -> Option<u64> {
        ["memory.max_usage_in_bytes", "memory.peak"]
            .iter()
            .find_map(|f| std::fs::read_to_string(self.dir.join(f)).ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|b| b >> 10)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The kernel refuses while a process is still in it; they are all
        // waited for before the cgroup goes.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_digest-gate"))
}

/// `serve --dev`, inside `cgroup` when there is one.
struct Serve {
    child: Child,
    webhook: SocketAddr,
    ca_pem: String,
    _cgroup: Option<Cgroup>,
}

impl Serve {
    fn start(name: &str) -> Self {
        Self::start_with(name, &[])
    }

    /// [`Serve::start`], with more flags.
    fn start_with(name: &str, flags: &[&str]) -> Self {
        let cgroup = Cgroup::new(name, CHART_LIMIT_MIB << 20);
        if cgroup.is_none() {
            eprintln!("no memory cgroup here: peaks are checked, the limit is not applied");
        }
        let dir = scratch(&format!("bounds-{name}"));
        let webhook: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut cmd = match &cgroup {
            Some(c) => c.command(&binary()),
            None => Command::new(binary()),
        };
        cmd.args(["serve", "--dev", "--dev-dir"])
            .arg(&dir)
            .args(["--listen", &webhook.to_string()])
            .args(["--admin-listen", &admin.to_string()])
            .args(["--log-level", "warn"])
            .args(flags)
            .env_remove("DIGEST_GATE_ALLOWLIST")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let ca = dir.join("ca.crt");
        while !(std::net::TcpStream::connect(webhook).is_ok() && ca.exists()) {
            assert!(Instant::now() < deadline, "serve --dev did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            webhook,
            ca_pem: std::fs::read_to_string(ca).unwrap(),
            _cgroup: cgroup,
        }
    }

    /// The highest resident set the process has had, in KiB.
    fn peak_kib(&self) -> u64 {
        vm_hwm(self.child.id()).expect("the server is gone: killed for its memory?")
    }

    async fn post(&self, body: Vec<u8>) -> (hyper::StatusCode, Vec<u8>) {
        self.post_to("/mutate", body).await
    }

    async fn post_to(&self, path: &str, body: Vec<u8>) -> (hyper::StatusCode, Vec<u8>) {
        let stream = connect_named(self.webhook, &self.ca_pem, "localhost", &[b"http/1.1"], None)
            .await
            .unwrap();
        Client::http1(stream)
            .await
            .post(path, "application/json", body)
            .await
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn body(object: &Value) -> Vec<u8> {
    serde_json::to_vec(&review("bounds", "CREATE", object, None)).unwrap()
}

fn runtimes_config(text: String) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "servingruntimes-config", "namespace": "redhat-ods-applications"},
           "data": {"default-config": text}})
}

/// A ServingRuntime document whose spec is a twelve-level "billion laughs":
/// 1.4 KB that would expand to 10^12 nodes.
fn billion_laughs() -> String {
    let mut text = String::from(
        "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nmetadata:\n  name: ovms\nspec:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..12 {
        let p = i - 1;
        let refs = vec![format!("*a{p}"); 10].join(", ");
        text.push_str(&format!("  a{i}: &a{i} [{refs}]\n"));
    }
    text
}

/// A ServingRuntime document whose containers are `bytes` of `[0,0,…]`.
fn flow_sequence(bytes: usize) -> String {
    flow_of(bytes, "0")
}

/// The same with `item` for each zero.
fn flow_of(bytes: usize, item: &str) -> String {
    let mut text = String::from(
        "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nmetadata:\n  name: ovms\nspec:\n  containers: [",
    );
    text.reserve(bytes);
    text.push_str(item);
    while text.len() < bytes {
        text.push(',');
        text.push_str(item);
    }
    text.push_str("]\n");
    text
}

/// A Pod with as many containers as fit in `bytes` of review.
fn many_containers(bytes: usize) -> Value {
    let one = json!({"name": "c", "image": format!("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@{}", digest_gate::testing::BAD)});
    let n = bytes / (serde_json::to_vec(&one).unwrap().len() + 1);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "demo-models"},
           "spec": {"containers": vec![one; n]}})
}

/// One hostile review against a fresh, warm server: answered, its answer
/// an AdmissionReview saying `expect`, the peak within the budget.
async fn within_budget(name: &str, object: Value, expect: &str) {
    let serve = Serve::start(name);
    let ordinary: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("examples/review.json")).unwrap()).unwrap();
    let (status, _) = serve.post(serde_json::to_vec(&ordinary).unwrap()).await;
    assert_eq!(status, 200);
    let warm = serve.peak_kib();
    let hostile = body(&object);
    assert!(
        hostile.len() <= 8 << 20,
        "{name}: {} bytes, over --max-body-bytes",
        hostile.len()
    );
    let (status, answer) = serve.post(hostile).await;
    // A denial, never a 400: an entry with failurePolicy Ignore would
    // admit what a 400 answers.
    assert_eq!(status, 200, "{name}: {}", String::from_utf8_lossy(&answer));
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["response"]["uid"], "bounds");
    assert_eq!(answer["response"]["allowed"], false, "{name}");
    let message = answer["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    let shown: String = answer.to_string().chars().take(400).collect();
    assert!(message.contains(expect), "{name}: {shown}");
    let peak = serve.peak_kib();
    eprintln!("{name}: warm {} MiB, peak {} MiB", warm >> 10, peak >> 10);
    assert!(
        peak.saturating_sub(warm) <= REVIEW_BUDGET_MIB << 10,
        "{name}: the review took {} MiB over the warm server's {} MiB (budget {REVIEW_BUDGET_MIB} MiB)",
        (peak - warm) >> 10,
        warm >> 10
    );
    // And the next ordinary review is served.
    let (status, _) = serve.post(serde_json::to_vec(&ordinary).unwrap()).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_billion_laughs_in_the_runtime_config_is_refused_within_the_budget() {
    within_budget("laughs", runtimes_config(billion_laughs()), "alias").await;
}

#[tokio::test]
async fn a_runtime_config_of_a_million_zeros_is_refused_within_the_budget() {
    within_budget(
        "zeros",
        runtimes_config(flow_sequence(6_300_000)),
        "more than the 1024 KiB",
    )
    .await;
    // Under the bytes a ConfigMap holds, the nodes refuse it.
    within_budget("zeros-1m", runtimes_config(flow_sequence(1_000_000)), "dense").await;
    // Sparse enough for the bytes, the nodes of a review are capped.
    within_budget(
        "words-1m",
        runtimes_config(flow_of(1_000_000, "zero")),
        "more than 50000 nodes",
    )
    .await;
}

#[tokio::test]
async fn a_pod_of_many_containers_is_refused_within_the_budget() {
    // 66,000 stale containers: more values than a review may keep.
    within_budget("containers", many_containers(7 << 20), "more than 65536 values").await;
    // 5,000: decoded, more images than one object may have judged.
    within_budget(
        "containers-5k",
        many_containers(800_000),
        "more than the 4096 digest-gate judges",
    )
    .await;
}

#[tokio::test]
async fn a_review_of_many_small_values_is_refused_within_the_budget() {
    let mut annotations = serde_json::Map::new();
    for i in 0..600_000 {
        annotations.insert(format!("k{i}"), json!(""));
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "p", "namespace": "demo-models", "annotations": annotations},
                     "spec": {"containers": []}});
    within_budget("annotations", pod, "more than 65536 values").await;
    let volumes = vec![json!({"name": "v", "emptyDir": {}}); 200_000];
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "demo-models"},
                     "spec": {"containers": [], "volumes": volumes}});
    within_budget("volumes", pod, "more than 65536 values").await;
}

/// The approval endpoint reads an InstallPlan whole: past the values a
/// review may keep, the approval is denied, not answered with a 400 that
/// its `failurePolicy: Ignore` entry would let through.
#[tokio::test]
async fn an_approval_too_large_to_read_is_denied() {
    let serve = Serve::start("approval");
    let mut annotations = serde_json::Map::new();
    for i in 0..70_000 {
        annotations.insert(format!("k{i}"), json!(""));
    }
    let plan = |approved: bool| {
        json!({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "InstallPlan",
               "metadata": {"name": "install-x", "namespace": "ops", "annotations": annotations},
               "spec": {"approved": approved, "approval": "Manual", "clusterServiceVersionNames": ["x"]}})
    };
    let body = serde_json::to_vec(&review("bounds", "UPDATE", &plan(true), Some(&plan(false)))).unwrap();
    let (status, answer) = serve.post_to("/validate-approval", body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["response"]["allowed"], false);
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the object holds more than 65536 values"),
        "{message}"
    );
}

/// Issue 59: a judgement forged on the plan (anyone who may patch it could
/// write one before the guard) reaches the approver short and escaped: a
/// million findings, 600,000 named (as many as fit twice in a body, on the
/// plan and the plan as it was), and a `judgedAt` of terminal escapes:
/// such a body gave 1.19 million
/// warnings (20 MB) in rewrite mode, and a denial that erased its own
/// "Forbidden" line on a terminal in enforce mode.
#[tokio::test]
async fn a_forged_judgement_is_answered_short_and_escaped() {
    let judged = json!({"judgedAt": "\u{1b}[2K\r\u{1b}[32minstallplan.operators.coreos.com/x patched\u{1b}[0m",
                        "targets": ["t"], "staleAfterUpgrade": 1_000_000, "named": vec!["x"; 600_000]});
    let plan = |approved: bool| {
        json!({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "InstallPlan",
               "metadata": {"name": "install-x", "namespace": "ops",
                            "annotations": {"digest-gate.dev/preflight": judged.to_string()}},
               "spec": {"approved": approved, "approval": "Manual"}})
    };
    let body = serde_json::to_vec(&review("bounds", "UPDATE", &plan(true), Some(&plan(false)))).unwrap();
    assert!(body.len() > 4 << 20, "{}", body.len());
    for (mode, flags) in [
        ("rewrite", &[][..]),
        ("enforce", &["--kind-mode", "InstallPlan=enforce"][..]),
    ] {
        let serve = Serve::start_with(&format!("forged-{mode}"), flags);
        let (status, answer) = serve.post_to("/validate-approval", body.clone()).await;
        assert_eq!(status, 200, "{mode}");
        assert!(answer.len() < 8 << 10, "{mode}: a {}-byte answer", answer.len());
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        let response = &answer["response"];
        let mut said: Vec<&str> = response["warnings"]
            .as_array()
            .map(|w| w.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        said.extend(response["status"]["message"].as_str());
        assert!(!said.is_empty() && said.len() <= 16, "{mode}: {said:?}");
        for line in said {
            assert!(!line.contains(char::is_control), "{mode}: {line:?}");
        }
        assert_eq!(response["allowed"], mode == "rewrite", "{mode}");
    }
}

/// `check` on one file: its peak in KiB, its exit code and what it
/// printed. The peak is the cgroup's (`ru_maxrss` would be the test
/// process's: `posix_spawn` shares its memory until the exec), else the
/// last `VmHWM` seen while it ran, a lower bound.
fn check_peak(name: &str, text: &str) -> (u64, i32, String) {
    let dir = scratch(&format!("bounds-check-{name}"));
    let file = dir.join("input.yaml");
    std::fs::write(&file, text).unwrap();
    let out = dir.join("out");
    // Far above any budget: here only to measure.
    let cgroup = Cgroup::new(&format!("check-{name}"), 4 << 30);
    let mut cmd = match &cgroup {
        Some(c) => c.command(&binary()),
        None => Command::new(binary()),
    };
    let mut child = cmd
        .args(["check", "--allowlist"])
        .arg(root().join("examples/allowlist.yaml"))
        .arg("-f")
        .arg(&file)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "check {name} did not finish");
        seen = seen.max(vm_hwm(child.id()).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(5));
    };
    let peak = cgroup.as_ref().and_then(Cgroup::peak_kib).unwrap_or(seen);
    let mut printed = std::fs::read_to_string(out).unwrap();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut printed).unwrap();
    (peak, status.code().unwrap_or(-1), printed)
}

fn vm_hwm(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[test]
fn check_refuses_hostile_yaml_within_its_budget() {
    let (idle, code, stderr) = check_peak("small", &flow_sequence(1000));
    assert_eq!(code, 1, "{stderr}");
    for (name, text, expect) in [
        ("laughs", billion_laughs(), "alias"),
        ("zeros", flow_sequence(8 << 20), "nodes"),
    ] {
        let (peak, code, stderr) = check_peak(name, &text);
        eprintln!(
            "check {name}: {} MiB (small input: {} MiB)",
            peak >> 10,
            idle >> 10
        );
        assert_eq!(code, 2, "{name}: {stderr}");
        assert!(stderr.contains(expect), "{name}: {stderr}");
        assert!(
            peak.saturating_sub(idle) <= CHECK_BUDGET_MIB << 10,
            "check {name}: {} MiB over a small input's {} MiB (budget {CHECK_BUDGET_MIB} MiB)",
            (peak - idle) >> 10,
            idle >> 10
        );
    }
}
