//! The AdmissionReview contract (`admission.k8s.io/v1`): decode a review,
//! judge its object, encode the answer. No HTTP here.
//!
//! The wire types are our own, not kube-core's: kube-core 5 serialises
//! `response.patch` as an array of numbers where the apiserver expects a
//! base64 string (kube-rs#1781), and its request type parses `metadata` into a
//! typed `ObjectMeta` through `#[serde(flatten)]`, which costs a second pass
//! over every object and turns malformed metadata into an undecodable review
//! instead of a denial the developer can read. The fields below are the
//! contract's; tests check every one the apiserver reads.

pub mod approval;
mod wire;

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::Value;

use crate::allowlist::{self, Source};
use crate::judge::{self, ImageJudgement, ImageVerdict, Judgement, ObjectVerdict, Operation};
use crate::policy::{Mode, PromotedBy, Reason, Verdict};
use crate::text::{self, Cut};
use wire::{ConfigMapIn, Decoded, RequestIn, ResponseOut, ReviewOut, StatusOut, decode};

/// The only AdmissionReview version digest-gate speaks.
pub const API_VERSION: &str = "admission.k8s.io/v1";
pub mod render;

pub use approval::answer_approval;
use render::Rendered;
pub use render::{MAX_WARNING_LEN, REWRITTEN_ANNOTATION};

/// Which webhook is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Endpoint {
    /// Rewrites what it can, denies the rest.
    Mutate,
    /// The final check after every mutating webhook: never patches.
    Validate,
}

impl Endpoint {
    /// The endpoint's name, as paths and metrics use it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A body that is not a usable AdmissionReview: answered with HTTP 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadReview {
    #[error("the body is not an AdmissionReview: {0}")]
    Decode(String),
    #[error(
        "apiVersion '{0}' is not supported; digest-gate speaks {API_VERSION} (set admissionReviewVersions: [v1])"
    )]
    ApiVersion(String),
    #[error("kind '{0}' is not AdmissionReview")]
    Kind(String),
    #[error("the AdmissionReview has no request")]
    NoRequest,
    #[error("request.uid is empty")]
    NoUid,
    /// Its objects hold more values than a review may keep: answered with
    /// a denial by [`decoded`], never a 400, which an entry with
    /// `failurePolicy: Ignore` would admit.
    #[error("{0}")]
    TooLarge(String),
}

impl BadReview {
    /// A stable label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Decode(_) | Self::TooLarge(_) => "undecodable",
            Self::ApiVersion(_) | Self::Kind(_) => "wrong_version",
            Self::NoRequest | Self::NoUid => "no_request",
        }
    }
}

/// The answer to one review, with what logs and metrics need.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The encoded AdmissionReview.
    pub body: Vec<u8>,
    pub allowed: bool,
    pub verdict: ObjectVerdict,
    pub uid: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub operation: String,
    pub dry_run: bool,
    /// Outcome and reason of each judged image.
    pub images: Vec<(ImageVerdict, Reason)>,
    /// The denial message, when denied.
    pub message: Option<String>,
    /// Who promoted the digests images are rewritten to (or would be, in
    /// audit mode): what the decision log names.
    pub promoted_by: Vec<PromotedBy>,
    /// In audit mode, when something would have happened: what the other
    /// modes would have answered.
    pub would: Option<Would>,
}

/// What audit mode let through, as rewrite and enforce would have answered
/// it: what the decision log says during an audit-mode rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Would {
    /// The object's verdict in rewrite mode.
    pub rewrite: ObjectVerdict,
    /// Why, in the warnings' words (one per image).
    pub why: Vec<String>,
}

impl Would {
    /// The object's verdict in enforce mode: denied, as enforce denies
    /// what rewrite would rewrite as well as what it would deny.
    pub fn enforce(&self) -> ObjectVerdict {
        ObjectVerdict::Deny
    }

    /// `None` when every mode would have allowed the object.
    fn of(j: &Judgement, warnings: &[String]) -> Option<Self> {
        let rewrite = match j.images.iter().map(ImageJudgement::would_be).max() {
            None | Some(Verdict::Allow) => return None,
            Some(Verdict::Rewrite) => ObjectVerdict::Rewrite,
            Some(Verdict::Deny) => ObjectVerdict::Deny,
        };
        Some(Self {
            rewrite,
            why: warnings.to_vec(),
        })
    }
}

