//! What the cluster and file commands show on standard error while they
//! work: drawn only when it is a terminal (indicatif's stderr target hides
//! itself otherwise), never with `--quiet`. A report written as it goes
//! to a terminal is its own progress: a bar beside it would be drawn
//! through its lines, so the single-stream bars need standard output to go
//! elsewhere (`> report.json`, a pipe).

use std::io::IsTerminal;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether a bar beside a report written as it goes is left out.
fn beside_report(quiet: bool) -> bool {
    quiet || std::io::stdout().is_terminal()
}

/// Clears its bar when dropped, however the run ends.
pub(super) struct Clear<'a>(pub(super) &'a ProgressBar);

impl Drop for Clear<'_> {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// A count of the objects read from one cluster and judged, the kind and
/// page being read as its message.
pub(super) fn cluster_objects(quiet: bool) -> ProgressBar {
    if beside_report(quiet) {
        return ProgressBar::hidden();
    }
    objects(None)
}

/// A count of the objects read and judged, with what is being read as its
/// message; `cluster` names the cluster a fleet run's bar is of.
fn objects(cluster: Option<&str>) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let template = match cluster {
        Some(_) => "{spinner} {prefix}: {pos} objects read and judged, reading {msg}",
        None => "{spinner} {pos} objects read and judged, reading {msg}",
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    if let Some(name) = cluster {
        bar.set_prefix(name.to_owned());
    }
    bar
}

/// One bar per cluster of a fleet run, drawn together.
pub(super) struct Fleet {
    bars: Option<MultiProgress>,
}

impl Fleet {
    pub(super) fn new(quiet: bool) -> Self {
        Self {
            bars: (!quiet).then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr())),
        }
    }

    /// The bar of cluster `name`.
    pub(super) fn cluster(&self, name: &str) -> ProgressBar {
        match &self.bars {
            Some(bars) => bars.add(objects(Some(name))),
            None => ProgressBar::hidden(),
        }
    }

    /// Runs `write` (the report of a cluster read) with the bars cleared
    /// from the terminal, drawn again after.
    pub(super) fn suspend<R>(&self, write: impl FnOnce() -> R) -> R {
        match &self.bars {
            Some(bars) => bars.suspend(write),
            None => write(),
        }
    }
}

/// A count of the objects `check` has judged, with the file being read as
/// its message.
pub(super) fn objects_judged(quiet: bool) -> ProgressBar {
    if beside_report(quiet) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {pos} objects judged, reading {msg}") {
        bar.set_style(style);
    }
    bar
}
