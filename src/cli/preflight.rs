//! `digest-gate preflight`: its flags, and the run against a cluster.

use clap::Args;

use super::args::{ContextArgs, Output, PolicyArgs};
use super::interrupt::{self, Cut, Interrupt};
use super::{client_runtime, print_out};
use crate::allowlist;
use crate::audit;
use crate::fleet::Status;
use crate::preflight::catalog::CatalogTarget;
use crate::preflight::files::FileTarget;
use crate::preflight::{self, Plans, render};

/// `digest-gate preflight`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["installplan", "all_pending", "csv", "bundle", "catalog"])))]
pub struct PreflightArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub clusters: ContextArgs,
    /// The InstallPlan to judge before it is approved (of one cluster: with
    /// several contexts, --all-pending or a file target).
    #[arg(
        long,
        env = "DIGEST_GATE_INSTALLPLAN",
        value_name = "NAMESPACE/NAME",
        value_parser = parse_plan
    )]
    pub installplan: Option<(String, String)>,
    /// Judge every InstallPlan that waits for an approval.
    #[arg(long, env = "DIGEST_GATE_ALL_PENDING")]
    pub all_pending: bool,
    /// With --all-pending: only the plans of this namespace (repeatable;
    /// default: every namespace).
    #[arg(
        long = "plan-namespace",
        env = "DIGEST_GATE_PLAN_NAMESPACE",
        value_delimiter = ',',
        value_name = "NAMESPACE",
        requires = "all_pending"
    )]
    pub plan_namespaces: Vec<String>,
    /// Judge this ClusterServiceVersion as the target, before any plan
    /// exists: what it replaces is the installed CSV of its package's
    /// Subscription (any namespace).
    #[arg(long, env = "DIGEST_GATE_CSV", value_name = "FILE")]
    pub csv: Option<std::path::PathBuf>,
    /// Judge this registry+v1 bundle (its manifests/*.clusterserviceversion.yaml)
    /// as the target, as --csv does.
    #[arg(long, env = "DIGEST_GATE_BUNDLE", value_name = "DIR")]
    pub bundle: Option<std::path::PathBuf>,
    /// Judge a release of this file-based catalog (a file or a directory,
    /// as `opm render` writes it) as --csv does: of the one
    /// --catalog-package, the head of --catalog-channel (default: the
    /// package's defaultChannel), or --target-version.
    #[arg(long, env = "DIGEST_GATE_CATALOG", value_name = "FILE|DIR")]
    pub catalog: Option<std::path::PathBuf>,
    /// With --catalog: the release to judge, by version or CSV name
    /// (default: the channel's head).
    #[arg(
        long,
        env = "DIGEST_GATE_TARGET_VERSION",
        value_name = "VERSION",
        requires = "catalog"
    )]
    pub target_version: Option<String>,
    /// Read the objects of this namespace only (repeatable; default: every
    /// namespace, as the incident's ConfigMap is not in the operator's).
    #[arg(
        short = 'n',
        long = "namespace",
        env = "DIGEST_GATE_NAMESPACE",
        value_delimiter = ','
    )]
    pub namespaces: Vec<String>,
    /// Read only the objects of namespaces matching this label selector.
    #[arg(
        long,
        env = "DIGEST_GATE_NAMESPACE_SELECTOR",
        value_name = "SELECTOR",
        conflicts_with = "namespaces"
    )]
    pub namespace_selector: Option<String>,
    /// Report format: SARIF's rules are the categories
    /// (stale_after_upgrade, already_stale, fixed_by_upgrade; with
    /// --registry also unpullable_after_upgrade, unverifiable_after_upgrade).
    #[arg(short = 'o', long, env = "DIGEST_GATE_OUTPUT", value_enum, default_value_t = Output::Text)]
    pub output: Output,
    #[command(flatten)]
    pub csvs: audit::installed::CsvArgs,
    /// Also ask whether every digest a target promotes can be pulled where
    /// the nodes pull it from (by the allowlist's mirror rules), for the
    /// nodes' platforms: what cannot is unpullable_after_upgrade.
    #[arg(
        long = "registry",
        visible_alias = "verify-registry",
        env = "DIGEST_GATE_VERIFY_REGISTRY"
    )]
    pub registry: bool,
    /// With --registry: a platform the nodes run, OS/ARCH[/VARIANT]
    /// (repeatable; default: the platforms of the cluster's nodes).
    #[arg(
        long = "platform",
        env = "DIGEST_GATE_PLATFORM",
        value_delimiter = ',',
        requires = "registry"
    )]
    pub platforms: Vec<crate::published::Platform>,
    #[command(flatten)]
    pub registry_access: crate::registry::RegistryArgs,
    /// Write each judged plan's findings as wgpolicyk8s.io PolicyReports
    /// named digest-gate-preflight-<plan or target> in the namespaces of the
    /// objects they list (never the audit's; `cleanup` removes both).
    #[arg(long, env = "DIGEST_GATE_POLICY_REPORTS")]
    pub policy_reports: bool,
    /// Write each judged InstallPlan's judgement on it (the
    /// digest-gate.dev/preflight annotation), which the webhook answers its
    /// approval from.
    #[arg(long, env = "DIGEST_GATE_ANNOTATE")]
    pub annotate: bool,
    /// No progress on standard error (drawn only on a terminal anyway).
    #[arg(short = 'q', long, env = "DIGEST_GATE_QUIET")]
    pub quiet: bool,
}

