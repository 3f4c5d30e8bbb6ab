//! `serve`'s flags, and the inputs it is started with.
//!
//! The flags are clap's alone: their defaults are declared once, in the
//! attributes, and [`ServerArgs::default`] is what `digest-gate serve` with
//! no flag parses to. What the command line makes of other flags (the TLS
//! files `--dev` generates, the allowlist paths, the decision settings) is
//! an [`Inputs`], passed to [`start`](super::start) beside the flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::audit::{BREAK_GLASS_LABEL, ClusterArgs, installed::CsvArgs};
use crate::flags::{parse_duration, parse_positive_duration};
use crate::policy::Policy;

/// `serve`'s own flags.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ServerArgs {
    /// Webhook (TLS) address.
    #[arg(long, env = "DIGEST_GATE_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Admin (plain HTTP) address for /healthz, /readyz and /metrics.
    #[arg(long, env = "DIGEST_GATE_ADMIN_LISTEN", default_value = "0.0.0.0:8080")]
    pub admin_listen: SocketAddr,
    /// Require client certificates signed by this CA (PEM).
    #[arg(long, env = "DIGEST_GATE_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,
    /// Keep the last allowlist that loaded in this directory (an emptyDir in
    /// the chart): a restart that finds the mounted allowlist unusable then
    /// serves that copy, or waits unready for a usable one, instead of
    /// exiting.
    #[arg(long, env = "DIGEST_GATE_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    #[command(flatten)]
    pub csvs: CsvArgs,
    /// Largest AdmissionReview body accepted (bytes).
    #[arg(long, env = "DIGEST_GATE_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Most established webhook connections; at the cap the oldest one that
    /// has not sent a whole request is closed for a new one.
    #[arg(long, env = "DIGEST_GATE_MAX_CONNECTIONS", default_value = "1024", value_parser = parse_connections)]
    pub max_connections: usize,
    /// Most connections whose TLS handshake has not finished; at the cap the
    /// oldest is closed for a new one, so a client that opens sockets and
    /// sends nothing cannot keep others out.
    #[arg(long, env = "DIGEST_GATE_MAX_PENDING_HANDSHAKES", default_value = "256", value_parser = parse_connections)]
    pub max_pending_handshakes: usize,
    /// Most unfinished TLS handshakes from one peer address; at the cap that
    /// peer's oldest is closed. An apiserver's handshakes take milliseconds.
    #[arg(long, env = "DIGEST_GATE_MAX_PENDING_PER_PEER", default_value = "64", value_parser = parse_connections)]
    pub max_pending_per_peer: usize,
    /// Time a client has to send request headers, and a body.
    #[arg(long, env = "DIGEST_GATE_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_positive_duration)]
    pub request_timeout: Duration,
    /// Time a TLS handshake may take (the apiserver's takes milliseconds).
    #[arg(long, env = "DIGEST_GATE_HANDSHAKE_TIMEOUT", default_value = "3s", value_parser = parse_positive_duration)]
    pub handshake_timeout: Duration,
    /// Time in-flight reviews get to finish on SIGTERM.
    #[arg(long, env = "DIGEST_GATE_GRACE_PERIOD", default_value = "20s", value_parser = parse_duration)]
    pub grace_period: Duration,
    /// Time to keep accepting after readiness turns 503 on SIGTERM, so
    /// endpoints can drop this pod before it stops listening.
    #[arg(long, env = "DIGEST_GATE_DRAIN_DELAY", default_value = "0s", value_parser = parse_duration)]
    pub drain_delay: Duration,
    /// How often the allowlist and certificate files are re-read (at least 100ms).
    #[arg(long, env = "DIGEST_GATE_RELOAD_INTERVAL", default_value = "2s", value_parser = parse_reload_interval)]
    pub reload_interval: Duration,
    /// Who may add, change or remove an InstallPlan's judgement (the
    /// digest-gate.dev/preflight annotation that /validate-approval answers
    /// its approval from), by username: the server's own ServiceAccount
    /// (system:serviceaccount:NAMESPACE:NAME), and whoever runs `preflight
    /// --annotate`. Anyone else is denied in enforce mode. None: nobody.
    #[arg(
        long,
        env = "DIGEST_GATE_JUDGEMENT_WRITERS",
        value_name = "USERNAME",
        value_delimiter = ','
    )]
    pub judgement_writers: Vec<String>,
    /// The cluster the background audit and --allowlist-csv read.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub audit: BackgroundArgs,
    #[command(flatten)]
    pub verify: super::verify::BackgroundVerifyArgs,
}

