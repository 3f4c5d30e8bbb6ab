//! The SARIF 2.1.0 report (`--output sarif`), for code scanning in GitHub
//! and GitLab: one rule per reason code, one result per image that needs a
//! change, located at the file, line and column of the image.
//!
//! Levels follow what the admission does: `error` for a denial, `warning`
//! for a rewrite, `note` for what audit mode would do. Files that could not
//! be read, and files skipped, are the invocation's notifications.

use serde_json::{Value, json};

use strum::VariantArray;

use crate::judge::ImageVerdict;
use crate::policy::Reason;
use crate::published::State;
use crate::report::{ImageReport, ObjectReport, Report, UpgradeChange};

/// The schema the document names, as code scanning expects it.
const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";
const INFORMATION_URI: &str = "https://github.com/digest-gate/digest-gate";

/// The rules: one per finding reason, then, with `--registry`, one per
/// registry state that is not ok (after the reasons' rules, so their
/// indexes stay).
fn rules(registry: bool) -> (Vec<Reason>, &'static [State]) {
    let reasons = Reason::VARIANTS
        .iter()
        .copied()
        .filter(|r| r.is_finding())
        .collect();
    let states: &[State] = if registry {
        &[
            State::Missing,
            State::NotRunnable,
            State::PlatformMissing,
            State::Unverifiable,
        ]
    } else {
        &[]
    };
    (reasons, states)
}

/// An object's results: one per image that needs a change, and, with
/// `--registry` (`registry`), one per image the registry cannot serve. The
/// document lists every object's first kind before any of the second.
pub fn object_results(registry: bool, object: &ObjectReport) -> (Vec<Value>, Vec<Value>) {
    let (reasons, states) = rules(registry);
    let policy = object
        .images
        .iter()
        .filter_map(|image| result(object, image, &reasons))
        .collect();
    let registry = object
        .images
        .iter()
        .filter_map(|image| registry_result(object, image, states, reasons.len()))
        .collect();
    (policy, registry)
}

/// The SARIF document for `report`, with `results` as its run's results.
pub fn document(report: &Report, results: Value) -> Value {
    let (reasons, states) = rules(report.summary.registry.is_some());
    let mut rule_objects: Vec<Value> = reasons.iter().map(|r| rule(*r)).collect();
    rule_objects.extend(states.iter().map(|s| registry_rule(*s)));
    let notifications: Vec<Value> = report
        .errors
        .iter()
        .map(|e| notification("error", e))
        .chain(
            report
                .skipped
                .iter()
                .map(|s| notification("note", &format!("skipped {}: {}", s.source, s.reason))),
        )
        .chain(report.notes.iter().map(|n| notification("note", n)))
        .collect();
    run(rule_objects, notifications, report.errors.is_empty(), results)
}

/// A digest an upgrade's target promotes that the registry did not
/// confirm can be pulled (`preflight --registry`).
pub struct PullFinding<'a> {
    /// The plan and CSV, as [`upgrade_document`]'s objects name them.
    pub target: &'a str,
    /// `repository@digest`.
    pub reference: String,
    pub state: State,
    pub detail: &'a str,
}

/// The rules `preflight --registry` adds after the categories': a digest
/// that will not pull, and one no answer was had for.
const PULL_RULES: [(&str, &str, &str); 2] = [
    (
        "unpullable_after_upgrade",
        "error",
        "The new release promotes a digest the registry (or mirror) the nodes pull from does not serve for their platforms: Pods the upgrade makes will not start.",
    ),
    (
        "unverifiable_after_upgrade",
        "warning",
        "The new release promotes a digest the registry did not answer for (credentials, network): not known to pull.",
    ),
];