fn parse_plan(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("'{s}' is not NAMESPACE/NAME")),
    }
}

/// The plans the flags name (clap made them exclusive).
fn plans(args: &PreflightArgs) -> Result<Plans, String> {
    let file = |target| Ok(Plans::File(target));
    if let Some((namespace, name)) = &args.installplan {
        return Ok(Plans::Named {
            namespace: namespace.clone(),
            name: name.clone(),
        });
    }
    if let Some(path) = &args.csv {
        return file(FileTarget::Csv(path.clone()));
    }
    if let Some(path) = &args.bundle {
        return file(FileTarget::Bundle(path.clone()));
    }
    if let Some(path) = &args.catalog {
        let catalog = &args.policy.allowlist.catalog;
        let [package] = catalog.packages.as_slice() else {
            return Err(format!(
                "--catalog needs exactly one --catalog-package, the target's package (given: {})",
                catalog.packages.len()
            ));
        };
        return file(FileTarget::Catalog(CatalogTarget {
            path: path.clone(),
            package: package.clone(),
            channel: catalog.channel.clone(),
            version: args.target_version.clone(),
        }));
    }
    Ok(Plans::AllPending {
        namespaces: args.plan_namespaces.clone(),
    })
}

pub(super) fn run(args: &PreflightArgs) -> u8 {
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
    let policy = args.policy.policy();
    let plans = match plans(args) {
        Ok(plans) => plans,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let registry = match args.registry.then(|| args.registry_access.settings()) {
        None => None,
        Some(Ok(settings)) => Some(preflight::pulls::Asking {
            settings,
            platforms: args.platforms.clone(),
        }),
        Some(Err(e)) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let scope = if args.namespaces.is_empty() {
        audit::Scope::All {
            namespace_selector: args.namespace_selector.clone(),
        }
    } else {
        audit::Scope::Namespaces(args.namespaces.clone())
    };
    let inputs = preflight::Inputs {
        plans,
        files: &files,
        csvs: &args.csvs.allowlist_csv,
        policy: &policy,
        target: audit::Target {
            scope,
            label_selector: None,
            kinds: None,
            break_glass_label: None,
        },
        // Several clusters' bars at once would draw over one another.
        quiet: args.quiet || args.clusters.fleet(),
        registry,
        policy_reports: args.policy_reports,
        annotate: args.annotate,
        owner: None,
    };
    if args.clusters.fleet() {
        return fleet(args, &runtime, &inputs);
    }
    single(args, &runtime, &inputs)
}

/// One cluster's pre-flight, told.
fn single(args: &PreflightArgs, runtime: &tokio::runtime::Runtime, inputs: &preflight::Inputs<'_>) -> u8 {
    let interrupt = Interrupt::listen(runtime);
    let found = runtime.block_on(interrupt.or_stop(async {
        let connection = audit::Connection::open(&args.clusters.settings())
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(preflight::run(&connection, inputs).await)
    }));
    let found = match found {
        Some(Ok(f)) => f,
        Some(Err(e)) => {
            eprintln!("error: {e}");
            return 2;
        }
        // Nothing is judged whole until the end: the document says only that.
        None => preflight::Preflight {
            errors: vec![interrupt::SAID.to_owned()],
            ..Default::default()
        },
    };
    let now = std::time::SystemTime::now();
    crate::output::say("error", "", &found.errors);
    print_out(&match args.output {
        Output::Json => render::json(&found, now),
        Output::Sarif => render::sarif(&found),
        Output::Text => render::text(&found, now),
    });
    match interrupt.happened() {
        true => interrupt::EXIT,
        false => render::exit_code(&found),
    }
}

/// One cluster's pre-flight: its context and server, and the judgement or
/// why there is none.
type Judged = (String, String, Result<preflight::Preflight, (Status, String)>);

/// The pre-flight of every cluster the contexts name, concurrently: each
/// cluster's report under its name (text), in `clusters[]` (JSON), or as a
/// SARIF run of its own; the worst exit code, 2 for a cluster not read.
fn fleet(args: &PreflightArgs, runtime: &tokio::runtime::Runtime, inputs: &preflight::Inputs<'_>) -> u8 {
    if args.installplan.is_some() {
        eprintln!(
            "error: one --installplan cannot name a plan on several clusters: use --all-pending, --csv, --bundle or --catalog"
        );
        return 2;
    }
    let clusters = match args.clusters.clusters() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let deadline = args.clusters.deadline();
    let now = std::time::SystemTime::now();
    let interrupt = &Interrupt::listen(runtime);
    let done: Vec<Judged> = runtime.block_on(async {
        use futures::StreamExt;
        let reads = clusters.iter().map(|(context, _)| async move {
            let settings = args.clusters.connection.settings(Some(context.name.clone()));
            let read = async {
                if let Some(why) = &context.unusable {
                    return Err((Status::Config, why.clone()));
                }
                let connection = audit::Connection::open(&settings)
                    .await
                    .map_err(|e| (Status::Config, e.to_string()))?;
                Ok(preflight::run(&connection, inputs).await)
            };
            let found = interrupt
                .within(deadline, read)
                .await
                .unwrap_or_else(|cut| match cut {
                    Cut::Deadline(late) => Err((Status::Deadline, late)),
                    Cut::Interrupted => Err((Status::Interrupted, interrupt::SAID.to_owned())),
                });
            (context.name.clone(), context.server.clone(), found)
        });
        futures::stream::iter(reads)
            .buffered(usize::from(args.clusters.parallel))
            .collect()
            .await
    });
    let (code, text, told, log) = each_told(&done, now);
    print_out(&match args.output {
        Output::Text => text,
        Output::Json => {
            let mut s = serde_json::to_string_pretty(&serde_json::json!({ "clusters": told })).expect("JSON");
            s.push('\n');
            s
        }
        Output::Sarif => {
            let mut s = serde_json::to_string_pretty(&log).expect("JSON");
            s.push('\n');
            s
        }
    });
    match interrupt.happened() {
        true => interrupt::EXIT,
        false => code,
    }
}

/// Each cluster's pre-flight rendered: the worst exit code, the text, the
/// JSON `clusters[]` and the SARIF log with a run per cluster.
#[allow(clippy::type_complexity)]
fn each_told(
    done: &[Judged],
    now: std::time::SystemTime,
) -> (u8, String, Vec<serde_json::Value>, serde_json::Value) {
    let mut code = 0;
    let mut text = String::new();
    let mut told = Vec::new();
    let mut runs = Vec::new();
    // SARIF's log of every cluster: the first one's, with each cluster's
    // run (a log holds several runs, SARIF 3.13.4).
    let mut log = serde_json::Value::Null;
    for (context, server, found) in done {
        let (status, error) = match found {
            Ok(found) => {
                code = code.max(render::exit_code(found));
                crate::output::say("error", &format!("cluster \"{context}\": "), &found.errors);
                text.push_str(&format!(
                    "== cluster \"{context}\" ({server}) ==\n{}",
                    render::text(found, now)
                ));
                let report = render::json_value(found, now);
                let sarif = render::sarif_value(found);
                for mut run in sarif["runs"].as_array().cloned().unwrap_or_default() {
                    run["properties"] = serde_json::json!({"context": context, "server": server});
                    runs.push(run);
                }
                if log.is_null() {
                    log = sarif;
                }
                let ok = if found.complete() {
                    Status::Ok
                } else {
                    Status::Partial
                };
                told.push(
                    serde_json::json!({"context": context, "server": server, "status": ok,
                    "error": null, "preflight": report}),
                );
                continue;
            }
            Err((status, e)) => (*status, e),
        };
        code = 2;
        // Said on standard error too: a SARIF log has no run for it.
        eprintln!("error: cluster \"{context}\" ({server}) not read ({status}): {error}");
        text.push_str(&format!(
            "== cluster \"{context}\" ({server}) ==\nerror: not read: {error}\n"
        ));
        told.push(
            serde_json::json!({"context": context, "server": server, "status": status, "error": error}),
        );
    }
    if log.is_null() {
        log = serde_json::json!({"version": "2.1.0"});
    }
    log["runs"] = serde_json::Value::Array(runs);
    (code, text, told, log)
}
