//! The command line: flag definitions and dispatch for `serve`, `check`,
//! `audit`, `cleanup`, `allowlist convert`, `allowlist lint` and `allowlist
//! verify`, one file per command; `args` holds the flags they share. Every
//! flag also reads `DIGEST_GATE_<FLAG>` from the environment. Flag structs
//! are `…Args` everywhere.

mod allowlist;
mod args;
mod audit;
mod check;
mod environment;
mod fleet;
mod interrupt;
mod preflight;
mod progress;
mod serve;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub use allowlist::{AllowlistCommand, BlobsArg, FilesArgs, VerifyArgs, VerifyOutput};
pub use args::{AllowlistArgs, CatalogArgs, ConnectionArgs, KindMode, Output, PolicyArgs};
pub use audit::{AuditArgs, CleanupArgs};
pub use check::CheckArgs;
pub use preflight::PreflightArgs;
pub use serve::{LogFormat, ServeArgs};

use crate::allowlist::{Loaded, load_paths_with};
use crate::output;
use crate::policy::Policy;

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
    /// read; 130 interrupted (SIGINT or SIGTERM: the report ends with
    /// that error, a fleet's unfinished clusters `interrupted`).
    Audit(Box<AuditArgs>),
    /// Delete the PolicyReports and Events that `audit` (and `preflight`)
    /// wrote.
    ///
    /// With --owner, only those a release's background audit wrote (owned
    /// by its ClusterRole); the chart's pre-delete hook runs this on `helm
    /// uninstall`. Exit codes: 0 everything found was deleted (or nothing
    /// was found); 2 the cluster unreachable, or something could not be
    /// listed or deleted.
    Cleanup(CleanupArgs),
    /// Judge an operator upgrade before it is approved: what a pending
    /// InstallPlan would leave on images the new release does not promote.
    /// Reads with your credentials, never approves, and writes nothing
    /// unless --annotate or --policy-reports asks.
    ///
    /// Each CSV the plan would install is judged on its own: every object
    /// of the cluster (every namespace unless -n or --namespace-selector),
    /// by the allowlist in force now (the files, the CSVs installed in the
    /// plan's namespace and --allowlist-csv's) and by the one the upgrade
    /// leaves (without the CSV it replaces, with the new one). Exit codes:
    /// 0 safe to approve; 1 an object will be stale after the upgrade, or
    /// is already; 2 something could not be read (the cluster, a plan, a
    /// bundle), a plan not ready yet or not waiting for an approval, or
    /// nothing judged; 130 interrupted (SIGINT or SIGTERM).
    Preflight(Box<PreflightArgs>),
    /// Work with allowlist files.
    #[command(subcommand)]
    Allowlist(AllowlistCommand),
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let command = environment::boolish(Cli::command());
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let matches = match command.clone().try_get_matches_from(&argv) {
        Ok(m) => m,
        Err(e) => match environment::named_by_variable(&e, &command, &argv) {
            Some(message) => {
                let _ = writeln!(std::io::stderr(), "error: {message}");
                return ExitCode::from(2);
            }
            None => e.exit(),
        },
    };
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let code = match cli.command {
        Command::Serve(args) => {
            let given = |id: &str| {
                matches
                    .subcommand_matches("serve")
                    .and_then(|m| m.value_source(id))
                    .is_some_and(|s| s != clap::parser::ValueSource::DefaultValue)
            };
            let addresses = serve::Given {
                listen: given("listen"),
                admin_listen: given("admin_listen"),
            };
            serve::run(*args, addresses)
        }
        Command::Check(args) => check::run(&args),
        Command::Audit(args) if args.clusters.fleet() => fleet::run(&args),
        Command::Audit(args) => audit::run(&args),
        Command::Preflight(args) => preflight::run(&args),
        Command::Cleanup(args) => audit::run_cleanup(&args),
        Command::Allowlist(command) => allowlist::run(command),
    };
    ExitCode::from(code)
}

fn load(paths: &[PathBuf], catalog: &crate::allowlist::CatalogOptions) -> Result<Loaded, u8> {
    load_paths_with(paths, catalog).map_err(|errors| {
        eprintln!("error: the allowlist cannot be used:\n{errors}");
        2
    })
}

/// What loading skipped or did not read (an entry pinned by tag only, an
/// ImageSetConfiguration's operator catalogs), said on standard error by
/// the commands that judge by the allowlist (`check`, `audit`), as
/// `allowlist lint` and `serve` say it: never silently less than was
/// written.
fn said_load_warnings(loaded: &Loaded) {
    let lines: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    crate::output::say("warning", "", &lines);
}

/// The rule for an allowlist that promotes nothing, where a mode applies
/// (`check`, `audit`; `serve` keeps it in its supply): an error where it
/// would deny every listed image, else a warning said here.
fn judged_by(policy: &Policy, list: &crate::allowlist::Allowlist) -> Result<(), String> {
    let warning = policy.judges_by(list).map_err(|e| e.to_string())?;
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    Ok(())
}

/// Exits 2: `--allowlist` missing, said with the usage of the command
/// `path` names (`["allowlist", "lint"]`), not the top level's.
fn missing_allowlist(path: &[&str]) -> ! {
    let mut at = Cli::command();
    // Built, each subcommand knows its whole name for the usage line.
    at.build();
    for name in path {
        if let Some(sub) = at.find_subcommand(name).cloned() {
            at = sub;
        }
    }
    at.error(
        clap::error::ErrorKind::MissingRequiredArgument,
        "--allowlist is required (a file or directory; repeatable)",
    )
    .exit()
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

/// The single-threaded runtime the cluster commands run their client on.
fn client_runtime() -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .inspect_err(|e| eprintln!("error: cannot start the runtime: {e}"))
        .ok()
}

/// Writes to stdout, ignoring a closed pipe (`| head`) instead of panicking.
fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Issue 60: docs/check.md says a list variable is comma-separated, but
    /// `DIGEST_GATE_CONTEXT=ukce,frkq` was one context named `ukce,frkq`.
    /// Every repeatable flag that reads a variable splits it on commas.
    #[test]
    fn every_list_variable_splits_on_commas() {
        let mut flags = Vec::new();
        every_flag(&Cli::command(), "digest-gate".into(), &mut flags);
        let whole: Vec<String> = flags
            .iter()
            .filter(|(_, arg)| arg.get_env().is_some() && matches!(arg.get_action(), clap::ArgAction::Append))
            .filter(|(_, arg)| arg.get_value_delimiter() != Some(','))
            .map(|(path, arg)| format!("{path} {}", arg.get_id()))
            .collect();
        assert!(whole.is_empty(), "list variables read whole: {whole:#?}");
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
}
