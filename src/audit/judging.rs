//! The judging of one run's objects, each reported once its owner chain is
//! known; and, for a comparison (`preflight`: before and after an upgrade),
//! the same object judged by further rules in the same pass, so the cluster
//! is read once however many allowlists it is judged against.

use serde_json::Value;

use super::{Audit, owners, write};
use crate::judge::{self, ObjectVerdict};
use crate::objects::Kind;
use crate::output::Writer;
use crate::policy::Verdict;
use crate::report::ObjectReport;

/// One object judged by the run's rules and by each of the further rules a
/// comparison asks for, in their order (an audit's has none). Kept in
/// [`Audit::compared`] only where some judgement has a finding: what
/// complies under every allowlist is counted, not held.
#[derive(Debug, Clone)]
pub struct Compared {
    pub report: ObjectReport,
    pub also: Vec<ObjectReport>,
}

pub(super) struct Judging<'a, 'w> {
    pub(super) rules: judge::Rules<'a>,
    /// Further rules each object is judged by ([`Compared::also`]); empty
    /// for an audit.
    pub(super) also: &'a [judge::Rules<'a>],
    pub(super) learn: bool,
    pub(super) events: bool,
    pub(super) source: String,
    pub(super) owners: owners::Index,
    /// Reports waiting for an owner of a kind still to be read, with the
    /// uid of their controller.
    pub(super) pending: Vec<(Compared, String)>,
    pub(super) out: Option<&'a mut Writer<'w>>,
    /// Objects read so far, on a terminal (hidden otherwise).
    pub(super) progress: &'a indicatif::ProgressBar,
}

impl Judging<'_, '_> {
    pub(super) fn object(
        &mut self,
        audit: &mut Audit,
        kind: &Kind,
        group: &str,
        object: &Value,
        to_come: &dyn Fn(&str) -> bool,
    ) {
        self.owners.add(kind.name, object);
        self.progress.inc(1);
        let subject = judge::Subject {
            group,
            kind: kind.name,
            object,
            old: None,
        };
        let j = judge::judge_as(subject, self.rules);
        let allowlist = self.rules.allowlist;
        if self.learn {
            audit
                .will_run
                .extend(j.images.iter().filter_map(|i| i.will_run(allowlist)));
        }
        let mut report = ObjectReport::new(self.source.clone(), object, &j, allowlist, |_| None);
        if kind.name == "Pod" {
            resolved(object, &mut report);
            for image in &report.images {
                audit.running.add(image);
            }
        }
        if let Some(published) = self.rules.published {
            report = report.with_registry(&j, allowlist, published);
        }
        let also = self
            .also
            .iter()
            .map(|rules| {
                let j = judge::judge_as(subject, *rules);
                ObjectReport::new(self.source.clone(), object, &j, rules.allowlist, |_| None)
            })
            .collect();
        let mut judged = Compared { report, also };
        let Some(uid) = owners::controller_uid(object) else {
            return self.take(audit, judged);
        };
        match self.owners.resolve(&judged.report.owners, &uid, to_come) {
            Some(chain) => {
                judged.report.owners = chain;
                self.take(audit, judged);
            }
            None => self.pending.push((judged, uid)),
        }
    }

    /// Counts, gathers and writes out one object's report.
    fn take(&mut self, audit: &mut Audit, judged: Compared) {
        let Compared { report, mut also } = judged;
        if let Some(gathered) = &mut audit.gathered {
            gathered.add(&report);
        }
        if self.events && write::needs_action(&report) {
            audit.flagged.push(report.clone());
        }
        audit.found(&report);
        if self.also.is_empty() {
            audit.report.push(report);
        } else {
            audit.report.tally(&report);
            if finding(&report).is_some() || also.iter().any(|r| finding(r).is_some()) {
                for r in &mut also {
                    r.owners.clone_from(&report.owners);
                }
                audit.compared.push(Compared { report, also });
            }
        }
        if let Some(out) = self.out.as_deref_mut() {
            out.flush(&mut audit.report);
        }
    }

    /// Reports what waited, with the chains known now that everything was
    /// read.
    pub(super) fn finish(&mut self, audit: &mut Audit) {
        for (mut judged, uid) in std::mem::take(&mut self.pending) {
            judged.report.owners = self.owners.chain(&judged.report.owners, &uid);
            self.take(audit, judged);
        }
    }
}

/// Each Pod container's image as its node resolved it
/// (`status.*ContainerStatuses[].imageID`), where the node names a digest
/// other than the spec's: a tag resolved, or a digest the node reports
/// differently.
fn resolved(pod: &Value, report: &mut ObjectReport) {
    for image in &mut report.images {
        let statuses = match image.path.split('/').nth(2) {
            Some("containers") => "containerStatuses",
            Some("initContainers") => "initContainerStatuses",
            Some("ephemeralContainers") => "ephemeralContainerStatuses",
            _ => continue,
        };
        let Some(name) = image.container.as_deref() else {
            continue;
        };
        let id = pod
            .pointer(&format!("/status/{statuses}"))
            .and_then(Value::as_array)
            .and_then(|all| {
                all.iter()
                    .find(|s| s.get("name").and_then(Value::as_str) == Some(name))
            })
            .and_then(|s| s.get("imageID"))
            .and_then(Value::as_str)
            .and_then(crate::fleet::node_reference);
        let spec_digest = image
            .image
            .as_str()
            .and_then(|i| i.rsplit_once('@'))
            .map(|(_, d)| d);
        if let Some(id) = id.filter(|id| id.rsplit_once('@').map(|(_, d)| d) != spec_digest) {
            image.resolved = Some(id.to_owned());
        }
    }
}

/// What an object's report counts as in the findings: its verdict, or in
/// audit mode what rewrite mode would reach.
pub fn finding(r: &ObjectReport) -> Option<Verdict> {
    match r.verdict {
        ObjectVerdict::Deny => Some(Verdict::Deny),
        ObjectVerdict::Rewrite => Some(Verdict::Rewrite),
        _ if r.images.iter().any(|i| i.would_be == Some(Verdict::Deny)) => Some(Verdict::Deny),
        _ if r.images.iter().any(|i| i.would_be.is_some()) => Some(Verdict::Rewrite),
        _ => None,
    }
}
