//! What an audit writes, and nothing else: `wgpolicyk8s.io/v1alpha2`
//! policy reports (`--policy-reports`), the format Kyverno and Policy
//! Reporter users already read, and Warning Events (`--events`) on the
//! objects with findings.
//!
//! A rerun that finds the same must change nothing, so a dashboard or an
//! `kubectl get events -w` shows news only: reports have stable names, a
//! result keeps the timestamp of the run that first found it, an unchanged
//! report is not written, and an Event's name is derived from the finding,
//! so creating it again is refused as AlreadyExists.

mod cleanup;
mod events;
mod reports;

use kube::core::{ApiResource, DynamicObject, GroupVersionKind, Resource};

pub use cleanup::{Removed, cluster_role_owner, cluster_role_uid, remove, remove_settled};
pub use events::{events, plan_events};
pub use reports::{Gathered, PullResult, needs_action, policy_reports};

/// The policy name in every result, and the name of every report.
pub const POLICY: &str = "digest-gate";
/// The policy name in a pre-flight's results.
pub const PREFLIGHT_POLICY: &str = "digest-gate-preflight";
/// How a pre-flight's reports' names start (`preflight --policy-reports`).
pub const PREFLIGHT_PREFIX: &str = "digest-gate-preflight-";
/// The label on everything an audit writes: what it lists to find its own,
/// and what `helm uninstall` and a person select to remove it.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "digest-gate");
/// The Event reason.
pub const EVENT_REASON: &str = "UnpromotedImage";
/// The reason of the Event on a waiting InstallPlan whose approval would
/// break something (`serve --audit-preflight`).
pub const PREFLIGHT_EVENT_REASON: &str = "UpgradeWouldBreak";

