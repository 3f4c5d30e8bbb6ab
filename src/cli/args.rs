//! The flags several commands share: the allowlist and its catalog, the
//! decision flags, the report format, and how the cluster is reached.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::allowlist::{self, Exemption, Pattern};
use crate::audit;
use crate::policy::{Mode, Policy, Unlisted};

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

/// How `audit`, `preflight` and `cleanup` reach a cluster: the cluster
/// flags `serve` shares, and the name the timeout had until chart 0.7.1
/// (app 0.6.1). `--context` is each command's own: repeatable on `audit`
/// and `preflight` ([`ContextArgs`]), not on `cleanup`.
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    #[command(flatten)]
    pub cluster: audit::ClusterArgs,
    /// Deprecated: --cluster-timeout. `serve --request-timeout` is the
    /// webhook's own, so the cluster's has a name of its own.
    #[arg(long, env = "DIGEST_GATE_REQUEST_TIMEOUT", hide = true, value_name = "DURATION",
          value_parser = crate::flags::parse_positive_duration)]
    pub request_timeout: Option<std::time::Duration>,
}

impl ConnectionArgs {
    /// The connection settings for `context`; the old timeout flag is used
    /// when the new one is not given, with a warning.
    pub(super) fn settings(&self, context: Option<String>) -> audit::ClusterSettings {
        let mut cluster = self.cluster.clone();
        if let Some(old) = self.request_timeout {
            eprintln!(
                "warning: --request-timeout (DIGEST_GATE_REQUEST_TIMEOUT) is deprecated for audit and cleanup; use --cluster-timeout (DIGEST_GATE_CLUSTER_TIMEOUT)"
            );
            cluster.cluster_timeout.get_or_insert(old);
        }
        cluster.run_settings(context)
    }
}

/// Says on standard error what reading `$KUBECONFIG` had to say (a file
/// named and missing, a context kept under `FILE:NAME`), once per run,
/// before connecting.
pub(super) fn warn_kubeconfig(cluster: &audit::ClusterArgs) {
    let notes = audit::kubeconfig_notes(cluster.kubeconfig.as_deref());
    crate::output::say("warning", "", &notes);
}

/// How long one cluster may take, read and written, when
/// `--cluster-deadline` is not given: a cluster that hangs does not hold a
/// fleet's answer back, nor a cron job's run for ever (55,000 objects are
/// read in 15 s).
pub const CLUSTER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// Which clusters `audit` and `preflight` read: one context, or several
/// (a fleet), read concurrently.
#[derive(Debug, Args)]
pub struct ContextArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Kubeconfig context (default: the current context); repeat, or
    /// separate with commas, to read several clusters in one run.
    #[arg(
        long = "context",
        env = "DIGEST_GATE_CONTEXT",
        value_delimiter = ',',
        conflicts_with = "all_contexts"
    )]
    pub contexts: Vec<String>,
    /// Read every context of the kubeconfig (of every file $KUBECONFIG
    /// names, merged as kubectl merges them, a missing file skipped and a
    /// later file's context whose name an earlier one took read as
    /// FILE:NAME); contexts naming the same server are read once.
    #[arg(long, env = "DIGEST_GATE_ALL_CONTEXTS")]
    pub all_contexts: bool,
    /// With several contexts: clusters read at once.
    #[arg(long, env = "DIGEST_GATE_PARALLEL", value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub parallel: u16,
    /// Gives up on a cluster whose whole read (and what is written into
    /// it), from reading its kubeconfig entry on, takes longer, e.g. 10m,
    /// and reports it as not read [default: 10m].
    #[arg(long, env = "DIGEST_GATE_CLUSTER_DEADLINE", value_name = "DURATION",
          value_parser = crate::flags::parse_positive_duration)]
    pub cluster_deadline: Option<std::time::Duration>,
}

impl ContextArgs {
    /// Whether several clusters are read: more than one context named, or
    /// `--all-contexts`.
    pub fn fleet(&self) -> bool {
        self.all_contexts || self.contexts.len() > 1
    }

    /// The settings of the one context read when not [`ContextArgs::fleet`].
    pub(super) fn settings(&self) -> audit::ClusterSettings {
        warn_kubeconfig(&self.connection.cluster);
        self.connection.settings(self.contexts.first().cloned())
    }

    /// The clusters to read, those naming the same server together (the
    /// first context named reads it), in the order named.
    pub(super) fn clusters(&self) -> Result<Vec<(audit::Context, Vec<String>)>, audit::AuditError> {
        warn_kubeconfig(&self.connection.cluster);
        let kubeconfig = self.connection.cluster.kubeconfig.as_deref();
        let mut clusters: Vec<(audit::Context, Vec<String>)> = Vec::new();
        for context in audit::contexts(kubeconfig, &self.contexts, self.all_contexts)? {
            // A context that cannot be used has no server to share.
            let shares = |c: &audit::Context| {
                c.unusable.is_none() && context.unusable.is_none() && c.server == context.server
            };
            match clusters.iter_mut().find(|(c, _)| shares(c)) {
                Some((_, also)) => also.push(context.name),
                None => clusters.push((context, Vec::new())),
            }
        }
        Ok(clusters)
    }

    /// The deadline of one cluster's read.
    pub(super) fn deadline(&self) -> std::time::Duration {
        self.cluster_deadline.unwrap_or(CLUSTER_DEADLINE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