/// Decodes a review, judges it by `rules`, and encodes the answer.
pub fn answer(endpoint: Endpoint, body: &[u8], rules: judge::Rules<'_>) -> Result<Answer, BadReview> {
    let request: RequestIn = match decoded(body) {
        Ok(request) => request,
        Err(answered) => return *answered,
    };
    Ok(judge(endpoint, &request, rules))
}

/// [`decode`], a review too large to read answered instead (`Err(Ok)`):
/// denied, read again without its objects for its uid, kind and name.
fn decoded<O: serde::de::DeserializeOwned>(
    body: &[u8],
) -> Result<RequestIn<O>, Box<Result<Answer, BadReview>>> {
    decoded_or(body, |_| None)
}

/// [`decoded`], and a review whose objects cannot be read at all (a
/// syntax error in them, nesting past the decoder's depth in what is kept)
/// answered by `unreadable` (given why) when it gives an answer: a 400 is
/// what an entry with `failurePolicy: Ignore` admits unjudged.
fn decoded_or<O: serde::de::DeserializeOwned>(
    body: &[u8],
    unreadable: impl FnOnce(String) -> Option<Response>,
) -> Result<RequestIn<O>, Box<Result<Answer, BadReview>>> {
    let (why, response) = match decode(body) {
        Ok(request) => return Ok(request),
        Err(BadReview::TooLarge(why)) => (why.clone(), Response::refuse(403, "Forbidden", why)),
        Err(BadReview::Decode(why)) => match unreadable(why.clone()) {
            Some(response) => (why, response),
            None => return Err(Box::new(Err(BadReview::Decode(why)))),
        },
        Err(e) => return Err(Box::new(Err(e))),
    };
    match decode::<wire::Unread>(body).map(|request| encode(&request, response)) {
        Ok(answer) => Err(Box::new(Ok(answer))),
        // Not even its uid can be read: nothing can be answered.
        Err(_) => Err(Box::new(Err(BadReview::Decode(why)))),
    }
}

/// Decodes the review of an allowlist ConfigMap (labelled
/// `digest-gate.dev/allowlist`), has `check` load its keys as the server
/// loads the files of the mounted ConfigMap — every key not starting with
/// `.`, in name order, named by key — and encodes the answer: denied with
/// the loader's `key:line: message` when they do not load, so a broken edit
/// is refused before any replica reads it.
pub fn answer_allowlist<E: std::fmt::Display>(
    body: &[u8],
    check: impl FnOnce(&[Source]) -> Result<(), E>,
) -> Result<Answer, BadReview> {
    // Nothing that cannot be read can be loaded.
    let unreadable = |why: String| {
        Some(Response::refuse(
            403,
            "Forbidden",
            format!(
                "digest-gate cannot read this ConfigMap, so no replica could load it as an allowlist: {}",
                text::one_line(&why, 300, Cut::End)
            ),
        ))
    };
    let request: RequestIn<ConfigMapIn> = match decoded_or(body, unreadable) {
        Ok(request) => request,
        Err(answered) => return *answered,
    };
    if let Some(misrouted) = misrouted(&request, ("", "ConfigMap"), "/validate-allowlist") {
        return Ok(encode(&request, misrouted));
    }
    let operation = Operation::of(&request.operation);
    let response = match (operation, request.object.as_ref().map(|o| &o.0)) {
        (Operation::Create | Operation::Update, Some(Value::Object(object))) => {
            let checked = match allowlist::configmap_sources(object) {
                Ok(sources) => check(&sources).map_err(|e| e.to_string()),
                Err(errors) => Err(errors.to_string()),
            };
            match checked {
                Ok(()) => Response::allow(ObjectVerdict::Allow),
                // 403 as for image denials: kubectl prints the message of
                // a 403, while for a 422 without field causes it prints only
                // "The request is invalid".
                Err(errors) => Response::refuse(
                    403,
                    "Forbidden",
                    format!(
                        "this digest-gate allowlist does not load, so no replica would use it (each keeps its last good allowlist):\n{errors}"
                    ),
                ),
            }
        }
        (Operation::Create | Operation::Update, _) => Response::refuse(
            400,
            "BadRequest",
            format!(
                "a {} review must carry a ConfigMap as request.object",
                request.operation
            ),
        ),
        // Deleting is how an allowlist is retired (and Helm uninstalls).
        _ => Response::allow(ObjectVerdict::Allow),
    };
    Ok(encode(&request, response))
}

