//! The AdmissionReview's wire types (`admission.k8s.io/v1`), our own: what
//! is decoded of a review (its objects pruned to what the walkers read) and
//! what is encoded of an answer, field by field as the apiserver reads it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{API_VERSION, BadReview};
use crate::objects;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReviewIn<O> {
    api_version: Option<String>,
    kind: Option<String>,
    request: Option<RequestIn<O>>,
}

#[derive(Deserialize)]
pub(super) struct GroupVersionKind {
    #[serde(default)]
    pub(super) group: String,
    #[serde(default)]
    pub(super) kind: String,
}

/// A review's request, its objects decoded as `O`: pruned to what the
/// walkers read ([`ObjectIn`]) for the image reviews, whole for the
/// allowlist check.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RequestIn<O = ObjectIn> {
    pub(super) uid: String,
    pub(super) kind: GroupVersionKind,
    #[serde(default)]
    pub(super) sub_resource: Option<String>,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) namespace: Option<String>,
    pub(super) operation: String,
    #[serde(default = "none")]
    pub(super) object: Option<O>,
    #[serde(default = "none")]
    pub(super) old_object: Option<O>,
    #[serde(default)]
    pub(super) dry_run: Option<bool>,
}

/// An object decoded with only what the walkers read (see
/// [`objects::OBJECT`]): a pod's env, probes and managedFields are skipped
/// without being allocated, which is most of a review's decoding cost.
pub(super) struct ObjectIn(pub(super) Value);

/// Serde's `default` for an optional field of a generic type.
fn none<O>() -> Option<O> {
    None
}

/// What [`encode`] reads of a decoded object.
pub(super) trait Decoded {
    fn value(&self) -> &Value;
}

impl Decoded for ObjectIn {
    fn value(&self) -> &Value {
        &self.0
    }
}

/// An object not read: a review whose objects are too large to read is
/// still answered, by its uid, kind and name.
pub(super) struct Unread;

impl Decoded for Unread {
    fn value(&self) -> &Value {
        static NULL: Value = Value::Null;
        &NULL
    }
}

impl<'de> Deserialize<'de> for Unread {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer).map(|_| Unread)
    }
}

/// An object decoded whole (an allowlist ConfigMap, an InstallPlan), its
/// values counted against [`REVIEW_VALUES`] as a pruned one's are.
pub(super) struct WholeIn(pub(super) Value);

impl Decoded for WholeIn {
    fn value(&self) -> &Value {
        &self.0
    }
}

impl<'de> Deserialize<'de> for WholeIn {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::DeserializeSeed;
        objects::Pruned(&objects::WHOLE)
            .deserialize(deserializer)
            .map(WholeIn)
    }
}

impl<'de> Deserialize<'de> for ObjectIn {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::DeserializeSeed;
        objects::Pruned(&objects::OBJECT)
            .deserialize(deserializer)
            .map(ObjectIn)
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReviewOut<'a> {
    pub(super) api_version: &'static str,
    pub(super) kind: &'static str,
    pub(super) response: ResponseOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ResponseOut<'a> {
    pub(super) uid: &'a str,
    pub(super) allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) status: Option<StatusOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) warnings: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) audit_annotations: BTreeMap<String, String>,
}

/// `metav1.Status` as the apiserver reads it from a denial.
#[derive(Serialize)]
pub(super) struct StatusOut {
    pub(super) status: &'static str,
    pub(super) code: u16,
    pub(super) reason: &'static str,
    pub(super) message: String,
}

/// The most values a review's object and old object may keep between them
/// (see [`objects::prune::bounded`]): ~18 MiB at the dearest, small
/// mappings; a real object keeps a few hundred, and what the apiserver
/// stores (1.5 MiB) rarely reaches 65,536 of anything.
pub const REVIEW_VALUES: usize = 65_536;

/// Decodes an `admission.k8s.io/v1` AdmissionReview's request.
/// [`BadReview::TooLarge`]: its objects hold more than [`REVIEW_VALUES`].
pub(super) fn decode<O: serde::de::DeserializeOwned>(body: &[u8]) -> Result<RequestIn<O>, BadReview> {
    let (review, ran_out) = objects::prune::bounded(REVIEW_VALUES, || serde_json::from_slice(body));
    let review: ReviewIn<O> = review.map_err(|e| match ran_out {
        true => BadReview::TooLarge(e.to_string()),
        false => explain_decode_error(body, e),
    })?;
    match review.api_version.as_deref() {
        Some(API_VERSION) => {}
        other => return Err(BadReview::ApiVersion(other.unwrap_or("").to_owned())),
    }
    match review.kind.as_deref() {
        Some("AdmissionReview") => {}
        other => return Err(BadReview::Kind(other.unwrap_or("").to_owned())),
    }
    let request = review.request.ok_or(BadReview::NoRequest)?;
    if request.uid.is_empty() {
        return Err(BadReview::NoUid);
    }
    Ok(request)
}

/// A review that does not decode may simply be another version (v1beta1
/// requests differ in shape); say so rather than name a missing field.
pub(super) fn explain_decode_error(body: &[u8], error: serde_json::Error) -> BadReview {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Head {
        api_version: Option<String>,
        kind: Option<String>,
    }
    match serde_json::from_slice::<Head>(body) {
        Ok(Head {
            api_version: Some(v), ..
        }) if v != API_VERSION => BadReview::ApiVersion(v),
        Ok(Head { kind: Some(k), .. }) if k != "AdmissionReview" => BadReview::Kind(k),
        _ => BadReview::Decode(error.to_string()),
    }
}
