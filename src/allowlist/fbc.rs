//! The model of an OLM file-based catalog, as `catalog` reads it: the
//! blobs kept of each package, the options that choose them, and the
//! upgrade graph's heads and distances. A leaf: the loader holds a
//! [`Catalog`] while `catalog` fills it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde::Deserialize;

/// Which packages of a catalog to promote, and which channel orders their
/// releases (`--catalog-package`, `--catalog-channel`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CatalogOptions {
    /// Empty: every package.
    pub packages: Vec<String>,
    /// None: each package's `defaultChannel`.
    pub channel: Option<String>,
}

impl CatalogOptions {
    pub(super) fn keeps(&self, package: &str) -> bool {
        self.packages.is_empty() || self.packages.iter().any(|p| p == package)
    }
}

/// What a catalog says of one kept package, for `lint`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageSummary {
    pub package: String,
    /// The channel that ordered its releases, if it has one.
    pub ordered_by: Option<String>,
    pub channels: Vec<ChannelSummary>,
    /// Bundles read, and those promoted (an entry of some channel).
    pub bundles: usize,
    pub promoted_bundles: usize,
}

/// One channel of a package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSummary {
    pub name: String,
    /// The entries no other entry replaces or skips (opm allows one).
    pub heads: Vec<String>,
    pub entries: usize,
    /// Entries with a `skipRange` (read, not used to order).
    pub skip_ranges: usize,
}

/// The blobs of the kept packages read so far, across every source: a
/// catalog may be split over files (one per package or per schema).
#[derive(Default)]
pub(super) struct Catalog {
    pub(super) default_channels: BTreeMap<String, Option<String>>,
    pub(super) channels: Vec<ChannelBlob>,
    pub(super) bundles: Vec<BundleBlob>,
    /// Every package a blob named, kept or not: a `--catalog-package` that
    /// names none of them is a mistake worth saying.
    pub(super) seen: std::collections::BTreeSet<String>,
}

pub(super) struct ChannelBlob {
    pub(super) package: String,
    pub(super) name: String,
    pub(super) entries: Vec<Entry>,
}

pub(super) struct BundleBlob {
    pub(super) package: String,
    pub(super) name: String,
    pub(super) version: Option<semver::Version>,
    /// Its related images but its own, each once.
    pub(super) images: Vec<String>,
    pub(super) file: Arc<str>,
    pub(super) line: usize,
}

/// A channel entry.
#[derive(Deserialize)]
pub(super) struct Entry {
    pub(super) name: String,
    pub(super) replaces: Option<String>,
    pub(super) skips: Option<Vec<String>>,
    #[serde(rename = "skipRange")]
    pub(super) skip_range: Option<String>,
}

/// The entries no other entry of the channel replaces or skips.
pub(super) fn heads(channel: &ChannelBlob) -> Vec<&str> {
    let replaced: HashSet<&str> = channel
        .entries
        .iter()
        .flat_map(|e| e.replaces.iter().chain(e.skips.iter().flatten()))
        .map(String::as_str)
        .collect();
    channel
        .entries
        .iter()
        .map(|e| e.name.as_str())
        .filter(|n| !replaced.contains(n))
        .collect()
}

/// How far each entry is from the channel's head, along `replaces` and
/// `skips` (breadth first: the fewest upgrade steps).
pub(super) fn distances(channel: &ChannelBlob) -> HashMap<&str, u32> {
    let by_name: HashMap<&str, &Entry> = channel.entries.iter().map(|e| (e.name.as_str(), e)).collect();
    let mut out: HashMap<&str, u32> = HashMap::new();
    let mut queue: VecDeque<(&str, u32)> = heads(channel).into_iter().map(|h| (h, 0)).collect();
    while let Some((name, d)) = queue.pop_front() {
        if out.contains_key(name) {
            continue;
        }
        out.insert(name, d);
        if let Some(e) = by_name.get(name) {
            for next in e.replaces.iter().chain(e.skips.iter().flatten()) {
                if !out.contains_key(next.as_str()) {
                    queue.push_back((next, d + 1));
                }
            }
        }
    }
    out
}

pub(super) fn summarize(channel: &ChannelBlob) -> ChannelSummary {
    ChannelSummary {
        name: channel.name.clone(),
        heads: heads(channel).into_iter().map(str::to_owned).collect(),
        entries: channel.entries.len(),
        skip_ranges: channel.entries.iter().filter(|e| e.skip_range.is_some()).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, replaces: Option<&str>, skips: &[&str]) -> Entry {
        Entry {
            name: name.to_owned(),
            replaces: replaces.map(str::to_owned),
            skips: (!skips.is_empty()).then(|| skips.iter().map(|s| (*s).to_owned()).collect()),
            skip_range: None,
        }
    }

    #[test]
    fn skips_are_edges_of_the_graph_and_a_skip_is_one_step() {
        // v4 replaces v3 and skips v2; v3 replaces v2, which replaces v1.
        // v5 is in another head's line: two heads, as opm would refuse.
        let channel = ChannelBlob {
            package: "p".into(),
            name: "c".into(),
            entries: vec![
                entry("v1", None, &[]),
                entry("v2", Some("v1"), &[]),
                entry("v3", Some("v2"), &[]),
                entry("v4", Some("v3"), &["v2"]),
                entry("v5", None, &[]),
            ],
        };
        assert_eq!(heads(&channel), ["v4", "v5"]);
        let d = distances(&channel);
        let at = |n: &str| d.get(n).copied();
        assert_eq!(
            (at("v4"), at("v5"), at("v3"), at("v2"), at("v1")),
            (Some(0), Some(0), Some(1), Some(1), Some(2))
        );
        // A cycle ends: nothing is its head, nothing is ordered.
        let cycle = ChannelBlob {
            package: "p".into(),
            name: "c".into(),
            entries: vec![entry("a", Some("b"), &[]), entry("b", Some("a"), &[])],
        };
        assert!(heads(&cycle).is_empty() && distances(&cycle).is_empty());
    }
}
