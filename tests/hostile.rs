//! Malformed and hostile requests. Every one gets a well-formed answer — a
//! 4xx with a JSON error, or an AdmissionReview (a denial with a reason where
//! it judged something) — and the server keeps serving the next good review.
//! Body-level cases go through the router in-process; transport-level ones
//! (HTTP/1.0, pipelining, plain HTTP or garbage on the TLS port) over real TLS.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use digest_gate::server::{self, State};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

use digest_gate::testing::BAD as NEVER_PROMOTED;

fn state() -> Arc<State> {
    ready_state()
}

fn good_object() -> Value {
    json!({"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
           "metadata": {"name": "ovms", "namespace": "demo-models"},
           "spec": {"containers": [{"name": "ovms",
               "image": format!("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@{NEVER_PROMOTED}")}]}})
}

fn pod(containers: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}})
}

use Expect::{Allow, Deny, Status};

/// What a case must get back.
#[derive(Debug)]
enum Expect {
    /// An HTTP error with a JSON body.
    Status(StatusCode),
    /// An AdmissionReview that denies, with `code` and a message containing this.
    Deny(u16, &'static str),
    /// An AdmissionReview that allows.
    Allow,
}

fn review_with(request: Value) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}),
    )
    .unwrap()
}

fn request_for(object: Value) -> Value {
    let mut r = review("hostile", "CREATE", &object, None);
    r["request"].take()
}

fn with(mut request: Value, pointer: &str, value: Value) -> Vec<u8> {
    *request.pointer_mut(pointer).unwrap() = value;
    review_with(request)
}

fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

fn json_post(body: impl Into<Body>) -> Request<Body> {
    Request::post("/mutate")
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap()
}

fn base() -> Value {
    request_for(good_object())
}

fn big_image() -> String {
    format!("quay.io/{}", "a".repeat(100_000))
}

fn many() -> Vec<Value> {
    (0..3000)
        .map(|i| json!({"name": format!("c{i}"), "image": format!("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@{NEVER_PROMOTED}")}))
        .collect()
}

fn deep_object() -> String {
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"kind":"Pod"}},"operation":"CREATE","object":{{"spec":{{"containers":{}}}}}}}}}"#,
        nested(100_000)
    )
}

fn deep_ignored() -> String {
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"kind":"Pod"}},"operation":"CREATE","object":{{"status":{}}}}}}}"#,
        nested(100_000)
    )
}

fn alias_bomb() -> String {
    let mut text = String::from("kind: ServingRuntime\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    text
}

fn configmap(text: String) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "servingruntimes-config"}, "data": {"default-config": text}})
}

fn annotated() -> Value {
    let mut annotations = serde_json::Map::new();
    for i in 0..5000 {
        annotations.insert(format!("example.com/a{i}"), json!("v"));
    }
    annotations.insert("digest-gate.dev/rewritten-images".into(), json!("{not json"));
    let mut annotated = good_object();
    annotated["metadata"]["annotations"] = Value::Object(annotations);
    annotated
}

