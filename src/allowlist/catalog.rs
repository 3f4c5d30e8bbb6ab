//! OLM file-based catalogs (FBC): `olm.package`, `olm.channel` and
//! `olm.bundle` blobs, as `opm render` writes them (JSON objects one after
//! another, or YAML documents), as catalog images carry them under
//! `/configs` and catalogd serves them.
//!
//! What a catalog promotes: the `relatedImages` of every bundle of a kept
//! package that is an entry of some channel, except the bundle image itself
//! (opm lists it among them; no workload runs it). Each bundle is a release
//! whose place in the package's ordering channel (`--catalog-channel`, else
//! the package's `defaultChannel`) orders it: the head of a channel is the
//! entry no other entry replaces or skips (opm's rule), and a bundle nearer
//! it along `replaces`/`skips` is more recent, whatever the versions say.
//! `skipRange` says what a bundle may be installed over, not an order: it is
//! counted for `lint`, never used.
//!
//! A catalog is hundreds of MiB: JSON is read one blob at a time (a blob's
//! text is held while it is read, nothing after), and only the fields used
//! are kept of the packages kept.

use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead};
use std::ops::ControlFlow;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use super::entries::{Ctx, Entries, Format, SourceSummary};
use super::error::LoadError;
use super::fbc::{
    BundleBlob, Catalog, CatalogOptions, ChannelBlob, Entry, PackageSummary, distances, summarize,
};

use super::{Origin, Provenance};
use crate::json;
use crate::yaml::stream::Failure;

// === the blobs, as serde reads them: only the fields used ===

#[derive(Deserialize)]
struct Blob {
    schema: String,
    package: Option<String>,
    name: Option<String>,
    #[serde(rename = "defaultChannel")]
    default_channel: Option<String>,
    image: Option<String>,
    entries: Option<Vec<Entry>>,
    #[serde(rename = "relatedImages")]
    related_images: Option<Vec<Related>>,
    properties: Option<Vec<Property>>,
}

#[derive(Deserialize)]
struct Related {
    image: String,
}

#[derive(Deserialize)]
struct Property {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    value: VersionField,
}

/// The `version` of a property's value when it is a mapping that has one
/// (`olm.package`'s), nothing otherwise: `olm.bundle.object` values are
/// large and are skipped, not kept.
#[derive(Default)]
struct VersionField(Option<String>);

