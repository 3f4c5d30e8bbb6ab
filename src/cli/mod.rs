//! The command line: flag definitions and dispatch for `serve`, `check`,
//! `audit`, `allowlist convert`, `allowlist lint` and `allowlist verify`. Every flag also reads
//! `DIGEST_GATE_<FLAG>` from the environment.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::allowlist::{self, Exemption, Loaded, Pattern};
use crate::audit;
use crate::check;
use crate::judge;
use crate::output;
use crate::policy::{Mode, Policy, Unlisted};
use crate::published::{Platform, Published};
use crate::registry::{self, RegistryArgs, verify};
use crate::report;
use crate::server;

/// Keeps model-serving workloads on promoted production image digests.
#[derive(Debug, Parser)]
#[command(name = "digest-gate", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the admission webhook: POST /mutate and /validate over TLS,
    /// /healthz, /readyz and /metrics on the admin port.
    ///
    /// Exit codes: 0 stopped by SIGTERM or SIGINT, after draining; 1 it
    /// could not start (certificate, allowlist, ports), or a second signal
    /// cut the drain short; 2 unusable flags.
    Serve(Box<ServeArgs>),
    /// Check manifests offline, as the webhook would judge them.
    ///
    /// Exit codes: 0 everything complies; 1 something is denied or needs a
    /// rewrite (with --fix: something is still denied after fixing); 2
    /// unusable input or flags, an allowlist that promotes nothing where it
    /// would deny every listed image, or nothing judged: no object found, or
    /// none of a kind digest-gate reads while something was skipped.
    Check(Box<CheckArgs>),
    /// Judge what is already in a cluster, as the webhook would judge it
    /// written now. Reads with your credentials, and writes nothing but
    /// what --policy-reports and --events ask for.
    ///
    /// Exit codes: 0 everything read complies; 1 something would be
    /// rewritten or denied; 2 unusable flags, kubeconfig or allowlist (one
    /// that promotes nothing where it would deny every listed image
    /// included), the cluster unreachable, or a kind it serves could not be
    /// read.
    Audit(Box<AuditArgs>),
    /// Delete the PolicyReports and Events that `audit` wrote.
    ///
    /// With --owner, only those a release's background audit wrote (owned
    /// by its ClusterRole); the chart's pre-delete hook runs this on `helm
    /// uninstall`. Exit codes: 0 everything found was deleted (or nothing
    /// was found); 2 the cluster unreachable, or something could not be
    /// listed or deleted.
    Cleanup(CleanupArgs),
    /// Work with allowlist files.
    #[command(subcommand)]
    Allowlist(AllowlistCommand),
}

/// Report formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
    /// SARIF 2.1.0, for code scanning (GitHub, GitLab).
    Sarif,
}

/// A per-kind mode override, `KIND=MODE`: the kind is one of the kinds
/// table's, so a mistyped one is refused where it is read rather than
/// quietly matching nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindMode {
    pub kind: &'static crate::objects::Kind,
    pub mode: Mode,
}

fn parse_kind_mode(s: &str) -> Result<KindMode, String> {
    let (kind, mode) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not KIND=MODE, e.g. ServingRuntime=enforce"))?;
    let mode = Mode::from_str(mode.trim(), true)
        .map_err(|_| format!("'{mode}' is not a mode; use rewrite, enforce or audit"))?;
    if kind.trim().is_empty() {
        return Err(format!("'{s}' names no kind"));
    }
    let kind = crate::objects::kinds::named(kind).map_err(|e| e.to_string())?;
    Ok(KindMode { kind, mode })
}

/// Where the allowlist comes from: `--allowlist`, and which packages of a
/// file-based catalog among them promote. One definition for every command
/// that reads an allowlist.
#[derive(Debug, Args)]
pub struct AllowlistArgs {
    /// Allowlist file or directory (repeat, or comma-separate in the env var).
    #[arg(long = "allowlist", env = "DIGEST_GATE_ALLOWLIST", value_delimiter = ',')]
    pub allowlists: Vec<PathBuf>,
    #[command(flatten)]
    pub catalog: CatalogArgs,
}

/// Decision flags shared by `check` and `serve`.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    #[command(flatten)]
    pub allowlist: AllowlistArgs,
    /// What to do with images that are not promoted.
    #[arg(long, env = "DIGEST_GATE_MODE", value_enum, default_value_t = Mode::Rewrite)]
    pub mode: Mode,
    /// Mode for one kind, e.g. ServingRuntime=enforce: a kind digest-gate
    /// reads or its plural resource name, any case (repeatable).
    #[arg(
        long = "kind-mode",
        env = "DIGEST_GATE_KIND_MODE",
        value_name = "KIND=MODE",
        value_delimiter = ',',
        value_parser = parse_kind_mode
    )]
    pub kind_modes: Vec<KindMode>,
    /// Images from repositories the allowlist does not list.
    #[arg(long, env = "DIGEST_GATE_UNLISTED", value_enum, default_value_t = Unlisted::Deny)]
    pub unlisted: Unlisted,
    /// Always allow images matching this pattern, e.g. quay.io/platform/debug-*
    /// (repeatable; added to the allowlist's exemptImages).
    #[arg(
        long = "exempt-image",
        env = "DIGEST_GATE_EXEMPT_IMAGE",
        value_name = "PATTERN",
        value_delimiter = ',',
        value_parser = parse_pattern
    )]
    pub exempt_images: Vec<Pattern>,
    /// Judge only ConfigMaps of these names (repeatable), e.g.
    /// servingruntimes-config; by default every ConfigMap whose values are
    /// runtime documents is judged.
    #[arg(
        long = "configmap-names",
        env = "DIGEST_GATE_CONFIGMAP_NAMES",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub configmap_names: Vec<String>,
}

