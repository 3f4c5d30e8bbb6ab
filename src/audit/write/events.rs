//! `--events`: a Warning Event per finding, named after it, so creating it
//! again is refused as AlreadyExists.

use std::collections::BTreeSet;
use std::time::SystemTime;

use kube::core::Request;
use kube::core::params::PostParams;
use serde_json::{Value, json};

use super::reports::result_of;
use super::*;
use crate::audit::{AuditError, Connection, RequestFailure};
use crate::report::{ImageReport, ObjectReport};
use k8s_openapi::api::core::v1::Event;
use kube::core::Resource;

/// Creates a Warning Event for each finding of each object; a finding that
/// already has one (its name is derived from the object's uid and the
/// finding) is counted as unchanged, not repeated.
pub async fn events(
    connection: &Connection,
    objects: &[ObjectReport],
    owner: Option<&Value>,
    now: SystemTime,
) -> Result<Written, AuditError> {
    let time = humantime::format_rfc3339_seconds(now).to_string();
    let mut written = Written::default();
    let mut seen = BTreeSet::new();
    for object in objects {
        for image in object.images.iter().filter(|i| result_of(i).needs_action()) {
            let (Some(kind), Some(name)) = (&object.kind, &object.name) else {
                continue;
            };
            let event_name = event_name(object, image);
            // Cluster-scoped objects' Events go to "default", as kubectl
            // looks for them there.
            let ns = object.namespace.as_deref().unwrap_or("default");
            if !seen.insert((ns.to_owned(), event_name.clone())) {
                continue;
            }
            let mut involved =
                json!({"apiVersion": object.api_version, "kind": kind, "name": name, "uid": object.uid});
            if let Some(ns) = &object.namespace {
                involved["namespace"] = ns.clone().into();
            }
            let event = Warning {
                name: &event_name,
                namespace: ns,
                involved,
                reason: EVENT_REASON,
                message: format!("digest-gate: {}", image.reason),
            };
            create(connection, &event, (owner, &time), &mut written).await?;
        }
    }
    Ok(written)
}

/// A Warning Event to create.
struct Warning<'a> {
    name: &'a str,
    namespace: &'a str,
    involved: Value,
    reason: &'static str,
    message: String,
}

/// Creates `event` (owned by `owner`, at `time`); one that exists already
/// (its name is derived from what it says) is counted as unchanged.
async fn create(
    connection: &Connection,
    event: &Warning<'_>,
    (owner, time): (Option<&Value>, &str),
    written: &mut Written,
) -> Result<(), AuditError> {
    let mut metadata =
        json!({"name": event.name, "namespace": event.namespace, "labels": {MANAGED_BY.0: MANAGED_BY.1}});
    if let Some(owner) = owner {
        metadata["ownerReferences"] = json!([owner]);
    }
    let body = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": metadata,
        "involvedObject": event.involved,
        "reason": event.reason,
        "message": event.message,
        "type": "Warning",
        "source": {"component": POLICY},
        "reportingComponent": POLICY,
        "reportingInstance": POLICY,
        "firstTimestamp": time,
        "lastTimestamp": time,
        "count": 1,
    });
    let kind = event.involved["kind"].as_str().unwrap_or_default();
    let name = event.involved["name"].as_str().unwrap_or_default();
    let at = format!("create an Event for {kind} \"{name}\"");
    let request = Request::new(Event::url_path(&(), Some(event.namespace)))
        .create(&PostParams::default(), body.to_string().into_bytes())
        .map_err(|e| AuditError::Request(format!("cannot {at}: {e}")))?;
    match connection.client.request::<serde::de::IgnoredAny>(request).await {
        Ok(_) => written.created += 1,
        Err(kube::Error::Api(s)) if s.code == 409 => written.unchanged += 1,
        Err(e) => match connection.describe(&at, &e) {
            RequestFailure::Fatal(m) => return Err(AuditError::Unreachable(m)),
            RequestFailure::Request(m) => written.errors.push(m),
        },
    }
    Ok(())
}

/// A Warning Event ([`PREFLIGHT_EVENT_REASON`]) on each waiting InstallPlan
/// whose approval would break something: `(plan, message)`, the plan as a
/// result's `resources` names it. Named after the plan and what is said,
/// so a judgement unchanged writes nothing and a new one a new Event.
pub async fn plan_events(
    connection: &Connection,
    plans: &[(Value, String)],
    owner: Option<&Value>,
    now: SystemTime,
) -> Result<Written, AuditError> {
    let time = humantime::format_rfc3339_seconds(now).to_string();
    let mut written = Written::default();
    for (plan, message) in plans {
        let (Some(ns), Some(name)) = (plan["namespace"].as_str(), plan["name"].as_str()) else {
            continue;
        };
        let event_name = named(name, &[name, message]);
        let event = Warning {
            name: &event_name,
            namespace: ns,
            involved: plan.clone(),
            reason: PREFLIGHT_EVENT_REASON,
            message: message.clone(),
        };
        create(connection, &event, (owner, &time), &mut written).await?;
    }
    Ok(written)
}

/// `<object>.<16 hex digits>`: the digits hash the object's uid and the
/// finding (path, code, message), so the same finding on the same object
/// always names the same Event, and a new one (another digest promoted,
/// the object recreated) a new Event.
pub(super) fn event_name(object: &ObjectReport, image: &ImageReport) -> String {
    let parts = [
        object.uid.as_deref().unwrap_or_default(),
        object.kind.as_deref().unwrap_or_default(),
        object.name.as_deref().unwrap_or_default(),
        &image.path,
        image.code.into(),
        &image.reason,
    ];
    named(object.name.as_deref().unwrap_or("object"), &parts)
}

/// `<name>.<16 hex digits>`, the digits a hash of `parts`.
fn named(name: &str, parts: &[&str]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        ctx.update(part.as_bytes());
        ctx.update(&[0]);
    }
    let digest = ctx.finish();
    let hex: String = digest.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect();
    // A name is a DNS subdomain (≤ 253); object names can be that long too.
    let cut = name.char_indices().nth(200).map_or(name.len(), |(i, _)| i);
    format!("{}.{hex}", name[..cut].trim_end_matches('.'))
}
