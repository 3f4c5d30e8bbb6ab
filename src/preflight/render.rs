//! The pre-flight report: per plan and target, what the upgrade changes,
//! the objects it concerns by category, and one verdict line; as text or as
//! JSON (`upgrade` beside `results` as `audit` writes them). And its exit
//! code: 2 when something could not be read, else 1 when an object is or
//! will be stale or a digest will not pull, else 2 when a registry could
//! not answer, else 0.

use std::fmt::Write;
use std::time::SystemTime;

use serde::Serialize;

use super::changes::Change;
use super::{PlanOutcome, Preflight, TargetOutcome};
use crate::judge::ImageVerdict;
use crate::reference::short_digest;
use crate::registry::verify::Verification;
use crate::report::{ObjectReport, UpgradeChange, owner_chain};
use crate::text::plural;

/// The exit code: never 0 for what was not read or not answered.
pub fn exit_code(found: &Preflight) -> u8 {
    let stale = |t: &TargetOutcome| {
        t.concerned
            .iter()
            .any(|c| c.change != UpgradeChange::FixedByUpgrade)
    };
    if !found.errors.is_empty() {
        2
    } else if targets(found).any(|t| stale(t) || !t.pull_findings().0.is_empty()) {
        1
    } else if targets(found).any(|t| !t.pull_findings().1.is_empty()) {
        2
    } else {
        0
    }
}

/// How the verdict names digests: the first few in full (to copy into a
/// mirroring tool), the rest counted.
fn references(found: &[Verification]) -> String {
    const NAMED: usize = 5;
    let mut out: Vec<String> = found
        .iter()
        .take(NAMED)
        .map(|v| format!("{}@{}", v.repository, v.digest))
        .collect();
    if found.len() > NAMED {
        out.push(format!("and {} more listed above", found.len() - NAMED));
    }
    out.join(", ")
}

fn targets(found: &Preflight) -> impl Iterator<Item = &TargetOutcome> {
    found.plans.iter().flat_map(|p| &p.targets)
}

/// The verdict on one target, in one line.
pub fn verdict(t: &TargetOutcome) -> String {
    let (stale, already) = (
        t.count(UpgradeChange::StaleAfterUpgrade),
        t.count(UpgradeChange::AlreadyStale),
    );
    let (unpullable, unverifiable) = t.pull_findings();
    let mut blocking = Vec::new();
    if stale > 0 {
        blocking.push(format!(
            "approving leaves {stale} object{} on images the new release does not promote, and the webhook rewrites what is written, not what is stored; update {} to the digests named above with the approval (for manifests in git: digest-gate check --fix against the new release)",
            plural(stale, "", "s"),
            if stale == 1 { "it" } else { "them" }
        ));
    }
    if !unpullable.is_empty() {
        blocking.push(format!(
            "{} digest{} the new release promotes will not pull where this cluster pulls from; mirror {} first: {}",
            unpullable.len(),
            plural(unpullable.len(), "", "s"),
            if unpullable.len() == 1 { "it" } else { "them" },
            references(unpullable)
        ));
    }
    if !blocking.is_empty() {
        return format!("do not approve yet: {}", blocking.join("; and "));
    }
    if !unverifiable.is_empty() {
        return format!(
            "not known to be safe: the registry did not answer for {} digest{} the new release promotes ({}); run again once it does",
            unverifiable.len(),
            plural(unverifiable.len(), "", "s"),
            references(unverifiable)
        );
    }
    // Nothing blocks: stale objects and digests that will not pull said so.
    match already {
        0 if t.replaced.is_none() => {
            "safe to approve: a fresh install replaces nothing, so nothing the cluster runs changes its verdict"
                .to_owned()
        }
        0 => "safe to approve".to_owned(),
        n => format!(
            "the upgrade breaks nothing; {n} object{} already stale",
            plural(n, " is", "s are")
        ),
    }
}

