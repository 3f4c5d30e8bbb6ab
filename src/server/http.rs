//! The HTTP surface: the webhook routes (`POST /mutate`, `POST /validate`,
//! `/validate-allowlist`, `/validate-approval`) and
//! the admin routes (`/healthz`, `/readyz`, `/metrics`), each built from the
//! shared [`State`] so tests can drive them in-process.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State as Extract};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::state::State;
use super::supply;
use crate::admission::{self, Endpoint};
use crate::judge;
use crate::metrics::{self, RequestLabels, Timer};
use crate::policy::PromotedBy;
use crate::text::{self, Cut};

/// The webhook routes.
pub fn webhook_router(state: Arc<State>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .route("/validate-allowlist", post(validate_allowlist))
        .route("/validate-approval", post(validate_approval))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .with_state(state)
}

/// The admin routes (plain HTTP, separate port).
pub fn admin_router(state: Arc<State>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(state)
}

/// A JSON error body, so clients never have to parse text.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({"code": status.as_u16(), "error": message.into()});
    (
        status,
        [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        body.to_string(),
    )
        .into_response()
}

/// How much of a refused request's body an early answer waits for, as a
/// multiple of `--max-body-bytes`.
const SETTLE_FACTOR: usize = 2;

/// An answer sent while the request's body is still arriving can be lost:
/// over HTTP/2 the stream is reset after it, and clients (curl among them)
/// drop the answer with it; over HTTP/1.1 the connection is closed with
/// the body's rest unread, the kernel answers the client's next bytes with
/// a reset, and a client still sending (curl: "Send failure: Broken pipe")
/// never reads the answer. So an early error first reads the rest of the
/// body and discards it: at most twice `--max-body-bytes`, within
/// `--request-timeout`. Past either it is sent at once. An HTTP/1.1 client
/// waiting on `Expect: 100-continue` has sent no body and will send none:
/// reading would only ask it for one.
async fn settle(state: &State, request: Request) {
    if request.version() != axum::http::Version::HTTP_2 && expects_continue(&request) {
        return;
    }
    let limit = state.max_body_bytes.saturating_mul(SETTLE_FACTOR);
    if declared_length(&request).is_some_and(|n| n > limit as u64) {
        return;
    }
    let mut body = request.into_body();
    let drain = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, |d| d.len());
            if seen > limit {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(state.request_timeout, drain).await;
}

/// Whether an HTTP/1.1 client waits for `100 Continue` before its body.
fn expects_continue(request: &Request) -> bool {
    request
        .headers()
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"))
}

/// The Content-Length a request declares.
fn declared_length(request: &Request) -> Option<u64> {
    request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

async fn method_not_allowed(Extract(state): Extract<Arc<State>>, request: Request) -> Response {
    settle(&state, request).await;
    state.metrics.admission.bad_request("method");
    let mut r = error(
        StatusCode::METHOD_NOT_ALLOWED,
        "use POST with an AdmissionReview body",
    );
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    r
}

async fn not_found(Extract(state): Extract<Arc<State>>, request: Request) -> Response {
    settle(&state, request).await;
    state.metrics.admission.bad_request("path");
    error(
        StatusCode::NOT_FOUND,
        "digest-gate serves POST /mutate, /validate, /validate-allowlist and /validate-approval",
    )
}

async fn mutate(Extract(state): Extract<Arc<State>>, request: Request) -> Response {
    review(Endpoint::Mutate, &state, request).await
}

async fn validate(Extract(state): Extract<Arc<State>>, request: Request) -> Response {
    review(Endpoint::Validate, &state, request).await
}

fn is_json(request: &Request) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// 413, whether the declared length or the bytes sent went over the limit.
fn too_large(state: &State) -> Response {
    state.metrics.admission.bad_request("too_large");
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body exceeds {} bytes", state.max_body_bytes),
    )
}

async fn read_body(state: &State, body: Body) -> Result<Bytes, Response> {
    let limited = Limited::new(body, state.max_body_bytes);
    match tokio::time::timeout(state.request_timeout, limited.collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large(state)),
        Ok(Err(e)) => {
            state.metrics.admission.bad_request("body");
            Err(error(
                StatusCode::BAD_REQUEST,
                format!("cannot read the body: {e}"),
            ))
        }
        Err(_) => {
            state.metrics.admission.bad_request("timeout");
            Err(error(
                StatusCode::REQUEST_TIMEOUT,
                "the body was not sent in time",
            ))
        }
    }
}

