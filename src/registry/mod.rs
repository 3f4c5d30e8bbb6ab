//! Asking registries whether promoted digests can be pulled
//! (`allowlist verify`). Never on the admission path.
//!
//! `auth` finds credentials, `client` asks (limits, retries, what an answer
//! means), `manifest` reads what was served, `verify` decides each digest's
//! [`State`](crate::published::State), and `render` writes the report.

pub mod auth;
pub mod client;
pub mod learn;
pub mod manifest;
pub mod render;
pub mod verify;

pub use learn::{Learned, Round, VerifyRegistryArgs, judged};

use std::path::PathBuf;
use std::time::Duration;

use crate::flags::parse_positive_duration;

/// How to reach registries: the options every registry-facing command
/// shares.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct RegistryArgs {
    /// Registry credentials (containers-auth.json or .docker/config.json).
    /// Default: $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json,
    /// ~/.config/containers/auth.json, ~/.docker/config.json, the first
    /// that exists.
    #[arg(long, env = "DIGEST_GATE_REGISTRY_AUTH", value_name = "FILE")]
    pub registry_auth: Option<PathBuf>,
    /// PEM file of CA certificates trusted beside the system's (repeatable).
    #[arg(
        long,
        env = "DIGEST_GATE_REGISTRY_CA",
        value_name = "FILE",
        value_delimiter = ','
    )]
    pub registry_ca: Vec<PathBuf>,
    /// Longest a registry may take to connect or to send the next bytes.
    #[arg(long, env = "DIGEST_GATE_REGISTRY_TIMEOUT", default_value = "30s", value_parser = parse_positive_duration)]
    pub registry_timeout: Duration,
    /// Registry requests in flight (at most 4 to one registry).
    #[arg(long, env = "DIGEST_GATE_REGISTRY_CONCURRENCY", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub registry_concurrency: u16,
}

impl RegistryArgs {
    /// The files these options read (the credentials file in use, the CA
    /// files): a long-running verifier reads them again when they change.
    pub fn files(&self) -> Vec<PathBuf> {
        auth::AuthFile::locate(self.registry_auth.as_deref())
            .into_iter()
            .chain(self.registry_ca.iter().cloned())
            .collect()
    }

    /// The client settings, its credentials file read.
    pub fn settings(&self) -> Result<client::RegistrySettings, auth::AuthError> {
        let auth = auth::AuthFile::discover(self.registry_auth.as_deref())?;
        Ok(client::RegistrySettings::new(
            auth,
            self.registry_ca.clone(),
            self.registry_timeout,
            usize::from(self.registry_concurrency),
        ))
    }
}

/// Why verification could not start.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Setup(#[from] client::SetupError),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

/// Verifies every promoted digest of `list`, with a progress bar on a
/// terminal unless `quiet`.
pub fn verify_allowlist(
    list: &crate::allowlist::Allowlist,
    settings: client::RegistrySettings,
    options: &verify::Options,
    quiet: bool,
) -> Result<render::VerifyReport, VerifyError> {
    block_on(verify_subjects(
        list.mirror_rules(),
        verify::subjects(list),
        settings,
        options,
        quiet,
    ))?
}

/// Runs a command's verification on a runtime of its own: two workers are
/// enough for requests that mostly wait.
pub fn block_on<F: std::future::Future>(future: F) -> Result<F::Output, VerifyError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(VerifyError::Runtime)?;
    Ok(runtime.block_on(future))
}

/// Verifies `subjects` where `rules` say nodes pull them from, with a
/// progress bar on a terminal unless `quiet`.
pub async fn verify_subjects(
    rules: &[crate::allowlist::MirrorRule],
    subjects: Vec<verify::Subject>,
    settings: client::RegistrySettings,
    options: &verify::Options,
    quiet: bool,
) -> Result<render::VerifyReport, VerifyError> {
    let in_flight = settings.concurrency * 2;
    let registries = client::Registries::new(settings)?;
    let progress = progress(subjects.len(), quiet);
    let images = verify::verify(
        &registries,
        rules,
        subjects,
        options,
        in_flight,
        &|v: &verify::Verification| {
            progress.set_message(format!(
                "{}@{}",
                v.repository,
                crate::reference::short_digest(&v.digest)
            ));
            progress.inc(1);
        },
    )
    .await;
    progress.finish_and_clear();
    Ok(render::VerifyReport::new(
        images,
        registries.warnings().to_vec(),
        registries.requests(),
    ))
}

/// A bar on standard error, drawn only when it is a terminal.
fn progress(total: usize, quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar =
        indicatif::ProgressBar::with_draw_target(Some(total as u64), indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} verified {msg}") {
        bar.set_style(style);
    }
    bar
}

/// The complete native allowlist `--write-platforms` writes: every
/// repository and digest of `list`, each index that was read with its
/// images by platform. Loaded alone or with `list`, it decides the same,
/// and a reference to an index's image is promoted for its platform.
pub fn with_platforms(
    list: &crate::allowlist::Allowlist,
    sources: &[String],
    report: &render::VerifyReport,
) -> String {
    let mut found = crate::inventory::Found {
        by: Some("allowlist verify --write-platforms"),
        ..Default::default()
    };
    for v in report.images.iter().filter(|v| !v.images.is_empty()) {
        found
            .platforms
            .insert((v.repository.clone(), v.digest.clone()), v.images.clone());
    }
    crate::inventory::to_native_yaml_with(list, "promoted", sources, &found)
}

/// Verifies the references workloads will run (`check --registry`, `audit
/// --registry`): each distinct (canonical repository, digest) once, where a
/// node pulls it, and returns what the registries said of each.
pub async fn verify_references(
    list: &crate::allowlist::Allowlist,
    references: &std::collections::BTreeSet<crate::reference::Pinned>,
    settings: client::RegistrySettings,
    options: &verify::Options,
    quiet: bool,
) -> Result<(crate::published::Published, Vec<String>), VerifyError> {
    let subjects = references
        .iter()
        .map(|pinned| verify::Subject {
            repository: pinned.repository.clone(),
            digest: pinned.digest.clone(),
            tags: Vec::new(),
            promotions: verify::promotions_of(list, &pinned.repository, &pinned.digest),
        })
        .collect();
    let report = verify_subjects(list.mirror_rules(), subjects, settings, options, quiet).await?;
    let mut published = crate::published::Published::default();
    for v in &report.images {
        let known = crate::published::Known {
            state: v.state,
            detail: v.detail.clone(),
            checked_at: v.checked_at,
        };
        published.insert(&v.repository, &v.digest, known);
    }
    Ok((published, report.errors))
}