impl<'de> Deserialize<'de> for VersionField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = VersionField;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a property value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<VersionField, A::Error> {
                let mut version = None;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "version" {
                        version = map.next_value::<Option<Scalar>>()?.and_then(|s| s.0);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(VersionField(version))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<VersionField, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(VersionField(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<VersionField, E> {
                Ok(VersionField(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<VersionField, E> {
                Ok(VersionField(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<VersionField, E> {
                Ok(VersionField(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<VersionField, E> {
                Ok(VersionField(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<VersionField, E> {
                Ok(VersionField(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<VersionField, E> {
                Ok(VersionField(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string, or any other scalar read as none.
struct Scalar(Option<String>);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Scalar(match Value::deserialize(d)? {
            Value::String(s) => Some(s),
            _ => None,
        }))
    }
}

/// What the catalog reader keeps from one source to the next: the blobs
/// read (a bundle is promoted only once every source is read, as the
/// channel listing it may come later), which packages and channel to
/// keep, and the summary of each package promoted.
#[derive(Default)]
pub(super) struct CatalogState {
    catalog: Catalog,
    options: CatalogOptions,
    pub(super) summaries: Vec<PackageSummary>,
}

impl CatalogState {
    pub(super) fn new(options: CatalogOptions) -> Self {
        Self {
            options,
            ..Self::default()
        }
    }

    /// A JSON catalog: objects one after another, each split off
    /// ([`json::values`]), parsed, kept if it is wanted and dropped before
    /// the next. A syntax error ends the file (nothing after it can be
    /// placed); a blob of the wrong shape is named and skipped.
    pub(super) fn json(
        &mut self,
        out: &mut Entries<'_>,
        file: &str,
        text: Box<dyn BufRead + '_>,
    ) -> Result<(Format, usize), Failure> {
        let shared: Arc<str> = file.into();
        let syntax = |line: usize, message: String| LoadError {
            file: file.to_owned(),
            line: Some(line),
            entry: None,
            message: format!("not valid JSON: {message}"),
        };
        let mut source = json::Source::new(text);
        let read = json::values(&mut source, |piece| {
            let line = piece.start.line;
            match serde_json::from_slice::<Blob>(&piece.bytes) {
                Ok(blob) => self.blob(out, &shared, blob, line),
                Err(e) if e.is_data() => {
                    out.errors
                        .push(blob_error(file, line + e.line().saturating_sub(1), &e));
                }
                Err(e) => {
                    out.errors
                        .push(syntax(line + e.line().saturating_sub(1), e.to_string()));
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        });
        match read {
            Ok(()) => {}
            Err(e) if e.is_read() => return Err(Failure::Read(io::Error::other(e.message))),
            Err(e) => out.errors.push(syntax(e.line, e.message)),
        }
        Ok((Format::Catalog, 0))
    }

    /// A catalog blob read as a YAML document (or a List item).
    pub(super) fn document(
        &mut self,
        out: &mut Entries<'_>,
        ctx: &Ctx<'_>,
        value: &Value,
        ptr: &str,
    ) -> Option<(Format, usize)> {
        let line = ctx.doc.line_of(ptr);
        match Blob::deserialize(value) {
            Ok(blob) => self.blob(out, &ctx.shared, blob, line),
            Err(e) => out
                .errors
                .push(ctx.error(ptr, format!("not a catalog blob: {e}"))),
        }
        Some((Format::Catalog, 0))
    }

    fn blob(&mut self, out: &mut Entries<'_>, file: &Arc<str>, blob: Blob, line: usize) {
        let error = |message: String| LoadError {
            file: file.to_string(),
            line: Some(line),
            entry: None,
            message,
        };
        let required = |field: Option<String>, what: &str| {
            field
                .filter(|s| !s.is_empty())
                .ok_or_else(|| error(format!("an {} blob needs '{what}'", blob.schema)))
        };
        let named = match blob.schema.as_str() {
            "olm.package" => blob.name.as_ref(),
            _ => blob.package.as_ref(),
        };
        if let Some(package) = named
            && !self.catalog.seen.contains(package)
        {
            self.catalog.seen.insert(package.clone());
        }
        match blob.schema.as_str() {
            "olm.package" => match required(blob.name, "name") {
                Ok(name) if self.options.keeps(&name) => {
                    self.catalog.default_channels.insert(name, blob.default_channel);
                }
                Ok(_) => {}
                Err(e) => out.errors.push(e),
            },
            "olm.channel" => match (required(blob.package, "package"), required(blob.name, "name")) {
                (Ok(package), Ok(name)) if self.options.keeps(&package) => {
                    self.catalog.channels.push(ChannelBlob {
                        package,
                        name,
                        entries: blob.entries.unwrap_or_default(),
                    });
                }
                (Ok(_), Ok(_)) => {}
                (Err(e), _) | (_, Err(e)) => out.errors.push(e),
            },
            "olm.bundle" => match (required(blob.package, "package"), required(blob.name, "name")) {
                (Ok(package), Ok(name)) if self.options.keeps(&package) => {
                    let own = blob.image.unwrap_or_default();
                    let mut images: Vec<String> = Vec::new();
                    for r in blob.related_images.unwrap_or_default() {
                        if r.image != own && !r.image.is_empty() && !images.contains(&r.image) {
                            images.push(r.image);
                        }
                    }
                    let version = blob
                        .properties
                        .unwrap_or_default()
                        .into_iter()
                        .find(|p| p.kind == "olm.package")
                        .and_then(|p| p.value.0)
                        .and_then(|v| semver::Version::parse(v.trim_start_matches('v')).ok());
                    self.catalog.bundles.push(BundleBlob {
                        package,
                        name,
                        version,
                        images,
                        file: file.clone(),
                        line,
                    });
                }
                (Ok(_), Ok(_)) => {}
                (Err(e), _) | (_, Err(e)) => out.errors.push(e),
            },
            // olm.deprecations, and schemas of others' own: nothing promoted.
            _ => {}
        }
    }

    /// Promotes what the catalog blobs read from every source say, once
    /// all are read: a bundle is promoted only if some channel lists it,
    /// which may be in a file read after it.
    pub(super) fn promote(&mut self, out: &mut Entries<'_>, sources: &mut [SourceSummary]) {
        let catalog = std::mem::take(&mut self.catalog);
        if catalog.seen.is_empty() {
            return;
        }
        // Named packages no catalog read has: a typo would leave every
        // image of the operator unpromoted.
        for wanted in &self.options.packages {
            if !catalog.seen.contains(wanted) {
                out.errors.push(LoadError {
                    file: "--catalog-package".into(),
                    line: None,
                    entry: None,
                    message: format!(
                        "no catalog read has a package named '{wanted}' (it has {})",
                        catalog.seen.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        }
        if let Some(channel) = &self.options.channel
            && !catalog.channels.iter().any(|c| &c.name == channel)
        {
            out.errors.push(LoadError {
                file: "--catalog-channel".into(),
                line: None,
                entry: None,
                message: format!("no package read has a channel named '{channel}'"),
            });
            return;
        }
        let mut promoted: HashMap<Arc<str>, usize> = HashMap::new();
        let kept: Vec<&String> = catalog.seen.iter().filter(|p| self.options.keeps(p)).collect();
        for package in kept {
            let summary = self.promote_package(out, &catalog, package, &mut promoted);
            self.summaries.push(summary);
        }
        for source in sources.iter_mut() {
            if let Some(n) = promoted.get(source.file.as_str()) {
                source.entries += n;
            }
        }
    }

    fn promote_package(
        &mut self,
        out: &mut Entries<'_>,
        catalog: &Catalog,
        package: &str,
        promoted: &mut HashMap<Arc<str>, usize>,
    ) -> PackageSummary {
        let channels: Vec<&ChannelBlob> = catalog.channels.iter().filter(|c| c.package == package).collect();
        let default = catalog.default_channels.get(package).cloned().flatten();
        let wanted = self.options.channel.clone().or(default);
        let ordering = wanted
            .as_deref()
            .and_then(|w| channels.iter().find(|c| c.name == w).copied());
        if let (Some(w), None) = (&wanted, ordering)
            && !channels.is_empty()
        {
            out.warnings.push(LoadError {
                file: package.to_owned(),
                line: None,
                entry: None,
                message: format!(
                    "package {package} has no channel '{w}': its releases are ordered by version alone"
                ),
            });
        }
        let ranks = ordering.map(|c| distances(c)).unwrap_or_default();
        let listed: HashSet<&str> = channels
            .iter()
            .flat_map(|c| c.entries.iter().map(|e| e.name.as_str()))
            .collect();
        let mut summary = PackageSummary {
            package: package.to_owned(),
            ordered_by: ordering.map(|c| c.name.clone()),
            channels: channels.iter().map(|c| summarize(c)).collect(),
            bundles: 0,
            promoted_bundles: 0,
        };
        for bundle in catalog.bundles.iter().filter(|b| b.package == package) {
            summary.bundles += 1;
            if !listed.contains(bundle.name.as_str()) {
                out.warnings.push(LoadError {
                    file: bundle.file.to_string(),
                    line: Some(bundle.line),
                    entry: None,
                    message: format!(
                        "bundle {} is in no channel of {package}: not promoted",
                        bundle.name
                    ),
                });
                continue;
            }
            summary.promoted_bundles += 1;
            let rank = ranks.get(bundle.name.as_str()).map(|d| u32::MAX - d);
            let channel = match (ordering, rank) {
                (Some(c), Some(_)) => c.name.as_str(),
                _ => channels
                    .iter()
                    .find(|c| c.entries.iter().any(|e| e.name == bundle.name))
                    .map_or("", |c| c.name.as_str()),
            };
            let n = promote_bundle(out, package, bundle, channel, rank);
            *promoted.entry(bundle.file.clone()).or_default() += n;
        }
        summary
    }
}

/// One bundle's related images, as a release of `package` named by
/// its place on `channel`.
fn promote_bundle(
    out: &mut Entries<'_>,
    package: &str,
    bundle: &BundleBlob,
    channel: &str,
    rank: Option<u32>,
) -> usize {
    let provenance = out.builder.provenance(Provenance {
        source: bundle.file.clone(),
        origin: format!(
            "catalog package {package} bundle {} (channel {channel})",
            bundle.name
        ),
        version: bundle.version.clone(),
        package: Some(package.to_owned()),
        name: Some(bundle.name.clone()),
        replaces: None,
        rank,
    });
    let origin = Origin {
        file: bundle.file.clone(),
        line: bundle.line,
        provenance,
    };
    let mut promoted = 0;
    for image in &bundle.images {
        promoted += out.promote_at(image, &origin, |message| LoadError {
            file: bundle.file.to_string(),
            line: Some(bundle.line),
            entry: Some(format!("bundle {}", bundle.name)),
            message,
        });
    }
    promoted
}

fn blob_error(file: &str, line: usize, e: &serde_json::Error) -> LoadError {
    LoadError {
        file: file.to_owned(),
        line: Some(line),
        entry: None,
        message: format!("not a catalog blob: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allowlist::fbc::{CatalogOptions, ChannelSummary};
    use crate::allowlist::input::Source;
    use crate::allowlist::{LoadErrors, Loaded, load_paths_with, load_sources_with};

    const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/olm");
    const DASHBOARD: &str = "registry.redhat.io/rhoai/odh-dashboard-rhel9";
    /// The dashboard's digests in bundles 3.0.0, 3.2.0, 3.3.0 and 3.3.1.
    const D300: &str = "sha256:4f250fd17c023c43ca64ade19c84afbc77e72e66548573c2f987d10e6aed3821";
    const D330: &str = "sha256:11c2454cd7265192c90223f7356aba9f4837f2ce1d497add0b1341c9a120932b";
    const D331: &str = "sha256:dc1dc46e9eb9fe228effad2d8b27ef90c6d9b506a29c61f092da4f6140497bb5";

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!("{DIR}/{name}")).unwrap()
    }

    fn rhods() -> Vec<Source> {
        ["rhods/package-and-channels.yaml", "rhods/bundles-fast-3.x.yaml"]
            .into_iter()
            .map(|name| Source {
                name: name.to_owned(),
                text: fixture(name),
                kind: Default::default(),
            })
            .collect()
    }

    fn source(name: &str, text: String) -> Source {
        Source {
            name: name.to_owned(),
            text,
            kind: Default::default(),
        }
    }

    /// What loading one text says is wrong with it.
    fn errors_of(name: &str, text: &str) -> Vec<String> {
        let errors = load(&[source(name, text.to_owned())], &CatalogOptions::default())
            .unwrap_err()
            .0;
        errors.iter().map(ToString::to_string).collect()
    }

    fn load(sources: &[Source], options: &CatalogOptions) -> Result<Loaded, LoadErrors> {
        load_sources_with(sources.iter().map(|s| s as &dyn crate::allowlist::Input), options)
    }

    fn channel(loaded: &Loaded, name: &str) -> ChannelSummary {
        loaded.catalogs[0]
            .channels
            .iter()
            .find(|c| c.name == name)
            .unwrap()
            .clone()
    }

    /// The fixture's YAML documents as opm renders JSON: indented objects
    /// one after another.
    fn as_json(yaml: &str) -> String {
        crate::yaml::parse_stream(yaml)
            .unwrap()
            .iter()
            .map(|d| serde_json::to_string_pretty(&d.value).unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn each_bundle_promotes_its_related_images_but_its_own() {
        let loaded = load(&rhods(), &CatalogOptions::default()).unwrap();
        let list = &loaded.allowlist;
        let by_bundle: Vec<(String, Option<String>)> = list
            .provenances()
            .iter()
            .map(|p| (p.origin.clone(), p.version.as_ref().map(ToString::to_string)))
            .collect();
        assert_eq!(
            by_bundle,
            [
                (
                    "catalog package rhods-operator bundle rhods-operator.3.0.0 (channel fast-3.x)",
                    "3.0.0"
                ),
                (
                    "catalog package rhods-operator bundle rhods-operator.3.2.0 (channel fast-3.x)",
                    "3.2.0"
                ),
                (
                    "catalog package rhods-operator bundle rhods-operator.3.3.0 (channel stable-3.x)",
                    "3.3.0"
                ),
                (
                    "catalog package rhods-operator bundle rhods-operator.3.3.1 (channel stable-3.x)",
                    "3.3.1"
                ),
            ]
            .map(|(o, v)| (o.to_owned(), Some(v.to_owned())))
        );
        // 97 + 90 + 96 + 96 related images but the bundle's own, each once.
        assert_eq!(loaded.sources[1].entries, 379);
        assert_eq!(loaded.sources[0].entries, 0);
        let c = list.candidates(DASHBOARD);
        assert!(c.is_promoted(D300) && c.is_promoted(D330) && c.is_promoted(D331));
        // The bundle image (opm lists it among relatedImages) runs nowhere.
        assert!(
            list.candidates("registry.redhat.io/rhoai/odh-operator-bundle")
                .promoted()
                .is_empty()
        );
        // Each promotion names its bundle's line.
        let (by, line) = c.newest_promotion(D330).unwrap();
        assert_eq!((by.source.as_ref(), line), ("rhods/bundles-fast-3.x.yaml", 1410));
    }

    #[test]
    fn the_head_is_the_entry_nothing_replaces_or_skips() {
        let loaded = load(&rhods(), &CatalogOptions::default()).unwrap();
        assert_eq!(loaded.catalogs.len(), 1);
        let p = &loaded.catalogs[0];
        assert_eq!(
            (p.package.as_str(), p.ordered_by.as_deref()),
            ("rhods-operator", Some("stable-3.x"))
        );
        assert_eq!(p.channels.len(), 20);
        for (name, head, entries) in [
            ("fast-3.x", "rhods-operator.3.3.1", 4),
            ("stable-3.x", "rhods-operator.3.4.2", 6),
            ("stable-3.3", "rhods-operator.3.3.5", 6),
            ("alpha", "rhods-operator.2.25.8", 51),
            ("beta", "rhods-operator.3.5.0-ea.1", 1),
        ] {
            let c = channel(&loaded, name);
            assert_eq!((c.heads, c.entries), (vec![head.to_owned()], entries), "{name}");
        }
        // skipRange is read (the real catalog's '>=2.25.6 <2.26.0 || ...'
        // among them), never an error and never an order.
        assert_eq!(channel(&loaded, "fast-3.x").skip_ranges, 3);
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    }

    #[test]
    fn a_rewrite_goes_to_the_bundle_nearest_the_ordering_channels_head() {
        // The default channel, stable-3.x, lists 3.3.0 and 3.3.1 (its head
        // 3.4.2 is not in the fragment): 3.3.1 is nearest the head; 3.0.0
        // and 3.2.0 are off it.
        let loaded = load(&rhods(), &CatalogOptions::default()).unwrap();
        let (target, by) = crate::policy::newest_release(&loaded.allowlist.candidates(DASHBOARD)).unwrap();
        assert_eq!(
            (target.digest(), by.name.as_deref()),
            (D331, Some("rhods-operator.3.3.1"))
        );
        // Ordered by fast-3.x, every bundle is on the graph: still 3.3.1,
        // and 3.2.0 is nearer the head than 3.0.0.
        let fast = CatalogOptions {
            channel: Some("fast-3.x".into()),
            ..Default::default()
        };
        let loaded = load(&rhods(), &fast).unwrap();
        let ranks: Vec<Option<u32>> = loaded.allowlist.provenances().iter().map(|p| p.rank).collect();
        assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{ranks:?}");
        let (target, _) = crate::policy::newest_release(&loaded.allowlist.candidates(DASHBOARD)).unwrap();
        assert_eq!(target.digest(), D331);
    }

    #[test]
    fn the_graph_beats_semver() {
        // The same fragment, 3.3.1's bundle claiming version 3.2.5: by
        // version 3.3.0 is newest; by the channel 3.3.1 replaces 3.3.0.
        let mut sources = rhods();
        let text = &mut sources[1].text;
        let claim = "    packageName: rhods-operator\n    version: 3.3.1\n";
        assert_eq!(text.matches(claim).count(), 1, "the fixture changed");
        *text = text.replace(claim, "    packageName: rhods-operator\n    version: 3.2.5\n");
        let loaded = load(&sources, &CatalogOptions::default()).unwrap();
        let (target, by) = crate::policy::newest_release(&loaded.allowlist.candidates(DASHBOARD)).unwrap();
        assert_eq!(
            (target.digest(), by.name.as_deref()),
            (D331, Some("rhods-operator.3.3.1"))
        );
        // An explicit rewriteTo beats both.
        let pinned = format!(
            "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nmetadata: {{name: pin}}\nspec:\n  repositories:\n    - name: {DASHBOARD}\n      digests: [{D300}]\n      rewriteTo: {D300}\n"
        );
        sources.push(source("pin.yaml", pinned));
        let loaded = load(&sources, &CatalogOptions::default()).unwrap();
        assert_eq!(
            crate::policy::default_target(&loaded.allowlist.candidates(DASHBOARD))
                .unwrap()
                .digest(),
            D300
        );
    }

    #[test]
    fn a_package_filter_keeps_only_its_packages() {
        let mut sources = rhods();
        sources.push(source("foo.yaml", fixture("foo.yaml")));
        let only_foo = CatalogOptions {
            packages: vec!["foo".into()],
            ..Default::default()
        };
        let loaded = load(&sources, &only_foo).unwrap();
        assert_eq!(loaded.allowlist.repository_count(), 0);
        assert_eq!(
            loaded
                .catalogs
                .iter()
                .map(|p| p.package.as_str())
                .collect::<Vec<_>>(),
            ["foo"]
        );
        // foo lists its images by tag only: each skipped with a warning
        // naming the bundle, never its own bundle image.
        let warned: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(warned.len(), 6, "{warned:#?}");
        assert!(
            warned
                .iter()
                .all(|w| w.contains("not pinned by digest") && w.contains("bundle foo.v0."))
        );
        assert!(!warned.iter().any(|w| w.contains("foo-bundle")));
        // foo's channels: skips read, one head each.
        let beta = channel(&loaded, "beta");
        assert_eq!(
            (beta.heads, beta.entries, beta.skip_ranges),
            (vec!["foo.v0.2.0".to_owned()], 2, 2)
        );
        let both = CatalogOptions {
            packages: vec!["foo".into(), "rhods-operator".into()],
            ..Default::default()
        };
        assert_eq!(load(&sources, &both).unwrap().catalogs.len(), 2);
    }

    #[test]
    fn json_is_read_one_blob_at_a_time_with_each_blobs_line() {
        let yaml = rhods();
        let json: Vec<Source> = yaml
            .iter()
            .map(|s| source(&s.name.replace(".yaml", ".json"), as_json(&s.text)))
            .collect();
        let from_yaml = load(&yaml, &CatalogOptions::default()).unwrap();
        let from_json = load(&json, &CatalogOptions::default()).unwrap();
        assert_eq!(from_json.sources[1].format, Format::Catalog);
        assert_eq!(from_json.sources[1].entries, from_yaml.sources[1].entries);
        assert_eq!(from_json.catalogs, from_yaml.catalogs);
        // The line is where the blob's `{` is.
        let (_, line) = from_json
            .allowlist
            .candidates(DASHBOARD)
            .newest_promotion(D331)
            .unwrap();
        let text = &json[1].text;
        let opening = text.lines().position(|l| l == "{").unwrap();
        let nth = text
            .lines()
            .enumerate()
            .filter(|(_, l)| *l == "{")
            .nth(3)
            .unwrap()
            .0;
        assert_eq!(opening, 0);
        assert_eq!(line as usize, nth + 1);
    }

    #[test]
    fn malformed_blobs_are_named_by_file_and_line_and_the_rest_is_read() {
        let yaml = "schema: olm.package\nname: p\ndefaultChannel: c\n---\nschema: olm.channel\npackage: p\nname: c\nentries: nope\n---\nschema: olm.bundle\nname: p.v1\n---\nschema: olm.channel\npackage: p\nname: d\nentries: [{name: p.v1}]\n";
        let said = errors_of("c.yaml", yaml);
        assert_eq!(said.len(), 2, "{said:#?}");
        assert!(
            said[0].starts_with("c.yaml:5: not a catalog blob: invalid type: string \"nope\""),
            "{said:#?}"
        );
        assert_eq!(said[1], "c.yaml:10: an olm.bundle blob needs 'package'");
        // In JSON too, where the blob's line is where it starts.
        let json = "{\"schema\": \"olm.package\", \"name\": \"p\"}\n{\"schema\": \"olm.channel\",\n \"package\": \"p\", \"name\": \"c\",\n \"entries\": 7}\n{\"schema\": \"olm.bundle\", \"package\": \"p\"}\n";
        let said = errors_of("c.json", json);
        assert_eq!(said.len(), 2, "{said:#?}");
        assert!(
            said[0].starts_with("c.json:4: not a catalog blob: invalid type: integer `7`"),
            "{said:#?}"
        );
        assert_eq!(said[1], "c.json:5: an olm.bundle blob needs 'name'");
        // A syntax error ends the file, where it is.
        let broken = "{\"schema\": \"olm.package\", \"name\": \"p\"}\n{\"schema\": \"olm.channel\",\n";
        let errors = errors_of("b.json", broken);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("b.json:3: not valid JSON: EOF"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn a_package_no_catalog_has_is_an_error() {
        let typo = CatalogOptions {
            packages: vec!["rhods-operatr".into()],
            ..Default::default()
        };
        let errors = load(&rhods(), &typo).unwrap_err().0;
        assert_eq!(
            errors[0].to_string(),
            "--catalog-package: no catalog read has a package named 'rhods-operatr' (it has rhods-operator)"
        );
        // Without any catalog the flag names nothing to check (it may be
        // set for every command, beside allowlists of other formats).
        let native = source(
            "n.yaml",
            "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nmetadata: {name: n}\nspec: {repositories: []}\n".into(),
        );
        assert!(load(&[native], &typo).is_ok());
    }

    #[test]
    fn a_channel_no_package_has_is_an_error() {
        let typo = CatalogOptions {
            channel: Some("stabel-3.x".into()),
            ..Default::default()
        };
        let errors = load(&rhods(), &typo).unwrap_err().0;
        assert_eq!(
            errors[0].to_string(),
            "--catalog-channel: no package read has a channel named 'stabel-3.x'"
        );
    }

    #[test]
    fn a_catalog_tree_is_read_from_its_subdirectories() {
        // As a catalog image holds it: configs/<package>/..., beside files
        // that are not documents (skipped below the top level).
        let root = std::env::temp_dir().join(format!("digest-gate-catalog-{}", std::process::id()));
        let package = root.join("configs").join("rhods-operator");
        std::fs::create_dir_all(&package).unwrap();
        std::fs::write(
            package.join("channels.yaml"),
            fixture("rhods/package-and-channels.yaml"),
        )
        .unwrap();
        std::fs::write(
            package.join("bundles.json"),
            as_json(&fixture("rhods/bundles-fast-3.x.yaml")),
        )
        .unwrap();
        std::fs::write(package.join("README.md"), "not a document\n").unwrap();
        std::fs::create_dir_all(root.join("configs").join(".hidden")).unwrap();
        std::fs::write(root.join("configs").join(".hidden").join("x.yaml"), "nope: [").unwrap();
        let loaded = load_paths_with(&[root.join("configs")], &CatalogOptions::default());
        std::fs::remove_dir_all(&root).unwrap();
        let loaded = loaded.unwrap();
        let files: Vec<&str> = loaded
            .sources
            .iter()
            .map(|s| s.file.rsplit('/').next().unwrap())
            .collect();
        assert_eq!(files, ["bundles.json", "channels.yaml"]);
        assert_eq!(loaded.sources[0].entries, 379);
        assert_eq!(loaded.catalogs[0].ordered_by.as_deref(), Some("stable-3.x"));
    }
}