/// Which packages of a file-based catalog promote, and which channel
/// orders their releases.
#[derive(Debug, Clone, Args)]
pub struct CatalogArgs {
    /// Of a file-based catalog, promote only this package's bundles
    /// (repeatable; every package by default).
    #[arg(
        long = "catalog-package",
        env = "DIGEST_GATE_CATALOG_PACKAGE",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub packages: Vec<String>,
    /// Order a catalog package's releases by this channel's upgrade graph
    /// instead of its defaultChannel.
    #[arg(
        long = "catalog-channel",
        env = "DIGEST_GATE_CATALOG_CHANNEL",
        value_name = "NAME"
    )]
    pub channel: Option<String>,
}

impl CatalogArgs {
    pub fn options(&self) -> allowlist::CatalogOptions {
        allowlist::CatalogOptions {
            packages: self.packages.clone(),
            channel: self.channel.clone(),
        }
    }
}

fn parse_pattern(s: &str) -> Result<Pattern, String> {
    Pattern::parse(s).map_err(|e| e.to_string())
}

impl PolicyArgs {
    /// The decision settings these flags describe.
    pub fn policy(&self) -> Policy {
        let mut policy = Policy {
            mode: self.mode,
            unlisted: self.unlisted,
            exemptions: self
                .exempt_images
                .iter()
                .map(|pattern| Exemption {
                    pattern: pattern.clone(),
                    origin: "--exempt-image".into(),
                })
                .collect(),
            configmap_names: self.configmap_names.clone(),
            catalog: self.allowlist.catalog.options(),
            ..Policy::default()
        };
        for km in &self.kind_modes {
            policy.set_kind_mode(km.kind.name, km.mode);
        }
        policy
    }
}

/// `digest-gate check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Manifest file, directory, or - for standard input (repeatable).
    #[arg(
        short = 'f',
        long = "filename",
        env = "DIGEST_GATE_FILENAME",
        value_delimiter = ','
    )]
    pub filenames: Vec<String>,
    /// More manifest files.
    #[arg(value_name = "FILE")]
    pub files: Vec<String>,
    /// Report format.
    #[arg(short = 'o', long, env = "DIGEST_GATE_OUTPUT", value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Print the manifests with rewrites applied (image values only; the
    /// report goes to standard error).
    #[arg(long, env = "DIGEST_GATE_FIX")]
    pub fix: bool,
    /// With --fix: write fixed files back instead of printing them.
    #[arg(long, env = "DIGEST_GATE_IN_PLACE", requires = "fix")]
    pub in_place: bool,
    #[command(flatten)]
    pub verify: VerifyRegistryArgs,
}

/// `--registry`: also ask the registries about what workloads will run.
#[derive(Debug, Args)]
pub struct VerifyRegistryArgs {
    /// Also ask the registries whether the reference each workload will
    /// run can be pulled (the rewrite target for a rewrite, the image as
    /// written when allowed): a rewrite to one that cannot be is denied.
    #[arg(
        long = "registry",
        visible_alias = "verify-registry",
        env = "DIGEST_GATE_VERIFY_REGISTRY"
    )]
    pub enabled: bool,
    /// With --registry: a platform the nodes run, OS/ARCH[/VARIANT]
    /// (repeatable; audit reads the nodes' labels without it).
    #[arg(
        long = "platform",
        env = "DIGEST_GATE_PLATFORM",
        value_delimiter = ',',
        requires = "enabled"
    )]
    pub platforms: Vec<Platform>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

impl VerifyRegistryArgs {
    /// What the registries say of `references`, when --registry is given.
    /// The platforms are the named ones, else (for `audit`, given its
    /// connection) the nodes'. The progress bar shows on a terminal.
    async fn published(
        &self,
        nodes: Option<&audit::Connection>,
        list: &allowlist::Allowlist,
        references: &std::collections::BTreeSet<(String, String)>,
    ) -> Result<Option<Published>, String> {
        if !self.enabled {
            return Ok(None);
        }
        let settings = self.registry.settings().map_err(|e| e.to_string())?;
        let platforms = match (self.platforms.is_empty(), nodes) {
            (true, Some(connection)) => audit::nodes::platforms(connection)
                .await
                .map_err(|e| e.to_string())?,
            _ => self.platforms.clone(),
        };
        let options = verify::Options {
            platforms,
            mirrors_only: false,
            blobs: verify::Blobs::Config,
        };
        let (published, warnings) = registry::verify_references(list, references, settings, &options, false)
            .await
            .map_err(|e| e.to_string())?;
        for w in warnings {
            eprintln!("warning: {w}");
        }
        Ok(Some(published))
    }
}

/// How `audit` and `cleanup` reach the cluster: the cluster flags
/// `serve` shares, their own `--context`, and the name the timeout had
/// until chart 0.7.1 (app 0.6.1).
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    #[command(flatten)]
    pub cluster: audit::ClusterArgs,
    /// Kubeconfig context (default: the current context).
    #[arg(long, env = "DIGEST_GATE_CONTEXT")]
    pub context: Option<String>,
    /// Deprecated: --cluster-timeout. `serve --request-timeout` is the
    /// webhook's own, so the cluster's has a name of its own.
    #[arg(long, env = "DIGEST_GATE_REQUEST_TIMEOUT", hide = true, value_name = "DURATION",
          value_parser = crate::flags::parse_duration)]
    pub request_timeout: Option<std::time::Duration>,
}

impl ConnectionArgs {
    /// The connection settings; the old timeout flag is used when the new
    /// one is not given, with a warning.
    fn settings(&self) -> audit::Settings {
        let mut cluster = self.cluster.clone();
        if let Some(old) = self.request_timeout {
            eprintln!(
                "warning: --request-timeout (DIGEST_GATE_REQUEST_TIMEOUT) is deprecated for audit and cleanup; use --cluster-timeout (DIGEST_GATE_CLUSTER_TIMEOUT)"
            );
            cluster.cluster_timeout.get_or_insert(old);
        }
        cluster.settings(self.context.clone())
    }
}

