//! The routes: reviews, the allowlist ConfigMap check, each bad request
//! class and the admin port in-process, and early errors over real HTTP
//! (curl, HTTP/1.1 and HTTP/2).

use super::*;

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

/// Issue 49: an InstallPlan's approval is answered from the pre-flight's
/// judgement on the plan as it was; the mode is InstallPlan's own.
#[tokio::test]
async fn an_approval_is_answered_from_the_judgement_on_the_plan() {
    use digest_gate::admission::approval::{JUDGED_ANNOTATION, Judged};
    let mut judged = Judged {
        judged_at: "2026-12-07T13:00:00Z".into(),
        targets: vec!["rhods-operator.1.21.0".into()],
        stale_after_upgrade: 1,
        ..Judged::default()
    };
    judged.name(["models/ServingRuntime/ovms".to_owned()]);
    let plan = |approved: bool| {
        json!({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "InstallPlan",
               "metadata": {"name": "install-x", "namespace": "ops",
                            "annotations": {JUDGED_ANNOTATION: serde_json::to_string(&judged).unwrap()}},
               "spec": {"approval": "Manual", "approved": approved}})
    };
    let body = serde_json::to_vec(&review("ip", "UPDATE", &plan(true), Some(&plan(false)))).unwrap();
    let mut policy = Policy::default();
    policy.set_kind_mode("InstallPlan", Mode::Enforce);
    let enforcing = Arc::new(State::new(digest_gate::testing::incident_allowlist(), policy));
    let (status, denied) = oneshot(
        &enforcing,
        post("/validate-approval", "application/json", body.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_contract(&denied, "ip");
    assert_eq!(denied["response"]["allowed"], false);
    let message = denied["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("leaves 1 object on unpromoted images (models/ServingRuntime/ovms)"),
        "{message}"
    );
    // Pods stay in rewrite mode; the approval is only warned of there.
    let (_, warned) = oneshot(&state(), post("/validate-approval", "application/json", body)).await;
    assert_eq!(warned["response"]["allowed"], true);
    assert_eq!(
        warned["response"]["warnings"][1],
        "digest-gate: models/ServingRuntime/ovms"
    );
    let metrics = enforcing.metrics.encode();
    assert!(metrics.contains("endpoint=\"validate-approval\""), "{metrics}");
}
