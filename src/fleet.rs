//! Several clusters told as one answer. The incident report was a fleet
//! table: two upgraded clusters pulled a runtime digest never promoted, a
//! fresh one the promoted digest. `audit` over several contexts prints that
//! table ([`Table`]); the background audit exports the same facts, bounded,
//! as `digest_gate_audit_images` ([`Running`]), for a fleet's Prometheus to
//! sum over its cluster label.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use crate::policy::{Reason, Verdict};
use crate::reference;
use crate::report::{ImageReport, ObjectReport, Summary};

vocabulary! {
    "kebab-case";
    /// How much of one cluster a fleet run read.
    pub enum Status {
        /// Everything it should, without an error.
        Ok,
        /// Read, but not wholly: a kind could not be listed, or the server
        /// was lost midway. What was read is reported.
        Partial,
        /// Not reached, or its credentials refused.
        Unreachable,
        /// Not read within `--cluster-deadline`: nothing of it is reported.
        Deadline,
        /// Not finished when the run was interrupted (SIGINT, SIGTERM):
        /// nothing of it is reported.
        Interrupted,
        /// Its context cannot be used (the kubeconfig).
        Config,
        /// Reached, but the read could not go on: its APIs could not be
        /// discovered (e.g. forbidden), or the allowlist read from it
        /// (`--allowlist-csv`) cannot be used.
        Failed,
    }
}

impl Status {
    /// Whether what the cluster runs is (at least partly) known.
    pub fn was_read(self) -> bool {
        matches!(self, Self::Ok | Self::Partial)
    }
}

/// One cluster of a fleet run: the JSON report's `clusters[]`.
#[derive(Debug, Clone, Serialize)]
pub struct Cluster {
    /// The context it was read through, and what the report names it by.
    pub context: String,
    /// Further contexts naming the same server: read once, as `context`.
    #[serde(rename = "alsoContexts", skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
    pub server: String,
    pub status: Status,
    /// Why it was not wholly read.
    pub error: Option<String>,
    pub summary: Summary,
}

/// What an image reference runs, as the table tells it apart.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Version {
    Digest(String),
    Tag(String),
    /// Neither written: the runtime pulls `latest`.
    Bare,
}

impl Version {
    fn suffix(&self, short: bool) -> String {
        match self {
            Self::Digest(d) if short && d.len() > 19 => format!("@{}…", reference::short_digest(d)),
            Self::Digest(d) => format!("@{d}"),
            Self::Tag(t) => format!(":{t}"),
            Self::Bare => String::new(),
        }
    }
}

/// The repository and what of it an image reference names; `None` for a
/// reference that cannot be read.
fn split(image: &str) -> Option<(String, Version)> {
    let r = reference::parse(image).ok()?;
    let repository = r
        .canonical_repository(None)
        .map_or_else(|| r.name().to_owned(), std::borrow::Cow::into_owned);
    let version = match (r.digest(), r.tag()) {
        (Some(d), _) => Version::Digest(d.to_owned()),
        (None, Some(t)) => Version::Tag(t.to_owned()),
        (None, None) => Version::Bare,
    };
    Some((repository, version))
}

/// A node's `imageID`, as a reference: runtimes write it as
/// `repository@digest`, Docker with a `docker-pullable://` scheme. A bare
/// image ID (`sha256:…`, the config's digest) names no repository and is
/// not comparable to a manifest digest: `None`.
pub fn node_reference(image_id: &str) -> Option<&str> {
    let id = image_id
        .strip_prefix("docker-pullable://")
        .or_else(|| image_id.strip_prefix("docker://"))
        .unwrap_or(image_id);
    let (repository, digest) = id.split_once('@')?;
    (!repository.is_empty() && reference::validate_digest_str(digest).is_ok()).then_some(id)
}

/// Where a row's reference was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    /// In an object's spec, judged with this reason.
    Spec(Reason),
    /// In a Pod's `status.containerStatuses[].imageID`: what the node
    /// resolved a reference to, where that differs from the spec.
    Node,
}

