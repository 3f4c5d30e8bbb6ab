//! Prometheus metrics, all named `digest_gate_*`.
//!
//! Label values come from closed sets: a forged review can name any kind or
//! operation, and an unbounded label would let it grow our memory.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

use crate::judge::{ImageVerdict, ObjectVerdict};
use crate::policy::{Reason, Verdict};
use crate::published::{Counts, State, Trouble};

/// Label values of the verdict and reason types: their derived names
/// (`digest_not_promoted`), where prometheus-client's derive would write
/// the variant's (`DigestNotPromoted`).
macro_rules! label_values {
    ($($t:ty),*) => {$(
        impl EncodeLabelValue for $t {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
                std::fmt::Write::write_str(encoder, (*self).into())
            }
        }
    )*};
}

label_values!(
    Verdict,
    Reason,
    ImageVerdict,
    ObjectVerdict,
    Eviction,
    Reloaded,
    State,
    Trouble,
    LeaseTrouble,
    Unjudged
);

/// Labels of a judged admission request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: &'static str,
    pub kind: &'static str,
    pub operation: &'static str,
    /// `skipped` for kinds without images.
    pub verdict: ObjectVerdict,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ImageLabels {
    verdict: ImageVerdict,
    reason: Reason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    source: Reloaded,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: Reloaded,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvictionLabels {
    reason: Eviction,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

pub use crate::objects::kind_label;

mod audit;
pub use audit::{AuditMetrics, LeaseTrouble, Unjudged};

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

/// Now, as Unix seconds, for the `*_timestamp_seconds` gauges.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Every metric the server exports, by concern. Each concern is a set of
/// shared handles: a background task takes a clone of the one it updates,
/// never the whole server.
pub struct Metrics {
    registry: Registry,
    pub admission: AdmissionMetrics,
    pub reloads: ReloadMetrics,
    pub connections: ConnectionMetrics,
    pub audit: AuditMetrics,
    /// Registered only with `--verify-registry` ([`Metrics::verifying`]).
    pub verify: Option<VerifyMetrics>,
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
        let mut registry = Registry::with_prefix("digest_gate");
        let admission = AdmissionMetrics::register(&mut registry);
        let reloads = ReloadMetrics::register(&mut registry);
        let connections = ConnectionMetrics::register(&mut registry);
        let audit = AuditMetrics::register(&mut registry);
        crate::logsink::register(&mut registry);
        Self {
            registry,
            admission,
            reloads,
            connections,
            audit,
            verify: None,
        }
    }

    /// With `--verify-registry`: its metrics registered too (without it
    /// they would only ever read zero).
    pub fn verifying() -> Self {
        let mut metrics = Self::new();
        metrics.verify = Some(VerifyMetrics::register(&mut metrics.registry));
        metrics
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

// === admission ===

/// Reviews answered and refused, and the images in them.
#[derive(Clone)]
pub struct AdmissionMetrics {
    requests: Family<RequestLabels, Counter>,
    duration: Family<EndpointLabels, Histogram>,
    images: Family<ImageLabels, Counter>,
    bad_requests: Family<ReasonLabels, Counter>,
}

/// Times one review from its start; records into the latency histogram
/// when stopped or dropped, unless [`Timer::discard`]ed (a request refused
/// before review is counted apart, not timed). The endpoint's series is made only
/// then, as for the request counter: a refused request makes none.
pub struct Timer<'m> {
    histograms: Option<&'m Family<EndpointLabels, Histogram>>,
    endpoint: &'static str,
    started: std::time::Instant,
}

impl Timer<'_> {
    /// Records the time so far, and returns it (one clock read for the
    /// histogram and the decision log).
    pub fn stop(mut self) -> std::time::Duration {
        let elapsed = self.started.elapsed();
        self.record(elapsed);
        elapsed
    }

    /// Records nothing.
    pub fn discard(mut self) {
        self.histograms = None;
    }

    fn record(&mut self, elapsed: std::time::Duration) {
        if let Some(histograms) = self.histograms.take() {
            let endpoint = self.endpoint;
            histograms
                .get_or_create(&EndpointLabels { endpoint })
                .observe(elapsed.as_secs_f64());
        }
    }
}

impl Drop for Timer<'_> {
    /// A timer neither stopped nor discarded (an answer that unwound)
    /// still records.
    fn drop(&mut self) {
        if self.histograms.is_some() {
            self.record(self.started.elapsed());
        }
    }
}

