//! Where promoted digests come from: the source object (a CSV, a catalog
//! bundle, a file) and its line, and how releases of one operator are
//! ordered (`replaces`).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Where an entry came from, for conflict messages and provenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: Arc<str>,
    pub line: usize,
    /// The source object it was read from ([`Builder::provenance`]).
    pub provenance: u32,
}

/// The object promoted digests were read from. Each is kept once, however
/// many digests it promotes: digests refer to it by index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// The file read (for a mounted ConfigMap, its key).
    pub source: Arc<str>,
    /// What promoted them: `ClusterServiceVersion rhods-operator.1.21.0`,
    /// `ImageSetConfiguration name`, `Allowlist name`, `plain list`.
    pub origin: String,
    /// The operator release (a CSV's `spec.version`), when known.
    pub version: Option<semver::Version>,
    /// The operator a CSV is a release of: its name before the version, the
    /// same in every release of one package. CSVs linked by `spec.replaces`
    /// share one ([`Builder::build`]), whatever their names.
    pub package: Option<String>,
    /// The CSV's `metadata.name`, which another CSV's `replaces` names.
    pub name: Option<String>,
    /// The CSV this one replaces (`spec.replaces`).
    pub replaces: Option<String>,
    /// A catalog bundle's place in its package's ordering channel: greater
    /// is nearer the channel's head along `replaces`/`skips`. It orders
    /// releases before their versions do ([`Provenance::recency`]).
    pub rank: Option<u32>,
}

impl Provenance {
    /// A source object that is not an operator release.
    pub fn of(source: Arc<str>, origin: String) -> Self {
        Self {
            source,
            origin,
            version: None,
            package: None,
            name: None,
            replaces: None,
            rank: None,
        }
    }

    /// How recent a release is, to compare releases of one package: a
    /// catalog's upgrade graph first (a bundle on the ordering channel is
    /// more recent than one off it, and nearer the head more recent still),
    /// then the version. What is not a release compares least.
    pub fn recency(&self) -> (Option<u32>, Option<&semver::Version>) {
        (self.rank, self.version.as_ref())
    }

    /// Whether it orders among releases: a package, and a version or a
    /// place in a catalog's graph.
    pub fn is_release(&self) -> bool {
        self.package.is_some() && (self.version.is_some() || self.rank.is_some())
    }

    /// Which release of its package this one is when it is the newest by
    /// [`Provenance::recency`], as messages say it: a catalog's graph
    /// ordered it, or its version did.
    pub fn newest_as(&self) -> &'static str {
        if self.rank.is_some() {
            "the release nearest its channel's head"
        } else {
            "the newest release"
        }
    }

    /// `rhods-operator 1.21.0`: the release, as short messages name it.
    pub fn release(&self) -> Option<String> {
        Some(format!("{} {}", self.package.as_deref()?, self.version.as_ref()?))
    }
}

/// One source promoting one digest: which object, and the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Promotion {
    pub provenance: u32,
    pub line: u32,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// Gives CSVs linked by `spec.replaces` one package, so the newest-release
/// rule orders an upgrade whose CSV names do not end in their version (or
/// that renamed the operator). The package is the newest linked release's,
/// else the name it would have had; a release without a version stays out of
/// any order.
pub(super) fn link_replaces(provenances: &mut [Arc<Provenance>]) {
    if provenances.iter().all(|p| p.replaces.is_none()) {
        return;
    }
    // Union-find over provenance indexes; roots are the smallest index.
    let mut parent: Vec<usize> = (0..provenances.len()).collect();
    pub(super) fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let by_name: HashMap<&str, usize> = provenances
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((p.name.as_deref()?, i)))
        .collect();
    for (i, p) in provenances.iter().enumerate() {
        let Some(&j) = p.replaces.as_deref().and_then(|r| by_name.get(r)) else {
            continue;
        };
        let (a, b) = (root(&mut parent, i), root(&mut parent, j));
        parent[a.max(b)] = a.min(b);
    }
    let groups: Vec<usize> = (0..provenances.len()).map(|i| root(&mut parent, i)).collect();
    let mut sizes: HashMap<usize, usize> = HashMap::new();
    for &g in &groups {
        *sizes.entry(g).or_default() += 1;
    }
    // The newest release's package per linked group.
    let mut packages: HashMap<usize, (Option<&semver::Version>, String)> = HashMap::new();
    for (p, &group) in provenances.iter().zip(&groups) {
        let Some(package) = p.package.as_ref().or(p.name.as_ref()) else {
            continue;
        };
        if sizes[&group] < 2 {
            continue;
        }
        let entry = packages.entry(group).or_insert((None, String::new()));
        if entry.1.is_empty() || p.version.as_ref() > entry.0 {
            *entry = (p.version.as_ref(), package.clone());
        }
    }
    let packages: HashMap<usize, String> = packages.into_iter().map(|(g, (_, name))| (g, name)).collect();
    for (p, group) in provenances.iter_mut().zip(groups) {
        if let Some(package) = packages.get(&group)
            && p.package.as_ref() != Some(package)
        {
            Arc::make_mut(p).package = Some(package.clone());
        }
    }
}
