//! Prometheus metrics, all named `digest_gate_*`.
//!
//! Label values come from closed sets: a forged review can name any kind or
//! operation, and an unbounded label would let it grow our memory.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

/// Labels of a judged admission request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: &'static str,
    pub kind: &'static str,
    pub operation: &'static str,
    /// `allow`, `rewrite`, `deny`, or `skipped` for kinds without images.
    pub verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ImageLabels {
    verdict: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    source: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AuditLabels {
    kind: &'static str,
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

pub use crate::objects::kind_label;

/// A closed-set label for an operation.
pub fn operation_label(operation: &str) -> &'static str {
    match operation {
        "CREATE" => "CREATE",
        "UPDATE" => "UPDATE",
        "DELETE" => "DELETE",
        "CONNECT" => "CONNECT",
        _ => "other",
    }
}

/// Registers `metric` and returns the handle the server updates (metrics
/// are shared handles: the clone and the registered one are the same).
fn add<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    duration: Family<EndpointLabels, Histogram>,
    images: Family<ImageLabels, Counter>,
    bad_requests: Family<ReasonLabels, Counter>,
    reloads: Family<ReloadLabels, Counter>,
    last_reload: Family<SourceLabels, Gauge<f64, AtomicU64>>,
    allowlist_repositories: Gauge,
    allowlist_digests: Gauge,
    allowlist_stale: Gauge,
    tls_handshake_failures: Counter,
    certificate_expiry: Gauge,
    open_connections: Gauge,
    evicted_connections: Family<ReasonLabels, Counter>,
    audit_findings: Family<AuditLabels, Gauge>,
    audit_last_success: Gauge<f64, AtomicU64>,
    audit_duration: Histogram,
    audit_errors: Counter,
    audit_leader: Gauge,
    break_glass_namespaces: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

// === impl Metrics ===

impl Metrics {
    /// Registers every metric under the `digest_gate` prefix.
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("digest_gate");
        // Fields are initialised in the order written: every metric is
        // registered before the registry moves into the struct.
        Self {
            requests: add(
                &mut r,
                "admission_requests",
                "Admission reviews answered, by endpoint, kind, operation and verdict",
                Family::<RequestLabels, Counter>::default(),
            ),
            duration: add(
                &mut r,
                "admission_duration_seconds",
                "Time from a review's body being read to its answer being encoded",
                Family::<EndpointLabels, Histogram>::new_with_constructor(|| {
                    // 25 µs .. 0.6 s by factors of 2.5: the decision itself is
                    // microseconds. Then 1, 2.5 and 5 s, so that a quantile
                    // can be told to be above a second (the latency alert),
                    // up to the apiserver's default webhook timeout.
                    let fine = prometheus_client::metrics::histogram::exponential_buckets(25e-6, 2.5, 12);
                    Histogram::new(fine.chain([1.0, 2.5, 5.0]))
                }),
            ),
            images: add(
                &mut r,
                "images",
                "Images judged, by verdict and reason",
                Family::<ImageLabels, Counter>::default(),
            ),
            bad_requests: add(
                &mut r,
                "bad_requests",
                "Requests refused before review (wrong method, content type, size, undecodable)",
                Family::<ReasonLabels, Counter>::default(),
            ),
            reloads: add(
                &mut r,
                "reloads",
                "Reloads of the allowlist, the installed CSVs and the TLS certificate, by result (success, failure; empty: an allowlist that promotes nothing, accepted in audit mode)",
                Family::<ReloadLabels, Counter>::default(),
            ),
            last_reload: add(
                &mut r,
                "last_successful_reload_timestamp_seconds",
                "Unix time of the last successful load, by source",
                Family::<SourceLabels, Gauge<f64, AtomicU64>>::default(),
            ),
            allowlist_repositories: add(
                &mut r,
                "allowlist_repositories",
                "Repositories in the allowlist in force",
                Gauge::default(),
            ),
            allowlist_digests: add(
                &mut r,
                "allowlist_digests",
                "Promoted (repository, digest) pairs in the allowlist in force",
                Gauge::default(),
            ),
            allowlist_stale: add(
                &mut r,
                "allowlist_stale",
                "1 while the allowlist in force is not the one mounted: it failed to load, and the last good one (kept in memory, or in --state-dir across a restart) serves",
                Gauge::default(),
            ),
            tls_handshake_failures: add(
                &mut r,
                "tls_handshake_failures",
                "TLS handshakes that failed or timed out (plain HTTP on the TLS port counts here)",
                Counter::default(),
            ),
            certificate_expiry: add(
                &mut r,
                "certificate_expiry_timestamp_seconds",
                "Unix time the serving certificate chain in force stops being valid (the earliest notAfter in it); 0 when that cannot be read",
                Gauge::default(),
            ),
            open_connections: add(
                &mut r,
                "open_connections",
                "Webhook connections currently open",
                Gauge::default(),
            ),
            evicted_connections: add(
                &mut r,
                "connections_evicted",
                "Webhook connections closed to make room, by reason: pending-handshakes and pending-handshakes-per-peer (the oldest TLS handshake not finished, at --max-pending-handshakes or --max-pending-per-peer), unserved (the oldest connection that had not sent a whole request, at --max-connections), full (a new connection, at --max-connections with every one served)",
                Family::<ReasonLabels, Counter>::default(),
            ),
            break_glass_namespaces: add(
                &mut r,
                "break_glass_namespaces",
                "Namespaces the last background audit found carrying the break-glass label (--audit-break-glass-label): the webhook does not review them",
                Gauge::default(),
            ),
            audit_findings: add(
                &mut r,
                "audit_findings",
                "Objects in the cluster the last background audit found would be rewritten or denied, by kind and verdict (only the leader reports them)",
                Family::<AuditLabels, Gauge>::default(),
            ),
            audit_last_success: add(
                &mut r,
                "audit_last_success_timestamp_seconds",
                "Unix time the last background audit read everything it should without an error",
                Gauge::default(),
            ),
            audit_duration: add(
                &mut r,
                "audit_duration_seconds",
                "Time a background audit run took, reading, judging and writing",
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                    0.05, 2.5, 10,
                )),
            ),
            audit_errors: add(
                &mut r,
                "audit_errors",
                "What background audits could not read or write (each kind, write or failed connection counts once)",
                Counter::default(),
            ),
            audit_leader: add(
                &mut r,
                "audit_leader",
                "1 while this replica holds the audit lease (and so audits), else 0",
                Gauge::default(),
            ),
            registry: r,
        }
    }

    /// A background audit finished: `findings` per (kind, verdict), every
    /// kind read listed (with 0 when it found nothing), replaces the last
    /// run's.
    pub fn audit_run(&self, findings: &[(&'static str, &'static str, usize)], seconds: f64, errors: usize) {
        self.audit_findings.clear();
        for &(kind, verdict, n) in findings {
            self.audit_findings
                .get_or_create(&AuditLabels { kind, verdict })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        self.audit_duration.observe(seconds);
        self.audit_errors.inc_by(errors as u64);
        if errors == 0 {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            self.audit_last_success.set(now);
        }
    }

    /// A background audit could not run at all.
    pub fn audit_failed(&self) {
        self.audit_errors.inc();
    }

    /// Leadership changed: a replica that does not audit shows no findings
    /// (a stale copy would be counted twice in a sum over replicas).
    pub fn audit_leader(&self, leader: bool) {
        self.audit_leader.set(i64::from(leader));
        if !leader {
            // Only the leader reports what it found.
            self.audit_findings.clear();
            self.break_glass_namespaces.set(0);
        }
    }

    /// Counts an answered review.
    pub fn request(&self, labels: RequestLabels, seconds: f64) {
        self.requests.get_or_create(&labels).inc();
        self.duration
            .get_or_create(&EndpointLabels {
                endpoint: labels.endpoint,
            })
            .observe(seconds);
    }

    /// Counts a judged image.
    pub fn image(&self, verdict: &'static str, reason: &'static str) {
        self.images.get_or_create(&ImageLabels { verdict, reason }).inc();
    }

    /// Counts a refused request.
    pub fn bad_request(&self, reason: &'static str) {
        self.bad_requests.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Records a reload attempt of `source` (`allowlist` or `certificate`).
    pub fn reload(&self, source: &'static str, ok: bool) {
        self.reload_as(source, if ok { "success" } else { "failure" });
    }

    /// Records a reload of an allowlist that promotes nothing: it loaded
    /// (audit mode accepts it) but every image will be reported.
    pub fn reload_empty(&self, source: &'static str) {
        self.reload_as(source, "empty");
    }

    fn reload_as(&self, source: &'static str, result: &'static str) {
        self.reloads.get_or_create(&ReloadLabels { source, result }).inc();
        if result != "failure" {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            self.last_reload.get_or_create(&SourceLabels { source }).set(now);
        }
    }

    /// Records the size of the allowlist now in force.
    pub fn allowlist_size(&self, repositories: usize, digests: usize) {
        self.allowlist_repositories
            .set(i64::try_from(repositories).unwrap_or(i64::MAX));
        self.allowlist_digests
            .set(i64::try_from(digests).unwrap_or(i64::MAX));
    }

    /// Whether the allowlist in force is an older one than the mounted.
    pub fn allowlist_stale(&self, stale: bool) {
        self.allowlist_stale.set(i64::from(stale));
    }

    /// Records when the certificate chain now in force expires (`None`:
    /// unknown, exported as 0 so that an expiry alert fires rather than
    /// stays silent).
    pub fn certificate_expiry(&self, unix_seconds: Option<i64>) {
        self.certificate_expiry.set(unix_seconds.unwrap_or(0));
    }

    /// Counts a failed TLS handshake.
    pub fn tls_handshake_failed(&self) {
        self.tls_handshake_failures.inc();
    }

    /// Tracks open connections.
    pub fn connection_opened(&self) {
        self.open_connections.inc();
    }

    /// Tracks open connections.
    pub fn connection_closed(&self) {
        self.open_connections.dec();
    }

    /// The break-glass namespaces the last background audit found.
    pub fn break_glass_namespaces(&self, n: usize) {
        self.break_glass_namespaces
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Counts a connection closed to make room.
    pub fn connection_evicted(&self, why: crate::server::gate::Eviction) {
        self.evicted_connections
            .get_or_create(&ReasonLabels { reason: why.as_str() })
            .inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_prefix_and_counters_their_suffix() {
        let m = Metrics::new();
        m.request(
            RequestLabels {
                endpoint: "mutate",
                kind: kind_label("Pod"),
                operation: operation_label("CREATE"),
                verdict: "rewrite",
            },
            0.0001,
        );
        m.reload("allowlist", true);
        m.image("deny", "short_name");
        let text = m.encode();
        assert!(text.contains(
            "digest_gate_admission_requests_total{endpoint=\"mutate\",kind=\"Pod\",operation=\"CREATE\",verdict=\"rewrite\"} 1"
        ), "{text}");
        assert!(
            text.contains("digest_gate_admission_duration_seconds_bucket"),
            "{text}"
        );
        assert!(
            text.contains("digest_gate_reloads_total{source=\"allowlist\",result=\"success\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("digest_gate_images_total{verdict=\"deny\",reason=\"short_name\"} 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn labels_stay_in_closed_sets() {
        assert_eq!(kind_label("ServingRuntime"), "ServingRuntime");
        assert_eq!(kind_label("x".repeat(1000).as_str()), "other");
        assert_eq!(operation_label("PATCH"), "other");
    }
}