/// `POST /validate-allowlist`: an allowlist ConfigMap, loaded as the
/// reloader would load it, off the runtime's workers (a large allowlist
/// takes milliseconds to parse).
async fn validate_allowlist(Extract(state): Extract<Arc<State>>, request: Request) -> Response {
    let (timer, body) = match timed_body(&state, request, ALLOWLIST_ENDPOINT).await {
        Ok(timed) => timed,
        Err(response) => return response,
    };
    let checking = state.clone();
    let answered = tokio::task::spawn_blocking(move || {
        admission::answer_allowlist(&body, |sources| {
            supply::check_edit(sources, checking.installed.as_deref(), &checking.policy)
        })
    })
    .await;
    match answered {
        Ok(answered) => answer(ALLOWLIST_ENDPOINT, &state, timer, answered),
        Err(e) => {
            timer.discard();
            tracing::error!(error = %e, "the allowlist check failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, "the allowlist check failed")
        }
    }
}

/// The metrics and log name of `/validate-allowlist`.
const ALLOWLIST_ENDPOINT: &str = "validate-allowlist";

/// `POST /validate-approval`: an InstallPlan update, its approval judged
/// from the annotation on the plan as it was (no cluster, no registry).
async fn validate_approval(Extract(state): Extract<Arc<State>>, request: Request) -> Response {
    let (timer, body) = match timed_body(&state, request, APPROVAL_ENDPOINT).await {
        Ok(timed) => timed,
        Err(response) => return response,
    };
    let rules = admission::approval::Approvals {
        mode: state.policy.mode_for("InstallPlan"),
        writers: &state.judgement_writers,
    };
    let answered = admission::answer_approval(&body, rules);
    answer(APPROVAL_ENDPOINT, &state, timer, answered)
}

/// The metrics and log name of `/validate-approval`.
const APPROVAL_ENDPOINT: &str = "validate-approval";

async fn review(endpoint: Endpoint, state: &State, request: Request) -> Response {
    let (timer, body) = match timed_body(state, request, endpoint.as_str()).await {
        Ok(timed) => timed,
        Err(response) => return response,
    };
    let allowlist = state.allowlist.load();
    // Loaded only with --verify-registry: without it a review costs what
    // it did.
    let published = state.published.as_ref().map(|p| p.load());
    let rules = judge::Rules {
        policy: &state.policy,
        allowlist: &allowlist,
        published: published.as_deref().map(|p| &**p),
    };
    let answered = admission::answer(endpoint, &body, rules);
    answer(endpoint.as_str(), state, timer, answered)
}

/// A review's body, timed under `endpoint`; a body refused is not timed.
async fn timed_body<'s>(
    state: &'s State,
    request: Request,
    endpoint: &'static str,
) -> Result<(Timer<'s>, Bytes), Response> {
    let timer = state.metrics.admission.timer(endpoint);
    match review_body(state, request).await {
        Ok(body) => Ok((timer, body)),
        Err(response) => {
            timer.discard();
            Err(response)
        }
    }
}

/// The body of a review request: JSON, within the size limit, sent in time.
async fn review_body(state: &State, request: Request) -> Result<Bytes, Response> {
    if !is_json(&request) {
        settle(state, request).await;
        state.metrics.admission.bad_request("content_type");
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send Content-Type: application/json",
        ));
    }
    if declared_length(&request).is_some_and(|n| n > state.max_body_bytes as u64) {
        // Refused before judging a byte of it.
        settle(state, request).await;
        return Err(too_large(state));
    }
    read_body(state, request.into_body()).await
}

/// Counts and logs an answer, and sends it; `timer` records its time as
/// the answer is counted.
fn answer(
    endpoint: &'static str,
    state: &State,
    timer: Timer<'_>,
    answered: Result<admission::Answer, admission::BadReview>,
) -> Response {
    let answer = match answered {
        Ok(a) => a,
        Err(bad) => {
            timer.discard();
            state.metrics.admission.bad_request(bad.label());
            tracing::info!(endpoint, error = %bad, "refused a request that is not a usable AdmissionReview");
            return error(StatusCode::BAD_REQUEST, bad.to_string());
        }
    };
    let elapsed = timer.stop();
    let admission = &state.metrics.admission;
    admission.request(RequestLabels {
        endpoint,
        kind: metrics::kind_label(&answer.kind),
        operation: metrics::operation_label(&answer.operation),
        verdict: answer.verdict,
    });
    for (verdict, reason) in &answer.images {
        admission.image(*verdict, *reason);
    }
    tracing::info!(
        endpoint,
        uid = %loggable(&answer.uid),
        namespace = %loggable(&answer.namespace),
        kind = %loggable(&answer.kind),
        name = %loggable(&answer.name),
        operation = %loggable(&answer.operation),
        dry_run = answer.dry_run,
        verdict = answer.verdict.as_str(),
        images = answer.images.len(),
        latency_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        denial = answer.message.as_deref().unwrap_or(""),
        // Audit mode: what rewrite and enforce would have answered, and
        // why (the warnings' words); absent when nothing would have
        // happened.
        would_rewrite = answer.would.as_ref().map(|w| w.rewrite.as_str()),
        would_enforce = answer.would.as_ref().map(|w| w.enforce().as_str()),
        would = answer.would.as_ref().map(|w| w.why.join("; ")),
        // Evaluated only when the line is written.
        promoted_by = answer
            .promoted_by
            .iter()
            .map(PromotedBy::describe)
            .collect::<Vec<_>>()
            .join("; "),
        "review answered"
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        answer.body,
    )
        .into_response()
}

/// A request-supplied string as a log field: one line, bounded (253 is the
/// longest DNS subdomain, which names and namespaces are).
fn loggable(s: &str) -> std::borrow::Cow<'_, str> {
    text::one_line(s, 253, Cut::End)
}

async fn readyz(Extract(state): Extract<Arc<State>>) -> Response {
    match state.ready.check() {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response(),
    }
}

async fn metrics_text(Extract(state): Extract<Arc<State>>) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        )],
        state.metrics.encode(),
    )
        .into_response()
}
