//! `digest-gate allowlist convert`, `lint` and `verify`.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use super::args::AllowlistArgs;
use super::{load, missing_allowlist, print_out};
use crate::allowlist::Loaded;
use crate::inventory;
use crate::published::Platform;
use crate::registry::{self, RegistryArgs, verify};

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
    fn paths(&self, command: &str) -> Vec<PathBuf> {
        let paths: Vec<PathBuf> = self
            .allowlist
            .allowlists
            .iter()
            .chain(&self.files)
            .cloned()
            .collect();
        if paths.is_empty() {
            missing_allowlist(&["allowlist", command]);
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

/// Runs an `allowlist` command.
pub(super) fn run(command: AllowlistCommand) -> u8 {
    match command {
        AllowlistCommand::Convert { files, name } => run_convert(&files, &name),
        AllowlistCommand::Lint { files, strict } => run_lint(&files, strict),
        AllowlistCommand::Verify(args) => run_verify(&args),
    }
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
    let paths = args.paths("convert");
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
    print_out(&inventory::to_native_yaml(&loaded.allowlist, name, &sources));
    0
}

fn run_lint(args: &FilesArgs, strict: bool) -> u8 {
    let loaded = match load(&args.paths("lint"), &args.allowlist.catalog.options()) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let lint = inventory::lint(&loaded);
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
    let paths = args.files.paths("verify");
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
        VerifyOutput::Json => {
            // The text report leads with these; JSON keeps them, and a
            // reader of the log sees them here.
            crate::output::say("warning", "", &report.errors);
            print_out(&report.json())
        }
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