impl AdmissionMetrics {
    fn register(r: &mut Registry) -> Self {
        Self {
            requests: add(
                r,
                "admission_requests",
                "Admission reviews answered, by endpoint, kind, operation and verdict",
                Family::<RequestLabels, Counter>::default(),
            ),
            duration: add(
                r,
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
                r,
                "images",
                "Images judged, by verdict and reason",
                Family::<ImageLabels, Counter>::default(),
            ),
            bad_requests: add(
                r,
                "bad_requests",
                "Requests refused before review (wrong method, content type, size, undecodable)",
                Family::<ReasonLabels, Counter>::default(),
            ),
        }
    }

    /// Starts timing a review on `endpoint`.
    pub fn timer(&self, endpoint: &'static str) -> Timer<'_> {
        Timer {
            histograms: Some(&self.duration),
            endpoint,
            started: std::time::Instant::now(),
        }
    }

    /// Counts an answered review.
    pub fn request(&self, labels: RequestLabels) {
        self.requests.get_or_create(&labels).inc();
    }

    /// Counts a judged image.
    pub fn image(&self, verdict: ImageVerdict, reason: Reason) {
        self.images.get_or_create(&ImageLabels { verdict, reason }).inc();
    }

    /// Counts a refused request.
    pub fn bad_request(&self, reason: &'static str) {
        self.bad_requests.get_or_create(&ReasonLabels { reason }).inc();
    }
}

// === reloads ===

/// Reloads of the allowlist, the installed CSVs and the certificate, and
/// what is in force after them.
#[derive(Clone)]
pub struct ReloadMetrics {
    reloads: Family<ReloadLabels, Counter>,
    last_reload: Family<SourceLabels, Gauge<f64, AtomicU64>>,
    allowlist_repositories: Gauge,
    allowlist_digests: Gauge,
    allowlist_stale: Gauge,
    certificate_expiry: Gauge,
    csv_watch_down_since: Gauge<f64, AtomicU64>,
}

/// What reloads, as the `source` label names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum Reloaded {
    Allowlist,
    Certificate,
    /// The installed operators' CSVs (`--allowlist-csv`).
    InstalledCsvs,
}

impl ReloadMetrics {
    fn register(r: &mut Registry) -> Self {
        Self {
            reloads: add(
                r,
                "reloads",
                "Reloads of the allowlist, the installed CSVs and the TLS certificate, by result (success, failure; empty: an allowlist that promotes nothing, accepted in audit mode)",
                Family::<ReloadLabels, Counter>::default(),
            ),
            last_reload: add(
                r,
                "last_successful_reload_timestamp_seconds",
                "Unix time of the last successful load, by source",
                Family::<SourceLabels, Gauge<f64, AtomicU64>>::default(),
            ),
            allowlist_repositories: add(
                r,
                "allowlist_repositories",
                "Repositories in the allowlist in force",
                Gauge::default(),
            ),
            allowlist_digests: add(
                r,
                "allowlist_digests",
                "Promoted (repository, digest) pairs in the allowlist in force",
                Gauge::default(),
            ),
            allowlist_stale: add(
                r,
                "allowlist_stale",
                "1 while the allowlist in force is not the one mounted: it failed to load, and the last good one (kept in memory, or in --state-dir across a restart) serves",
                Gauge::default(),
            ),
            certificate_expiry: add(
                r,
                "certificate_expiry_timestamp_seconds",
                "Unix time the serving certificate chain in force stops being valid (the earliest notAfter in it); 0 when that cannot be read",
                Gauge::default(),
            ),
            csv_watch_down_since: add(
                r,
                "installed_csvs_watch_down_since_timestamp_seconds",
                "Unix time the watch of the installed CSVs (--allowlist-csv) first failed since it last worked, while the CSVs read last stay in force; 0 while it works, or is not used",
                Gauge::default(),
            ),
        }
    }