/// `digest-gate cleanup`.
#[derive(Debug, Args)]
pub struct CleanupArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Only what this ClusterRole owns: what the background audit of the
    /// release whose audit role it is wrote (`serve --audit-owner`).
    #[arg(long, env = "DIGEST_GATE_OWNER", value_name = "CLUSTERROLE")]
    pub owner: Option<String>,
}

/// `digest-gate audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Namespace to read (repeatable; default: the context's namespace).
    #[arg(
        short = 'n',
        long = "namespace",
        env = "DIGEST_GATE_NAMESPACE",
        value_delimiter = ',',
        conflicts_with = "all_namespaces"
    )]
    pub namespaces: Vec<String>,
    /// Read every namespace, and the cluster-scoped kinds.
    #[arg(short = 'A', long, env = "DIGEST_GATE_ALL_NAMESPACES")]
    pub all_namespaces: bool,
    /// Only objects matching this label selector, e.g. app=ovms.
    #[arg(
        short = 'l',
        long = "selector",
        env = "DIGEST_GATE_SELECTOR",
        value_name = "SELECTOR"
    )]
    pub selector: Option<String>,
    /// Only namespaces matching this label selector (implies -A), e.g.
    /// modelmesh-enabled=true.
    #[arg(
        long,
        env = "DIGEST_GATE_NAMESPACE_SELECTOR",
        value_name = "SELECTOR",
        conflicts_with = "namespaces"
    )]
    pub namespace_selector: Option<String>,
    /// Only these kinds (comma-separated, e.g. Pod,ServingRuntime); each must
    /// be served and readable. Default: every kind digest-gate reads that
    /// the cluster serves.
    #[arg(long, env = "DIGEST_GATE_KINDS", value_delimiter = ',', value_name = "KIND")]
    pub kinds: Vec<String>,
    /// Name the namespaces read that carry this label (the chart's break
    /// glass: the webhook does not review them). Empty: do not look.
    #[arg(
        long,
        env = "DIGEST_GATE_BREAK_GLASS_LABEL",
        value_name = "LABEL",
        default_value = audit::BREAK_GLASS_LABEL
    )]
    pub break_glass_label: String,
    /// Report format.
    #[arg(short = 'o', long, env = "DIGEST_GATE_OUTPUT", value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Write the results as wgpolicyk8s.io/v1alpha2 PolicyReports (one per
    /// namespace, named digest-gate) and a ClusterPolicyReport. A report
    /// speaks for everything in its namespace, so this cannot be narrowed
    /// with -l or --kinds.
    #[arg(long, env = "DIGEST_GATE_POLICY_REPORTS", conflicts_with_all = ["selector", "kinds"])]
    pub policy_reports: bool,
    /// With --policy-reports: list passing (and exempted) results too, one
    /// per image. Without it a report lists what needs action (fail, warn)
    /// and its summary counts the rest: on a big cluster the passes are
    /// most of the report and of what etcd stores.
    #[arg(long, env = "DIGEST_GATE_POLICY_REPORTS_PASSES", requires = "policy_reports")]
    pub policy_reports_passes: bool,
    /// Write a Warning Event (reason UnpromotedImage) on each object with a
    /// finding, once per finding.
    #[arg(long, env = "DIGEST_GATE_EVENTS")]
    pub events: bool,
    #[command(flatten)]
    pub csvs: audit::installed::CsvArgs,
    /// With --registry and without --platform, the nodes' platforms are
    /// read from their labels (`list nodes`).
    #[command(flatten)]
    pub verify: VerifyRegistryArgs,
}

/// Log line formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `digest-gate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// PEM certificate (chain) for the webhook port; reloaded when it changes.
    #[arg(
        long,
        env = "DIGEST_GATE_TLS_CERT",
        requires = "tls_key",
        required_unless_present = "dev"
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(
        long,
        env = "DIGEST_GATE_TLS_KEY",
        requires = "tls_cert",
        required_unless_present = "dev"
    )]
    pub tls_key: Option<PathBuf>,
    /// Development mode: generate a throwaway CA and localhost certificate, and
    /// use the bundled example allowlist unless --allowlist is given.
    #[arg(long, env = "DIGEST_GATE_DEV", conflicts_with_all = ["tls_cert", "tls_key"])]
    pub dev: bool,
    /// Where --dev writes its CA, certificate and allowlist.
    #[arg(long, env = "DIGEST_GATE_DEV_DIR", requires = "dev")]
    pub dev_dir: Option<PathBuf>,
    #[command(flatten)]
    pub server: server::Config,
    /// Log line format.
    #[arg(long, env = "DIGEST_GATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log filter, e.g. info or info,digest_gate=debug.
    #[arg(long, env = "DIGEST_GATE_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