impl Seen {
    /// The reason the reference was judged with; `None` for a node's.
    fn reason(self) -> Option<Reason> {
        match self {
            Self::Spec(reason) => Some(reason),
            Self::Node => None,
        }
    }
}

/// The images of a fleet by repository: each digest (or tag), where it was
/// seen, and the clusters (by index) that run it.
#[derive(Debug, Default)]
pub struct Table {
    clusters: Vec<String>,
    repositories: BTreeMap<String, BTreeMap<(Version, Seen), BTreeSet<usize>>>,
}

impl Table {
    /// A table of the clusters named, in the order given.
    pub fn new(clusters: Vec<String>) -> Self {
        Self {
            clusters,
            repositories: BTreeMap::new(),
        }
    }

    /// Adds the images of `object`, read from the `at`th cluster.
    pub fn add(&mut self, at: usize, object: &ObjectReport) {
        for image in &object.images {
            if let Some((repository, version)) = image.image.as_str().and_then(split) {
                self.row(repository, version, Seen::Spec(image.code)).insert(at);
            }
            if let Some((repository, version)) = image.resolved.as_deref().and_then(split) {
                self.row(repository, version, Seen::Node).insert(at);
            }
        }
    }

    /// Adds what `one` (a table of one cluster) holds as the `at`th
    /// cluster's: a cluster's table is kept apart while it is read, and
    /// joins the fleet's only if its report does.
    pub fn merge(&mut self, at: usize, one: Table) {
        for (repository, rows) in one.repositories {
            for (version, seen) in rows.into_keys() {
                self.row(repository.clone(), version, seen).insert(at);
            }
        }
    }

    fn row(&mut self, repository: String, version: Version, seen: Seen) -> &mut BTreeSet<usize> {
        self.repositories
            .entry(repository)
            .or_default()
            .entry((version, seen))
            .or_default()
    }

    fn names(&self, at: &BTreeSet<usize>) -> String {
        let names: Vec<&str> = at.iter().map(|&i| self.clusters[i].as_str()).collect();
        names.join(", ")
    }

    /// The incident's question, one line per reference some cluster runs
    /// that needs a change: on how many of the `read` clusters and which,
    /// and what the other clusters run of the same repository.
    pub fn incident_lines(&self, read: usize, out: &mut String) {
        for (repository, rows) in &self.repositories {
            for ((version, seen), row) in rows {
                if !seen.reason().is_some_and(Reason::is_finding) {
                    continue;
                }
                let n = row.len();
                let _ = write!(
                    out,
                    "{n} of {read} cluster{} {} {repository}{} ({}): {}",
                    if read == 1 { "" } else { "s" },
                    runs(n),
                    version.suffix(true),
                    words(seen.reason()),
                    self.names(row)
                );
                for ((other, seen), o) in rows.iter().filter(|(_, o)| !std::ptr::eq(*o, row)) {
                    let what = match (seen, seen.reason()) {
                        (Seen::Node, _) => format!("{} (its nodes resolved a tag to it)", other.suffix(true)),
                        (_, Some(Reason::Promoted | Reason::PromotedPlatform)) => {
                            format!("the promoted {}", other.suffix(true))
                        }
                        (_, reason) => format!("{} ({})", other.suffix(true), words(reason)),
                    };
                    let _ = write!(out, "; {} {} {what}", self.names(o), runs(o.len()));
                }
                out.push('\n');
            }
        }
    }