/// The report kinds an audit writes, `wgpolicyk8s.io/v1alpha2`: the
/// namespaced PolicyReport, or the ClusterPolicyReport.
pub(super) fn report_resource(namespaced: bool) -> ApiResource {
    let (kind, plural) = match namespaced {
        true => ("PolicyReport", "policyreports"),
        false => ("ClusterPolicyReport", "clusterpolicyreports"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("wgpolicyk8s.io", "v1alpha2", kind), plural)
}

/// Where objects of `resource` in `namespace` (every one, or a
/// cluster-scoped kind: `None`) are listed and created: kube's path for
/// the type, never one written by hand.
pub(super) fn collection(resource: &ApiResource, namespace: Option<&str>) -> String {
    DynamicObject::url_path(resource, namespace)
}
/// etcd refuses objects over 1.5 MiB; a report stays under this, dropping
/// `pass` results first (the summary still counts them).
pub(super) const MAX_REPORT_BYTES: usize = 1 << 20;

/// What was written, for the run's notes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Written {
    pub created: usize,
    pub updated: usize,
    pub unchanged: usize,
    /// What a report left out.
    pub notes: Vec<String>,
    /// Writes the cluster refused.
    pub errors: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::cleanup::*;
    use super::events::*;
    use super::reports::*;
    use super::*;
    use crate::judge::ImageVerdict;
    use crate::report::ObjectReport;
    use crate::testing::{BAD, REPO, incident_allowlist};
    use serde_json::{Value, json};

    fn stale_pod(policy: &crate::policy::Policy) -> ObjectReport {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "models", "uid": "u-1"},
            "spec": {"containers": [{"name": "ovms", "image": format!("{REPO}@{BAD}")},
                                    {"name": "sidecar", "image": format!("{REPO}@{BAD}")}]}});
        let list = incident_allowlist();
        let j = crate::judge::judge(&pod, None, policy, &list);
        ObjectReport::new("cluster:e2e".into(), &pod, &j, &list, |_| None)
    }

    #[test]
    fn a_stale_image_fails_and_names_its_object() {
        let object = stale_pod(&Default::default());
        let results = results_of(&object);
        assert_eq!(results.len(), 2);
        let r = &results[0].1;
        assert_eq!(
            (&r["policy"], &r["rule"], &r["result"], &r["severity"]),
            (
                &json!("digest-gate"),
                &json!("digest_not_promoted"),
                &json!("fail"),
                &json!("high")
            )
        );
        assert_eq!(
            r["resources"][0],
            json!({"apiVersion": "v1", "kind": "Pod", "namespace": "models", "name": "p", "uid": "u-1"})
        );
        assert_eq!(r["properties"]["container"], "ovms");
        let gathered = Gathered::of([&object], false);
        assert_eq!(
            summary(&gathered.namespaces[&Some("models".into())].counts)["fail"],
            2
        );
    }

    #[test]
    fn audit_mode_would_rewrite_is_a_warning() {
        let policy = crate::policy::Policy {
            mode: crate::policy::Mode::Audit,
            ..Default::default()
        };
        let results = results_of(&stale_pod(&policy));
        assert_eq!(results[0].1["result"], "warn");
    }

    #[test]
    fn passes_are_counted_and_listed_only_when_asked() {
        let stale = stale_pod(&Default::default());
        let mut fine = stale.clone();
        for image in &mut fine.images {
            image.verdict = ImageVerdict::Allow;
            image.rewrite = None;
        }
        for (passes, listed) in [(false, 2), (true, 4)] {
            let gathered = Gathered::of([&stale, &fine], passes);
            let ns = &gathered.namespaces[&Some("models".into())];
            assert_eq!(ns.results.len(), listed, "passes listed: {passes}");
            let summary = summary(&ns.counts);
            assert_eq!((&summary["fail"], &summary["pass"]), (&json!(2), &json!(2)));
        }
    }

    #[test]
    fn a_finding_seen_before_keeps_its_first_timestamp() {
        let object = stale_pod(&Default::default());
        let gathered = Gathered::of([&object], false);
        let identities = &gathered.namespaces[&Some("models".into())].results;
        let old: Vec<Value> = identities.iter().map(|r| stamped(r, None, 7)).collect();
        let stored = StoredItem {
            metadata: StoredMeta {
                name: POLICY.into(),
                namespace: Some("models".into()),
                owner_references: Vec::new(),
            },
            results: old.clone(),
            summary: Value::Null,
        }
        .kept(false);
        let new: Vec<Value> = identities.iter().map(|r| stamped(r, Some(&stored), 99)).collect();
        assert_eq!(new, old);
        assert_eq!(stored.fingerprint, Content::fingerprint(&new, &Value::Null));
    }

    #[test]
    fn event_names_are_the_findings_own() {
        let object = stale_pod(&Default::default());
        let (a, b) = (&object.images[0], &object.images[1]);
        assert_eq!(event_name(&object, a), event_name(&object, a));
        assert_ne!(event_name(&object, a), event_name(&object, b));
        assert!(event_name(&object, a).starts_with("p."));
        let mut long = object.clone();
        long.name = Some("x".repeat(253));
        assert!(event_name(&long, a).len() <= 253);
    }

    #[test]
    fn cleanup_deletes_only_what_an_audit_wrote_and_the_owner_owns() {
        let item = |v: Value| serde_json::from_value::<Item>(v).unwrap();
        let owned = json!({"name": "p.0123", "namespace": "m", "uid": "e",
                           "ownerReferences": [{"uid": "role-1", "kind": "ClusterRole"}]});
        let event = item(json!({"metadata": owned, "reason": EVENT_REASON}));
        assert!(event.ours("Event", None));
        assert!(event.ours("Event", Some("role-1")));
        assert!(!event.ours("Event", Some("role-2")), "another release's");
        let other =
            item(json!({"metadata": {"name": "p.1", "namespace": "m", "uid": "f"}, "reason": "Pulled"}));
        assert!(
            !other.ours("Event", None),
            "labelled by someone else, not an audit's reason"
        );
        let report = item(json!({"metadata": {"name": POLICY, "namespace": "m", "uid": "r"}}));
        assert!(report.ours("PolicyReport", None));
        assert!(
            !report.ours("PolicyReport", Some("role-1")),
            "written by the CLI, owned by no release"
        );
        let kyverno =
            item(json!({"metadata": {"name": "cpol-require-labels", "namespace": "m", "uid": "k"}}));
        assert!(!kyverno.ours("PolicyReport", None));
    }

    #[test]
    fn a_preflight_lists_each_category_under_its_own_name() {
        use crate::report::UpgradeChange;
        let mut object = stale_pod(&Default::default());
        object.images[0].change = Some(UpgradeChange::AlreadyStale);
        object.images[1].change = Some(UpgradeChange::FixedByUpgrade);
        let mut gathered = Gathered::preflight("install-x");
        gathered.add_upgrade(&object, "rhods-operator.1.21.0");
        assert_eq!(gathered.name(), "digest-gate-preflight-install-x");
        let ns = &gathered.namespaces[&Some("models".into())];
        // What approving fixes is counted, not listed.
        let listed: Value = serde_json::from_str(&ns.results[0]).unwrap();
        assert_eq!(ns.results.len(), 1);
        assert_eq!(
            (
                &listed["policy"],
                &listed["rule"],
                &listed["result"],
                &listed["severity"]
            ),
            (
                &json!("digest-gate-preflight"),
                &json!("already_stale"),
                &json!("warn"),
                &json!("medium")
            )
        );
        assert_eq!(listed["properties"]["target"], "rhods-operator.1.21.0");
        let summary = summary(&ns.counts);
        assert_eq!(
            (&summary["warn"], &summary["pass"], &summary["fail"]),
            (&json!(1), &json!(1), &json!(0))
        );
        // cleanup takes a pre-flight's reports back, and not a look-alike.
        let item = |name: &str| {
            serde_json::from_value::<Item>(json!({"metadata": {"name": name, "uid": "u"}})).unwrap()
        };
        assert!(item("digest-gate-preflight-install-x").ours("PolicyReport", None));
        assert!(!item("digest-gate-preflightish").ours("PolicyReport", None));
    }

    #[test]
    fn passing_results_give_way_when_a_report_would_not_fit() {
        let object = stale_pod(&Default::default());
        let fail = results_of(&object).remove(0).1;
        let mut pass = fail.clone();
        pass["result"] = "pass".into();
        pass["message"] = "x".repeat(4096).into();
        let mut results = vec![pass; 300];
        results.push(fail);
        let mut notes = Vec::new();
        let counts = [(PolicyResult::Pass, 300), (PolicyResult::Fail, 1)].into();
        let content = fit(results, summary(&counts), Some("models"), &mut notes);
        assert_eq!(content.results.len(), 1);
        assert_eq!(
            (content.summary["pass"].clone(), content.summary["fail"].clone()),
            (json!(300), json!(1))
        );
        assert!(notes[0].contains("300 passing results"), "{notes:?}");
    }
}