/// `digest-gate allowlist ...`.
#[derive(Debug, Subcommand)]
pub enum AllowlistCommand {
    /// Convert any accepted source (CSV, ImageSetConfiguration, plain list,
    /// catalog, native) to one native Allowlist document on standard output.
    ///
    /// Exit codes: 0 converted; 2 unusable flags or allowlist (one that
    /// promotes no repository included).
    Convert {
        #[command(flatten)]
        files: FilesArgs,
        /// metadata.name of the generated Allowlist.
        #[arg(long, env = "DIGEST_GATE_NAME", default_value = "promoted")]
        name: String,
    },
    /// Check allowlist files and report what they promote.
    ///
    /// Exit codes: 0 usable; 1 usable but with warnings (only with --strict,
    /// which names them); 2 errors, or an allowlist that promotes no
    /// repository.
    Lint {
        #[command(flatten)]
        files: FilesArgs,
        /// Treat warnings as failures.
        #[arg(long, env = "DIGEST_GATE_STRICT")]
        strict: bool,
    },
    /// Ask the registries whether every promoted digest can be pulled:
    /// present where a node pulls it (mirrors first), an image rather than
    /// a signature or an artifact, and there for each --platform.
    ///
    /// Exit codes: 0 every digest ok; 1 a digest is missing, not runnable or
    /// missing a platform; 2 unusable flags, credentials or allowlist (one
    /// that promotes no repository included), or a digest that could not be
    /// verified (and none that fails).
    Verify(Box<VerifyArgs>),
}

/// The allowlist files `lint`, `convert` and `verify` read: `--allowlist`,
/// as every command spells it, and positional files, the spelling these
/// three had first (both work, together too).
#[derive(Debug, Args)]
pub struct FilesArgs {
    #[command(flatten)]
    pub allowlist: AllowlistArgs,
    /// More allowlist files or directories (the same as --allowlist).
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

impl FilesArgs {
    /// Every file named, `--allowlist` first; none is a usage error.
    fn paths(&self) -> Vec<PathBuf> {
        let paths: Vec<PathBuf> = self
            .allowlist
            .allowlists
            .iter()
            .chain(&self.files)
            .cloned()
            .collect();
        if paths.is_empty() {
            missing_allowlist();
        }
        paths
    }
}

/// `digest-gate allowlist verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub files: FilesArgs,
    /// A platform the nodes run, OS/ARCH[/VARIANT] (repeatable): each
    /// digest must have a runnable image for it, with its blobs.
    #[arg(long = "platform", env = "DIGEST_GATE_PLATFORM", value_delimiter = ',')]
    pub platforms: Vec<Platform>,
    /// Nodes pull only from mirrors: never contact a mirrored source
    /// (mirrorSourcePolicy: NeverContactSource on every rule).
    #[arg(long, env = "DIGEST_GATE_MIRRORS_ONLY")]
    pub mirrors_only: bool,
    /// Which blobs of each platform's image must be there.
    #[arg(long, env = "DIGEST_GATE_BLOBS", value_enum, default_value_t = BlobsArg::Config)]
    pub blobs: BlobsArg,
    /// Report format.
    #[arg(short = 'o', long, env = "DIGEST_GATE_OUTPUT", value_enum, default_value_t = VerifyOutput::Text)]
    pub output: VerifyOutput,
    /// No progress bar (it is shown only on a terminal).
    #[arg(short, long, env = "DIGEST_GATE_QUIET")]
    pub quiet: bool,
    /// Also write a complete native allowlist to FILE: every repository and
    /// digest of the input, each index with its images by platform (each
    /// then promoted for its platform).
    #[arg(long, env = "DIGEST_GATE_WRITE_PLATFORMS", value_name = "FILE")]
    pub write_platforms: Option<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BlobsArg {
    /// Each platform image's config.
    Config,
    /// Its config and every layer.
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VerifyOutput {
    Text,
    Json,
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let code = match cli.command {
        Command::Serve(args) => {
            let given = |id: &str| {
                matches
                    .subcommand_matches("serve")
                    .and_then(|m| m.value_source(id))
                    .is_some_and(|s| s != clap::parser::ValueSource::DefaultValue)
            };
            let addresses = Given {
                listen: given("listen"),
                admin_listen: given("admin_listen"),
            };
            run_serve(*args, addresses)
        }
        Command::Check(args) => run_check(&args),
        Command::Audit(args) => run_audit(&args),
        Command::Cleanup(args) => run_cleanup(&args),
        Command::Allowlist(AllowlistCommand::Convert { files, name }) => run_convert(&files, &name),
        Command::Allowlist(AllowlistCommand::Lint { files, strict }) => run_lint(&files, strict),
        Command::Allowlist(AllowlistCommand::Verify(args)) => run_verify(&args),
    };
    ExitCode::from(code)
}

fn load(paths: &[PathBuf], catalog: &allowlist::CatalogOptions) -> Result<Loaded, u8> {
    allowlist::load_paths_with(paths, catalog).map_err(|errors| {
        eprintln!("error: the allowlist cannot be used:\n{errors}");
        2
    })
}

/// The rule for an allowlist that promotes nothing, where a mode applies
/// (`check`, `audit`; `serve` keeps it in its supply): an error where it
/// would deny every listed image, else a warning said here.
fn judged_by(policy: &Policy, list: &allowlist::Allowlist) -> Result<(), String> {
    let warning = policy.judges_by(list).map_err(|e| e.to_string())?;
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    Ok(())
}

fn missing_allowlist() -> ! {
    Cli::command()
        .error(
            clap::error::ErrorKind::MissingRequiredArgument,
            "--allowlist is required (a file or directory; repeatable)",
        )
        .exit()
}

/// A `--log-level` filter's bare words must be levels: tracing reads a
/// bare `verbose` as a module named so, logged at every level, and the
/// server would log nothing of its own at all.
fn check_levels(filter: &str) -> Result<(), String> {
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bare = !directive.contains(['=', '[']);
        if bare
            && directive
                .parse::<tracing_subscriber::filter::LevelFilter>()
                .is_err()
        {
            return Err(format!(
                "--log-level '{filter}': '{directive}' is not a level (trace, debug, info, warn, error, off); name a module with its level, e.g. digest_gate=debug"
            ));
        }
    }
    Ok(())
}

fn init_logging(format: LogFormat, filter: &str) -> Result<(), String> {
    check_levels(filter)?;
    // kube's watcher warns of each failure it retries in Rust debug form; the
    // CSV watch logs the same failure worded for people. Asked for by name,
    // its lines are kept.
    let directives = match filter.contains("kube_runtime") {
        true => filter.to_owned(),
        false => format!("{filter},kube_runtime=error"),
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .map_err(|e| format!("--log-level '{filter}': {e}"))?;
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|e| e.to_string())
}

/// The bundled example allowlist, for `serve --dev` on a fresh checkout.
const EXAMPLE_ALLOWLIST: &str = include_str!("../examples/allowlist.yaml");

/// Which of `serve`'s addresses were given (a flag or its variable)
/// rather than left at their defaults.
struct Given {
    listen: bool,
    admin_listen: bool,
}

/// `--dev` listens on loopback unless an address is given: its CA is a
/// throwaway one, and the admin port has no authentication at all. An
/// address given that reaches further is said, with what it exposes.
fn dev_addresses(server: &mut server::Config, given: &Given) {
    let loopback = |addr: &mut std::net::SocketAddr| addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    let warn = |flag: &str, addr: std::net::SocketAddr, what: &str| {
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "--dev with {flag} {addr} exposes {what} to every network this host reaches");
        }
    };
    match given.listen {
        true => warn(
            "--listen",
            server.listen,
            "a webhook whose certificate is signed by a throwaway CA",
        ),
        false => loopback(&mut server.listen),
    }
    match given.admin_listen {
        true => warn(
            "--admin-listen",
            server.admin_listen,
            "/metrics and /readyz, unauthenticated,",
        ),
        false => loopback(&mut server.admin_listen),
    }
}

