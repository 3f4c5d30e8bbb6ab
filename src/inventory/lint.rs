//! `allowlist lint`: what loaded sources promote, and what would surprise
//! the people relying on them (skipped entries, several
//! digests with no way to pick a rewrite target).

use std::collections::BTreeSet;

use crate::allowlist::{Allowlist, Loaded, Repository};
use crate::policy::newest_release;
use crate::reference::short_digest;

/// What `allowlist lint` says of loaded sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lint {
    /// What each source promotes, the totals, then one `warning:` line each.
    pub report: String,
    /// The warning lines, as the report has them (what `--strict` fails on).
    pub warnings: Vec<String>,
}

/// Lints loaded sources.
pub fn lint(loaded: &Loaded) -> Lint {
    let list = &loaded.allowlist;
    let mut report = promoted_by_source(loaded);
    report.push_str(&catalogs(loaded));
    let mut warnings: Vec<String> = loaded.warnings.iter().map(|w| format!("warning: {w}")).collect();
    let mut notes = Vec::new();
    // Repositories whose rewrite target a catalog's graph picks, by
    // package: one note each, not one per repository (a release lists ~100).
    let mut by_graph: std::collections::BTreeMap<String, (usize, String)> = Default::default();
    for repo in list.repositories() {
        match several_digests(list, &repo) {
            Some(Said::Note(line)) => notes.push(line),
            Some(Said::Warning(line)) => warnings.push(line),
            Some(Said::Graph { package, release }) => {
                by_graph.entry(package).or_insert((0, release)).0 += 1;
            }
            None => {}
        }
        notes.extend(platform_images(&repo));
    }
    for (package, (n, release)) in by_graph {
        notes.push(format!(
            "note: {n} repositories are promoted with different digests by several bundles of {package}: rewrites go to the digest of the bundle nearest its channel's head that promotes one (e.g. {release})"
        ));
    }
    report.push_str(&format!(
        "total: {} repositories, {} promoted digests, {} mirror rules, {} exemptions\n",
        list.repository_count(),
        list.digest_count(),
        list.mirror_rules().len(),
        list.exemptions().len()
    ));
    for line in notes.iter().chain(&warnings) {
        report.push_str(line);
        report.push('\n');
    }
    Lint { report, warnings }
}

/// Each source, and what each object in it promotes.
fn promoted_by_source(loaded: &Loaded) -> String {
    let list = &loaded.allowlist;
    let digests = digests_by_provenance(list);
    let mut report = String::new();
    for s in &loaded.sources {
        report.push_str(&format!(
            "{}: {}, {} promoted image(s)\n",
            s.file, s.format, s.entries
        ));
        for (id, p) in list.provenances().iter().enumerate() {
            if *p.source != *s.file {
                continue;
            }
            let release = p
                .version
                .as_ref()
                .map(|v| format!(" (release {v})"))
                .unwrap_or_default();
            report.push_str(&format!(
                "  {}{release}: {} digest(s)\n",
                p.origin,
                digests.get(id).copied().unwrap_or(0)
            ));
        }
    }
    report
}

/// A note per promoted index whose platform images are listed: each is
/// promoted for its platform.
fn platform_images(repo: &Repository<'_>) -> Vec<String> {
    repo.digests()
        .filter_map(|p| {
            let images: Vec<String> = p
                .platforms()
                .map(|(platform, digest)| format!("{platform} {}", short_digest(digest)))
                .collect();
            (!images.is_empty()).then(|| {
                format!(
                    "note: {}@{} is an index; its images are promoted for their platforms: {}",
                    repo.name(),
                    short_digest(p.digest()),
                    images.join(", ")
                )
            })
        })
        .collect()
}

/// A line of the lint's end.
enum Said {
    Note(String),
    Warning(String),
    /// The catalog's upgrade graph picks the target, as for the others of
    /// the package: said once for all.
    Graph {
        package: String,
        release: String,
    },
}

/// What each catalog package is: its channels, their heads, and the
/// channel that orders its releases.
fn catalogs(loaded: &Loaded) -> String {
    let mut out = String::new();
    for p in &loaded.catalogs {
        let order = p.ordered_by.as_deref().map_or_else(
            || "no channel orders its releases: by version".to_owned(),
            |c| format!("releases ordered by channel {c}"),
        );
        out.push_str(&format!(
            "catalog package {}: {} bundle(s) read, {} promoted; {order}\n",
            p.package, p.bundles, p.promoted_bundles
        ));
        for c in &p.channels {
            let heads = match c.heads.as_slice() {
                [] => "no head (every entry is replaced or skipped)".to_owned(),
                [one] => format!("head {one}"),
                many => format!("{} heads, which opm refuses: {}", many.len(), many.join(", ")),
            };
            let ranges = if c.skip_ranges > 0 {
                format!(", {} skipRange(s) (read, not used to order)", c.skip_ranges)
            } else {
                String::new()
            };
            out.push_str(&format!(
                "  channel {}: {} {}, {heads}{ranges}\n",
                c.name,
                c.entries,
                crate::text::plural(c.entries, "entry", "entries")
            ));
        }
    }
    out
}

/// What a repository promoted with several digests needs said: how its
/// rewrite target is picked, or that none can be.
fn several_digests(list: &Allowlist, repo: &Repository<'_>) -> Option<Said> {
    if repo.digest_count() < 2 {
        return None;
    }
    let sources: BTreeSet<u32> = repo
        .digests()
        .flat_map(|p| p.promotions().map(|q| q.provenance))
        .collect();
    if sources.len() < 2 {
        return repo.rewrite_to().is_none().then(|| {
            Said::Warning(format!(
                "warning: {} has {} promoted digests and no rewriteTo: unpromoted digests and untagged references to it are denied, not rewritten",
                repo.name(),
                repo.digest_count()
            ))
        });
    }
    let by: Vec<String> = repo
        .digests()
        .map(|p| {
            let mut origins: Vec<&str> = Vec::new();
            for q in p.promotions().filter_map(|q| list.provenance(q.provenance)) {
                if !origins.contains(&q.origin.as_str()) {
                    origins.push(&q.origin);
                }
            }
            format!("{} by {}", short_digest(p.digest()), origins.join(" and "))
        })
        .collect();
    let line = format!(
        "{} is promoted with different digests by {} sources ({})",
        repo.name(),
        sources.len(),
        by.join("; ")
    );
    Some(
        match (repo.rewrite_to(), newest_release(&list.candidates(repo.name()))) {
            (Some(t), _) => Said::Note(format!(
                "note: {line}: rewriteTo {} decides",
                short_digest(t.digest())
            )),
            (None, Some((_, release))) if release.rank.is_some() => Said::Graph {
                package: release.package.clone().unwrap_or_default(),
                release: release.name.clone().unwrap_or_default(),
            },
            (None, Some((_, release))) => Said::Note(format!(
                "note: {line}: rewrites go to the newest release's, {}",
                release.release().unwrap_or_default()
            )),
            (None, None) => Said::Warning(format!(
                "warning: {line}: no release order or rewriteTo picks one, so unpromoted digests and untagged references to it are denied, not rewritten"
            )),
        },
    )
}

/// How many (repository, digest) pairs each source object promotes.
fn digests_by_provenance(list: &Allowlist) -> Vec<usize> {
    let mut counts = vec![0; list.provenances().len()];
    for p in list.repositories().flat_map(|r| r.digests()) {
        let mut ids: Vec<u32> = p.promotions().map(|q| q.provenance).collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            if let Some(c) = counts.get_mut(id as usize) {
                *c += 1;
            }
        }
    }
    counts
}