/// What `serve` is started with besides its flags.
#[derive(Debug)]
pub struct Inputs {
    /// The serving certificate (chain) and its key, PEM; re-read when they
    /// change.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Allowlist files and directories; re-read when they change.
    pub allowlists: Vec<PathBuf>,
    pub policy: Policy,
    /// The two ports, when they were bound before the start (`serve --dev`
    /// binds before it writes its files, so a start that cannot listen
    /// changes no file a running server uses); `None`: the start binds
    /// `--listen` and `--admin-listen`.
    pub bound: Option<Bound>,
}

/// The webhook and admin sockets, bound.
#[derive(Debug)]
pub struct Bound {
    pub webhook: std::net::TcpListener,
    pub admin: std::net::TcpListener,
}

// === impl Bound ===

impl Bound {
    /// Binds both addresses, or says which could not be.
    pub fn bind(webhook: SocketAddr, admin: SocketAddr) -> Result<Self, super::ServerError> {
        let bind = |addr: SocketAddr| {
            std::net::TcpListener::bind(addr)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(|source| super::ServerError::Bind { addr, source })
        };
        Ok(Self {
            webhook: bind(webhook)?,
            admin: bind(admin)?,
        })
    }
}

impl Default for ServerArgs {
    /// What `digest-gate serve` parses to with no flag and no
    /// `DIGEST_GATE_*` variable: a library caller's environment is not its
    /// input.
    fn default() -> Self {
        use clap::{Args, FromArgMatches};
        let matches = Self::augment_args(clap::Command::new("serve"))
            .mut_args(|arg| arg.env(None::<&str>))
            .try_get_matches_from(["serve"])
            .expect("every flag has a default");
        Self::from_arg_matches(&matches).expect("the defaults parse")
    }
}

/// At least one: a limit of none would accept nothing.
fn parse_connections(s: &str) -> Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .map(|n| n.max(1))
        .map_err(|e| format!("'{s}': {e}"))
}

/// Polling faster than this only burns CPU on stat calls.
fn parse_reload_interval(s: &str) -> Result<Duration, crate::flags::DurationError> {
    parse_duration(s).map(|d| d.max(Duration::from_millis(100)))
}