/// A review of another kind than an endpoint judges (`group`, `kind`): a
/// webhook configuration that sends it what it was not written for.
/// Allowed, as it is not what the endpoint guards, and said: the warning
/// names the kind and the endpoint, the decision log the kind.
fn misrouted<O>(request: &RequestIn<O>, (group, kind): (&str, &str), path: &str) -> Option<Response> {
    if request.kind.group == group && request.kind.kind == kind {
        return None;
    }
    let mut out = Response::allow(ObjectVerdict::Allow);
    out.warnings = vec![text::one_line_owned(
        format!(
            "digest-gate: {path} judges {kind}s only; this {} was not judged: fix the webhook configuration",
            request.kind.kind
        ),
        MAX_WARNING_LEN,
        Cut::End,
    )];
    Some(out)
}

/// What to send back, before encoding.
struct Response {
    allowed: bool,
    verdict: ObjectVerdict,
    status: Option<StatusOut>,
    patch: Option<String>,
    warnings: Vec<String>,
    audit: BTreeMap<String, String>,
    images: Vec<(ImageVerdict, Reason)>,
    promoted_by: Vec<PromotedBy>,
    would: Option<Would>,
}

impl Response {
    fn allow(verdict: ObjectVerdict) -> Self {
        Self {
            allowed: true,
            verdict,
            status: None,
            patch: None,
            warnings: Vec::new(),
            audit: BTreeMap::new(),
            images: Vec::new(),
            promoted_by: Vec::new(),
            would: None,
        }
    }

    fn refuse(code: u16, reason: &'static str, message: String) -> Self {
        Self {
            allowed: false,
            status: Some(StatusOut {
                status: "Failure",
                code,
                reason,
                message,
            }),
            ..Self::allow(ObjectVerdict::Deny)
        }
    }
}

fn judge(endpoint: Endpoint, request: &RequestIn, rules: judge::Rules<'_>) -> Answer {
    let object = request.object.as_ref().map(|o| &o.0);
    let old = request.old_object.as_ref().map(|o| &o.0);
    let response = match judge::asked(Operation::of(&request.operation), object, old) {
        judge::Asked::Judge { object, old } => {
            let subject = judge::Subject {
                group: &request.kind.group,
                kind: &request.kind.kind,
                object,
                old,
            };
            let j = judge::judge_as(subject, rules);
            let unpullable = rules
                .published
                .map(|p| render::unpullable(&j, rules.allowlist, p))
                .unwrap_or_default();
            let mut response = respond(endpoint, request, j, object);
            response.warnings.extend(unpullable);
            response
        }
        judge::Asked::Unjudged(_) => Response::allow(ObjectVerdict::Allow),
        judge::Asked::Unanswerable(why) => Response::refuse(400, "BadRequest", why),
    };
    encode(request, response)
}

fn respond(endpoint: Endpoint, request: &RequestIn, j: Judgement, object: &Value) -> Response {
    let mut out = match (endpoint, j.verdict) {
        (_, ObjectVerdict::Skipped) => return Response::allow(ObjectVerdict::Skipped),
        (_, ObjectVerdict::Allow) if j.mode == Mode::Audit => {
            let mut out = Response::allow(ObjectVerdict::Allow);
            out.audit = Rendered::of(&j, object).audit_annotations(&j);
            out.warnings = render::warnings(&j);
            out.would = Would::of(&j, &out.warnings);
            out
        }
        (_, ObjectVerdict::Allow) => Response::allow(ObjectVerdict::Allow),
        (Endpoint::Mutate, ObjectVerdict::Rewrite) => {
            let mut out = Response::allow(ObjectVerdict::Rewrite);
            out.warnings = render::warnings(&j);
            let mut rendered = Rendered::of(&j, object);
            // A subresource update cannot change metadata.
            if let Some((ops, record)) = rendered.take_patch(request.sub_resource.is_none()) {
                let patch = serde_json::to_vec(&ops).expect("patches serialise");
                out.patch = Some(base64::engine::general_purpose::STANDARD.encode(patch));
                out.audit.insert(rendered.audit_key("rewritten-images"), record);
            }
            out
        }
        (Endpoint::Validate, ObjectVerdict::Rewrite) => {
            // Still rewritable at validation: the mutating webhook did not run
            // on this object (or something changed the image after it).
            let messages = j.rewrites().map(|i| {
                format!(
                    "{} (it should have been rewritten before validation: is digest-gate's mutating webhook registered for this object?)",
                    i.message()
                )
            });
            Response::refuse(403, "Forbidden", render::denial(messages.collect()))
        }
        (_, ObjectVerdict::Deny) => Response::refuse(
            403,
            "Forbidden",
            render::denial(j.denials().map(ImageJudgement::message).collect()),
        ),
    };
    out.images = j.images.iter().map(|i| (i.verdict(), i.reason())).collect();
    out.promoted_by = j.promoted_by();
    out
}