/// The `preflight` document: one rule per [`UpgradeChange`], one result
/// per image an upgrade concerns (`target` names the plan and CSV, and its
/// reason `code` stays in the properties); with `--registry` (`pulls` is
/// `Some`), one result per digest that will not or may not pull.
pub fn upgrade_document<'a>(
    errors: &[String],
    notes: &[String],
    concerned: impl Iterator<Item = (&'a str, &'a ObjectReport)>,
    pulls: Option<&[PullFinding<'_>]>,
) -> Value {
    let mut rules: Vec<Value> = UpgradeChange::VARIANTS
        .iter()
        .map(|change| {
            let (level, text) = upgrade_rule(*change);
            json!({
                "id": change,
                "shortDescription": {"text": text},
                "defaultConfiguration": {"level": level},
                "helpUri": format!("{INFORMATION_URI}/blob/main/docs/preflight.md#each-finding"),
            })
        })
        .collect();
    let mut results = Vec::new();
    for (target, object) in concerned {
        for image in &object.images {
            let Some(change) = image.change else { continue };
            let index = UpgradeChange::VARIANTS
                .iter()
                .position(|c| *c == change)
                .unwrap_or(0);
            results.push(json!({
                "ruleId": change,
                "ruleIndex": index,
                "level": upgrade_rule(change).0,
                "message": {"text": format!("{target}: {}", image.reason)},
                "locations": [location(object, image)],
                "properties": {"image": image.image, "code": image.code, "rewrite": image.rewrite, "target": target},
            }));
        }
    }
    if let Some(pulls) = pulls {
        let first = rules.len();
        rules.extend(PULL_RULES.iter().map(|(id, level, text)| {
            json!({
                "id": id,
                "shortDescription": {"text": text},
                "defaultConfiguration": {"level": level},
                "helpUri": format!("{INFORMATION_URI}/blob/main/docs/preflight.md#what-will-not-pull"),
            })
        }));
        for p in pulls {
            let at = usize::from(p.state == State::Unverifiable);
            let (id, level, _) = PULL_RULES[at];
            results.push(json!({
                "ruleId": id,
                "ruleIndex": first + at,
                "level": level,
                "message": {"text": format!("{}: {} ({}): {}", p.target, p.reference, p.state, p.detail)},
                "properties": {"image": p.reference, "state": p.state, "target": p.target},
            }));
        }
    }
    let notifications = errors
        .iter()
        .map(|e| notification("error", e))
        .chain(notes.iter().map(|n| notification("note", n)))
        .collect();
    run(rules, notifications, errors.is_empty(), Value::Array(results))
}

fn upgrade_rule(change: UpgradeChange) -> (&'static str, &'static str) {
    match change {
        UpgradeChange::StaleAfterUpgrade => (
            "error",
            "Complies now, and runs an image the new release does not promote once the upgrade is approved.",
        ),
        UpgradeChange::AlreadyStale => (
            "warning",
            "Runs an image nothing promotes, before the upgrade and after.",
        ),
        UpgradeChange::FixedByUpgrade => ("note", "Runs an image only the new release promotes."),
    }
}

/// A SARIF document of one run of digest-gate.
fn run(rules: Vec<Value>, notifications: Vec<Value>, successful: bool, results: Value) -> Value {
    json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "digest-gate",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": INFORMATION_URI,
                "rules": rules,
            }},
            // Columns count characters, as the YAML reader does.
            "columnKind": "unicodeCodePoints",
            "invocations": [{
                "executionSuccessful": successful,
                "toolExecutionNotifications": notifications,
            }],
            "results": results,
        }],
    })
}

fn rule(reason: Reason) -> Value {
    let level = match reason {
        Reason::TagOnly | Reason::DigestNotPromoted => "warning",
        _ => "error",
    };
    json!({
        "id": reason.label(),
        "shortDescription": {"text": reason.summary()},
        "defaultConfiguration": {"level": level},
        "helpUri": format!("{INFORMATION_URI}#decisions"),
    })
}

fn registry_rule(state: State) -> Value {
    let (level, text) = match state {
        State::Unverifiable => (
            "warning",
            "The registry could not be asked whether the image can be pulled.",
        ),
        _ => (
            "error",
            "The registry cannot serve the image the workload will run: its Pods will not start.",
        ),
    };
    json!({
        "id": format!("registry_{}", <&str>::from(state).replace('-', "_")),
        "shortDescription": {"text": text},
        "defaultConfiguration": {"level": level},
        "helpUri": format!("{INFORMATION_URI}#is-it-really-promoted"),
    })
}