fn run_serve(mut args: ServeArgs, given: Given) -> u8 {
    if let Err(e) = init_logging(args.log_format, &args.log_level) {
        eprintln!("error: {e}");
        return 2;
    }
    let mut allowlists = args.policy.allowlist.allowlists.clone();
    if allowlists.is_empty() && args.server.csvs.allowlist_csv.is_empty() && !args.dev {
        missing_allowlist();
    }
    let mut bound = None;
    let (cert, key) = if args.dev {
        dev_addresses(&mut args.server, &given);
        // Bound before anything is written: a second `serve --dev` whose
        // ports are taken must not replace the running one's CA.
        match server::Bound::bind(args.server.listen, args.server.admin_listen) {
            Ok(b) => bound = Some(b),
            Err(e) => {
                eprintln!("error: {e}");
                return 1;
            }
        }
        match dev_files(&args, &mut allowlists) {
            Ok(files) => files,
            Err(code) => return code,
        }
    } else {
        match (args.tls_cert.clone(), args.tls_key.clone()) {
            (Some(c), Some(k)) => (c, k),
            _ => unreachable!("clap requires both unless --dev"),
        }
    };
    let inputs = server::Inputs {
        cert,
        key,
        allowlists,
        policy: args.policy.policy(),
        bound,
    };
    server::run(args.server, inputs)
}

/// `--dev`'s throwaway CA and certificate, and the bundled allowlist when
/// none is given, written to `--dev-dir`; the key pair's paths.
fn dev_files(args: &ServeArgs, allowlists: &mut Vec<PathBuf>) -> Result<(PathBuf, PathBuf), u8> {
    let dir = args
        .dev_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("digest-gate-dev"));
    let names = ["localhost", "127.0.0.1", "::1", "digest-gate.default.svc"];
    let files = server::tls::generate_dev_certificates(&dir, &names).map_err(|e| {
        eprintln!("error: {e}");
        1
    })?;
    if allowlists.is_empty() {
        let path = dir.join("allowlist.yaml");
        std::fs::write(&path, EXAMPLE_ALLOWLIST).map_err(|e| {
            eprintln!("error: {}: {e}", path.display());
            1
        })?;
        allowlists.push(path);
    }
    eprintln!(
        "development mode: throwaway CA at {ca} (certificate for localhost, 127.0.0.1, ::1)\n  allowlist: {list}\n  try: curl --cacert {ca} -H 'Content-Type: application/json' --data @examples/review.json https://localhost:{port}/mutate",
        ca = files.ca.display(),
        list = allowlists
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        port = args.server.listen.port(),
    );
    Ok((files.cert, files.key))
}

fn run_check(args: &CheckArgs) -> u8 {
    if args.policy.allowlist.allowlists.is_empty() {
        missing_allowlist();
    }
    let loaded = match load(
        &args.policy.allowlist.allowlists,
        &args.policy.allowlist.catalog.options(),
    ) {
        Ok(l) => l,
        Err(code) => return code,
    };
    if let Err(e) = judged_by(&args.policy.policy(), &loaded.allowlist) {
        eprintln!("error: {e}");
        return 2;
    }
    let names: Vec<String> = args.filenames.iter().chain(&args.files).cloned().collect();
    if names.is_empty() {
        eprintln!("error: no manifests given; pass -f FILE (or -f - for standard input)");
        return 2;
    }
    if args.in_place && names.iter().any(|n| n == "-") {
        eprintln!("error: --in-place cannot write back to standard input");
        return 2;
    }
    let sources = check::sources(&names);
    let format = output_format(args.output, args.fix);
    // With --fix, standard output is the fixed stream: the report goes to
    // standard error.
    let out: Box<dyn Write> = if args.fix {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    let Some(mut writer) = report_writer(format, out) else {
        return 2;
    };
    let mut outcome = match checked(args, sources, &loaded.allowlist, &mut writer) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    // Skipped files are told on stderr whatever the format, so they never
    // mix into a report or a fixed stream on stdout.
    for s in &outcome.report.skipped {
        eprintln!("note: skipped {}: {}", s.source, s.reason);
    }
    // A reader that went away (`| head`) ends the report, not the run's
    // verdict.
    let _ = writer.finish(&mut outcome.report, args.fix.then_some(outcome.still_denied));
    if args.fix {
        if args.in_place {
            for f in outcome.fixed.iter().filter(|f| f.rewrites > 0) {
                let written = std::fs::File::create(&f.name).and_then(|file| {
                    let mut file = std::io::BufWriter::new(file);
                    f.write_to(&mut file).and_then(|()| file.flush())
                });
                if let Err(e) = written {
                    eprintln!("error: {}: cannot write: {e}", f.name);
                    return 2;
                }
            }
        } else {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let _ = check::write_fixed(&outcome.fixed, &mut out).and_then(|()| out.flush());
        }
    }
    check::exit_code(&outcome, args.fix)
}

/// The report's writer; `None` (said) when SARIF's temporary file cannot
/// be made.
fn report_writer<'w>(format: output::Format, out: impl Write + 'w) -> Option<output::Writer<'w>> {
    output::Writer::new(format, out)
        .map_err(|e| eprintln!("error: cannot write the report: {e}"))
        .ok()
}