    /// The per-repository table: every repository some cluster runs a
    /// reference of that needs a change, more than one reference of, or
    /// one its nodes resolved; the others are counted (JSON lists them).
    pub fn text(&self, read: usize, out: &mut String) {
        let shown: Vec<_> = self
            .repositories
            .iter()
            .filter(|(_, rows)| {
                rows.len() > 1
                    || rows
                        .keys()
                        .any(|(_, seen)| seen.reason().is_none_or(Reason::is_finding))
            })
            .collect();
        if self.repositories.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "images by repository, over {read} cluster{} read:",
            if read == 1 { "" } else { "s" }
        );
        for (repository, rows) in &shown {
            let _ = writeln!(out, "  {repository}");
            let width = rows
                .keys()
                .map(|(_, seen)| words(seen.reason()).len())
                .max()
                .unwrap_or(0);
            let wide = rows
                .keys()
                .map(|(v, _)| v.suffix(false).chars().count())
                .max()
                .unwrap_or(0);
            for ((version, seen), row) in rows.iter() {
                let _ = writeln!(
                    out,
                    "    {:<width$}  {:<wide$}  {}",
                    words(seen.reason()),
                    version.suffix(false),
                    self.names(row)
                );
            }
        }
        let rest = self.repositories.len() - shown.len();
        if rest > 0 {
            let _ = writeln!(
                out,
                "  and {rest} more repositor{} whose one reference is allowed wherever it runs (listed in --output json)",
                if rest == 1 { "y" } else { "ies" }
            );
        }
    }

    /// The JSON report's `images`: every repository, each reference with
    /// its reason (`null`: resolved by a node) and the clusters running it.
    pub fn json(&self) -> serde_json::Value {
        #[derive(Serialize)]
        struct Reference<'a> {
            digest: Option<&'a str>,
            tag: Option<&'a str>,
            seen: &'static str,
            code: Option<&'static str>,
            clusters: Vec<&'a str>,
        }
        let repositories: Vec<serde_json::Value> = self
            .repositories
            .iter()
            .map(|(repository, rows)| {
                let running: Vec<Reference> = rows
                    .iter()
                    .map(|((version, seen), row)| Reference {
                        digest: match version {
                            Version::Digest(d) => Some(d),
                            _ => None,
                        },
                        tag: match version {
                            Version::Tag(t) => Some(t),
                            _ => None,
                        },
                        seen: match seen {
                            Seen::Spec(_) => "spec",
                            Seen::Node => "node",
                        },
                        code: seen.reason().map(Reason::label),
                        clusters: row.iter().map(|&i| self.clusters[i].as_str()).collect(),
                    })
                    .collect();
                serde_json::json!({"repository": repository, "running": running})
            })
            .collect();
        serde_json::Value::Array(repositories)
    }
}

fn runs(n: usize) -> &'static str {
    if n == 1 { "runs" } else { "run" }
}

/// A reason as the table words it: short, for a column.
fn words(reason: Option<Reason>) -> &'static str {
    match reason {
        None => "resolved by the node",
        Some(Reason::Promoted) => "promoted",
        Some(Reason::PromotedPlatform) => "promoted (a platform of)",
        Some(Reason::DigestNotPromoted) => "never promoted",
        Some(Reason::TagOnly) => "tag only",
        Some(Reason::Unlisted) => "repository not listed",
        Some(Reason::UnlistedAllowed) => "not listed, allowed",
        Some(Reason::Exempt) => "exempt",
        Some(Reason::UnknownTag) => "tag not promoted",
        Some(Reason::PromotedUnpullable) => "promoted, will not pull",
        Some(other) => other.label(),
    }
}

// === the metric ===

/// The `repository` label of images whose repository the allowlist does
/// not list (or that are exempt, and may be any): one value, so the label
/// stays within the allowlist's repositories.
pub const UNLISTED: &str = "unlisted";
/// The `repository` label of references that cannot be read.
pub const UNREADABLE: &str = "unreadable";
/// The `digest` label of a tag-only reference.
pub const TAG_ONLY: &str = "tag_only";
/// The `digest` label of a repository's further digests, past
/// [`OTHERS_PER_REPOSITORY`].
pub const OTHER: &str = "other";
/// The `repository` and `digest` labels of what did not fit in the series
/// limit.
pub const OVERFLOW: &str = "overflow";
/// Digests of a repository kept as their own series besides the promoted
/// ones: the most run.
pub const OTHERS_PER_REPOSITORY: usize = 5;
/// Series of `digest_gate_audit_images` at most, the overflow's included.
pub const SERIES_LIMIT: usize = 500;