fn encode<O: Decoded>(request: &RequestIn<O>, response: Response) -> Answer {
    let message = response.status.as_ref().map(|s| s.message.clone());
    let out = ReviewOut {
        api_version: API_VERSION,
        kind: "AdmissionReview",
        response: ResponseOut {
            uid: &request.uid,
            allowed: response.allowed,
            status: response.status,
            patch_type: response.patch.as_ref().map(|_| "JSONPatch"),
            patch: response.patch,
            warnings: response.warnings,
            audit_annotations: response.audit,
        },
    };
    let object = request.object.as_ref().map(Decoded::value);
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
    Answer {
        body: serde_json::to_vec(&out).expect("responses serialise"),
        allowed: response.allowed,
        verdict: response.verdict,
        uid: request.uid.clone(),
        kind: request.kind.kind.clone(),
        namespace: request
            .namespace
            .clone()
            .unwrap_or_else(|| text(object.and_then(|o| o.pointer("/metadata/namespace")))),
        name: request.name.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| {
            let name = text(object.and_then(|o| o.pointer("/metadata/name")));
            if name.is_empty() {
                text(object.and_then(|o| o.pointer("/metadata/generateName")))
            } else {
                name
            }
        }),
        operation: request.operation.clone(),
        dry_run: request.dry_run.unwrap_or(false),
        images: response.images,
        promoted_by: response.promoted_by,
        would: response.would,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allowlist::Allowlist;
    use crate::policy::Policy;
    use serde_json::json;

    fn rules<'a>(policy: &'a Policy, allowlist: &'a Allowlist) -> judge::Rules<'a> {
        judge::Rules {
            policy,
            allowlist,
            published: None,
        }
    }

    use crate::testing::{BAD, GOOD, REPO};

    fn allowlist() -> Allowlist {
        crate::testing::incident_allowlist()
    }

    fn review_of(operation: &str, object: Value, old: Option<Value>) -> Vec<u8> {
        let mut request = json!({
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "demo", "operation": operation,
            "userInfo": {"username": "dev"}, "object": object, "dryRun": false
        });
        if let Some(old) = old {
            request["oldObject"] = old;
        }
        serde_json::to_vec(&json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request}))
            .unwrap()
    }

    fn pod(image: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "demo"},
               "spec": {"containers": [{"name": "ovms", "image": image}]}})
    }

    fn response(endpoint: Endpoint, body: &[u8], policy: &Policy) -> (Answer, Value) {
        let a = answer(endpoint, body, rules(policy, &allowlist())).unwrap();
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(v["apiVersion"], API_VERSION);
        assert_eq!(v["kind"], "AdmissionReview");
        assert_eq!(v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        (a, v)
    }

    #[test]
    fn mutate_rewrites_with_a_base64_json_patch() {
        let object = pod(&format!("{REPO}@{BAD}"));
        let (a, v) = response(
            Endpoint::Mutate,
            &review_of("CREATE", object.clone(), None),
            &Policy::default(),
        );
        assert_eq!(a.verdict, ObjectVerdict::Rewrite);
        let r = &v["response"];
        assert_eq!(r["allowed"], true);
        assert_eq!(r["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(r["patch"].as_str().unwrap())
            .unwrap();
        let ops: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let mut patched = object;
        json_patch::patch(&mut patched, &ops).unwrap();
        assert_eq!(
            patched["spec"]["containers"][0]["image"],
            format!("{REPO}@{GOOD}")
        );
        let warnings: Vec<&str> = r["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        assert_eq!(
            warnings,
            ["digest-gate: \"ovms\": sha256:7ef272bc7be8 never promoted; rewritten to sha256:8af20e48bb48"]
        );
        assert!(warnings.iter().all(|w| w.chars().count() <= MAX_WARNING_LEN));
        assert!(
            r["auditAnnotations"]["rewritten-images"]
                .as_str()
                .unwrap()
                .contains(BAD)
        );
        assert!(r.get("status").is_none());
    }

    #[test]
    fn dry_runs_get_the_same_answer() {
        let object = pod(&format!("{REPO}@{BAD}"));
        let mut review: Value = serde_json::from_slice(&review_of("CREATE", object, None)).unwrap();
        let (real, _) = response(
            Endpoint::Mutate,
            &serde_json::to_vec(&review).unwrap(),
            &Policy::default(),
        );
        review["request"]["dryRun"] = json!(true);
        let (dry, _) = response(
            Endpoint::Mutate,
            &serde_json::to_vec(&review).unwrap(),
            &Policy::default(),
        );
        assert!(dry.dry_run && !real.dry_run);
        assert_eq!(dry.body, real.body);
    }

    #[test]
    fn validate_never_patches() {
        let body = review_of("CREATE", pod(&format!("{REPO}@{BAD}")), None);
        let (a, v) = response(Endpoint::Validate, &body, &Policy::default());
        assert!(!a.allowed);
        assert!(v["response"].get("patch").is_none() && v["response"].get("patchType").is_none());
        assert_eq!(v["response"]["status"]["code"], 403);
        let msg = v["response"]["status"]["message"].as_str().unwrap();
        assert!(msg.contains(&format!("use '{REPO}@{GOOD}'")), "{msg}");
        assert!(msg.contains("mutating webhook"), "{msg}");
        let body = review_of("CREATE", pod(&format!("{REPO}@{GOOD}")), None);
        assert!(response(Endpoint::Validate, &body, &Policy::default()).0.allowed);
    }

    #[test]
    fn denials_are_403_with_the_fix() {
        let body = review_of("CREATE", pod("ovms-1:replace"), None);
        let (a, v) = response(Endpoint::Mutate, &body, &Policy::default());
        assert!(!a.allowed);
        let status = &v["response"]["status"];
        assert_eq!(
            (status["code"].as_u64(), status["reason"].as_str()),
            (Some(403), Some("Forbidden"))
        );
        assert_eq!(
            status["message"],
            "container \"ovms\": image 'ovms-1:replace' is an unsubstituted placeholder (the tag ':replace', which a build step replaces); substitute it before applying: a promoted image, registry/repository@sha256:..."
        );
        assert_eq!(a.images, [(ImageVerdict::Deny, Reason::Placeholder)]);
    }

    #[test]
    fn audit_allows_with_warnings_and_audit_annotations() {
        let policy = Policy {
            mode: Mode::Audit,
            ..Policy::default()
        };
        let object = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [
            {"name": "a", "image": format!("{REPO}@{BAD}")}, {"name": "b", "image": "nginx"}]}});
        let (a, v) = response(Endpoint::Mutate, &review_of("CREATE", object, None), &policy);
        assert!(a.allowed);
        let r = &v["response"];
        assert!(r.get("patch").is_none());
        assert_eq!(
            r["warnings"][0],
            "digest-gate audit: \"a\" would be rewritten to sha256:8af20e48bb48"
        );
        assert_eq!(
            r["warnings"][1],
            "digest-gate audit: \"b\" would be denied: no registry domain"
        );
        assert!(
            r["auditAnnotations"]["would-deny"]
                .as_str()
                .unwrap()
                .contains("/spec/containers/1/image")
        );
        assert!(
            r["auditAnnotations"]["would-rewrite"]
                .as_str()
                .unwrap()
                .contains(GOOD)
        );
    }

    #[test]
    fn operations() {
        let revoked = pod(&format!("{REPO}@{BAD}"));
        for op in ["DELETE", "CONNECT"] {
            let (a, _) = response(
                Endpoint::Mutate,
                &review_of(op, revoked.clone(), None),
                &Policy::default(),
            );
            assert!(a.allowed, "{op}");
        }
        // UPDATE judges only what changed.
        let mut relabelled = revoked.clone();
        relabelled["metadata"]["labels"] = json!({"x": "y"});
        let body = review_of("UPDATE", relabelled, Some(revoked.clone()));
        assert!(response(Endpoint::Validate, &body, &Policy::default()).0.allowed);
        let body = review_of("UPDATE", pod("nginx"), Some(revoked.clone()));
        assert!(!response(Endpoint::Validate, &body, &Policy::default()).0.allowed);
        // Objects being deleted are never blocked.
        let mut finalizing = pod("nginx");
        finalizing["metadata"]["deletionTimestamp"] = json!("2026-12-02T10:00:00Z");
        assert!(
            response(
                Endpoint::Mutate,
                &review_of("UPDATE", finalizing, None),
                &Policy::default()
            )
            .0
            .allowed
        );
        let (a, v) = response(
            Endpoint::Mutate,
            &review_of("PATCH", revoked, None),
            &Policy::default(),
        );
        assert!(!a.allowed);
        assert_eq!(v["response"]["status"]["code"], 400);
    }

    #[test]
    fn ephemeral_container_updates_patch_without_metadata() {
        let old = pod(&format!("{REPO}@{GOOD}"));
        let mut new = old.clone();
        new["spec"]["ephemeralContainers"] =
            json!([{"name": "debug", "image": format!("{REPO}:v1.21.0-15")}]);
        let mut review: Value = serde_json::from_slice(&review_of("UPDATE", new.clone(), Some(old))).unwrap();
        review["request"]["subResource"] = json!("ephemeralcontainers");
        let (a, v) = response(
            Endpoint::Mutate,
            &serde_json::to_vec(&review).unwrap(),
            &Policy::default(),
        );
        assert_eq!(a.verdict, ObjectVerdict::Rewrite);
        let patch = base64::engine::general_purpose::STANDARD
            .decode(v["response"]["patch"].as_str().unwrap())
            .unwrap();
        let ops: Vec<Value> = serde_json::from_slice(&patch).unwrap();
        assert_eq!(
            ops,
            [
                json!({"op": "replace", "path": "/spec/ephemeralContainers/0/image", "value": format!("{REPO}:v1.21.0-15@{GOOD}")})
            ]
        );
    }

    #[test]
    fn unknown_kinds_are_allowed_and_marked_skipped() {
        let mut review: Value =
            serde_json::from_slice(&review_of("CREATE", json!({"kind": "Service"}), None)).unwrap();
        review["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Service"});
        let (a, _) = response(
            Endpoint::Mutate,
            &serde_json::to_vec(&review).unwrap(),
            &Policy::default(),
        );
        assert!(a.allowed);
        assert_eq!(a.verdict, ObjectVerdict::Skipped);
    }

    #[test]
    fn unusable_reviews_are_errors() {
        let p = Policy::default();
        let list = allowlist();
        let bad = |body: &[u8]| answer(Endpoint::Mutate, body, rules(&p, &list)).unwrap_err();
        assert!(matches!(bad(b"{"), BadReview::Decode(_)));
        assert!(matches!(bad(b"[]"), BadReview::Decode(_)));
        assert_eq!(
            bad(br#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}"#),
            BadReview::ApiVersion("admission.k8s.io/v1beta1".into())
        );
        assert_eq!(
            bad(br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#),
            BadReview::NoRequest
        );
        let no_uid = br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "", "kind": {"kind": "Pod"}, "operation": "CREATE"}}"#;
        assert_eq!(bad(no_uid), BadReview::NoUid);
        let wrong_type = br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7, "kind": {"kind": "Pod"}, "operation": "CREATE"}}"#;
        assert!(matches!(bad(wrong_type), BadReview::Decode(m) if m.contains("invalid type")));
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
            Just(json!("CREATE")),
            Just(json!("UPDATE")),
            Just(json!(format!("{REPO}@{BAD}"))),
            Just(json!(format!("{REPO}:v1.21.0-15"))),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    "(containers|image|name|spec|metadata|kind|\\PC{0,6})",
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Arbitrary JSON in every field of a review: never a panic, and any
        /// patch, once applied, leaves nothing more to rewrite.
        #[test]
        fn any_review_gets_an_answer_and_patches_settle(
            fields in proptest::collection::vec(any_json(), 8),
            keep in proptest::collection::vec(proptest::bool::ANY, 8),
            image_a in any_json(),
        ) {
            let mut object = pod(&format!("{REPO}@{BAD}"));
            object["spec"]["containers"][0]["image"] = image_a;
            let mut request = serde_json::from_slice::<Value>(&review_of("CREATE", object, None)).unwrap()["request"].take();
            for (i, key) in ["uid", "kind", "operation", "object", "oldObject", "dryRun", "namespace", "subResource"].iter().enumerate() {
                if !keep[i] {
                    request[*key] = fields[i].clone();
                }
            }
            let body = serde_json::to_vec(&json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request.clone()})).unwrap();
            let list = allowlist();
            if let Ok(answer) = answer(Endpoint::Mutate, &body, rules(&Policy::default(), &list)) {
                let v: Value = serde_json::from_slice(&answer.body).unwrap();
                proptest::prop_assert_eq!(&v["apiVersion"], API_VERSION);
                if let Some(p) = v["response"]["patch"].as_str() {
                    let ops: json_patch::Patch = serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(p).unwrap()).unwrap();
                    let mut patched = request["object"].clone();
                    proptest::prop_assert!(json_patch::patch(&mut patched, &ops).is_ok());
                    request["object"] = patched;
                    let again = serde_json::to_vec(&json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request})).unwrap();
                    let second = answer_value(&again, &list);
                    proptest::prop_assert!(second["response"].get("patch").is_none(), "{}", second);
                }
            }
        }
    }

    fn answer_value(body: &[u8], list: &Allowlist) -> Value {
        serde_json::from_slice(
            &answer(Endpoint::Mutate, body, rules(&Policy::default(), list))
                .unwrap()
                .body,
        )
        .unwrap()
    }

    #[test]
    fn long_names_keep_warnings_short() {
        let long = "c".repeat(63);
        let object = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": long, "image": format!("{REPO}:v1.21.0-15")}]}});
        let (_, v) = response(
            Endpoint::Mutate,
            &review_of("CREATE", object, None),
            &Policy::default(),
        );
        let w = v["response"]["warnings"][0].as_str().unwrap();
        assert!(w.chars().count() <= MAX_WARNING_LEN, "{w}");
    }

    /// The apiserver reinvokes the mutating webhook after a later one added
    /// an image. It keeps the first value of an audit annotation key, so the
    /// second answer must use its own key, and the object's record says
    /// which invocation rewrote what.
    #[test]
    fn a_reinvocation_gets_its_own_audit_annotation_key() {
        let decode = |v: &Value| -> json_patch::Patch {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v["response"]["patch"].as_str().unwrap())
                .unwrap();
            serde_json::from_slice(&bytes).unwrap()
        };
        let mut object = pod(&format!("{REPO}@{BAD}"));
        let (_, first) = response(
            Endpoint::Mutate,
            &review_of("CREATE", object.clone(), None),
            &Policy::default(),
        );
        let keys = |v: &Value| -> Vec<String> {
            v["response"]["auditAnnotations"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        assert_eq!(keys(&first), ["rewritten-images"]);
        json_patch::patch(&mut object, &decode(&first)).unwrap();
        // A sidecar injector adds a tag-only image; the same request comes back.
        object["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "sidecar", "image": format!("{REPO}:v1.21.0-15")}));
        let (_, second) = response(
            Endpoint::Mutate,
            &review_of("CREATE", object.clone(), None),
            &Policy::default(),
        );
        assert_eq!(keys(&second), ["rewritten-images-2"]);
        let record: Value = serde_json::from_str(
            second["response"]["auditAnnotations"]["rewritten-images-2"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            record,
            json!({"/spec/containers/1/image": {"from": format!("{REPO}:v1.21.0-15"), "to": format!("{REPO}:v1.21.0-15@{GOOD}"), "promotedBy": "plain list (l.txt:1)"}})
        );
        json_patch::patch(&mut object, &decode(&second)).unwrap();
        let history: Value = serde_json::from_str(
            object["metadata"]["annotations"][REWRITTEN_ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(history["/spec/containers/0/image"].get("invocation"), None);
        assert_eq!(history["/spec/containers/1/image"]["invocation"], 2);
        // A third call, with a third image, is the third invocation.
        object["spec"]["containers"][1]["image"] = json!(format!("{REPO}@{BAD}"));
        let (_, third) = response(
            Endpoint::Mutate,
            &review_of("CREATE", object, None),
            &Policy::default(),
        );
        assert_eq!(keys(&third), ["rewritten-images-3"]);
        // Audit mode counts the same way from the object as it arrives.
        let audit = Policy {
            mode: Mode::Audit,
            ..Policy::default()
        };
        let mut audited = pod(&format!("{REPO}@{BAD}"));
        audited["metadata"]["annotations"] = json!({
            REWRITTEN_ANNOTATION: history.to_string()
        });
        let (_, v) = response(Endpoint::Mutate, &review_of("CREATE", audited, None), &audit);
        assert_eq!(keys(&v), ["would-rewrite-3"]);
    }
}