/// How `--output` is written.
fn output_format(output: Output, fixed: bool) -> output::Format {
    match output {
        Output::Text => output::Format::Text { fixed },
        Output::Json => output::Format::Json,
        Output::Sarif => output::Format::Sarif,
    }
}

fn run_audit(args: &AuditArgs) -> u8 {
    if args.policy.allowlist.allowlists.is_empty() && args.csvs.allowlist_csv.is_empty() {
        missing_allowlist();
    }
    let kinds = match kinds(&args.kinds) {
        Ok(k) => k,
        Err(code) => return code,
    };
    let files = match allowlist::open_files(&args.policy.allowlist.allowlists) {
        Ok(s) => s,
        Err(errors) => {
            eprintln!("error: the allowlist cannot be used:\n{errors}");
            return 2;
        }
    };
    let Some(runtime) = client_runtime() else {
        return 2;
    };
    let Some(mut writer) = report_writer(output_format(args.output, false), std::io::stdout()) else {
        return 2;
    };
    let policy = args.policy.policy();
    let writes = audit::Writes {
        policy_reports: args.policy_reports,
        passes: args.policy_reports_passes,
        events: args.events,
        owner: None,
    };
    let result = runtime.block_on(async {
        let connection = audit::Connection::open(&args.connection.settings())
            .await
            .map_err(|e| e.to_string())?;
        // The files, then the installed CSVs, merged as one allowlist.
        let mut installed = Vec::new();
        for csvs in &args.csvs.allowlist_csv {
            let read = audit::installed::read(&connection, csvs).await;
            installed.extend(read.map_err(|f| f.message().to_owned())?);
        }
        let loaded = allowlist::load_sources_with(
            allowlist::inputs(&files).chain(allowlist::inputs(&installed)),
            &policy.catalog,
        )
        .map_err(|errors| format!("the allowlist cannot be used:\n{errors}"))?;
        judged_by(&policy, &loaded.allowlist)?;
        let target = audit::Target {
            scope: scope(args, &connection),
            label_selector: args.selector.clone(),
            kinds: (!kinds.is_empty()).then_some(kinds),
            break_glass_label: Some(args.break_glass_label.clone()),
        };
        let audited = Audited {
            args,
            connection: &connection,
            target: &target,
            policy: &policy,
            allowlist: &loaded.allowlist,
        };
        let mut found = audited.judged(&writes, &mut writer).await?;
        // Results were written out as they were judged: what cannot be
        // written now ends the report as its errors.
        if found.stopped.is_none()
            && let Err(e) = audit::write(&connection, &mut found, &writes).await
        {
            found.report.errors.push(e.to_string());
        }
        Ok::<_, String>((connection, found))
    });
    let (connection, mut found) = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    found.report.notes.push(read_note(&connection, &found));
    let _ = writer.finish(&mut found.report, None);
    report::exit_code(&found.report)
}

/// What an audit read, and from where.
fn read_note(connection: &audit::Connection, found: &audit::Audit) -> String {
    let read: Vec<String> = found.read.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
    format!(
        "read from {} (context \"{}\"): {}",
        connection.server,
        connection.context,
        if read.is_empty() {
            "nothing".to_owned()
        } else {
            read.join(", ")
        }
    )
}

/// What one `audit` reads with.
struct Audited<'a> {
    args: &'a AuditArgs,
    connection: &'a audit::Connection,
    target: &'a audit::Target,
    policy: &'a Policy,
    allowlist: &'a allowlist::Allowlist,
}

impl Audited<'_> {
    /// The audit's findings, each written to `out` as it is judged; with
    /// --registry, judged again knowing what the registries said of what
    /// the first pass found will run.
    async fn judged(
        &self,
        writes: &audit::Writes,
        out: &mut output::Writer<'_>,
    ) -> Result<audit::Audit, String> {
        let mut rules = judge::Rules {
            policy: self.policy,
            allowlist: self.allowlist,
            published: None,
        };
        let verify = &self.args.verify;
        if !verify.enabled {
            return audit::run(self.connection, self.target, rules, false, writes, Some(out))
                .await
                .map_err(|e| e.to_string());
        }
        // The first pass only learns what will run: its reports are dropped.
        let mut nowhere = output::Writer::discard();
        let nothing = audit::Writes::default();
        let found = audit::run(
            self.connection,
            self.target,
            rules,
            true,
            &nothing,
            Some(&mut nowhere),
        )
        .await
        .map_err(|e| e.to_string())?;
        let published = verify
            .published(Some(self.connection), self.allowlist, &found.will_run)
            .await?;
        if let Some(published) = &published {
            rules.published = Some(published);
        }
        audit::run(self.connection, self.target, rules, false, writes, Some(out))
            .await
            .map_err(|e| e.to_string())
    }
}

