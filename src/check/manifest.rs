//! Where manifests come from: the files, directories and standard input
//! `-f` names (`sources`), each opened when its turn comes.

use std::collections::HashSet;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{CheckError, ErrorKind};
use crate::report;

/// Where a manifest comes from.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The path as given or found, or `-` for standard input.
    pub name: String,
    origin: Place,
}

#[derive(Debug, Clone)]
enum Place {
    Stdin,
    /// `found`: met while walking a directory rather than named.
    File {
        path: PathBuf,
        found: bool,
    },
    Text(String),
    /// Standard input copied to an unnamed temporary file, to be read again.
    Spilled(Arc<std::fs::File>),
}

/// One manifest, opened.
pub(super) struct Opened {
    pub(super) name: String,
    pub(super) reader: Box<dyn Read>,
    /// Found in a directory: a file that holds no Kubernetes object (a
    /// `values.yaml`, a workflow) or a Helm template is skipped, not an
    /// error.
    pub(super) found: bool,
}

impl Manifest {
    /// A manifest given as text, e.g. by a test or a library user.
    pub fn text(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            origin: Place::Text(text.into()),
        }
    }

    /// The same manifest, readable again, for a run that reads its sources
    /// twice (`--registry`): standard input can be read once, so it is
    /// copied to a temporary file (not to memory: it may be a cluster's
    /// dump).
    pub fn buffered(self) -> Result<Self, CheckError> {
        let Place::Stdin = self.origin else {
            return Ok(self);
        };
        let stdin = |kind| CheckError {
            file: "-".into(),
            line: None,
            kind,
        };
        let mut file = crate::output::temporary().map_err(|e| stdin(ErrorKind::KeepStdin(e)))?;
        std::io::copy(&mut std::io::stdin().lock(), &mut file).map_err(|e| stdin(ErrorKind::ReadStdin(e)))?;
        Ok(Self {
            name: self.name,
            origin: Place::Spilled(Arc::new(file)),
        })
    }

    /// Opens it; standard input can be read once.
    pub(super) fn open(&self) -> Result<Opened, CheckError> {
        let failed = |kind| CheckError {
            file: self.name.clone(),
            line: None,
            kind,
        };
        let (reader, found): (Box<dyn Read>, bool) = match &self.origin {
            Place::Stdin => (Box::new(std::io::stdin()), false),
            Place::File { path, found } => (
                Box::new(std::fs::File::open(path).map_err(|e| failed(ErrorKind::Open(e)))?),
                *found,
            ),
            Place::Text(text) => (Box::new(std::io::Cursor::new(text.clone().into_bytes())), false),
            Place::Spilled(file) => {
                // A clone shares the file's offset: each pass starts over.
                let file = file
                    .try_clone()
                    .and_then(|mut f| f.rewind().map(|()| f))
                    .map_err(|e| failed(ErrorKind::RereadStdin(e)))?;
                (Box::new(file), false)
            }
        };
        Ok(Opened {
            name: self.name.clone(),
            reader,
            found,
        })
    }
}

/// What the `-f` arguments name: the manifests to read, the arguments
/// that cannot be used, and what was left out on the way (charts met
/// while walking a tree).
#[derive(Debug, Default)]
pub struct Sources {
    pub manifests: Vec<Manifest>,
    pub problems: Vec<String>,
    pub skipped: Vec<report::Skipped>,
}

/// The manifests `-f` arguments name: files, `-` (stdin), or directories,
/// walked recursively (like `kubectl apply -R -f dir`) for their `.yaml`,
/// `.yml` and `.json` files in sorted order, hidden files and directories
/// left out. A Helm chart is not manifests until rendered: named, it is a
/// problem that says what to run; met in a tree, it is skipped whole.
pub fn sources(args: &[String]) -> Sources {
    let mut found = Sources::default();
    let mut stdin = false;
    for arg in args {
        if arg == "-" {
            if !std::mem::replace(&mut stdin, true) {
                found.manifests.push(Manifest {
                    name: "-".into(),
                    origin: Place::Stdin,
                });
            }
            continue;
        }
        let path = Path::new(arg);
        if is_chart(path) {
            found.problems.push(format!("{arg}: {}", chart_advice(arg)));
        } else if path.is_dir() {
            let mut seen = HashSet::new();
            walk(path, &mut seen, &mut found);
        } else {
            found.manifests.push(Manifest {
                name: arg.clone(),
                origin: Place::File {
                    path: path.to_owned(),
                    found: false,
                },
            });
        }
    }
    found
}

// === impl Sources ===

impl From<Vec<Manifest>> for Sources {
    fn from(manifests: Vec<Manifest>) -> Self {
        Self {
            manifests,
            ..Self::default()
        }
    }
}

impl Sources {
    /// The same sources, readable twice ([`Manifest::buffered`]).
    pub fn buffered(self) -> Result<Self, CheckError> {
        let manifests = self
            .manifests
            .into_iter()
            .map(Manifest::buffered)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { manifests, ..self })
    }
}

/// A Helm chart's directory: the one that holds its `Chart.yaml`.
fn is_chart(dir: &Path) -> bool {
    dir.is_dir() && dir.join("Chart.yaml").is_file()
}

fn chart_advice(chart: &str) -> String {
    format!(
        "a Helm chart (it holds Chart.yaml), whose templates are not manifests until rendered: \
         render it and check the result, e.g. helm template RELEASE {chart} | digest-gate check --allowlist ... -f -"
    )
}

/// Adds the manifests under `dir`. Symbolic links are followed, each
/// directory once, so a link back up the tree ends the walk there.
fn walk(dir: &Path, seen: &mut HashSet<PathBuf>, found: &mut Sources) {
    let shown = dir.display();
    match dir.canonicalize() {
        Ok(real) => {
            if !seen.insert(real) {
                return;
            }
        }
        Err(e) => {
            return found
                .problems
                .push(format!("{shown}: cannot read directory: {e}"));
        }
    }
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries.filter_map(Result::ok).map(|e| e.path()).collect(),
        Err(e) => {
            return found
                .problems
                .push(format!("{shown}: cannot list directory: {e}"));
        }
    };
    entries.sort();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        if is_chart(&path) {
            let shown = path.display().to_string();
            found.skipped.push(report::Skipped {
                reason: chart_advice(&shown),
                source: shown,
            });
        } else if path.is_dir() {
            walk(&path, seen, found);
        } else if path.is_file()
            && path
                .extension()
                .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
        {
            found.manifests.push(Manifest {
                name: path.display().to_string(),
                origin: Place::File { path, found: true },
            });
        }
    }
}