/// One series of `digest_gate_audit_images`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Series {
    pub repository: String,
    pub digest: String,
    pub verdict: Verdict,
    /// [`SEEN_SPEC`]: the reference a spec names; [`SEEN_NODE`]: the digest
    /// a node resolved a Pod's tag to (`imageID`), the same containers
    /// counted again by what they run.
    pub seen: &'static str,
}

/// `digest_gate_audit_images{seen}`: what the spec names.
pub const SEEN_SPEC: &str = "spec";
/// `digest_gate_audit_images{seen}`: what a node resolved a tag to.
pub const SEEN_NODE: &str = "node";

/// Pod containers of one audit counted by what they run.
#[derive(Debug, Clone, Default)]
pub struct Running {
    /// (series, whether the digest is promoted) → containers.
    counts: BTreeMap<Series, (usize, bool)>,
}

impl Running {
    /// Counts one image of a Pod.
    pub fn add(&mut self, image: &ImageReport) {
        // In audit mode, what rewrite mode would do.
        let verdict = image.would_be.unwrap_or(image.verdict.admission());
        let promoted = matches!(image.code, Reason::Promoted | Reason::PromotedPlatform);
        let listed = promoted
            || matches!(
                image.code,
                Reason::DigestNotPromoted
                    | Reason::TagOnly
                    | Reason::UnknownTag
                    | Reason::CannotRewrite
                    | Reason::PromotedUnpullable
            );
        let (repository, digest) = match image.image.as_str().and_then(split) {
            Some((repository, version)) if listed => match version {
                Version::Digest(d) => (repository, d),
                _ => (repository, TAG_ONLY.to_owned()),
            },
            Some(_) if !matches!(image.code, Reason::ShortName | Reason::NoTagOrDigest) => {
                (UNLISTED.to_owned(), UNLISTED.to_owned())
            }
            _ => (UNREADABLE.to_owned(), UNREADABLE.to_owned()),
        };
        let entry = self
            .counts
            .entry(Series {
                repository,
                digest,
                verdict,
                seen: SEEN_SPEC,
            })
            .or_insert((0, promoted));
        entry.0 += 1;
        // A tag's node-resolved digest: what the container really runs,
        // the incident's digest even when the spec says `:v1.21.0-15`.
        if let Some((repository, Version::Digest(digest))) = image.resolved.as_deref().and_then(split) {
            let series = Series {
                repository,
                digest,
                verdict,
                seen: SEEN_NODE,
            };
            self.counts.entry(series).or_insert((0, false)).0 += 1;
        }
    }

