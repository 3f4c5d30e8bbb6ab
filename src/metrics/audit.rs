//! The background audit's metrics: what it found, its runs, its Lease,
//! the pending upgrades it judged, and the namespaces it checks.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{add, gauge_value, unix_now};
use crate::fleet;
use crate::policy::Verdict;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AuditLabels {
    kind: &'static str,
    verdict: Verdict,
}

/// What the last background audit found Pods run: a repository the
/// allowlist lists (or [`fleet::UNLISTED`]), one of its digests (or
/// [`fleet::TAG_ONLY`], [`fleet::OTHER`]), and the verdict; bounded by
/// [`fleet::Running::series`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunningLabels {
    repository: String,
    digest: String,
    verdict: Verdict,
    seen: &'static str,
}

/// A pending operator upgrade's findings: the plan's namespace, the
/// target's package (both bounded by the operators installed), and a
/// category of `preflight` or `unpullable_after_upgrade`. The plan's
/// namespace is not `namespace`: Prometheus would rename that to
/// `exported_namespace`, the target's own `namespace` label winning.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PendingLabels {
    plan_namespace: String,
    package: String,
    reason: &'static str,
}

/// A waiting plan the pre-flight could not judge: its namespace, and why.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UnjudgedLabels {
    plan_namespace: String,
    reason: Unjudged,
}

vocabulary! {
    "snake_case";
    /// Why the pre-flight could not judge a plan: the `reason` label of
    /// `digest_gate_pending_upgrade_unjudged`.
    #[derive(PartialOrd, Ord)]
    pub enum Unjudged {
        /// The InstallPlan itself cannot be read (its JSON, or not as OLM
        /// writes plans).
        PlanUnreadable,
        /// A target's bundle (its ConfigMap, its CSV) cannot be read.
        BundleUnreadable,
        /// A target's bundle is past what digest-gate reads.
        TooLarge,
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    reason: LeaseTrouble,
}

/// Why the background audit could not use its Lease: the `reason` label
/// of `digest_gate_audit_lease_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum LeaseTrouble {
    /// The apiserver did not answer.
    Unreachable,
    /// RBAC refused (403) or the credentials were refused (401).
    Forbidden,
    /// The Lease does not exist (the chart creates it).
    Missing,
    /// Anything else the apiserver or the election said.
    Other,
}

/// The background audit's findings and runs.
#[derive(Clone)]
pub struct AuditMetrics {
    break_glass_namespaces: Gauge,
    without_name_label: Gauge,
    audit_findings: Family<AuditLabels, Gauge>,
    audit_last_success: Gauge<f64, AtomicU64>,
    audit_duration: Histogram,
    audit_errors: Counter,
    audit_leader: Gauge,
    lease_errors: Family<LeaseLabels, Counter>,
    pending_upgrade_findings: Family<PendingLabels, Gauge>,
    pending_upgrade_unjudged: Family<UnjudgedLabels, Gauge>,
    images: Family<RunningLabels, Gauge>,
}

