//! `preflight --policy-reports`: each plan's findings as
//! `digest-gate-preflight-<plan or target>` PolicyReports in the namespaces
//! of the objects they list, written as `audit` writes its own (a rerun
//! that finds the same changes nothing, a namespace read that no longer
//! has findings is emptied) and never touching them; `cleanup` removes
//! both. A digest that will not pull is listed on the plan itself, in its
//! namespace.

use serde_json::{Value, json};

use super::plan::Plan;
use super::{PlanObject, Preflight};
use crate::audit::write::{self, Gathered, PullResult};
use crate::audit::{Connection, Covered};

impl PlanObject {
    /// The cluster object `plan` is: the InstallPlan, or for a file target
    /// the Subscription it would upgrade (none: a fresh install nobody
    /// subscribed to).
    pub fn of(plan: &Plan, file: bool) -> Option<Self> {
        let (kind, name, uid) = match file {
            false => ("InstallPlan", plan.name.clone(), plan.uid.clone()),
            true => ("Subscription", plan.owners.first()?.clone(), None),
        };
        (!plan.namespace.is_empty()).then(|| PlanObject {
            kind,
            namespace: plan.namespace.clone(),
            name,
            uid,
        })
    }

    /// As a report result's `resources` and an Event's `involvedObject`
    /// name it.
    pub fn resource(&self) -> Value {
        let mut object = json!({"apiVersion": "operators.coreos.com/v1alpha1", "kind": self.kind,
                                "namespace": self.namespace, "name": self.name});
        if let Some(uid) = &self.uid {
            object["uid"] = uid.clone().into();
        }
        object
    }
}

/// What one plan's reports list.
fn gathered(plan: &super::PlanOutcome, notes: &mut Vec<String>) -> Gathered {
    let mut gathered = Gathered::preflight(&plan.report);
    for t in &plan.targets {
        for c in &t.concerned {
            gathered.add_upgrade(&c.report, &t.csv);
        }
        let Some(pulls) = &t.pulls else { continue };
        let unpullable = pulls.unpullable.iter().map(|v| (v, true));
        let found: Vec<_> = unpullable
            .chain(pulls.unverifiable.iter().map(|v| (v, false)))
            .collect();
        if found.is_empty() {
            continue;
        }
        let Some(object) = &plan.object else {
            notes.push(format!(
                "{}: no Subscription of its package, so no namespace lists what will not pull",
                plan.label
            ));
            continue;
        };
        let resource = object.resource();
        for (v, fails) in found {
            let reference = format!("{}@{}", v.repository, v.digest);
            let pull = PullResult {
                target: &t.csv,
                reference: &reference,
                state: v.state,
                detail: &v.detail,
                fails,
            };
            gathered.add_pull(&object.namespace, resource.clone(), pull);
        }
    }
    gathered
}

/// Writes every judged plan's reports, and says what was written; only
/// after a complete read, as `audit` writes its own: a report written from
/// a partial one would drop the results of what could not be read.
pub(super) async fn write(connection: &Connection, found: &mut Preflight, owner: Option<&Value>) {
    if !found.complete() {
        found
            .notes
            .push("policy reports not written: not everything could be read (see the errors)".into());
        return;
    }
    let now = std::time::SystemTime::now();
    for at in 0..found.plans.len() {
        let plan = &found.plans[at];
        if plan.incomplete {
            found.notes.push(format!(
                "{}: no policy report written: a target could not be read",
                plan.label
            ));
            continue;
        }
        if plan.passed_over.is_some() || plan.targets.is_empty() {
            continue;
        }
        let gathered = gathered(plan, &mut found.notes);
        let covered = covered(found.covered.as_ref(), plan.object.as_ref());
        match write::policy_reports(connection, &gathered, &covered, owner, now).await {
            Ok(w) => {
                found.notes.push(format!(
                    "policy reports {}: {} created, {} updated, {} unchanged",
                    gathered.name(),
                    w.created,
                    w.updated,
                    w.unchanged
                ));
                found.notes.extend(w.notes);
                found.errors.extend(w.errors);
            }
            Err(e) => found.errors.push(e.to_string()),
        }
    }
}

/// Where a plan's reports may be emptied: where the objects were read, and
/// the plan's own namespace (what will not pull is listed there).
fn covered(read: Option<&Covered>, object: Option<&PlanObject>) -> Covered {
    let mut covered = read.cloned().unwrap_or(Covered {
        namespaces: Some(Default::default()),
        cluster: false,
    });
    if let (Some(set), Some(own)) = (covered.namespaces.as_mut(), object) {
        set.insert(own.namespace.clone());
    }
    covered
}