    /// Records a load of `source` that succeeded or failed.
    pub fn reload(&self, source: Reloaded, ok: bool) {
        self.reload_as(source, if ok { "success" } else { "failure" });
    }

    /// Records a reload of an allowlist that promotes nothing: it loaded
    /// (audit mode accepts it) but every image will be reported.
    pub fn reload_empty(&self, source: Reloaded) {
        self.reload_as(source, "empty");
    }

    fn reload_as(&self, source: Reloaded, result: &'static str) {
        self.reloads.get_or_create(&ReloadLabels { source, result }).inc();
        if result != "failure" {
            self.last_reload
                .get_or_create(&SourceLabels { source })
                .set(unix_now());
        }
    }

    /// Records the size of the allowlist now in force.
    pub fn allowlist_size(&self, repositories: usize, digests: usize) {
        self.allowlist_repositories.set(gauge_value(repositories));
        self.allowlist_digests.set(gauge_value(digests));
    }

    /// Whether the allowlist in force is an older one than the mounted.
    pub fn allowlist_stale(&self, stale: bool) {
        self.allowlist_stale.set(i64::from(stale));
    }

    /// Records that the installed-CSV watch has been down since `since`
    /// (`None`: it works).
    pub fn csv_watch_down(&self, since: Option<std::time::SystemTime>) {
        let seconds = since
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs_f64());
        self.csv_watch_down_since.set(seconds);
    }

    /// Records when the certificate chain now in force expires (`None`:
    /// unknown, exported as 0 so that an expiry alert fires rather than
    /// stays silent).
    pub fn certificate_expiry(&self, unix_seconds: Option<i64>) {
        self.certificate_expiry.set(unix_seconds.unwrap_or(0));
    }
}

// === connections ===

/// The webhook port's connections.
#[derive(Clone)]
pub struct ConnectionMetrics {
    tls_handshake_failures: Counter,
    open_connections: Gauge,
    evicted_connections: Family<EvictionLabels, Counter>,
}

/// Why a connection was closed to make room: the `reason` label of
/// `digest_gate_connections_evicted_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::VariantArray)]
pub enum Eviction {
    /// The oldest pending handshake, at the cap of pending handshakes.
    #[strum(serialize = "pending-handshakes")]
    Pending,
    /// The peer's oldest pending handshake, at the cap per peer address.
    #[strum(serialize = "pending-handshakes-per-peer")]
    Peer,
    /// The oldest established connection that had not sent a whole request,
    /// at the connection cap.
    #[strum(serialize = "unserved")]
    Unserved,
    /// A new connection, at the connection cap with every one served.
    #[strum(serialize = "full")]
    Full,
}

impl Eviction {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl ConnectionMetrics {
    fn register(r: &mut Registry) -> Self {
        Self {
            tls_handshake_failures: add(
                r,
                "tls_handshake_failures",
                "TLS handshakes that failed or timed out (plain HTTP on the TLS port counts here)",
                Counter::default(),
            ),
            open_connections: add(
                r,
                "open_connections",
                "Webhook connections currently open",
                Gauge::default(),
            ),
            evicted_connections: add(
                r,
                "connections_evicted",
                "Webhook connections closed to make room, by reason: pending-handshakes and pending-handshakes-per-peer (the oldest TLS handshake not finished, at --max-pending-handshakes or --max-pending-per-peer), unserved (the oldest connection that had not sent a whole request, at --max-connections), full (a new connection, at --max-connections with every one served)",
                Family::<EvictionLabels, Counter>::default(),
            ),
        }
    }

