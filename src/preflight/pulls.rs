//! What will not pull (`preflight --registry`): every digest a target
//! promotes, asked of the registry or mirror its nodes pull it from (the
//! allowlist's mirror rules, in CRI-O's order), for the nodes' platforms,
//! as `allowlist verify` asks. RHOAI 3.4/3.5 shipped digests the production
//! registry never had; the incident's was never pushed at all. A digest
//! that is missing, is no image, or lacks a node's platform is
//! `unpullable_after_upgrade`: the Pods the upgrade makes will not start.
//! An answer that could not be had is `unverifiable`, and never "safe".

use std::collections::BTreeMap;

use super::{Preflight, Prepared};
use crate::allowlist::MirrorRule;
use crate::audit::Connection;
use crate::published::{Platform, State};
use crate::registry::client::RegistrySettings;
use crate::registry::verify::{self, Subject, Verification};

/// `--registry`: how to reach the registries, and which platforms.
#[derive(Debug, Clone)]
pub struct Asking {
    pub settings: RegistrySettings,
    /// `--platform`; none: the platforms of the cluster's nodes.
    pub platforms: Vec<Platform>,
}

/// The registries' answers about one target's digests.
#[derive(Debug, Clone, Default)]
pub struct Pulls {
    /// Digests asked about.
    pub checked: usize,
    /// Missing, not runnable, or lacking a node's platform.
    pub unpullable: Vec<Verification>,
    /// Not checked to the end: refused credentials, an unknown repository,
    /// network errors.
    pub unverifiable: Vec<Verification>,
}

/// What a run will ask, target by target, and where nodes pull from.
#[derive(Default)]
pub(super) struct Asks {
    /// (plan, target CSV, its digests).
    targets: Vec<(usize, String, Vec<Subject>)>,
    /// The mirror rules of the allowlist files (each target's allowlists
    /// read the same files).
    rules: Option<Vec<MirrorRule>>,
}

impl Asks {
    pub(super) fn add(&mut self, plan: usize, prepared: &mut Prepared) {
        self.rules
            .get_or_insert_with(|| prepared.after.allowlist.mirror_rules().to_vec());
        let subjects = std::mem::take(&mut prepared.asks);
        self.targets.push((plan, prepared.outcome.csv.clone(), subjects));
    }

    /// Asks, and gives each target judged its answers; what could not be
    /// asked is an error of the run.
    pub(super) async fn ask(
        self,
        connection: &Connection,
        asking: &Asking,
        quiet: bool,
        found: &mut Preflight,
    ) {
        if self.targets.is_empty() {
            return;
        }
        let (keys, subjects): (Vec<(usize, String)>, Vec<Vec<Subject>>) = self
            .targets
            .into_iter()
            .map(|(plan, csv, subjects)| ((plan, csv), subjects))
            .unzip();
        let rules = self.rules.unwrap_or_default();
        match ask(connection, asking, &rules, &subjects, quiet).await {
            Ok((pulls, warnings)) => {
                found.notes.extend(warnings);
                for ((plan, csv), pulls) in keys.into_iter().zip(pulls) {
                    let target = found.plans[plan].targets.iter_mut().find(|t| t.csv == csv);
                    if let Some(target) = target {
                        target.pulls = Some(pulls);
                    }
                }
            }
            Err(e) => found.errors.push(format!(
                "cannot ask the registries whether the targets' digests pull: {e}"
            )),
        }
    }
}

/// Asks about every target's digests, each (repository, digest) once
/// however many targets promote it, and sorts the answers back to each.
/// `Err`: verification could not start, or the nodes' platforms could not
/// be read (the run then says so and is never safe).
pub async fn ask(
    connection: &Connection,
    asking: &Asking,
    rules: &[MirrorRule],
    targets: &[Vec<Subject>],
    quiet: bool,
) -> Result<(Vec<Pulls>, Vec<String>), String> {
    let platforms = crate::registry::learn::platforms(&asking.platforms, Some(connection)).await?;
    let mut unique: BTreeMap<(&str, &str), Subject> = BTreeMap::new();
    for subject in targets.iter().flatten() {
        unique
            .entry((&subject.repository, &subject.digest))
            .or_insert_with(|| subject.clone());
    }
    let options = verify::Options {
        platforms,
        mirrors_only: false,
        blobs: verify::Blobs::Config,
    };
    let subjects: Vec<Subject> = unique.into_values().collect();
    let report = crate::registry::verify_subjects(rules, subjects, asking.settings.clone(), &options, quiet)
        .await
        .map_err(|e| e.to_string())?;
    let answers: BTreeMap<(&str, &str), &Verification> = report
        .images
        .iter()
        .map(|v| ((v.repository.as_str(), v.digest.as_str()), v))
        .collect();
    let pulls = targets
        .iter()
        .map(|subjects| {
            let mut pulls = Pulls {
                checked: subjects.len(),
                ..Pulls::default()
            };
            for s in subjects {
                match answers.get(&(s.repository.as_str(), s.digest.as_str())) {
                    Some(v) if v.state.fails() => pulls.unpullable.push((*v).clone()),
                    Some(v) if v.state == State::Unverifiable => pulls.unverifiable.push((*v).clone()),
                    _ => {}
                }
            }
            // In repository order, as the change list is.
            let order = |a: &Verification, b: &Verification| {
                (&a.repository, &a.digest).cmp(&(&b.repository, &b.digest))
            };
            pulls.unpullable.sort_by(order);
            pulls.unverifiable.sort_by(order);
            pulls
        })
        .collect();
    Ok((pulls, report.errors.clone()))
}
