//! `digest-gate audit` and `digest-gate cleanup`: their flags, and the
//! runs against a cluster.

use clap::Args;

use super::args::{ConnectionArgs, ContextArgs, Output, PolicyArgs};
use super::interrupt::{self, Cut, Interrupt};
use super::{client_runtime, judged_by, missing_allowlist, output_format, print_out, report_writer};
use crate::allowlist;
use crate::audit;
use crate::judge;
use crate::output;
use crate::registry::{self, Learned, Round, VerifyRegistryArgs};
use crate::report;

/// `digest-gate cleanup`.
#[derive(Debug, Args)]
pub struct CleanupArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Kubeconfig context (default: the current context).
    #[arg(long, env = "DIGEST_GATE_CONTEXT")]
    pub context: Option<String>,
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
    pub clusters: ContextArgs,
    /// Namespace to read (repeatable; default: the context's namespace,
    /// with several contexts every namespace).
    #[arg(
        short = 'n',
        long = "namespace",
        env = "DIGEST_GATE_NAMESPACE",
        value_delimiter = ',',
        conflicts_with = "all_namespaces"
    )]
    pub namespaces: Vec<String>,
    /// Read every namespace, and the cluster-scoped kinds (the default with
    /// several contexts).
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
    /// No progress on standard error (drawn only on a terminal anyway).
    #[arg(short = 'q', long, env = "DIGEST_GATE_QUIET")]
    pub quiet: bool,
    /// Exit 0 when the namespaces read hold no object of a kind digest-gate
    /// reads (a namespace meant to be empty). Without it such a run judged
    /// nothing and is exit 2, as `check` is.
    #[arg(long, env = "DIGEST_GATE_ALLOW_EMPTY")]
    pub allow_empty: bool,
}

pub(super) fn run(args: &AuditArgs) -> u8 {
    prepared(args, single)
}

/// What every audit run starts from (the flags checked, the allowlist
/// files opened, the runtime and the report's writer), handed to `go`:
/// [`single`], or the fleet's run over several contexts.
pub(super) fn prepared(
    args: &AuditArgs,
    go: impl FnOnce(&Run<'_>, &tokio::runtime::Runtime, output::Writer<'_>) -> u8,
) -> u8 {
    if args.policy.allowlist.allowlists.is_empty() && args.csvs.allowlist_csv.is_empty() {
        missing_allowlist(&["audit"]);
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
    let Some(writer) = report_writer(output_format(args.output, false), std::io::stdout()) else {
        return 2;
    };
    let run = Run {
        args,
        files: &files,
        policy: args.policy.policy(),
        kinds,
        writes: audit::Writes {
            policy_reports: args.policy_reports,
            passes: args.policy_reports_passes,
            events: args.events,
            owner: None,
        },
    };
    go(&run, &runtime, writer)
}

/// What one run reads every cluster with.
pub(super) struct Run<'a> {
    pub(super) args: &'a AuditArgs,
    pub(super) files: &'a [allowlist::OpenFile],
    pub(super) policy: crate::policy::Policy,
    pub(super) kinds: Vec<&'static crate::objects::Kind>,
    pub(super) writes: audit::Writes,
}

/// Why a cluster's audit could not be done, typed where the cluster said so.
pub(super) struct Failed {
    pub(super) cause: Option<audit::AuditError>,
    pub(super) message: String,
}

impl From<String> for Failed {
    fn from(message: String) -> Self {
        Self { cause: None, message }
    }
}

impl From<audit::AuditError> for Failed {
    fn from(e: audit::AuditError) -> Self {
        Self {
            message: e.to_string(),
            cause: Some(e),
        }
    }
}

