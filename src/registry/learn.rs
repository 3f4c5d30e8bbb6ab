//! `--registry` for the commands that judge objects (`check`, `audit`): a
//! first pass learns what each workload will run, the registries are asked
//! about exactly that (for the platforms named, else the nodes'), and the
//! pass that reports judges knowing their answers. Written once, here.

use std::collections::BTreeSet;

use clap::Args;

use super::RegistryArgs;
use crate::allowlist::Allowlist;
use crate::audit;
use crate::published::{Platform, Published};
use crate::reference::Pinned;

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

/// Which pass a judging run is.
#[derive(Debug, Clone, Copy)]
pub enum Round<'p> {
    /// Only learn what will run: nothing of it is reported.
    Learn,
    /// Judge and report, knowing what the registries said (with
    /// `--registry`).
    Judge(Option<&'p Published>),
}

/// What a learning pass found each workload will run: canonical
/// repository and digest.
pub trait Learned {
    fn will_run(&self) -> &BTreeSet<Pinned>;
}

/// Runs `pass` once to judge; with `--registry`, first to learn, then
/// again knowing what the registries said of what it learned. `nodes`: the
/// cluster whose nodes' platforms are verified when none is named.
pub async fn judged<T: Learned>(
    args: &VerifyRegistryArgs,
    nodes: Option<&audit::Connection>,
    list: &Allowlist,
    mut pass: impl AsyncFnMut(Round<'_>) -> Result<T, String>,
) -> Result<T, String> {
    if !args.enabled {
        return pass(Round::Judge(None)).await;
    }
    let learned = pass(Round::Learn).await?;
    let published = published(args, nodes, list, learned.will_run()).await?;
    pass(Round::Judge(Some(&published))).await
}

/// What the registries say of `references`. The progress bar shows on a
/// terminal; what could not be asked is warned of on standard error.
async fn published(
    args: &VerifyRegistryArgs,
    nodes: Option<&audit::Connection>,
    list: &Allowlist,
    references: &BTreeSet<Pinned>,
) -> Result<Published, String> {
    let settings = args.registry.settings().map_err(|e| e.to_string())?;
    let options = super::verify::Options {
        platforms: platforms(&args.platforms, nodes).await?,
        mirrors_only: false,
        blobs: super::verify::Blobs::Config,
    };
    let (published, warnings) = super::verify_references(list, references, settings, &options, false)
        .await
        .map_err(|e| e.to_string())?;
    for w in warnings {
        eprintln!("warning: {w}");
    }
    Ok(published)
}

/// The platforms to verify for: those named, else (given a cluster) its
/// nodes', else none (no platform is then required).
pub async fn platforms(
    named: &[Platform],
    nodes: Option<&audit::Connection>,
) -> Result<Vec<Platform>, String> {
    match (named.is_empty(), nodes) {
        (true, Some(connection)) => audit::nodes::platforms(connection)
            .await
            .map_err(|e| e.to_string()),
        _ => Ok(named.to_vec()),
    }
}
