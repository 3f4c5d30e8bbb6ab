//! The command line: `check`, `allowlist convert`, `allowlist lint`. Every
//! flag also reads `DIGEST_GATE_<FLAG>` from the environment.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::allowlist::{self, Loaded};
use crate::check;
use crate::policy::{Mode, Policy, Unlisted};

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
    /// Check manifests offline, as the webhook would judge them.
    ///
    /// Exit codes: 0 everything complies; 1 something is denied or needs a
    /// rewrite (with --fix: something is still denied after fixing); 2
    /// unusable input or flags.
    Check(CheckArgs),
    /// Work with allowlist files.
    #[command(subcommand)]
    Allowlist(AllowlistCommand),
}

/// Report formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// A per-kind mode override, `KIND=MODE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindMode {
    pub kind: String,
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
    Ok(KindMode {
        kind: kind.trim().to_owned(),
        mode,
    })
}

/// Decision flags shared by `check` and (later) `serve`.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Allowlist file or directory (repeat, or comma-separate in the env var).
    #[arg(
        long = "allowlist",
        env = "DIGEST_GATE_ALLOWLIST",
        value_delimiter = ',',
        required = true
    )]
    pub allowlists: Vec<PathBuf>,
    /// What to do with images that are not promoted.
    #[arg(long, env = "DIGEST_GATE_MODE", value_enum, default_value_t = Mode::Rewrite)]
    pub mode: Mode,
    /// Mode for one kind, e.g. ServingRuntime=enforce (repeatable).
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
}

impl PolicyArgs {
    /// The decision settings these flags describe.
    pub fn policy(&self) -> Policy {
        let mut policy = Policy {
            mode: self.mode,
            unlisted: self.unlisted,
            ..Policy::default()
        };
        for km in &self.kind_modes {
            policy.set_kind_mode(&km.kind, km.mode);
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
}

/// `digest-gate allowlist ...`.
#[derive(Debug, Subcommand)]
pub enum AllowlistCommand {
    /// Convert any accepted source (CSV, ImageSetConfiguration, plain list,
    /// native) to one native Allowlist document on standard output.
    Convert {
        /// Source files or directories; they merge by union.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// metadata.name of the generated Allowlist.
        #[arg(long, env = "DIGEST_GATE_NAME", default_value = "promoted")]
        name: String,
    },
    /// Check allowlist files and report what they promote.
    ///
    /// Exit codes: 0 usable; 1 usable but with warnings (only with --strict);
    /// 2 errors.
    Lint {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Treat warnings as failures.
        #[arg(long, env = "DIGEST_GATE_STRICT")]
        strict: bool,
    },
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Check(args) => run_check(&args),
        Command::Allowlist(AllowlistCommand::Convert { files, name }) => run_convert(&files, &name),
        Command::Allowlist(AllowlistCommand::Lint { files, strict }) => run_lint(&files, strict),
    };
    ExitCode::from(code)
}

fn load(paths: &[PathBuf]) -> Result<Loaded, u8> {
    allowlist::load_paths(paths).map_err(|errors| {
        eprintln!("error: the allowlist cannot be used:\n{errors}");
        2
    })
}

fn run_check(args: &CheckArgs) -> u8 {
    let loaded = match load(&args.policy.allowlists) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let names: Vec<String> = args.filenames.iter().chain(&args.files).cloned().collect();
    if names.is_empty() {
        eprintln!("error: no manifests given; pass -f FILE (or -f - for standard input)");
        return 2;
    }
    if args.in_place && names.iter().any(|n| n == "-") {
        eprintln!("error: --in-place cannot write back to standard input");
        return 2;
    }
    let (inputs, mut problems) = check::read_inputs(&names);
    let mut outcome = check::check(&inputs, &loaded.allowlist, &args.policy.policy(), args.fix);
    problems.append(&mut outcome.problems);
    outcome.problems = problems;

    let report = match args.output {
        Output::Text => check::text_report(&outcome, args.fix),
        Output::Json => check::json_report(&outcome),
    };
    if args.fix {
        eprint!("{report}");
        if args.in_place {
            for f in outcome.fixed.iter().filter(|f| f.rewrites > 0) {
                if let Err(e) = std::fs::write(&f.name, &f.text) {
                    eprintln!("error: {}: cannot write: {e}", f.name);
                    return 2;
                }
            }
        } else {
            print_out(&check::fixed_stream(&outcome.fixed));
        }
    } else {
        print_out(&report);
    }
    check::exit_code(&outcome, args.fix)
}

/// Writes to stdout, ignoring a closed pipe (`| head`) instead of panicking.
fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

fn run_convert(files: &[PathBuf], name: &str) -> u8 {
    let loaded = match load(files) {
        Ok(l) => l,
        Err(code) => return code,
    };
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let sources: Vec<String> = loaded.sources.iter().map(|s| s.file.clone()).collect();
    print_out(&allowlist::to_native_yaml(&loaded.allowlist, name, &sources));
    0
}

fn run_lint(files: &[PathBuf], strict: bool) -> u8 {
    let loaded = match load(files) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let mut report = String::new();
    for s in &loaded.sources {
        report.push_str(&format!(
            "{}: {}, {} promoted image(s)\n",
            s.file, s.format, s.entries
        ));
    }
    let mut warnings: Vec<String> = loaded.warnings.iter().map(|w| format!("warning: {w}")).collect();
    let list = &loaded.allowlist;
    if list.repository_count() == 0 {
        warnings.push("warning: no repositories are promoted; every listed image would be denied".into());
    }
    for repo in list.repositories() {
        if repo.digests.len() > 1 && repo.rewrite_to().is_none() {
            warnings.push(format!(
                "warning: {} has {} promoted digests and no rewriteTo: unpromoted digests and untagged references to it are denied, not rewritten",
                repo.name,
                repo.digests.len()
            ));
        }
    }
    report.push_str(&format!(
        "total: {} repositories, {} promoted digests, {} mirror rules, {} exemptions\n",
        list.repository_count(),
        list.digest_count(),
        list.mirror_rules().len(),
        list.exemptions().len()
    ));
    for w in &warnings {
        report.push_str(w);
        report.push('\n');
    }
    print_out(&report);
    u8::from(strict && !warnings.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn kind_modes_parse() {
        assert_eq!(
            parse_kind_mode("ServingRuntime=Enforce"),
            Ok(KindMode {
                kind: "ServingRuntime".into(),
                mode: Mode::Enforce
            })
        );
        assert!(parse_kind_mode("ServingRuntime").is_err());
        assert!(parse_kind_mode("Pod=strict").is_err());
        assert!(parse_kind_mode("=audit").is_err());
    }
}