/// The registry's result for one image, when its state is not ok (and a
/// denial does not already say it).
fn registry_result(
    object: &ObjectReport,
    image: &ImageReport,
    rules: &[State],
    offset: usize,
) -> Option<Value> {
    let registry = image.registry.as_ref().filter(|r| r.state != State::Ok)?;
    if image.code == Reason::PromotedUnpullable {
        return None;
    }
    let index = rules.iter().position(|s| *s == registry.state)?;
    let level = if registry.state.fails() {
        "error"
    } else {
        "warning"
    };
    let message = format!("{}: {}: {}", registry.reference, registry.state, registry.detail);
    Some(json!({
        "ruleId": format!("registry_{}", <&str>::from(registry.state).replace('-', "_")),
        "ruleIndex": offset + index,
        "level": level,
        "message": {"text": message},
        "locations": [location(object, image)],
        "properties": properties(object, json!({"image": image.image, "reference": registry.reference})),
    }))
}

/// A result's properties, and the cluster its object was read from (it
/// has no file to point into): `audit` over several clusters names each.
fn properties(object: &ObjectReport, mut properties: Value) -> Value {
    if let Some(context) = object.source.strip_prefix("cluster:") {
        properties["cluster"] = json!(context);
    }
    properties
}

/// The result for one image, or `None` when it needs no change.
fn result(object: &ObjectReport, image: &ImageReport, rules: &[Reason]) -> Option<Value> {
    let level = match (image.verdict, image.would_be) {
        (ImageVerdict::Deny, _) => "error",
        (ImageVerdict::Rewrite, _) => "warning",
        (_, Some(_)) => "note",
        _ => return None,
    };
    let index = rules.iter().position(|r| *r == image.code)?;
    let mut result = json!({
        "ruleId": image.code,
        "ruleIndex": index,
        "level": level,
        "message": {"text": image.reason},
        "locations": [location(object, image)],
    });
    // The image as written and, for a rewrite, what it becomes: what a
    // code-scanning rule or a bot acting on the results needs.
    let mut properties = json!({"image": image.image});
    if let Some(to) = &image.rewrite {
        properties["rewrite"] = json!(to);
    }
    result["properties"] = self::properties(object, properties);
    Some(result)
}

/// Where an image is: the object and path, and the file and line when
/// there is a file.
fn location(object: &ObjectReport, image: &ImageReport) -> Value {
    let kind = object.kind.as_deref().unwrap_or("object");
    let name = match (&object.namespace, &object.name) {
        (Some(ns), Some(n)) => format!("{ns}/{n}"),
        (None, Some(n)) => n.clone(),
        _ => "(unnamed)".to_owned(),
    };
    let mut location = json!({
        "logicalLocations": [{"fullyQualifiedName": format!("{kind} {name}: {}", image.path), "kind": "object"}],
    });
    // Standard input and cluster objects have no file to point into.
    if let (Some(line), false) = (
        image.line,
        object.source == "-" || object.source.starts_with("cluster:"),
    ) {
        let mut region = json!({"startLine": line});
        if let Some(column) = image.column {
            region["startColumn"] = json!(column);
        }
        location["physicalLocation"] = json!({
            "artifactLocation": {"uri": uri(&object.source)},
            "region": region,
        });
    }
    location
}

fn notification(level: &str, text: &str) -> Value {
    json!({"level": level, "message": {"text": text}})
}

/// A path as a URI reference: relative paths stay relative (code scanning
/// resolves them against the checkout), absolute ones become `file://`
/// URIs; characters a URI cannot hold are percent-encoded.
fn uri(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    if path.starts_with('/') {
        out.push_str("file://");
    }
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::uri;

    #[rstest::rstest]
    #[case::relative("manifests/runtime.yaml", "manifests/runtime.yaml")]
    #[case::absolute("/src/a b.yaml", "file:///src/a%20b.yaml")]
    #[case::reserved("dir/#1?.yaml", "dir/%231%3F.yaml")]
    #[case::non_ascii("é.yaml", "%C3%A9.yaml")]
    fn paths_are_uri_references(#[case] path: &str, #[case] want: &str) {
        assert_eq!(uri(path), want);
    }
}