impl AuditMetrics {
    pub(super) fn register(r: &mut Registry) -> Self {
        Self {
            break_glass_namespaces: add(
                r,
                "break_glass_namespaces",
                "Namespaces the last background audit found carrying the break-glass label (--audit-break-glass-label): the webhook does not review them",
                Gauge::default(),
            ),
            without_name_label: add(
                r,
                "namespaces_without_name_label",
                "Namespaces the webhook's entries select or exclude by their kubernetes.io/metadata.name label (--audit-named-namespaces) that exist without it, as last checked by the leader: the entries miss them (Kubernetes sets the label from 1.21 only)",
                Gauge::default(),
            ),
            audit_findings: add(
                r,
                "audit_findings",
                "Objects in the cluster the last background audit found would be rewritten or denied, by kind and verdict (only the leader reports them)",
                Family::<AuditLabels, Gauge>::default(),
            ),
            audit_last_success: add(
                r,
                "audit_last_success_timestamp_seconds",
                "Unix time the last background audit read everything it should without an error",
                Gauge::default(),
            ),
            audit_duration: add(
                r,
                "audit_duration_seconds",
                "Time a background audit run took, reading, judging and writing",
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                    0.05, 2.5, 10,
                )),
            ),
            audit_errors: add(
                r,
                "audit_errors",
                "What background audits could not read or write (each kind, write or failed connection counts once)",
                Counter::default(),
            ),
            pending_upgrade_findings: add(
                r,
                "pending_upgrade_findings",
                "What approving each operator upgrade that waits for an approval would break, as the last pre-flight (serve --audit-preflight) judged it: objects stale_after_upgrade or already_stale, digests unpullable_after_upgrade, not_judged 1 for a release whose bundle is too large or too complex to read; a plan's series go once it no longer waits",
                Family::<PendingLabels, Gauge>::default(),
            ),
            pending_upgrade_unjudged: add(
                r,
                "pending_upgrade_unjudged",
                "InstallPlans the last pre-flight (serve --audit-preflight) could not judge, by the plan's namespace and why (plan_unreadable, bundle_unreadable, too_large): their approval is answered as not judged",
                Family::<UnjudgedLabels, Gauge>::default(),
            ),
            images: add(
                r,
                "audit_images",
                "Pod containers the last background audit found, by what they run: a repository the allowlist lists (else unlisted), a digest (promoted ones, at most 5 others, the rest other; tag_only for a tag), the verdict, and seen: spec, or node for the digest a node resolved a tag to (the same containers again: sum seen=\"spec\" to count them); at most 500 series, the rest under repository overflow",
                Family::<RunningLabels, Gauge>::default(),
            ),
            audit_leader: add(
                r,
                "audit_leader",
                "1 while this replica holds the audit lease (and so audits), else 0",
                Gauge::default(),
            ),
            lease_errors: add(
                r,
                "audit_lease_errors",
                "Attempts to join the background audit's election that failed, by reason (unreachable, forbidden, missing, other); retried with backoff",
                {
                    // Every reason present from the start, so a rate over it is
                    // defined before the first error.
                    let family = Family::<LeaseLabels, Counter>::default();
                    for &reason in <LeaseTrouble as strum::VariantArray>::VARIANTS {
                        let _ = family.get_or_create(&LeaseLabels { reason });
                    }
                    family
                },
            ),
        }
    }

    /// An attempt to join the election failed.
    pub fn lease_failed(&self, reason: LeaseTrouble) {
        self.lease_errors.get_or_create(&LeaseLabels { reason }).inc();
    }

    /// A background audit finished: `findings` per (kind, verdict), every
    /// kind read listed (with 0 when it found nothing), replaces the last
    /// run's.
    pub fn run(&self, findings: &[(&'static str, Verdict, usize)], seconds: f64, errors: usize) {
        self.audit_findings.clear();
        for &(kind, verdict, n) in findings {
            self.audit_findings
                .get_or_create(&AuditLabels { kind, verdict })
                .set(gauge_value(n));
        }
        self.audit_duration.observe(seconds);
        self.audit_errors.inc_by(errors as u64);
        if errors == 0 {
            self.audit_last_success.set(unix_now());
        }
    }

    /// A pre-flight round finished: (namespace, package, reason, count) of
    /// every plan judged replaces the last round's, so a plan approved or
    /// gone loses its series.
    pub fn pending_upgrades(&self, found: &[(String, String, &'static str, usize)]) {
        self.pending_upgrade_findings.clear();
        for (namespace, package, reason, n) in found {
            let labels = PendingLabels {
                plan_namespace: namespace.clone(),
                package: package.clone(),
                reason,
            };
            self.pending_upgrade_findings
                .get_or_create(&labels)
                .set(gauge_value(*n));
        }
    }

    /// The plans the last pre-flight could not judge replace the last
    /// one's: `(plan namespace, reason)` and how many.
    pub fn unjudged_upgrades(&self, unjudged: &[((String, Unjudged), usize)]) {
        self.pending_upgrade_unjudged.clear();
        for ((namespace, reason), n) in unjudged {
            let labels = UnjudgedLabels {
                plan_namespace: namespace.clone(),
                reason: *reason,
            };
            self.pending_upgrade_unjudged
                .get_or_create(&labels)
                .set(gauge_value(*n));
        }
    }

    /// What the last background audit's Pods run replaces the last run's:
    /// a digest no longer found loses its series.
    pub fn images(&self, series: &[(fleet::Series, usize)]) {
        self.images.clear();
        for (s, n) in series {
            let labels = RunningLabels {
                repository: s.repository.clone(),
                digest: s.digest.clone(),
                verdict: s.verdict,
                seen: s.seen,
            };
            self.images.get_or_create(&labels).set(gauge_value(*n));
        }
    }

    /// A background audit could not run at all.
    pub fn failed(&self) {
        self.audit_errors.inc();
    }

    /// Leadership changed: a replica that does not audit shows no findings
    /// (a stale copy would be counted twice in a sum over replicas).
    pub fn leader(&self, leader: bool) {
        self.audit_leader.set(i64::from(leader));
        if !leader {
            // Only the leader reports what it found.
            self.audit_findings.clear();
            self.images.clear();
            self.pending_upgrade_findings.clear();
            self.break_glass_namespaces.set(0);
            self.without_name_label.set(0);
        }
    }

    /// The break-glass namespaces the last background audit found.
    pub fn break_glass_namespaces(&self, n: usize) {
        self.break_glass_namespaces.set(gauge_value(n));
    }

    /// The named namespaces found without their name label.
    pub fn without_name_label(&self, n: usize) {
        self.without_name_label.set(gauge_value(n));
    }
}