    /// Counts a failed TLS handshake.
    pub fn tls_handshake_failed(&self) {
        self.tls_handshake_failures.inc();
    }

    /// Counts a connection open until the guard is dropped.
    pub fn open(&self) -> OpenConnection {
        self.open_connections.inc();
        OpenConnection(self.open_connections.clone())
    }

    /// Counts a connection closed to make room.
    pub fn evicted(&self, why: Eviction) {
        self.evicted_connections
            .get_or_create(&EvictionLabels { reason: why })
            .inc();
    }
}

/// One open connection, counted until dropped (whichever way the
/// connection's task ends).
pub struct OpenConnection(Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

// === registry verification ===

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: State,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TroubleLabels {
    pub reason: Trouble,
}

/// `--verify-registry`: the allowlist's promoted digests by what their
/// registries said, how long a verification took, and what stopped one.
#[derive(Clone)]
pub struct VerifyMetrics {
    promoted_images: Family<StateLabels, Gauge>,
    duration: Histogram,
    errors: Family<TroubleLabels, Counter>,
}

impl VerifyMetrics {
    fn register(r: &mut Registry) -> Self {
        let errors = Family::<TroubleLabels, Counter>::default();
        // Every reason present from the start, so a rate over it is
        // defined before the first error.
        for &reason in <Trouble as strum::VariantArray>::VARIANTS {
            let _ = errors.get_or_create(&TroubleLabels { reason });
        }
        Self {
            promoted_images: add(
                r,
                "promoted_images",
                "The allowlist's promoted digests by what their registries said (--verify-registry); not yet verified ones are not counted",
                Family::<StateLabels, Gauge>::default(),
            ),
            // A round asks about the digests not verified yet (seconds) or,
            // on the interval, all of them (minutes for thousands).
            duration: add(
                r,
                "registry_verification_duration_seconds",
                "How long one round of registry verification took (--verify-registry)",
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                    0.1, 3.0, 10,
                )),
            ),
            errors: add(
                r,
                "registry_verification_errors",
                "Registry requests that ended unverifiable, and rounds that could not start, by reason (--verify-registry)",
                errors,
            ),
        }
    }

    /// The counts of the last verification, every state set.
    pub fn set(&self, counts: Counts) {
        for &state in <State as strum::VariantArray>::VARIANTS {
            self.promoted_images
                .get_or_create(&StateLabels { state })
                .set(gauge_value(counts.of(state)));
        }
    }

    /// One round done, in `seconds`.
    pub fn round(&self, seconds: f64) {
        self.duration.observe(seconds);
    }