    /// The series to export: per repository its promoted digests and the
    /// [`OTHERS_PER_REPOSITORY`] others most run, the rest as [`OTHER`];
    /// then at most `limit` in all, what needs a change first, the rest
    /// summed per verdict under [`OVERFLOW`].
    pub fn series(&self, limit: usize) -> Vec<(Series, usize)> {
        let mut by_repository: BTreeMap<&str, Vec<(&Series, usize, bool)>> = BTreeMap::new();
        for (s, &(n, promoted)) in &self.counts {
            by_repository
                .entry(s.repository.as_str())
                .or_default()
                .push((s, n, promoted));
        }
        let mut kept: BTreeMap<Series, usize> = BTreeMap::new();
        for (repository, mut found) in by_repository {
            let fixed = |s: &Series| s.digest == TAG_ONLY || [UNLISTED, UNREADABLE].contains(&repository);
            // The most run first, then by name, so the cut is stable.
            found.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
            let mut others: Vec<&str> = Vec::new();
            for (s, n, promoted) in found {
                let own = promoted
                    || fixed(s)
                    || others.contains(&s.digest.as_str())
                    || others.len() < OTHERS_PER_REPOSITORY && {
                        others.push(&s.digest);
                        true
                    };
                let series = Series {
                    digest: if own { s.digest.clone() } else { OTHER.to_owned() },
                    ..s.clone()
                };
                *kept.entry(series).or_default() += n;
            }
        }
        let mut all: Vec<(Series, usize)> = kept.into_iter().collect();
        if all.len() <= limit {
            return all;
        }
        // What needs a change first, then the most run.
        all.sort_by(|a, b| {
            b.0.verdict
                .cmp(&a.0.verdict)
                .then_with(|| b.1.cmp(&a.1))
                .then_with(|| a.0.cmp(&b.0))
        });
        // Summed per verdict and per what was seen, so that the spec's
        // series still sum to the containers.
        let kinds: BTreeSet<(Verdict, &str)> = all.iter().map(|s| (s.0.verdict, s.0.seen)).collect();
        let room = limit.saturating_sub(kinds.len());
        let mut overflow: BTreeMap<(Verdict, &'static str), usize> = BTreeMap::new();
        for (s, n) in all.drain(room..) {
            *overflow.entry((s.verdict, s.seen)).or_default() += n;
        }
        all.extend(overflow.into_iter().map(|((verdict, seen), n)| {
            (
                Series {
                    repository: OVERFLOW.to_owned(),
                    digest: OVERFLOW.to_owned(),
                    verdict,
                    seen,
                },
                n,
            )
        }));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::ImageVerdict;
    use crate::testing::{BAD, GOOD, REPO, incident_allowlist};

    fn pod(image: &str) -> ObjectReport {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "models"},
            "spec": {"containers": [{"name": "ovms", "image": image}]}});
        let list = incident_allowlist();
        let j = crate::judge::judge(&pod, None, &crate::policy::Policy::default(), &list);
        ObjectReport::new("cluster:x".into(), &pod, &j, &list, |_| None)
    }

    #[test]
    fn the_incident_table_names_which_clusters_run_which_digest() {
        let mut table = Table::new(vec!["frkq".into(), "ukce".into(), "umne".into()]);
        table.add(0, &pod(&format!("{REPO}@{GOOD}")));
        table.add(1, &pod(&format!("{REPO}@{BAD}")));
        table.add(2, &pod(&format!("{REPO}@{BAD}")));
        let mut out = String::new();
        table.incident_lines(3, &mut out);
        let short = |d: &str| format!("@{}…", reference::short_digest(d));
        assert_eq!(
            out,
            format!(
                "2 of 3 clusters run {REPO}{} (never promoted): ukce, umne; frkq runs the promoted {}\n",
                short(BAD),
                short(GOOD)
            )
        );
        let mut text = String::new();
        table.text(3, &mut text);
        assert!(
            text.contains(&format!("never promoted  @{BAD}  ukce, umne\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("promoted        @{GOOD}  frkq\n")),
            "{text}"
        );
        let json = table.json();
        assert_eq!(json[0]["running"].as_array().unwrap().len(), 2);
        let never = json[0]["running"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["code"] == "digest_not_promoted")
            .unwrap();
        assert_eq!(never["clusters"], serde_json::json!(["ukce", "umne"]));
    }

    #[test]
    fn a_tag_resolved_by_the_node_is_a_row_of_its_own() {
        let mut table = Table::new(vec!["a".into()]);
        let mut report = pod(&format!("{REPO}:v1"));
        report.images[0].resolved = Some(format!("{REPO}@{BAD}"));
        table.add(0, &report);
        let mut out = String::new();
        table.incident_lines(1, &mut out);
        assert!(
            out.starts_with(&format!(
                "1 of 1 cluster runs {REPO}:v1 (tag not promoted): a; a runs @"
            )),
            "{out}"
        );
        assert!(out.contains("(its nodes resolved a tag to it)"), "{out}");
        let json = table.json();
        let node = json[0]["running"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["seen"] == "node");
        assert_eq!(node.unwrap()["digest"], BAD);
    }

    #[test]
    fn node_references_are_repository_digests() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            node_reference(&format!("docker-pullable://quay.io/x/y@{d}")),
            Some(format!("quay.io/x/y@{d}").as_str())
        );
        assert_eq!(
            node_reference(&format!("quay.io/x/y@{d}")),
            Some(format!("quay.io/x/y@{d}").as_str())
        );
        assert_eq!(node_reference(&d), None);
        assert_eq!(node_reference(&format!("docker://{d}")), None);
    }

    fn image(repository: &str, digest: &str, code: Reason) -> ImageReport {
        let mut i = pod(&format!("{REPO}@{GOOD}")).images.remove(0);
        i.image = serde_json::Value::String(format!("{repository}@{digest}"));
        i.code = code;
        i.verdict = if code.is_finding() {
            ImageVerdict::Deny
        } else {
            ImageVerdict::Allow
        };
        i
    }

    fn digest(n: usize) -> String {
        format!("sha256:{n:064x}")
    }

    #[test]
    fn a_repository_keeps_its_promoted_digests_and_five_others() {
        let mut running = Running::default();
        for n in 0..3 {
            running.add(&image(REPO, &digest(n), Reason::Promoted));
        }
        for n in 10..20 {
            // Digest 10 the most run, 11 next, …
            for _ in 0..(30 - n) {
                running.add(&image(REPO, &digest(n), Reason::DigestNotPromoted));
            }
        }
        running.add(&image("quay.io/elsewhere/x", &digest(1), Reason::Unlisted));
        let series = running.series(SERIES_LIMIT);
        let of = |d: &str| {
            series
                .iter()
                .filter(|s| s.0.digest == d)
                .map(|s| s.1)
                .sum::<usize>()
        };
        for n in 0..3 {
            assert_eq!(of(&digest(n)), 1);
        }
        for n in 10..15 {
            assert_eq!(of(&digest(n)), 30 - n, "{n}");
        }
        assert_eq!(of(&digest(15)), 0);
        assert_eq!(of(OTHER), (15..20).map(|n| 30 - n).sum::<usize>());
        assert_eq!(of(UNLISTED), 1);
        assert!(
            series
                .iter()
                .all(|s| s.0.repository == REPO || s.0.repository == UNLISTED)
        );
    }

    /// Issue 60: a Pod on `:v1.21.0-15` whose node resolved the tag to the
    /// never-promoted digest was only `tag_only`, so the panel could not
    /// show the incident where Pods use tags.
    #[test]
    fn a_tag_counts_the_digest_its_node_resolved_too() {
        let mut running = Running::default();
        let mut tagged = image(REPO, &digest(1), Reason::TagOnly);
        tagged.image = serde_json::Value::from(format!("{REPO}:v1.21.0-15"));
        tagged.resolved = Some(format!("{REPO}@{}", digest(9)));
        running.add(&tagged);
        let series = running.series(SERIES_LIMIT);
        let seen: Vec<(&str, &str)> = series.iter().map(|s| (s.0.digest.as_str(), s.0.seen)).collect();
        let node = digest(9);
        assert_eq!(seen, [(node.as_str(), SEEN_NODE), (TAG_ONLY, SEEN_SPEC)]);
        // The spec's series alone count the containers.
        let spec: usize = series.iter().filter(|s| s.0.seen == SEEN_SPEC).map(|s| s.1).sum();
        assert_eq!(spec, 1);
    }

    #[test]
    fn the_series_stay_within_the_limit_and_count_the_overflow() {
        let mut running = Running::default();
        let mut total = 0;
        // 2,000 repositories, each with one promoted digest and one never
        // promoted: 4,000 series before the bound.
        for r in 0..2000 {
            let repository = format!("quay.io/fleet/r{r}");
            running.add(&image(&repository, &digest(r), Reason::Promoted));
            running.add(&image(&repository, &digest(r + 5000), Reason::DigestNotPromoted));
            total += 2;
        }
        let series = running.series(SERIES_LIMIT);
        assert_eq!(series.len(), SERIES_LIMIT);
        assert_eq!(series.iter().map(|s| s.1).sum::<usize>(), total);
        let overflow: Vec<_> = series.iter().filter(|s| s.0.repository == OVERFLOW).collect();
        // One overflow series per verdict cut.
        assert_eq!(overflow.len(), 2, "{overflow:?}");
        // What needs a change is kept first.
        assert!(
            series
                .iter()
                .filter(|s| s.0.repository != OVERFLOW)
                .all(|s| s.0.verdict == Verdict::Deny)
        );
    }
}