/// Each case is its own test, so one failure does not hide the others; the
/// name in the case attribute is what a failure report names.
#[rstest::rstest]
// The body is not JSON, or not an object.
#[case::truncated_json(
    json_post(r#"{"apiVersion":"admission.k8s.io/v1","kind":"Adm"#),
    Status(StatusCode::BAD_REQUEST)
)]
#[case::not_utf_8(json_post(vec![0x7b, 0xff, 0xfe, 0x7d]), Status(StatusCode::BAD_REQUEST))]
#[case::empty_body(json_post(""), Status(StatusCode::BAD_REQUEST))]
#[case::json_null(json_post("null"), Status(StatusCode::BAD_REQUEST))]
#[case::json_array(json_post("[]"), Status(StatusCode::BAD_REQUEST))]
#[case::json_string(json_post("\"AdmissionReview\""), Status(StatusCode::BAD_REQUEST))]
#[case::trailing_garbage(json_post(format!("{}xyz", String::from_utf8(review_with(base())).unwrap())), Status(StatusCode::BAD_REQUEST))]
#[case::n100_000_deep_nesting(json_post(deep_object()), Status(StatusCode::BAD_REQUEST))]
// Skipped parts are scanned without recursion, so this is simply a Pod
// with no containers.
#[case::n100_000_deep_nesting_where_nothing_is_read(json_post(deep_ignored()), Allow)]
// The review envelope is wrong.
#[case::apiversion_v1beta1(json_post(serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": base()})).unwrap()), Status(StatusCode::BAD_REQUEST))]
#[case::no_apiversion(json_post(serde_json::to_vec(&json!({"kind": "AdmissionReview", "request": base()})).unwrap()), Status(StatusCode::BAD_REQUEST))]
#[case::kind_pod(json_post(serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": base()})).unwrap()), Status(StatusCode::BAD_REQUEST))]
#[case::no_request(
    json_post(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#),
    Status(StatusCode::BAD_REQUEST)
)]
#[case::request_null(
    json_post(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#),
    Status(StatusCode::BAD_REQUEST)
)]
#[case::request_a_string(
    json_post(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"x"}"#),
    Status(StatusCode::BAD_REQUEST)
)]
#[case::duplicate_uid(json_post(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","uid":"b","kind":{"kind":"Pod"},"operation":"DELETE"}}"#), Status(StatusCode::BAD_REQUEST))]
// Wrong JSON types in the request.
#[case::uid_missing(json_post({ let mut r = base(); r.as_object_mut().unwrap().remove("uid"); review_with(r) }), Status(StatusCode::BAD_REQUEST))]
#[case::uid_a_number(json_post(with(base(), "/uid", json!(42))), Status(StatusCode::BAD_REQUEST))]
#[case::uid_empty(json_post(with(base(), "/uid", json!(""))), Status(StatusCode::BAD_REQUEST))]
#[case::request_kind_missing(json_post({ let mut r = base(); r.as_object_mut().unwrap().remove("kind"); review_with(r) }), Status(StatusCode::BAD_REQUEST))]
#[case::request_kind_a_string(json_post(with(base(), "/kind", json!("Pod"))), Status(StatusCode::BAD_REQUEST))]
#[case::operation_missing(json_post({ let mut r = base(); r.as_object_mut().unwrap().remove("operation"); review_with(r) }), Status(StatusCode::BAD_REQUEST))]
#[case::operation_a_number(json_post(with(base(), "/operation", json!(1))), Status(StatusCode::BAD_REQUEST))]
#[case::dryrun_a_string(json_post(with(base(), "/dryRun", json!("yes"))), Status(StatusCode::BAD_REQUEST))]
#[case::unknown_operation(json_post(with(base(), "/operation", json!("PATCH"))), Deny(400, "operation 'PATCH'"))]
#[case::object_missing_on_create(json_post({ let mut r = base(); r.as_object_mut().unwrap().remove("object"); review_with(r) }), Deny(400, "must carry request.object"))]
#[case::object_null_on_create(
    json_post(with(base(), "/object", Value::Null)),
    Deny(400, "must carry request.object")
)]
#[case::object_a_list(json_post(with(base(), "/object", json!([1, 2]))), Deny(400, "must be a JSON object"))]
#[case::object_a_string(json_post(with(base(), "/object", json!("pod"))), Deny(400, "must be a JSON object"))]
#[case::oldobject_a_number_on_update(json_post({ let mut r = with(base(), "/operation", json!("UPDATE")); let mut v: Value = serde_json::from_slice::<Value>(&r).unwrap(); v["request"]["oldObject"] = json!(7); r = serde_json::to_vec(&v).unwrap(); r }), Allow)]
// Malformed objects: a denial that says what is wrong.
#[case::containers_a_string(json_post(review_with(request_for(pod(json!("nginx"))))), Deny(403, "must be a list of containers"))]
#[case::containers_of_numbers(json_post(review_with(request_for(pod(json!([1, 2]))))), Deny(403, "must be a container mapping"))]
#[case::image_a_number(json_post(review_with(request_for(pod(json!([{"name": "c", "image": 3}]))))), Deny(403, "image must be a string"))]
#[case::image_an_object(json_post(review_with(request_for(pod(json!([{"name": "c", "image": {"a": 1}}]))))), Deny(403, "image must be a string"))]
#[case::image_empty(json_post(review_with(request_for(pod(json!([{"name": "c", "image": ""}]))))), Deny(403, "the image is empty"))]
#[case::image_100_kb_long(json_post(review_with(request_for(pod(json!([{"name": "c", "image": big_image()}]))))), Deny(403, "bytes)"))]
#[case::image_with_control_characters(json_post(review_with(request_for(pod(json!([{"name": "c\n\u{1b}[31m", "image": "quay.io/x:1\n\u{0}"}]))))), Deny(403, "white space or a control character"))]
#[case::image_in_another_script(json_post(review_with(request_for(pod(json!([{"name": "c", "image": "quay.io/моя/модель:1"}]))))), Deny(403, "not a valid repository path component"))]
#[case::n3_000_containers(json_post(review_with(request_for(pod(Value::Array(many()))))), Allow)]
#[case::volumes_a_mapping(json_post(review_with(request_for(json!({"apiVersion": "v1", "kind": "Pod", "spec": {"volumes": {"a": 1}}})))), Deny(403, "must be a list of volumes"))]
#[case::runtime_config_not_yaml(json_post(review_with(request_for(configmap("kind: ServingRuntime\nspec: [\n".into())))), Deny(403, "is not valid YAML"))]
#[case::runtime_config_alias_bomb(
    json_post(review_with(request_for(configmap(alias_bomb())))),
    Deny(403, "alias bomb")
)]
#[case::template_objects_a_string(json_post(review_with(request_for(json!({"apiVersion": "template.openshift.io/v1", "kind": "Template", "objects": "x"})))), Deny(403, "Template objects must be a list"))]
#[case::n5_000_annotations_and_a_corrupt_record(json_post(review_with(request_for(annotated()))), Allow)]
// HTTP-level.
#[case::get(Request::get("/mutate").body(Body::empty()).unwrap(), Status(StatusCode::METHOD_NOT_ALLOWED))]
#[case::delete_method(Request::delete("/validate").body(Body::empty()).unwrap(), Status(StatusCode::METHOD_NOT_ALLOWED))]
#[case::unknown_path(Request::post("/../etc/passwd").header("content-type", "application/json").body(Body::from("{}")).unwrap(), Status(StatusCode::NOT_FOUND))]
#[case::text_plain(Request::post("/mutate").header("content-type", "text/plain").body(Body::from("{}")).unwrap(), Status(StatusCode::UNSUPPORTED_MEDIA_TYPE))]
#[case::no_content_type(Request::post("/mutate").body(Body::from("{}")).unwrap(), Status(StatusCode::UNSUPPORTED_MEDIA_TYPE))]
#[case::declared_length_over_the_limit(Request::post("/mutate").header("content-type", "application/json").header("content-length", "999999999").body(Body::from("{}")).unwrap(), Status(StatusCode::PAYLOAD_TOO_LARGE))]
#[case::body_over_the_limit(json_post(vec![b' '; 8 * 1024 * 1024 + 1]), Status(StatusCode::PAYLOAD_TOO_LARGE))]
#[tokio::test]
async fn every_hostile_request_gets_a_well_formed_answer(
    #[case] request: Request<Body>,
    #[case] expect: Expect,
) {
    let name = format!("expected {expect:?}");
    let s = state();
    let good = review_with(request_for(good_object()));
    let response = server::webhook_router(s.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let value: Value =
        serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{name}: the answer is not JSON ({e})"));
    match expect {
        Expect::Status(want) => {
            assert_eq!(status, want, "{name}: {value}");
            assert_eq!(value["code"], want.as_u16(), "{name}: {value}");
            assert!(
                value["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{name}: {value}"
            );
        }
        Expect::Deny(code, reason) => {
            assert_eq!(status, StatusCode::OK, "{name}: {value}");
            assert_contract(&value, value["response"]["uid"].as_str().unwrap());
            assert_eq!(value["response"]["allowed"], false, "{name}: {value}");
            assert_eq!(value["response"]["status"]["code"], code, "{name}: {value}");
            let message = value["response"]["status"]["message"].as_str().unwrap();
            assert!(message.contains(reason), "{name}: want {reason:?} in {message:?}");
            assert!(message.len() < 20_000, "{name}: a {} byte message", message.len());
            assert!(
                !message.contains(|c: char| c.is_control()),
                "{name}: control characters in {message:?}"
            );
        }
        Expect::Allow => {
            assert_eq!(status, StatusCode::OK, "{name}: {value}");
            assert_eq!(value["response"]["allowed"], true, "{name}: {value}");
        }
    }
    // The next good review is still answered, and the server is ready.
    let response = server::webhook_router(s.clone())
        .oneshot(json_post(good.clone()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "after {name}");
    assert!(s.ready.check().is_ok(), "after {name}");
}

// === transport-level cases, over real TLS ===

async fn start_tls(name: &str) -> (server::Running, Pki) {
    start_server(name, |c| {
        c.request_timeout = Duration::from_secs(2);
        c.handshake_timeout = Duration::from_secs(2);
    })
    .await
}

async fn read_all(stream: &mut (impl AsyncReadExt + Unpin)) -> String {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

#[tokio::test]
async fn transport_level_abuse_is_survived() {
    let (running, pki) = start_tls("transport").await;
    let addr = running.webhook_addr;
    let good = review_with(request_for(good_object()));

    // HTTP/1.0 with a body: answered, then closed.
    let mut s = connect(addr, &pki.ca_pem, &[b"http/1.1"], None).await.unwrap();
    let req = format!(
        "POST /mutate HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        good.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    s.write_all(&good).await.unwrap();
    let answer = read_all(&mut s).await;
    assert!(
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
        "{answer}"
    );

    // Two pipelined requests in one write: two answers, in order.
    let mut s = connect(addr, &pki.ca_pem, &[b"http/1.1"], None).await.unwrap();
    let one = |uid: &str| {
        let body = review_with(with_uid(request_for(good_object()), uid));
        let mut r = format!("POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        r.extend(body);
        r
    };
    let mut both = one("first");
    both.extend(one("second"));
    let mut last = b"GET /mutate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec();
    both.append(&mut last);
    s.write_all(&both).await.unwrap();
    let answers = read_all(&mut s).await;
    let first = answers.find("\"uid\":\"first\"").expect("first answered");
    let second = answers.find("\"uid\":\"second\"").expect("second answered");
    assert!(first < second);
    assert_eq!(answers.matches("HTTP/1.1 200").count(), 2, "{answers}");
    assert!(answers.contains("HTTP/1.1 405"), "{answers}");

    // Plain HTTP on the TLS port, and garbage that starts like a ClientHello.
    for garbage in [
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
        vec![0x16, 0x03, 0x01, 0x40, 0x00, 0xde, 0xad, 0xbe, 0xef],
        (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect(),
    ] {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = tcp.write_all(&garbage).await;
        let _ = read_all(&mut tcp).await;
    }
    // A client that completes TLS and then sends bytes that are not HTTP.
    let mut s = connect(addr, &pki.ca_pem, &[b"http/1.1"], None).await.unwrap();
    s.write_all(b"\x00\x01\x02 this is not HTTP \r\n\r\n")
        .await
        .unwrap();
    let reply = read_all(&mut s).await;
    assert!(reply.is_empty() || reply.starts_with("HTTP/1.1 400"), "{reply}");
    // A client that connects and sends nothing is cut off by the handshake timeout.
    let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    let started = std::time::Instant::now();
    let _ = read_all(&mut idle).await;
    assert!(started.elapsed() < Duration::from_secs(5));

    // Still serving, still ready.
    let mut client = Client::open(addr, &pki.ca_pem).await;
    let answer = client
        .review("/mutate", &serde_json::from_slice(&good).unwrap())
        .await;
    assert_contract(&answer, "hostile");
    assert_eq!(admin_get(running.admin_addr, "/readyz").await.0, StatusCode::OK);
    running.drain();
    running.wait().await;
}

fn with_uid(mut request: Value, uid: &str) -> Value {
    request["uid"] = json!(uid);
    request
}

#[tokio::test]
async fn slow_clients_are_timed_out_without_stalling_others() {
    let (running, pki) = start_tls("slow").await;
    let addr = running.webhook_addr;
    // Headers that never finish, and a body that never comes.
    let mut slow_headers = connect(addr, &pki.ca_pem, &[b"http/1.1"], None).await.unwrap();
    slow_headers
        .write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut slow_body = connect(addr, &pki.ca_pem, &[b"http/1.1"], None).await.unwrap();
    slow_body
        .write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .await
        .unwrap();
    // Meanwhile a good client is served at once.
    let mut client = Client::open(addr, &pki.ca_pem).await;
    let started = std::time::Instant::now();
    client
        .review("/mutate", &review("fast", "CREATE", &good_object(), None))
        .await;
    assert!(started.elapsed() < Duration::from_secs(1));
    // The slow ones are answered 408 or closed once the request timeout passes.
    let headers_reply = read_all(&mut slow_headers).await;
    assert!(
        headers_reply.is_empty() || headers_reply.starts_with("HTTP/1.1 408"),
        "{headers_reply}"
    );
    let body_reply = read_all(&mut slow_body).await;
    assert!(body_reply.starts_with("HTTP/1.1 408"), "{body_reply}");
    running.drain();
    running.wait().await;
}