/// How long ago an RFC 3339 time was, to the minute.
pub fn age(created: Option<&str>, now: SystemTime) -> Option<String> {
    let then = humantime::parse_rfc3339(created?).ok()?;
    let secs = now.duration_since(then).ok()?.as_secs();
    Some(humantime::format_duration(std::time::Duration::from_secs(secs / 60 * 60)).to_string())
        .map(|s| if secs < 60 { "under a minute".to_owned() } else { s })
}

/// The text report.
pub fn text(found: &Preflight, now: SystemTime) -> String {
    let mut out = String::new();
    for plan in &found.plans {
        plan_text(plan, now, &mut out);
    }
    for n in &found.notes {
        let _ = writeln!(out, "note: {n}");
    }
    // Errors are not here: the command writes them to standard error.
    let judged = targets(found).count();
    let _ = writeln!(
        out,
        "{} object{} read, {judged} upgrade target{} judged",
        found.objects,
        plural(found.objects, "", "s"),
        plural(judged, "", "s")
    );
    out
}

fn plan_text(plan: &PlanOutcome, now: SystemTime, out: &mut String) {
    out.push_str(&plan.label);
    if let Some(age) = age(plan.created.as_deref(), now) {
        let _ = write!(out, " (waiting {age})");
    }
    match &plan.passed_over {
        Some(why) => {
            let _ = writeln!(out, ": {why}");
            return;
        }
        None => out.push('\n'),
    }
    for t in &plan.targets {
        let _ = write!(out, "  {}", t.csv);
        if let Some(p) = &t.package {
            let _ = write!(out, " (package {p})");
        }
        match &t.replaced {
            Some((name, why)) => {
                let _ = writeln!(out, " replaces {name} ({why})");
            }
            None => out.push_str(": a fresh install, nothing installed is replaced\n"),
        }
        if let Some(line) = head_line(t) {
            let _ = writeln!(out, "    note: {line}");
        }
        for c in &t.changes {
            let _ = writeln!(out, "    {}", change_line(c));
        }
        for c in &t.concerned {
            object_text(&c.report, out);
        }
        pulls_text(t, out);
        let _ = writeln!(out, "  verdict: {}: {}", t.csv, verdict(t));
    }
}

