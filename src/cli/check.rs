//! `digest-gate check`: its flags, and the run from files to the report,
//! the fixed manifests and the exit code.

use std::io::Write;

use clap::Args;

use super::args::{Output, PolicyArgs};
use super::{judged_by, load, missing_allowlist, output_format, report_writer};
use crate::check::{self, Checked, Pass};
use crate::judge;
use crate::output;
use crate::registry::{self, Learned, Round, VerifyRegistryArgs};

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
    /// No progress on standard error (drawn only when it is a terminal and
    /// the report goes elsewhere).
    #[arg(short = 'q', long, env = "DIGEST_GATE_QUIET")]
    pub quiet: bool,
}

pub(super) fn run(args: &CheckArgs) -> u8 {
    if args.policy.allowlist.allowlists.is_empty() {
        missing_allowlist(&["check"]);
    }
    let loaded = match load(
        &args.policy.allowlist.allowlists,
        &args.policy.allowlist.catalog.options(),
    ) {
        Ok(l) => l,
        Err(code) => return code,
    };
    super::said_load_warnings(&loaded);
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

/// The check's findings; with --registry, judged again knowing what the
/// registries said of what the first pass found will run (standard input
/// is then read once and kept for the second pass).
fn checked(
    args: &CheckArgs,
    sources: check::Sources,
    allowlist: &crate::allowlist::Allowlist,
    out: &mut output::Writer<'_>,
) -> Result<Checked, String> {
    let policy = args.policy.policy();
    let judged = if args.fix { Pass::Fix } else { Pass::Judge };
    // With --fix the report is on standard error, where a bar would mix
    // into it.
    let progress = super::progress::objects_judged(args.quiet || args.fix);
    let _cleared = super::progress::Clear(&progress);
    let rules = judge::Rules {
        policy: &policy,
        allowlist,
        published: None,
    };
    if !args.verify.enabled {
        return Ok(check::check_showing(
            &sources,
            rules,
            judged,
            Some(out),
            &progress,
        ));
    }
    let sources = sources.buffered().map_err(|e| e.to_string())?;
    let pass = async |round: Round<'_>| {
        Ok(match round {
            // Learning reports nothing.
            Round::Learn => check::check(&sources, rules, Pass::Learn, None),
            Round::Judge(published) => {
                let rules = judge::Rules { published, ..rules };
                check::check_showing(&sources, rules, judged, Some(&mut *out), &progress)
            }
        })
    };
    registry::block_on(registry::judged(&args.verify, None, allowlist, pass)).map_err(|e| e.to_string())?
}

impl Learned for Checked {
    fn will_run(&self) -> &std::collections::BTreeSet<crate::reference::Pinned> {
        &self.will_run
    }
}