/// One context, its report written as it is judged.
fn single(run: &Run<'_>, runtime: &tokio::runtime::Runtime, mut writer: output::Writer<'_>) -> u8 {
    let args = run.args;
    let progress = super::progress::cluster_objects(args.quiet);
    let interrupt = Interrupt::listen(runtime);
    let result = runtime.block_on(async {
        let read = async {
            let connection = audit::Connection::open(&args.clusters.settings()).await?;
            let target = run.target(scope(args, &connection));
            let found = run
                .cluster(&connection, None, &target, Some(&mut writer), &progress)
                .await?;
            Ok::<_, Failed>((connection, found))
        };
        interrupt.within(args.clusters.deadline(), read).await
    });
    progress.finish_and_clear();
    let (connection, mut found) = match result {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            eprintln!("error: {}", e.message);
            return 2;
        }
        // What was written out stands; the document still ends, with why.
        Err(cut) => {
            let mut report = report::Report::default();
            let (why, code) = match cut {
                Cut::Deadline(late) => (late, 2),
                Cut::Interrupted => (interrupt::SAID.to_owned(), interrupt::EXIT),
            };
            report.errors.push(why);
            let _ = writer.finish(&mut report, None);
            return code;
        }
    };
    found.report.notes.push(read_note(&connection, &found));
    said_what_was_read(args, &connection, &mut found);
    let _ = writer.finish(&mut found.report, None);
    report::exit_code(&found.report)
}

impl Run<'_> {
    /// What `-n`, `-l`, `--kinds` and the break-glass label name, in `scope`.
    pub(super) fn target(&self, scope: audit::Scope) -> audit::Target {
        audit::Target {
            scope,
            label_selector: self.args.selector.clone(),
            kinds: (!self.kinds.is_empty()).then(|| self.kinds.clone()),
            break_glass_label: Some(self.args.break_glass_label.clone()),
        }
    }

    /// Reads and judges one cluster, then writes into it what was asked.
    /// `shared`: the allowlist, when no `--allowlist-csv` makes it the
    /// cluster's own. Each object's report goes to `out` as it is judged
    /// (kept in the audit's report without one).
    pub(super) async fn cluster(
        &self,
        connection: &audit::Connection,
        shared: Option<&allowlist::Loaded>,
        target: &audit::Target,
        mut out: Option<&mut output::Writer<'_>>,
        progress: &indicatif::ProgressBar,
    ) -> Result<audit::Audit, Failed> {
        let args = self.args;
        let own;
        let loaded = match shared {
            Some(loaded) => loaded,
            None => {
                own = self.with_installed(connection).await?;
                &own
            }
        };
        // With --registry the first pass only learns what will run: its
        // reports go nowhere and it writes nothing.
        let (mut nowhere, nothing) = (output::Writer::discard(), audit::Writes::default());
        let mut cause = None;
        let pass = async |round: Round<'_>| {
            let (learn, published, writes, out) = match round {
                Round::Learn => (true, None, &nothing, Some(&mut nowhere)),
                Round::Judge(published) => (false, published, &self.writes, out.as_deref_mut()),
            };
            let rules = judge::Rules {
                policy: &self.policy,
                allowlist: &loaded.allowlist,
                published,
            };
            audit::run(connection, target, rules, learn, writes, out, progress)
                .await
                .map_err(|e| {
                    let message = e.to_string();
                    cause = Some(e);
                    message
                })
        };
        let judged = registry::judged(&args.verify, Some(connection), &loaded.allowlist, pass).await;
        let mut found = judged.map_err(|message| Failed {
            cause: cause.take(),
            message,
        })?;
        // Results were written out as they were judged: what cannot be
        // written now ends the report as its errors.
        if found.stopped.is_none()
            && let Err(e) = audit::write(connection, &mut found, &self.writes).await
        {
            found.report.errors.push(e.to_string());
        }
        Ok(found)
    }
}

