//! What an upgrade does to the objects the cluster runs: each object judged
//! by the allowlist in force now (before) and by the one the upgrade leaves
//! (after), told apart by whether each judgement has a finding. Pure.

use crate::audit::{Compared, finding};
use crate::judge::ImageVerdict;
use crate::report::{ObjectReport, UpgradeChange};

/// One object an upgrade concerns: the report of what the webhook will do
/// after it (each image's `change` set where the upgrade matters to it).
#[derive(Debug, Clone)]
pub struct Concerned {
    pub change: UpgradeChange,
    pub report: ObjectReport,
}

/// The objects `compared` holds that the upgrade concerns, judged before by
/// rule set `before` and after by `after` (indexes into each object's
/// judgements: the run's own first, then [`Compared::also`]).
pub fn concerned(compared: &[Compared], before: usize, after: usize) -> Vec<Concerned> {
    let mut out = Vec::new();
    for c in compared {
        // Only what the webhook does after the upgrade is reported: that
        // judgement alone is copied.
        let (was, mut will) = (judgement_of(c, before), judgement_of(c, after).clone());
        let Some(change) = change_of(finding(was).is_some(), finding(&will).is_some()) else {
            continue;
        };
        // The walk is the same, so the images are in the same order.
        for (image, old) in will.images.iter_mut().zip(&was.images) {
            image.change = change_of(needs_action(old), needs_action(image));
        }
        out.push(Concerned { change, report: will });
    }
    out.sort_by_key(|c| c.change);
    out
}

/// What the upgrade does to an object or an image, by whether it needs
/// action before (`was`) and after (`will`); `None`: it complies both times.
fn change_of(was: bool, will: bool) -> Option<UpgradeChange> {
    match (was, will) {
        (false, true) => Some(UpgradeChange::StaleAfterUpgrade),
        (true, true) => Some(UpgradeChange::AlreadyStale),
        (true, false) => Some(UpgradeChange::FixedByUpgrade),
        (false, false) => None,
    }
}

/// An object's judgement by rule set `i`: the run's own first, then
/// [`Compared::also`].
fn judgement_of(c: &Compared, i: usize) -> &ObjectReport {
    if i == 0 { &c.report } else { &c.also[i - 1] }
}

