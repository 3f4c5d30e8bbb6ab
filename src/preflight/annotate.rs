//! `preflight --annotate`: each judged InstallPlan carries its judgement
//! (an `admission::approval::Judged`, as JSON, under
//! `digest-gate.dev/preflight`), so that the webhook answers its approval
//! from the plan itself, every replica alike, and `kubectl describe
//! installplan` shows it. Written only from a complete read, and only for
//! a plan every target of which was read: a judgement of what could not be
//! read would let an approval through unjudged. A plan whose judgement
//! finds what the one it carries does is not written again: `judgedAt` is
//! when the plan was first found so.

use std::time::SystemTime;

use super::{PlanOutcome, Preflight, cluster};
use crate::admission::approval::{JUDGED_ANNOTATION, Judged};
use crate::audit::Connection;
use crate::report::UpgradeChange;

/// The judgement of one plan, made `now`: its targets' categories summed,
/// the objects left stale and the digests that will not pull named.
pub fn judged(plan: &PlanOutcome, now: SystemTime) -> Judged {
    let mut j = Judged {
        judged_at: humantime::format_rfc3339_seconds(now).to_string(),
        targets: plan.targets.iter().map(|t| t.csv.clone()).collect(),
        ..Judged::default()
    };
    let mut stale = Vec::new();
    let mut unpullable = Vec::new();
    for t in &plan.targets {
        for c in &t.concerned {
            match c.change {
                UpgradeChange::StaleAfterUpgrade => {
                    j.stale_after_upgrade += 1;
                    stale.push(c.report.label(None));
                }
                UpgradeChange::AlreadyStale => j.already_stale += 1,
                UpgradeChange::FixedByUpgrade => j.fixed_by_upgrade += 1,
            }
        }
        let (will_not, unanswered) = t.pull_findings();
        j.unpullable_after_upgrade += will_not.len();
        j.unverifiable += unanswered.len();
        unpullable.extend(will_not.iter().map(|v| format!("{}@{}", v.repository, v.digest)));
    }
    j.name(stale.into_iter().chain(unpullable));
    j
}

/// Annotates every judged InstallPlan (a target read from a file has no
/// plan to carry it), and says what was written.
pub(super) async fn write(connection: &Connection, found: &mut Preflight) {
    if !found.complete() {
        found
            .notes
            .push("no judgement annotated: not everything could be read (see the errors)".into());
        return;
    }
    let now = SystemTime::now();
    let mut annotated = Vec::new();
    let mut unchanged = Vec::new();
    let mut notes = Vec::new();
    for plan in &found.plans {
        // A plan with a target that could not be read is not judged whole.
        if plan.incomplete {
            notes.push(format!(
                "{}: no judgement annotated: a target could not be read",
                plan.label
            ));
            continue;
        }
        if plan.passed_over.is_some() || plan.targets.is_empty() {
            continue;
        }
        let Some((namespace, name)) = plan.installplan() else {
            continue;
        };
        let judgement = judged(plan, now);
        // A plan is written only when what it is found to do changes: each
        // write is an update event for OLM's catalog operator and every
        // watcher, and `judgedAt` then says since when it reads so.
        let before = plan
            .judged
            .as_deref()
            .and_then(|t| serde_json::from_str::<Judged>(t).ok());
        if before.is_some_and(|b| b.finds_as(&judgement)) {
            unchanged.push(format!("{namespace}/{name}"));
            continue;
        }
        let value = serde_json::to_string(&judgement).expect("judgements serialise");
        match cluster::annotate_plan(connection, (namespace, name), (JUDGED_ANNOTATION, &value)).await {
            Ok(()) => annotated.push(format!("{namespace}/{name}")),
            Err(e) => found.errors.push(e.message().to_owned()),
        }
    }
    found.notes.extend(notes);
    if !annotated.is_empty() {
        found.notes.push(format!(
            "judgement annotated ({JUDGED_ANNOTATION}) on InstallPlan {}",
            annotated.join(", ")
        ));
    }
    if !unchanged.is_empty() {
        found.notes.push(format!(
            "judgement unchanged, not written again, on InstallPlan {}",
            unchanged.join(", ")
        ));
    }
}