impl Run<'_> {
    /// The allowlist files and then the installed CSVs `--allowlist-csv`
    /// names, read from the cluster, as one allowlist it may judge by.
    async fn with_installed(&self, connection: &audit::Connection) -> Result<allowlist::Loaded, String> {
        let mut installed = Vec::new();
        for csvs in &self.args.csvs.allowlist_csv {
            let read = audit::installed::read(connection, csvs).await;
            installed.extend(read.map_err(|f| f.message().to_owned())?);
        }
        self.load(&installed)
    }

    /// The allowlist of every cluster, loaded once: without
    /// `--allowlist-csv` nothing of it comes from a cluster.
    pub(super) fn shared(&self) -> Result<Option<allowlist::Loaded>, String> {
        if !self.args.csvs.allowlist_csv.is_empty() {
            return Ok(None);
        }
        self.load(&[]).map(Some)
    }

    fn load(&self, installed: &[allowlist::Source]) -> Result<allowlist::Loaded, String> {
        let loaded = allowlist::load_with_installed(self.files, installed, &self.policy.catalog)
            .map_err(|errors| format!("the allowlist cannot be used:\n{errors}"))?;
        super::said_load_warnings(&loaded);
        judged_by(&self.policy, &loaded.allowlist)?;
        Ok(loaded)
    }
}

/// What an audit read, and from where.
pub(super) fn read_note(connection: &audit::Connection, found: &audit::Audit) -> String {
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

/// What a run over one cluster must say of what it read: the namespace
/// when it was the context's by default (a cron job that forgot `-A` reads
/// `default` and would pass for ever), and that nothing was judged when no
/// object of a kind digest-gate reads was there (an error, exit 2, unless
/// `--allow-empty`).
pub(super) fn said_what_was_read(args: &AuditArgs, connection: &audit::Connection, found: &mut audit::Audit) {
    let defaulted = !args.all_namespaces
        && args.namespace_selector.is_none()
        && args.namespaces.is_empty()
        && !args.clusters.fleet();
    let scope = match scope(args, connection) {
        _ if defaulted => format!("namespace \"{}\" (the context's namespace)", connection.namespace),
        audit::Scope::Namespaces(given) => format!("namespace {}", given.join(", ")),
        audit::Scope::All {
            namespace_selector: Some(s),
        } => format!("the namespaces matching {s}"),
        audit::Scope::All {
            namespace_selector: None,
        } => "the cluster".to_owned(),
    };
    if defaulted {
        found.report.notes.push(format!(
            "read {scope} only: -n names others, -A reads every namespace"
        ));
    }
    let empty = found.read.iter().all(|(_, n)| *n == 0);
    if empty && found.stopped.is_none() && found.report.errors.is_empty() && !args.allow_empty {
        found.report.errors.push(format!(
            "{scope} holds no object of a kind digest-gate reads: nothing was judged (name namespaces with -n or -A; --allow-empty when none is expected)"
        ));
    }
}

impl Learned for audit::Audit {
    fn will_run(&self) -> &std::collections::BTreeSet<crate::reference::Pinned> {
        &self.will_run
    }
}

/// The kinds `--kinds` names, or exit code 2 with what it may name.
fn kinds(names: &[String]) -> Result<Vec<&'static crate::objects::Kind>, u8> {
    names
        .iter()
        .map(|name| match crate::objects::kinds::named(name) {
            Ok(kind) if kind.layout == crate::objects::Layout::Approval => {
                eprintln!(
                    "error: --kinds: {} holds no image: the webhook answers its approval, and `digest-gate preflight` judges the upgrade",
                    kind.name
                );
                Err(2)
            }
            Ok(kind) => Ok(kind),
            Err(e) => {
                eprintln!("error: --kinds: {e}");
                Err(2)
            }
        })
        .collect()
}

/// The namespaces `audit`'s flags name: all (`-A`, a selector, or several
/// contexts and no `-n`), those given, or the context's.
pub(super) fn scope(args: &AuditArgs, connection: &audit::Connection) -> audit::Scope {
    let fleet = args.clusters.fleet() && args.namespaces.is_empty();
    if args.all_namespaces || args.namespace_selector.is_some() || fleet {
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

pub(super) fn run_cleanup(args: &CleanupArgs) -> u8 {
    let Some(runtime) = client_runtime() else {
        return 2;
    };
    super::args::warn_kubeconfig(&args.connection.cluster);
    let result = runtime.block_on(async {
        let connection = audit::Connection::open(&args.connection.settings(args.context.clone()))
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