/// Whether the webhook would change or refuse the image (in audit mode:
/// would in rewrite mode).
fn needs_action(i: &crate::report::ImageReport) -> bool {
    matches!(i.verdict, ImageVerdict::Rewrite | ImageVerdict::Deny) || i.would_be.is_some()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::allowlist::{Allowlist, load_text};
    use crate::judge::{Rules, Subject};
    use crate::policy::Policy;
    use crate::preflight::render;

    const RUNTIME: &str = "examples/manifests/incident-servingruntime.yaml";
    const INCIDENT: &str = "sha256:7ef272bc7be866257b8126620e139d6e915ee962304d3eceba9c9d50d4e79767";
    const OLD: &str = "sha256:1201000000000000000000000000000000000000000000000000000000000000";
    const NEW: &str = "sha256:8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6";

    fn list(file: &str) -> Allowlist {
        let path = format!("{}/tests/data/allowlists/{file}", env!("CARGO_MANIFEST_DIR"));
        load_text(file, &std::fs::read_to_string(path).unwrap())
            .unwrap()
            .allowlist
    }

    /// The incident's runtime on `digest`, judged by 1.20.1 (before) and by
    /// 1.21.0 (after), as `audit::compare` judges it.
    fn compared(digest: &str, policy: &Policy) -> Compared {
        let mut object: Value = crate::yaml::parse_stream(&crate::testing::fixture(RUNTIME))
            .unwrap()
            .remove(0)
            .value;
        let image = object["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .replace(INCIDENT, digest);
        object["spec"]["containers"][0]["image"] = image.into();
        let reports: Vec<ObjectReport> = [
            list("rhods-operator.1.20.1.csv.yaml"),
            list("rhods-operator.csv.yaml"),
        ]
        .iter()
        .map(|allowlist| {
            let subject = Subject {
                group: "serving.kserve.io",
                kind: "ServingRuntime",
                object: &object,
                old: None,
            };
            let j = crate::judge::judge_as(
                subject,
                Rules {
                    policy,
                    allowlist,
                    published: None,
                },
            );
            ObjectReport::new("cluster:test".into(), &object, &j, allowlist, |_| None)
        })
        .collect();
        Compared {
            report: reports[0].clone(),
            also: vec![reports[1].clone()],
        }
    }

    #[rstest::rstest]
    #[case::on_the_old_release(OLD, Some(UpgradeChange::StaleAfterUpgrade))]
    #[case::never_promoted(INCIDENT, Some(UpgradeChange::AlreadyStale))]
    #[case::on_the_new_release(NEW, Some(UpgradeChange::FixedByUpgrade))]
    fn each_object_is_told_by_its_two_judgements(
        #[case] digest: &str,
        #[case] change: Option<UpgradeChange>,
    ) {
        for policy in [
            Policy::default(),
            Policy {
                mode: crate::policy::Mode::Audit,
                ..Policy::default()
            },
        ] {
            let found = concerned(&[compared(digest, &policy)], 0, 1);
            assert_eq!(found.first().map(|c| c.change), change, "{:?}", policy.mode);
            let image = &found[0].report.images[0];
            assert_eq!(image.change, change);
        }
    }

    /// 1.20.1 → 1.21.0 (the step says so), over the incident's runtime on
    /// each of `digests`.
    fn upgrade_of(
        digests: &[&str],
        policy: &Policy,
        pulls: Option<crate::preflight::pulls::Pulls>,
    ) -> crate::preflight::TargetOutcome {
        crate::preflight::TargetOutcome {
            csv: "rhods-operator.1.21.0".into(),
            package: Some("rhods-operator".into()),
            replaced: Some((
                "rhods-operator.1.20.1".into(),
                crate::preflight::replaced::Why::Step,
            )),
            changes: Vec::new(),
            head: None,
            concerned: concerned(
                &digests.iter().map(|d| compared(d, policy)).collect::<Vec<_>>(),
                0,
                1,
            ),
            pulls,
        }
    }

    /// A run that judged one plan, `ops/install-x`, with one target.
    fn one_plan(
        target: crate::preflight::TargetOutcome,
        objects: usize,
        errors: &[&str],
        created: Option<&str>,
    ) -> crate::preflight::Preflight {
        crate::preflight::Preflight {
            plans: vec![crate::preflight::PlanOutcome {
                label: "InstallPlan ops/install-x".into(),
                id: "ops/install-x".into(),
                created: created.map(Into::into),
                passed_over: None,
                incomplete: false,
                too_large: Vec::new(),
                report: "install-x".into(),
                object: None,
                targets: vec![target],
                judged: None,
            }],
            objects,
            errors: errors.iter().map(|e| (*e).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_verdict_and_the_exit_code_follow_the_worst_category() {
        let policy = Policy::default();
        let target = |digests: &[&str]| upgrade_of(digests, &policy, None);
        let run = |digests: &[&str], errors: &[&str]| one_plan(target(digests), digests.len(), errors, None);
        let verdict = |digests: &[&str]| render::verdict(&target(digests));
        assert_eq!(verdict(&[NEW]), "safe to approve");
        let fresh = crate::preflight::TargetOutcome {
            replaced: None,
            ..target(&[])
        };
        assert!(render::verdict(&fresh).starts_with("safe to approve: a fresh install replaces nothing"));
        assert_eq!(render::exit_code(&run(&[NEW], &[])), 0);
        assert_eq!(
            verdict(&[NEW, INCIDENT]),
            "the upgrade breaks nothing; 1 object is already stale"
        );
        assert_eq!(render::exit_code(&run(&[INCIDENT], &[])), 1);
        assert!(verdict(&[OLD, OLD, INCIDENT]).starts_with("do not approve yet: approving leaves 2 objects"));
        assert_eq!(render::exit_code(&run(&[OLD], &[])), 1);
        // What could not be read outranks any finding: never "safe".
        assert_eq!(render::exit_code(&run(&[OLD], &["cannot read a bundle"])), 2);
        assert_eq!(render::exit_code(&run(&[NEW], &["cannot read a bundle"])), 2);
        // What was judged may be written down only if every error concerns
        // one plan (passed over, or left incomplete and not written).
        let mut found = run(&[OLD], &["InstallPlan ops/y is not ready yet"]);
        assert!(!found.complete());
        found.plan_errors = 1;
        assert!(found.complete() && render::exit_code(&found) == 2);
    }

    /// What a registry said of the new runtime's digest.
    fn answer(state: crate::published::State) -> crate::registry::verify::Verification {
        crate::registry::verify::Verification {
            repository: "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8".into(),
            digest: NEW.into(),
            state,
            detail: "registry.redhat.io does not have this manifest (MANIFEST_UNKNOWN)".into(),
            location: None,
            checked_at: std::time::SystemTime::UNIX_EPOCH,
            tags: Vec::new(),
            platforms: Vec::new(),
            promotions: Vec::new(),
            images: Vec::new(),
        }
    }

    #[test]
    fn a_digest_that_will_not_pull_blocks_and_one_not_answered_is_never_safe() {
        use crate::preflight::pulls::Pulls;
        use crate::published::State;
        let policy = Policy::default();
        let run = |digests: &[&str], pulls: Pulls| {
            one_plan(
                upgrade_of(digests, &policy, Some(pulls)),
                digests.len(),
                &[],
                None,
            )
        };
        let missing = || Pulls {
            checked: 3,
            unpullable: vec![answer(State::Missing)],
            unverifiable: Vec::new(),
        };
        let unanswered = || Pulls {
            checked: 3,
            unpullable: Vec::new(),
            unverifiable: vec![answer(State::Unverifiable)],
        };
        let verdict = |found: &crate::preflight::Preflight| render::verdict(&found.plans[0].targets[0]);
        let reference = format!("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@{NEW}");
        // Every object complies, yet the new runtime will not pull.
        let found = run(&[NEW], missing());
        assert_eq!(render::exit_code(&found), 1);
        assert_eq!(
            verdict(&found),
            format!(
                "do not approve yet: 1 digest the new release promotes will not pull where this cluster pulls from; mirror it first: {reference}"
            )
        );
        // Both block, and both are said.
        let found = run(&[OLD], missing());
        assert!(verdict(&found).starts_with("do not approve yet: approving leaves 1 object"));
        assert!(verdict(&found).contains("; and 1 digest the new release promotes will not pull"));
        // Not answered: exit 2, after what blocks.
        let found = run(&[NEW], unanswered());
        assert_eq!(render::exit_code(&found), 2);
        assert!(
            verdict(&found).starts_with("not known to be safe: the registry did not answer for 1 digest")
        );
        assert_eq!(render::exit_code(&run(&[OLD], unanswered())), 1);
        assert_eq!(render::exit_code(&run(&[NEW], Pulls::default())), 0);
        let text = render::text(&run(&[NEW], missing()), std::time::SystemTime::UNIX_EPOCH);
        assert!(
            text.contains(&format!(
                "    unpullable_after_upgrade: {reference} (missing): registry.redhat.io does not have"
            )),
            "{text}"
        );
        assert!(
            text.contains("    registry: 3 digests asked, 1 will not pull, 0 not answered"),
            "{text}"
        );
        let doc: Value = serde_json::from_str(&render::json(
            &run(&[NEW], missing()),
            std::time::SystemTime::UNIX_EPOCH,
        ))
        .unwrap();
        assert_eq!(doc["summary"]["unpullable_after_upgrade"], 1);
        assert_eq!(
            doc["upgrade"][0]["registry"]["unpullable_after_upgrade"][0]["state"],
            "missing"
        );
    }

    #[test]
    fn the_json_report_counts_by_category_and_names_each_target() {
        let policy = Policy::default();
        let target = crate::preflight::TargetOutcome {
            csv: "rhods-operator.1.21.0".into(),
            package: Some("rhods-operator".into()),
            replaced: Some((
                "rhods-operator.1.20.1".into(),
                crate::preflight::replaced::Why::Subscription,
            )),
            changes: Vec::new(),
            concerned: concerned(&[compared(OLD, &policy), compared(INCIDENT, &policy)], 0, 1),
            head: None,
            pulls: None,
        };
        let found = one_plan(target, 2, &[], Some("2026-12-07T10:00:00Z"));
        let now = humantime::parse_rfc3339("2026-12-07T12:05:30Z").unwrap();
        let doc: Value = serde_json::from_str(&render::json(&found, now)).unwrap();
        assert_eq!(doc["summary"]["stale_after_upgrade"], 1);
        assert_eq!(doc["summary"]["already_stale"], 1);
        assert_eq!(doc["upgrade"][0]["age"], "2h 5m");
        assert_eq!(doc["upgrade"][0]["from"][0], "rhods-operator.1.20.1");
        assert_eq!(
            doc["upgrade"][0]["replacedBecause"],
            "the Subscription's installed CSV"
        );
        let results = doc["results"].as_array().unwrap();
        assert_eq!(results[0]["target"], "ops/install-x/rhods-operator.1.21.0");
        assert_eq!(
            (&results[0]["change"], &results[0]["images"][0]["code"]),
            (&"stale_after_upgrade".into(), &"digest_not_promoted".into())
        );
    }
}