/// The check's findings; with --registry, judged again knowing what the
/// registries said of what the first pass found will run (standard input
/// is then read once and kept for the second pass).
fn checked(
    args: &CheckArgs,
    sources: check::Sources,
    allowlist: &allowlist::Allowlist,
    out: &mut output::Writer<'_>,
) -> Result<check::Checked, String> {
    let policy = args.policy.policy();
    let mut rules = judge::Rules {
        policy: &policy,
        allowlist,
        published: None,
    };
    let pass = if args.fix {
        check::Pass::Fix
    } else {
        check::Pass::Judge
    };
    if !args.verify.enabled {
        return Ok(check::check(&sources, rules, pass, Some(out)));
    }
    let sources = sources.buffered().map_err(|e| e.to_string())?;
    // The first pass only learns what will run: its reports are dropped.
    let mut nowhere = output::Writer::discard();
    let found = check::check(&sources, rules, check::Pass::Learn, Some(&mut nowhere));
    let learned = registry::block_on(args.verify.published(None, allowlist, &found.will_run));
    let published = learned.map_err(|e| e.to_string())??;
    if let Some(published) = &published {
        rules.published = Some(published);
    }
    Ok(check::check(&sources, rules, pass, Some(out)))
}

/// The kinds `--kinds` names, or exit code 2 with what it may name.
fn kinds(names: &[String]) -> Result<Vec<&'static crate::objects::Kind>, u8> {
    names
        .iter()
        .map(|name| {
            crate::objects::kinds::named(name).map_err(|e| {
                eprintln!("error: --kinds: {e}");
                2
            })
        })
        .collect()
}

/// The namespaces `audit`'s flags name: all (`-A`, or a selector), those
/// given, or the context's.
fn scope(args: &AuditArgs, connection: &audit::Connection) -> audit::Scope {
    if args.all_namespaces || args.namespace_selector.is_some() {
        audit::Scope::All {
            namespace_selector: args.namespace_selector.clone(),
        }
    } else if args.namespaces.is_empty() {
        audit::Scope::Namespaces(vec![connection.namespace.clone()])
    } else {
        // `-n a -n a` reads a once.
        let mut given: Vec<String> = Vec::new();
        for ns in &args.namespaces {
            if !given.contains(ns) {
                given.push(ns.clone());
            }
        }
        audit::Scope::Namespaces(given)
    }
}

/// The single-threaded runtime the cluster commands run their client on.
fn client_runtime() -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .inspect_err(|e| eprintln!("error: cannot start the runtime: {e}"))
        .ok()
}

fn run_cleanup(args: &CleanupArgs) -> u8 {
    let Some(runtime) = client_runtime() else {
        return 2;
    };
    let result = runtime.block_on(async {
        let connection = audit::Connection::open(&args.connection.settings())
            .await
            .map_err(|e| e.to_string())?;
        let uid = match &args.owner {
            Some(name) => Some(
                audit::write::cluster_role_uid(&connection, name)
                    .await
                    .map_err(|f| f.message().to_owned())?,
            ),
            None => None,
        };
        let removed = audit::write::remove(&connection, uid.as_deref())
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((connection, removed))
    });
    let (connection, removed) = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    for e in &removed.errors {
        eprintln!("error: {e}");
    }
    let whose = args
        .owner
        .as_ref()
        .map_or(String::new(), |o| format!(" owned by ClusterRole \"{o}\""));
    print_out(&format!(
        "deleted {} policy reports and {} events{whose} from {} (context \"{}\")\n",
        removed.reports, removed.events, connection.server, connection.context
    ));
    if removed.errors.is_empty() { 0 } else { 2 }
}

/// Writes to stdout, ignoring a closed pipe (`| head`) instead of panicking.
fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Refuses an allowlist that promotes nothing, for the commands that take
/// no mode (`lint`, `convert`, `verify`): there it can only be a mistake.
fn promotes_something(loaded: &Loaded, command: &str) -> Result<(), u8> {
    if loaded.allowlist.repository_count() > 0 {
        return Ok(());
    }
    eprintln!("error: the allowlist promotes no repository: nothing to {command}");
    Err(2)
}

fn run_convert(args: &FilesArgs, name: &str) -> u8 {
    let paths = args.paths();
    let loaded = match load(&paths, &args.allowlist.catalog.options()) {
        Ok(l) => l,
        Err(code) => return code,
    };
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    if let Err(code) = promotes_something(&loaded, "convert") {
        return code;
    }
    let sources: Vec<String> = loaded.sources.iter().map(|s| s.file.clone()).collect();
    print_out(&allowlist::to_native_yaml(&loaded.allowlist, name, &sources));
    0
}

fn run_lint(args: &FilesArgs, strict: bool) -> u8 {
    let loaded = match load(&args.paths(), &args.allowlist.catalog.options()) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let lint = allowlist::lint(&loaded);
    print_out(&lint.report);
    if let Err(code) = promotes_something(&loaded, "lint") {
        return code;
    }
    if strict && !lint.warnings.is_empty() {
        let n = lint.warnings.len();
        eprintln!(
            "error: --strict: {n} warning{} fail{} the lint:",
            if n == 1 { "" } else { "s" },
            if n == 1 { "s" } else { "" }
        );
        for w in &lint.warnings {
            eprintln!("  {w}");
        }
        return 1;
    }
    0
}