/// One line per digest that will not, or may not, pull; and how many
/// were asked about.
fn pulls_text(t: &TargetOutcome, out: &mut String) {
    let Some(p) = &t.pulls else { return };
    let (unpullable, unverifiable) = t.pull_findings();
    for (category, found) in [
        ("unpullable_after_upgrade", unpullable),
        ("unverifiable", unverifiable),
    ] {
        for v in found {
            let at = v
                .location
                .as_deref()
                .map(|l| format!(" at {l}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "    {category}: {}@{} ({}{at}): {}",
                v.repository, v.digest, v.state, v.detail
            );
        }
    }
    let _ = writeln!(
        out,
        "    registry: {} digest{} asked, {} will not pull, {} not answered",
        p.checked,
        plural(p.checked, "", "s"),
        unpullable.len(),
        unverifiable.len()
    );
}

/// What a catalog given with --allowlist says of the target: its channel
/// head has moved past it, or it does not list it.
fn head_line(t: &TargetOutcome) -> Option<String> {
    let head = t.head.as_ref()?;
    Some(if head.lists_target {
        format!(
            "the catalog's channel head is {}, past this plan's target: OLM does not resolve a plan again until it is deleted (delete it for a plan to the head)",
            head.csv
        )
    } else {
        format!(
            "the catalog given does not list {}; its channel head is {}",
            t.csv, head.csv
        )
    })
}

fn digests(list: &[String]) -> String {
    let short: Vec<&str> = list.iter().map(|d| short_digest(d)).collect();
    short.join(", ")
}

fn change_line(c: &Change) -> String {
    let name = c.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
    if c.is_added() {
        format!("adds {}{name}: {}", c.repository, digests(&c.to))
    } else if c.is_dropped() {
        format!("drops {}{name}: {}", c.repository, digests(&c.from))
    } else {
        format!(
            "changes {}{name}: {} → {}",
            c.repository,
            digests(&c.from),
            digests(&c.to)
        )
    }
}

/// One line per image the upgrade concerns: its category, the object (and
/// what owns it), and what the webhook does to it after the upgrade.
fn object_text(r: &ObjectReport, out: &mut String) {
    let owners = owner_chain(&r.owners);
    for i in &r.images {
        let Some(change) = i.change else { continue };
        let image = i.image.as_str().unwrap_or_default();
        let then = match (change, i.verdict, i.would_be) {
            (UpgradeChange::FixedByUpgrade, ..) => format!("{image} is promoted once it is approved"),
            (_, ImageVerdict::Rewrite, _) => format!("the webhook will rewrite it: {}", i.reason),
            (_, ImageVerdict::Deny, _) => format!("the webhook will deny it: {}", i.reason),
            (_, _, Some(v)) => format!("the webhook will report it ({v} in rewrite mode): {}", i.reason),
            _ => i.reason.clone(),
        };
        let _ = writeln!(out, "    {change}: {}{owners}: {then}", r.label(None));
    }
}

/// The SARIF report: the categories are the rules, and with `--registry`
/// what will not pull.
pub fn sarif(found: &Preflight) -> String {
    pretty(&sarif_value(found))
}

/// The SARIF log as a value: one cluster's run of a fleet's log.
pub fn sarif_value(found: &Preflight) -> serde_json::Value {
    let named: Vec<(String, &TargetOutcome)> = found
        .plans
        .iter()
        .flat_map(|p| {
            p.targets
                .iter()
                .map(move |t| (format!("{}: {}", p.label, t.csv), t))
        })
        .collect();
    let concerned = named
        .iter()
        .flat_map(|(name, t)| t.concerned.iter().map(move |c| (name.as_str(), &c.report)));
    let pulls: Vec<crate::sarif::PullFinding<'_>> = named
        .iter()
        .flat_map(|(name, t)| {
            let (unpullable, unverifiable) = t.pull_findings();
            unpullable
                .iter()
                .chain(unverifiable)
                .map(move |v| crate::sarif::PullFinding {
                    target: name,
                    reference: format!("{}@{}", v.repository, v.digest),
                    state: v.state,
                    detail: &v.detail,
                })
        })
        .collect();
    let asked = named.iter().any(|(_, t)| t.pulls.is_some());
    crate::sarif::upgrade_document(
        &found.errors,
        &found.notes,
        concerned,
        asked.then_some(pulls.as_slice()),
    )
}

/// The JSON report: `upgrade` (one entry per target), the plans passed
/// over, `results` as `audit` writes them (each with its target and
/// `change`), a summary by category, errors and notes.
#[derive(Serialize)]
struct Doc<'a> {
    upgrade: Vec<Upgrade<'a>>,
    #[serde(rename = "passedOver", skip_serializing_if = "Vec::is_empty")]
    passed_over: Vec<PassedOver<'a>>,
    results: Vec<JsonResult<'a>>,
    summary: Summary,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    errors: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    notes: &'a [String],
}

#[derive(Serialize)]
struct Upgrade<'a> {
    package: Option<&'a str>,
    plan: String,
    age: Option<String>,
    from: Vec<&'a str>,
    #[serde(rename = "replacedBecause", skip_serializing_if = "Option::is_none")]
    replaced_because: Option<&'static str>,
    to: &'a str,
    changes: Vec<JsonChange<'a>>,
    added: Vec<&'a str>,
    dropped: Vec<&'a str>,
    /// A catalog's channel head that is not the target.
    #[serde(rename = "channelHead", skip_serializing_if = "Option::is_none")]
    channel_head: Option<String>,
    /// With `--registry`: what the registries said of its digests.
    #[serde(skip_serializing_if = "Option::is_none")]
    registry: Option<JsonPulls<'a>>,
    verdict: String,
}

#[derive(Serialize)]
struct JsonPulls<'a> {
    checked: usize,
    unpullable_after_upgrade: &'a [Verification],
    unverifiable: &'a [Verification],
}

#[derive(Serialize)]
struct JsonChange<'a> {
    repository: &'a str,
    name: Option<&'a str>,
    from: &'a [String],
    to: &'a [String],
}

#[derive(Serialize)]
struct PassedOver<'a> {
    plan: String,
    why: &'a str,
}