    /// `n` more errors for `reason`.
    pub fn errors(&self, reason: Trouble, n: u64) {
        self.errors.get_or_create(&TroubleLabels { reason }).inc_by(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet;

    #[test]
    fn names_carry_the_prefix_and_counters_their_suffix() {
        let m = Metrics::new();
        drop(m.admission.timer("mutate"));
        m.admission.request(RequestLabels {
            endpoint: "mutate",
            kind: kind_label("Pod"),
            operation: operation_label("CREATE"),
            verdict: ObjectVerdict::Rewrite,
        });
        m.reloads.reload(Reloaded::Allowlist, true);
        m.admission.image(ImageVerdict::Deny, Reason::ShortName);
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

    /// The names a type's values go by: one each, and the same in serde,
    /// strum and `Display`.
    fn names<T>(all: &[T]) -> Vec<&'static str>
    where
        T: Copy + serde::Serialize + std::fmt::Display + Into<&'static str>,
    {
        let names: Vec<&'static str> = all.iter().map(|v| (*v).into()).collect();
        for (v, name) in all.iter().zip(&names) {
            assert_eq!(serde_json::to_value(v).unwrap(), serde_json::json!(name));
            assert_eq!(v.to_string(), *name);
        }
        let distinct: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), all.len(), "{names:?}");
        names
    }

    #[test]
    fn every_verdict_and_reason_has_one_name_in_reports_and_metrics() {
        use strum::VariantArray;
        let m = Metrics::new();
        let images = names(ImageVerdict::VARIANTS);
        let reasons = names(Reason::VARIANTS);
        assert_eq!(images, ["allow", "exempt", "rewrite", "deny"]);
        assert!(reasons.contains(&"digest_not_promoted") && reasons.contains(&"no_tag_or_digest"));
        for &v in ImageVerdict::VARIANTS {
            for &r in Reason::VARIANTS {
                m.admission.image(v, r);
            }
        }
        for &verdict in ObjectVerdict::VARIANTS {
            m.admission.request(RequestLabels {
                endpoint: "mutate",
                kind: "Pod",
                operation: "CREATE",
                verdict,
            });
        }
        let findings: Vec<_> = Verdict::VARIANTS.iter().map(|&v| ("Pod", v, 1)).collect();
        m.audit.run(&findings, 0.1, 0);
        for &e in Eviction::VARIANTS {
            m.connections.evicted(e);
        }
        for &source in Reloaded::VARIANTS {
            m.reloads.reload(source, true);
        }
        let text = m.encode();
        for v in &images {
            for r in &reasons {
                let series = format!("digest_gate_images_total{{verdict=\"{v}\",reason=\"{r}\"}} 1");
                assert!(text.contains(&series), "{series}");
            }
        }
        for v in names(ObjectVerdict::VARIANTS) {
            assert!(text.contains(&format!("verdict=\"{v}\"}} 1")), "{v}");
        }
        for v in names(Verdict::VARIANTS) {
            assert!(
                text.contains(&format!(
                    "digest_gate_audit_findings{{kind=\"Pod\",verdict=\"{v}\"}} 1"
                )),
                "{v}"
            );
        }
        for e in Eviction::VARIANTS {
            let name: &str = (*e).into();
            assert!(text.contains(&format!("reason=\"{name}\"}} 1")), "{name}");
        }
        for source in ["allowlist", "certificate", "installed-csvs"] {
            assert!(
                text.contains(&format!("source=\"{source}\",result=\"success\"}} 1")),
                "{source}"
            );
        }
    }

    #[test]
    fn a_discarded_timer_records_nothing_and_makes_no_series() {
        let m = Metrics::new();
        m.admission.timer("validate-allowlist").discard();
        assert!(!m.encode().contains("endpoint=\"validate-allowlist\""));
        drop(m.admission.timer("validate"));
        assert!(
            m.encode()
                .contains("digest_gate_admission_duration_seconds_count{endpoint=\"validate\"} 1")
        );
    }

    #[test]
    fn labels_stay_in_closed_sets() {
        assert_eq!(kind_label("ServingRuntime"), "ServingRuntime");
        assert_eq!(kind_label("x".repeat(1000).as_str()), "other");
        assert_eq!(operation_label("PATCH"), "other");
    }

    #[test]
    fn an_image_no_longer_found_loses_its_series_and_a_follower_has_none() {
        let m = Metrics::new();
        let series = |digest: &str, n| {
            (
                fleet::Series {
                    repository: "quay.io/x/y".into(),
                    digest: digest.into(),
                    verdict: Verdict::Allow,
                    seen: fleet::SEEN_SPEC,
                },
                n,
            )
        };
        m.audit.images(&[series("sha256:aa", 2), series("sha256:bb", 1)]);
        let first = m.encode();
        assert!(first.contains(
            "digest_gate_audit_images{repository=\"quay.io/x/y\",digest=\"sha256:aa\",verdict=\"allow\",seen=\"spec\"} 2"
        ));
        m.audit.images(&[series("sha256:bb", 3)]);
        let second = m.encode();
        assert!(!second.contains("sha256:aa"), "{second}");
        assert!(
            second.contains("digest=\"sha256:bb\",verdict=\"allow\",seen=\"spec\"} 3"),
            "{second}"
        );
        m.audit.leader(false);
        assert!(!m.encode().contains("digest_gate_audit_images{"));
    }
}