fn run_verify(args: &VerifyArgs) -> u8 {
    let paths = args.files.paths();
    let loaded = match load(&paths, &args.files.allowlist.catalog.options()) {
        Ok(l) => l,
        Err(code) => return code,
    };
    if let Err(code) = promotes_something(&loaded, "verify") {
        return code;
    }
    let settings = match args.registry.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let options = verify::Options {
        platforms: args.platforms.clone(),
        mirrors_only: args.mirrors_only,
        blobs: match args.blobs {
            BlobsArg::Config => verify::Blobs::Config,
            BlobsArg::All => verify::Blobs::All,
        },
    };
    let report = match registry::verify_allowlist(&loaded.allowlist, settings, &options, args.quiet) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    match args.output {
        VerifyOutput::Text => print_out(&report.text()),
        VerifyOutput::Json => print_out(&report.json()),
    }
    if let Some(out) = &args.write_platforms {
        let sources: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        let text = registry::with_platforms(&loaded.allowlist, &sources, &report);
        if let Err(e) = write_whole(out, &text) {
            eprintln!("error: --write-platforms {}: {e}", out.display());
            return 2;
        }
    }
    report.exit_code()
}

/// Writes `text` to `path` whole or not at all (a sibling file renamed).
fn write_whole(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let partial = path.with_file_name(format!(".{name}.partial"));
    std::fs::write(&partial, text)?;
    std::fs::rename(&partial, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Every command's flags, with the path of subcommands that leads to
    /// them.
    fn every_flag(command: &clap::Command, path: String, out: &mut Vec<(String, clap::Arg)>) {
        for arg in command.get_arguments() {
            out.push((path.clone(), arg.clone()));
        }
        for sub in command.get_subcommands() {
            every_flag(sub, format!("{path} {}", sub.get_name()), out);
        }
    }

    /// Issue 41: "every flag also reads DIGEST_GATE_<FLAG>" was false for
    /// audit's -n, -A, -l, --kinds and more. Every flag reads the
    /// variable named after it (or after one of its aliases); positional
    /// files read their flag's (`-f`'s, `--allowlist`'s).
    #[test]
    fn every_flag_reads_its_environment_variable() {
        let mut flags = Vec::new();
        every_flag(&Cli::command(), "digest-gate".into(), &mut flags);
        let mut missing = Vec::new();
        for (path, arg) in &flags {
            let Some(long) = arg.get_long() else {
                assert!(
                    arg.is_positional() || arg.get_id() == "help",
                    "{path}: {}",
                    arg.get_id()
                );
                continue;
            };
            if matches!(long, "help" | "version") {
                continue;
            }
            let names: Vec<String> = std::iter::once(long)
                .chain(arg.get_all_aliases().into_iter().flatten())
                .map(|n| format!("DIGEST_GATE_{}", n.to_ascii_uppercase().replace('-', "_")))
                .collect();
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            if !env.as_ref().is_some_and(|e| names.contains(e)) {
                missing.push(format!("{path} --{long}: {env:?}"));
            }
        }
        assert!(
            missing.is_empty(),
            "flags without their variable:\n{}",
            missing.join("\n")
        );
    }

    /// Issue 41: every command's --help states its exit codes.
    #[test]
    fn every_command_states_its_exit_codes() {
        fn walk(command: &mut clap::Command, path: String, out: &mut Vec<String>) {
            if command.has_subcommands() {
                for sub in command.get_subcommands_mut() {
                    let name = format!("{path} {}", sub.get_name());
                    walk(sub, name, out);
                }
            } else if !command.render_long_help().to_string().contains("Exit codes: 0 ") {
                out.push(path);
            }
        }
        let mut silent = Vec::new();
        walk(&mut Cli::command(), "digest-gate".into(), &mut silent);
        assert!(silent.is_empty(), "no exit codes in --help of: {silent:?}");
    }

    #[test]
    fn dev_listens_on_loopback_unless_an_address_is_given() {
        let defaults = server::Config::default();
        let mut config = defaults.clone();
        let nothing = Given {
            listen: false,
            admin_listen: false,
        };
        dev_addresses(&mut config, &nothing);
        assert_eq!(config.listen, "127.0.0.1:8443".parse().unwrap());
        assert_eq!(config.admin_listen, "127.0.0.1:8080".parse().unwrap());
        // What is given stands, wherever it reaches (a warning says so).
        let mut config = defaults.clone();
        let both = Given {
            listen: true,
            admin_listen: true,
        };
        dev_addresses(&mut config, &both);
        assert_eq!(
            (config.listen, config.admin_listen),
            (defaults.listen, defaults.admin_listen)
        );
    }

    #[test]
    fn log_levels_are_levels_or_modules_with_theirs() {
        for good in [
            "info",
            "DEBUG",
            "info,digest_gate=debug",
            "warn,kube_runtime=error",
            "off",
        ] {
            assert_eq!(check_levels(good), Ok(()), "{good}");
        }
        let error = check_levels("verbose").unwrap_err();
        assert!(
            error.contains("'verbose' is not a level (trace, debug, info, warn, error, off)"),
            "{error}"
        );
        assert!(check_levels("info,digest_gate").is_err());
    }

    #[test]
    fn kind_modes_parse() {
        let runtime = crate::objects::kinds::named("ServingRuntime").unwrap();
        for given in [
            "ServingRuntime=Enforce",
            "servingruntimes=enforce",
            "SERVINGRUNTIME = enforce",
        ] {
            assert_eq!(
                parse_kind_mode(given),
                Ok(KindMode {
                    kind: runtime,
                    mode: Mode::Enforce
                }),
                "{given}"
            );
        }
        assert!(parse_kind_mode("ServingRuntime").is_err());
        let bogus = parse_kind_mode("Bogus=enforce").unwrap_err();
        assert!(
            bogus.starts_with("'Bogus' is not a kind digest-gate reads; it reads Pod,"),
            "{bogus}"
        );
        assert!(parse_kind_mode("Pod=strict").is_err());
        assert!(parse_kind_mode("=audit").is_err());
    }
}