#[derive(Serialize)]
struct JsonResult<'a> {
    /// The plan and CSV the result is of (`namespace/plan/csv`).
    target: String,
    change: UpgradeChange,
    #[serde(flatten)]
    report: &'a ObjectReport,
}

#[derive(Serialize, Default)]
struct Summary {
    objects: usize,
    targets: usize,
    stale_after_upgrade: usize,
    already_stale: usize,
    fixed_by_upgrade: usize,
    /// Digests that will not pull, and those not answered for (with
    /// `--registry`).
    #[serde(skip_serializing_if = "Option::is_none")]
    unpullable_after_upgrade: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unverifiable: Option<usize>,
}

/// The JSON report.
pub fn json(found: &Preflight, now: SystemTime) -> String {
    pretty(&doc(found, now))
}

/// The JSON report as a value: one cluster's part of a fleet's report.
pub fn json_value(found: &Preflight, now: SystemTime) -> serde_json::Value {
    serde_json::to_value(doc(found, now)).expect("reports serialise")
}

/// A document as pretty JSON, ending its last line.
fn pretty(doc: &impl Serialize) -> String {
    let mut text = serde_json::to_string_pretty(doc).expect("reports serialise");
    text.push('\n');
    text
}

fn doc(found: &Preflight, now: SystemTime) -> Doc<'_> {
    let mut doc = Doc {
        upgrade: Vec::new(),
        passed_over: Vec::new(),
        results: Vec::new(),
        summary: Summary {
            objects: found.objects,
            ..Summary::default()
        },
        errors: &found.errors,
        notes: &found.notes,
    };
    for plan in &found.plans {
        let at = &plan.id;
        if let Some(why) = &plan.passed_over {
            doc.passed_over.push(PassedOver {
                plan: at.clone(),
                why,
            });
        }
        for t in &plan.targets {
            doc.summary.targets += 1;
            if t.pulls.is_some() {
                let (unpullable, unverifiable) = t.pull_findings();
                *doc.summary.unpullable_after_upgrade.get_or_insert(0) += unpullable.len();
                *doc.summary.unverifiable.get_or_insert(0) += unverifiable.len();
            }
            doc.upgrade.push(upgrade(plan, t, now));
            for c in &t.concerned {
                *match c.change {
                    UpgradeChange::StaleAfterUpgrade => &mut doc.summary.stale_after_upgrade,
                    UpgradeChange::AlreadyStale => &mut doc.summary.already_stale,
                    UpgradeChange::FixedByUpgrade => &mut doc.summary.fixed_by_upgrade,
                } += 1;
                doc.results.push(JsonResult {
                    target: format!("{at}/{}", t.csv),
                    change: c.change,
                    report: &c.report,
                });
            }
        }
    }
    doc
}

/// One target's `upgrade` entry.
fn upgrade<'a>(plan: &PlanOutcome, t: &'a TargetOutcome, now: SystemTime) -> Upgrade<'a> {
    let of = |f: fn(&Change) -> bool| {
        t.changes
            .iter()
            .filter(|c| f(c))
            .map(|c| c.repository.as_str())
            .collect()
    };
    Upgrade {
        package: t.package.as_deref(),
        plan: plan.id.clone(),
        age: age(plan.created.as_deref(), now),
        from: t.replaced.iter().map(|(n, _)| n.as_str()).collect(),
        replaced_because: t.replaced.as_ref().map(|(_, why)| why.into()),
        to: &t.csv,
        changes: t
            .changes
            .iter()
            .filter(|c| !c.is_added() && !c.is_dropped())
            .map(|c| JsonChange {
                repository: &c.repository,
                name: c.name.as_deref(),
                from: &c.from,
                to: &c.to,
            })
            .collect(),
        added: of(Change::is_added),
        dropped: of(Change::is_dropped),
        channel_head: head_line(t),
        registry: t.pulls.as_ref().map(|p| JsonPulls {
            checked: p.checked,
            unpullable_after_upgrade: &p.unpullable,
            unverifiable: &p.unverifiable,
        }),
        verdict: verdict(t),
    }
}
