//! The AdmissionReview's wire types (`admission.k8s.io/v1`), our own: what
//! is decoded of a review (its objects pruned to what the walkers read) and
//! what is encoded of an answer, field by field as the apiserver reads it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{API_VERSION, BadReview};
use crate::objects::{self, Shape};

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

/// A review's request, its objects decoded as `O`: pruned to what its
/// endpoint reads ([`ObjectIn`], [`PlanIn`], [`ConfigMapIn`]).
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
    #[serde(default)]
    pub(super) user_info: UserInfo,
}

/// Serde's `default` for an optional field of a generic type.
fn none<O>() -> Option<O> {
    None
}

/// Who sent the request, as the apiserver authenticated them: what decides
/// who may write an InstallPlan's judgement.
#[derive(Default, Deserialize)]
pub(super) struct UserInfo {
    #[serde(default)]
    pub(super) username: String,
}

/// What [`encode`] reads of a decoded object.
pub(super) trait Decoded {
    fn value(&self) -> &Value;
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

/// An object type decoded with only what its endpoint reads, by `$shape`:
/// the rest (env, probes, managedFields, status) is skipped without being
/// allocated or recursed into, so neither its size nor its depth reaches
/// a reader; what is kept counts against [`REVIEW_VALUES`].
macro_rules! shaped {
    ($(#[$doc:meta])* $name:ident, $shape:expr) => {
        $(#[$doc])*
        pub(super) struct $name(pub(super) Value);

        impl Decoded for $name {
            fn value(&self) -> &Value {
                &self.0
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                use serde::de::DeserializeSeed;
                objects::Pruned($shape).deserialize(deserializer).map($name)
            }
        }
    };
}

shaped!(
    /// An object as the walkers read it (see [`objects::OBJECT`]): a pod's
    /// env, probes and managedFields are skipped, which is most of a
    /// review's decoding cost.
    ObjectIn,
    &objects::OBJECT
);
shaped!(
    /// An InstallPlan as its approval is answered: its name, annotations
    /// and `spec.approved`.
    PlanIn,
    &PLAN
);
shaped!(
    /// An allowlist ConfigMap: its name and its keys.
    ConfigMapIn,
    &CONFIGMAP
);

static KEEP: Shape = Shape::Keep;
static NAMED: Shape = Shape::Object(&[("name", &KEEP), ("namespace", &KEEP), ("annotations", &KEEP)]);
static PLAN: Shape = Shape::Object(&[
    ("apiVersion", &KEEP),
    ("kind", &KEEP),
    ("metadata", &NAMED),
    ("spec", &Shape::Object(&[("approved", &KEEP)])),
]);
static CONFIGMAP: Shape = Shape::Object(&[
    ("apiVersion", &KEEP),
    ("kind", &KEEP),
    ("metadata", &NAMED),
    ("data", &KEEP),
    ("binaryData", &KEEP),
]);

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