/// The background audit's flags.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct BackgroundArgs {
    /// Audit the cluster this often in the background, e.g. 10m; also after
    /// every allowlist reload. 0 turns it off.
    #[arg(long = "audit-interval", env = "DIGEST_GATE_AUDIT_INTERVAL", default_value = "0s",
          value_parser = parse_duration)]
    pub interval: Duration,
    /// Only namespaces matching this label selector (default: all).
    #[arg(
        long = "audit-namespace-selector",
        env = "DIGEST_GATE_AUDIT_NAMESPACE_SELECTOR",
        value_name = "SELECTOR"
    )]
    pub namespace_selector: Option<String>,
    /// The namespace label that keeps the webhook away (break glass): each
    /// run names the namespaces carrying it and counts them. Empty: none.
    #[arg(
        long = "audit-break-glass-label",
        env = "DIGEST_GATE_AUDIT_BREAK_GLASS_LABEL",
        value_name = "LABEL",
        default_value = BREAK_GLASS_LABEL
    )]
    pub break_glass_label: String,
    /// Write the findings as wgpolicyk8s.io PolicyReports.
    #[arg(long = "audit-policy-reports", env = "DIGEST_GATE_AUDIT_POLICY_REPORTS")]
    pub policy_reports: bool,
    /// With --audit-policy-reports: list passing results too (by default a
    /// report lists what needs action and its summary counts the rest).
    #[arg(
        long = "audit-policy-reports-passes",
        env = "DIGEST_GATE_AUDIT_POLICY_REPORTS_PASSES",
        requires = "policy_reports"
    )]
    pub policy_reports_passes: bool,
    /// Write a Warning Event on each object with a finding.
    #[arg(long = "audit-events", env = "DIGEST_GATE_AUDIT_EVENTS")]
    pub events: bool,
    /// Audit only while holding this coordination.k8s.io Lease (NAME, or
    /// NAMESPACE/NAME; default namespace: the pod's). Without it every
    /// replica audits.
    #[arg(long = "audit-lease", env = "DIGEST_GATE_AUDIT_LEASE", value_name = "LEASE")]
    pub lease: Option<String>,
    /// The ClusterRole that owns what the audit writes, so Kubernetes'
    /// garbage collector deletes reports and Events with it.
    #[arg(
        long = "audit-owner",
        env = "DIGEST_GATE_AUDIT_OWNER",
        value_name = "CLUSTERROLE"
    )]
    pub owner: Option<String>,
    /// After each audit, also judge every operator upgrade that waits for
    /// an approval in the namespaces of --allowlist-csv (as `preflight
    /// --all-pending` does): each plan carries its judgement (the
    /// digest-gate.dev/preflight annotation) that the webhook answers its
    /// approval from, and its findings are metrics.
    #[arg(long = "audit-preflight", env = "DIGEST_GATE_AUDIT_PREFLIGHT")]
    pub preflight: bool,
    /// Namespaces the webhook's entries select or exclude by their
    /// kubernetes.io/metadata.name label (the chart names them): each audit
    /// checks that each one there carries it, as Kubernetes sets it from
    /// 1.21 only, and says which do not (log, metric).
    #[arg(
        long = "audit-named-namespaces",
        env = "DIGEST_GATE_AUDIT_NAMED_NAMESPACES",
        value_name = "NAMESPACE",
        value_delimiter = ','
    )]
    pub named_namespaces: Vec<String>,
    /// Kubeconfig context for the audit and --allowlist-csv.
    #[arg(long, env = "DIGEST_GATE_CONTEXT")]
    pub context: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        config: ServerArgs,
    }

    #[test]
    fn the_defaults_are_what_serve_parses_to() {
        let parsed = Serve::try_parse_from(["serve"]).unwrap().config;
        assert_eq!(parsed, ServerArgs::default());
        let c = ServerArgs::default();
        assert_eq!(c.listen, SocketAddr::from(([0, 0, 0, 0], 8443)));
        assert_eq!(c.admin_listen, SocketAddr::from(([0, 0, 0, 0], 8080)));
        assert_eq!((c.max_body_bytes, c.max_connections), (8 * 1024 * 1024, 1024));
        assert_eq!(c.request_timeout, Duration::from_secs(10));
        assert_eq!(c.handshake_timeout, Duration::from_secs(3));
        assert_eq!((c.max_pending_handshakes, c.max_pending_per_peer), (256, 64));
        assert_eq!(c.grace_period, Duration::from_secs(20));
        assert_eq!(c.drain_delay, Duration::ZERO);
        assert_eq!(c.reload_interval, Duration::from_secs(2));
        assert_eq!(c.audit.interval, Duration::ZERO);
        assert_eq!(c.audit.break_glass_label, BREAK_GLASS_LABEL);
        assert!(c.client_ca.is_none() && c.state_dir.is_none() && c.cluster.cluster_timeout.is_none());
    }

    #[test]
    fn limits_and_intervals_have_floors() {
        assert_eq!(parse_reload_interval("1ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_connections("0"), Ok(1));
    }
}
