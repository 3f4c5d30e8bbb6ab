//! Loading allowlist sources (`input` says where they come from): telling
//! their formats apart, and handing each document to its format's reader
//! (`native`, `csv`, `imageset`, `plain`), which promote images through the
//! shared `promote_image`. Several sources merge by union.

use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use saphyr_parser::Span;
use serde_json::Value;

use super::catalog::CatalogState;
use super::entries::{Ctx, Entries, Format, SourceSummary, dotted};
use super::error::{LoadError, LoadErrors, file_error};
use super::fbc::{CatalogOptions, PackageSummary};
use super::input::{Input, Source, SourceKind, inputs, open_files};
use super::native::{self, Refused, Sink};
use super::{Allowlist, Builder, Provenance};
use super::{csv, imageset, plain};
use crate::yaml::de::{Cause, Head, Reader};
use crate::yaml::stream::{self, Chars, Failure};
use crate::yaml::{self, YamlError};

pub use super::native::API_VERSION;

/// A loaded allowlist with what went into it.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub allowlist: Allowlist,
    pub sources: Vec<SourceSummary>,
    /// Entries that were skipped, with why (e.g. a CSV image pinned only by tag).
    pub warnings: Vec<LoadError>,
    /// The packages of the file-based catalogs read: channels, heads, bundles.
    pub catalogs: Vec<PackageSummary>,
}

/// Loads and merges every file named, reading directories (their visible
/// files, and the `*.json`/`*.yaml` of their subdirectories, as a catalog
/// tree holds them) and skipping hidden entries (a mounted ConfigMap's
/// `..data` and friends).
pub fn load_paths<P: AsRef<Path>>(paths: &[P]) -> Result<Loaded, LoadErrors> {
    load_paths_with(paths, &CatalogOptions::default())
}

/// [`load_paths`], keeping only the catalog packages `catalog` names.
pub fn load_paths_with<P: AsRef<Path>>(paths: &[P], catalog: &CatalogOptions) -> Result<Loaded, LoadErrors> {
    load_sources_with(inputs(&open_files(paths)?), catalog)
}

/// The allowlist's sources (files, a ConfigMap's keys) and then the
/// operators' installed CSVs, merged as one allowlist: the one merge
/// `serve` puts in force (and checks an allowlist edit by) and `audit`
/// judges by.
pub fn load_with_installed<T: Input>(
    sources: &[T],
    installed: &[Source],
    catalog: &CatalogOptions,
) -> Result<Loaded, LoadErrors> {
    load_sources_with(inputs(sources).chain(inputs(installed)), catalog)
}

/// Parses and merges sources, in the order given.
pub fn load_sources<'a>(sources: impl IntoIterator<Item = &'a dyn Input>) -> Result<Loaded, LoadErrors> {
    load_sources_with(sources, &CatalogOptions::default())
}

/// [`load_sources`], keeping only the catalog packages `catalog` names.
pub fn load_sources_with<'a>(
    sources: impl IntoIterator<Item = &'a dyn Input>,
    catalog: &CatalogOptions,
) -> Result<Loaded, LoadErrors> {
    let mut loader = Loader {
        catalog: CatalogState::new(catalog.clone()),
        ..Loader::default()
    };
    for s in sources {
        loader.source(s);
    }
    let (mut out, catalog, sources) = loader.parts();
    catalog.promote(&mut out, sources);
    if loader.errors.is_empty() {
        Ok(loader.finish())
    } else {
        Err(LoadErrors(loader.errors))
    }
}

/// Loads one source held in memory; `name` is used in messages.
pub fn load_text(name: &str, text: &str) -> Result<Loaded, LoadErrors> {
    let source = Source {
        name: name.to_owned(),
        text: text.to_owned(),
        kind: SourceKind::File,
    };
    load_sources([&source as &dyn Input])
}

/// Reads sources into one allowlist; each format's reader is an `impl
/// Loader` block of its own file (`csv`, `imageset`, `plain`, and `native`
/// for the native document), this file only tells them apart.
#[derive(Default)]
pub(super) struct Loader {
    pub(super) builder: Builder,
    pub(super) sources: Vec<SourceSummary>,
    pub(super) errors: Vec<LoadError>,
    pub(super) warnings: Vec<LoadError>,
    /// What the source being read is.
    pub(super) kind: SourceKind,
    /// The catalog blobs read so far, promoted once every source is read.
    /// The catalog reader's state across sources.
    pub(super) catalog: CatalogState,
}

// === impl Loader ===

impl Loader {
    /// The sink the readers write to, the catalog reader's state, and the
    /// sources read so far: borrowed apart.
    fn parts(&mut self) -> (Entries<'_>, &mut CatalogState, &mut [SourceSummary]) {
        let out = Entries {
            builder: &mut self.builder,
            errors: &mut self.errors,
            warnings: &mut self.warnings,
            kind: &self.kind,
        };
        (out, &mut self.catalog, &mut self.sources)
    }

    /// The sink the format readers write to.
    pub(super) fn entries(&mut self) -> Entries<'_> {
        Entries {
            builder: &mut self.builder,
            errors: &mut self.errors,
            warnings: &mut self.warnings,
            kind: &self.kind,
        }
    }

    fn finish(self) -> Loaded {
        Loaded {
            allowlist: self.builder.build(),
            sources: self.sources,
            warnings: self.warnings,
            catalogs: self.catalog.summaries,
        }
    }

    /// Loads one source. A source that cannot be read to its end (a read
    /// error, text that is not UTF-8) gets that one error, not whatever the
    /// parser made of the part it read.
    fn source(&mut self, input: &dyn Input) {
        let file = input.name();
        self.kind = input.kind();
        let before = self.errors.len();
        match self.read(file, input) {
            Ok((format, entries)) => {
                if self.errors.len() == before {
                    self.sources.push(SourceSummary {
                        file: file.to_owned(),
                        format,
                        entries,
                    });
                }
            }
            Err(failure) => {
                self.errors.truncate(before);
                self.errors.push(file_error(file, failure.to_string()));
            }
        }
    }

    /// Reads `input` twice: its lines, to tell its format, then to load it.
    fn read(&mut self, file: &str, input: &dyn Input) -> Result<(Format, usize), Failure> {
        let open = || input.open().map_err(Failure::Read);
        let mut structured = false;
        // `<<` merges are resolved by the tree reader only (a merged
        // mapping's keys are known only at its end); a file that may hold
        // one is read as trees, which costs memory, never correctness.
        let mut merges = false;
        // JSON objects one after another with OLM schemas: a catalog as
        // opm renders it, which is not one YAML document.
        let mut first: Option<bool> = None;
        let mut catalog = false;
        stream::lines_while(open()?, |line| {
            structured = structured || is_structured(line);
            merges = merges || line.contains("<<");
            let t = line.trim_start();
            if first.is_none() && !t.is_empty() && !t.starts_with('#') {
                first = Some(t.starts_with('{'));
            }
            catalog = catalog || is_catalog_schema(t);
            // A JSON catalog is told by its first blob: no need to read
            // hundreds of MiB twice.
            !(first == Some(true) && catalog)
        })?;
        if first == Some(true) && catalog {
            let (mut out, catalog, _) = self.parts();
            return catalog.json(&mut out, file, open()?);
        }
        if structured {
            self.structured(file, open()?, !merges)
        } else {
            Ok((
                Format::PlainList,
                plain::read(&mut self.entries(), file, open()?)?,
            ))
        }
    }

    fn structured(
        &mut self,
        file: &str,
        text: Box<dyn BufRead + '_>,
        stream: bool,
    ) -> Result<(Format, usize), Failure> {
        let shared: Arc<str> = file.into();
        let (chars, failure) = Chars::new(text);
        let mut reader = Reader::from_chars(chars);
        let mut format = None;
        let mut entries = 0;
        for index in 0.. {
            let next = self.next_document(file, &shared, &mut reader, index, stream);
            // The text ended early: what the parser made of it is moot.
            if let Some(f) = failure.borrow_mut().take() {
                return Err(f);
            }
            match next {
                Ok(None) => break,
                Ok(Some(None)) => {}
                Ok(Some(Some((f, n)))) => {
                    entries += n;
                    format = match format {
                        None => Some(f),
                        Some(prev) if prev == f => Some(f),
                        Some(_) => Some(Format::Mixed),
                    };
                }
                Err(e) => {
                    self.errors.push(LoadError {
                        file: file.to_owned(),
                        line: Some(e.line),
                        entry: None,
                        message: format!("not valid YAML: {}", e.message),
                    });
                    return Ok((Format::Mixed, 0));
                }
            }
        }
        Ok((format.unwrap_or(Format::Native), entries))
    }

    /// One document of a stream: a native Allowlist is read event by event
    /// if `stream`, anything else as a tree. `None` at the end of the stream.
    #[allow(clippy::option_option)]
    fn next_document(
        &mut self,
        file: &str,
        shared: &Arc<str>,
        reader: &mut Reader<'_>,
        index: usize,
        stream: bool,
    ) -> Result<Option<Option<(Format, usize)>>, YamlError> {
        let Some(start) = reader.next_document()? else {
            return Ok(None);
        };
        let head = if stream { reader.head()? } else { Head::default() };
        if head.kind.as_ref().is_some_and(|(k, _)| k == "Allowlist") {
            // A syntax error ends the file here, before the parser is asked
            // for more.
            let read = self.streamed(file, shared, reader, &head)?;
            reader.finish_document()?;
            return Ok(Some(read));
        }
        self.tree(file, shared, reader, start, index).map(Some)
    }

    fn streamed(
        &mut self,
        file: &str,
        shared: &Arc<str>,
        reader: &mut Reader<'_>,
        head: &Head,
    ) -> Result<Option<(Format, usize)>, YamlError> {
        let api = head.api_version.as_ref();
        if api.is_none_or(|(v, _)| v != API_VERSION) {
            let (api, line) = api.map_or(("", head.line), |(v, l)| (v.as_str(), *l));
            self.errors.push(LoadError {
                file: file.to_owned(),
                line: Some(line),
                entry: Some("apiVersion".into()),
                message: unsupported_api(api),
            });
            return Ok(None);
        }
        self.native(file, shared, reader, String::new())
    }

    fn tree(
        &mut self,
        file: &str,
        shared: &Arc<str>,
        reader: &mut Reader<'_>,
        start: Span,
        index: usize,
    ) -> Result<Option<(Format, usize)>, YamlError> {
        let doc = reader.tree(start, index)?;
        let ctx = Ctx {
            file,
            shared: shared.clone(),
            doc: &doc,
        };
        Ok(self.document(&ctx, &doc.value, ""))
    }

    /// Reads a native document into the builder; a structural problem is
    /// recorded and ends the document, a syntax error ends the file.
    fn native(
        &mut self,
        file: &str,
        shared: &Arc<str>,
        reader: &mut Reader<'_>,
        base: String,
    ) -> Result<Option<(Format, usize)>, YamlError> {
        // Named "Allowlist <name>" once its metadata is read.
        let provenance = self
            .builder
            .provenance(Provenance::of(shared.clone(), "Allowlist".to_owned()));
        let mut sink = Sink {
            builder: &mut self.builder,
            errors: &mut self.errors,
            file,
            shared: shared.clone(),
            base,
            entries: 0,
            provenance,
        };
        match native::read(reader, &mut sink) {
            Ok(()) => Ok(Some((Format::Native, sink.entries))),
            Err(Refused { error, .. }) if error.cause == Cause::Syntax => Err(YamlError {
                line: error.line.unwrap_or(1),
                column: 1,
                message: error.message,
            }),
            Err(Refused { error, entry }) => {
                self.errors.push(LoadError {
                    file: file.to_owned(),
                    line: error.line,
                    entry,
                    message: error.message,
                });
                Ok(None)
            }
        }
    }

    fn document(&mut self, ctx: &Ctx<'_>, value: &Value, ptr: &str) -> Option<(Format, usize)> {
        let obj = match value {
            Value::Null => return None,
            Value::Object(obj) => obj,
            other => {
                self.errors.push(ctx.error(
                    ptr,
                    format!("expected a mapping, found {}", yaml::type_name(other)),
                ));
                return None;
            }
        };
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        if kind.is_empty() && obj.contains_key("schema") {
            let (mut out, catalog, _) = self.parts();
            return catalog.document(&mut out, ctx, value, ptr);
        }
        match kind {
            "Allowlist" => {
                let api = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
                if api != API_VERSION {
                    self.errors
                        .push(ctx.error(&format!("{ptr}/apiVersion"), unsupported_api(api)));
                    return None;
                }
                // A List item, an aliased kind, or a file with merge keys:
                // the same model reads the tree replayed as events.
                let mut reader = Reader::from_value(value, ctx.doc, ptr);
                let base = dotted(ptr);
                self.native(ctx.file, &ctx.shared, &mut reader, base)
                    .ok()
                    .flatten()
            }
            "ClusterServiceVersion" => Some((
                Format::ClusterServiceVersion,
                csv::read(&mut self.entries(), ctx, value, ptr),
            )),
            "ImageSetConfiguration" => Some((
                Format::ImageSetConfiguration,
                imageset::read(&mut self.entries(), ctx, value, ptr),
            )),
            "List" => {
                let items = obj.get("items").and_then(Value::as_array)?;
                let mut result: Option<(Format, usize)> = None;
                for (i, item) in items.iter().enumerate() {
                    if let Some((f, n)) = self.document(ctx, item, &format!("{ptr}/items/{i}")) {
                        result = Some(match result {
                            None => (f, n),
                            Some((prev, m)) => (if prev == f { f } else { Format::Mixed }, m + n),
                        });
                    }
                }
                result
            }
            "" => {
                self.errors.push(ctx.error(ptr, "the document has no kind; expected Allowlist, ClusterServiceVersion or ImageSetConfiguration"));
                None
            }
            other => {
                self.errors.push(ctx.error(
                    &format!("{ptr}/kind"),
                    format!("kind '{other}' is not an allowlist source; expected Allowlist, ClusterServiceVersion or ImageSetConfiguration"),
                ));
                None
            }
        }
    }
}

fn unsupported_api(api: &str) -> String {
    format!("apiVersion '{api}' is not supported for Allowlist; use {API_VERSION}")
}

/// Whether a line says its file is YAML or JSON, not a plain list:
/// structured sources declare `apiVersion`/`kind` (or are JSON); plain lists
/// never contain either.
fn is_structured(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with('{')
        || is_catalog_schema(t)
        || ["apiVersion", "kind", "\"apiVersion\"", "\"kind\""]
            .iter()
            .any(|k| {
                t.strip_prefix(k)
                    .is_some_and(|rest| rest.trim_start().starts_with(':'))
            })
}

/// Whether a line (trimmed at its start) names an OLM catalog schema:
/// `schema: olm.bundle`, `"schema": "olm.channel"`.
fn is_catalog_schema(t: &str) -> bool {
    let rest = t
        .strip_prefix("schema")
        .or_else(|| t.strip_prefix("\"schema\""))
        .or_else(|| t.strip_prefix("{\"schema\""));
    rest.and_then(|r| r.trim_start().strip_prefix(':'))
        .is_some_and(|v| v.trim_start().trim_start_matches(['"', '\'']).starts_with("olm."))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::{BAD as B, GOOD as A};

    fn errors(name: &str, text: &str) -> Vec<LoadError> {
        load_text(name, text).expect_err("should fail").0
    }

    #[test]
    fn native_document_loads() {
        let text = format!(
            "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nmetadata: {{name: x}}\nspec:\n  repositories:\n    - name: registry.redhat.io/rhods/ovms\n      digests:\n        - digest: {A}\n          tags: [\"v1.21.0-15\"]\n        - {B}\n      rewriteTo: {A}\n  mirrors:\n    - source: registry.redhat.io/rhods\n      mirrors: [quay.io/modh]\n  exemptImages: [\"quay.io/platform/debug-*\"]\n"
        );
        let loaded = load_text("a.yaml", &text).unwrap();
        let list = &loaded.allowlist;
        assert_eq!(loaded.sources[0].format, Format::Native);
        assert_eq!(loaded.sources[0].entries, 2);
        let c = list.candidates("registry.redhat.io/rhods/ovms");
        assert!(c.is_promoted(A) && c.is_promoted(B));
        assert_eq!(crate::policy::default_target(&c).unwrap().digest(), A);
        assert_eq!(c.digest_for_tag("v1.21.0-15").unwrap().digest(), A);
        assert!(list.candidates("quay.io/modh/ovms").is_promoted(A));
        assert!(
            list.exemption("quay.io/platform/debug-shell", None, None)
                .is_some()
        );
    }

    #[test]
    fn an_index_lists_its_images_by_platform_and_convert_and_lint_keep_them() {
        const ARM: &str = "sha256:a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a64a";
        let doc = |platforms: &str| {
            format!(
                "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nmetadata: {{name: x}}\nspec:\n  repositories:\n    - name: quay.io/a/b\n      digests:\n        - digest: {A}\n          tags: [v1]\n          platforms:\n{platforms}"
            )
        };
        let text = doc(&format!(
            "            - {{platform: linux/arm64/v8, digest: {ARM}}}\n            - {{platform: linux/amd64, digest: {B}}}\n"
        ));
        let loaded = load_text("a.yaml", &text).unwrap();
        let c = loaded.allowlist.candidates("quay.io/a/b");
        let (index, platform) = c.platform_image(ARM).unwrap();
        assert_eq!((index.digest(), platform), (A, "linux/arm64/v8"));
        assert!(!c.is_promoted(ARM) && c.platform_image(A).is_none());
        // convert writes them, and what it writes loads the same.
        let converted = crate::inventory::to_native_yaml(&loaded.allowlist, "x", &[]);
        assert!(
            converted.contains(&format!(
                "          platforms:\n            - {{platform: linux/arm64/v8, digest: {ARM}}}\n            - {{platform: linux/amd64, digest: {B}}}\n"
            )),
            "{converted}"
        );
        let again = load_text("b.yaml", &converted).unwrap();
        let images: Vec<_> = again
            .allowlist
            .repositories()
            .next()
            .unwrap()
            .digests()
            .next()
            .unwrap()
            .platforms()
            .collect();
        assert_eq!(images, [("linux/arm64/v8", ARM), ("linux/amd64", B)]);
        let lint = crate::inventory::lint(&loaded);
        assert!(
            lint.report.contains("note: quay.io/a/b@sha256:8af20e48bb48 is an index; its images are promoted for their platforms: linux/arm64/v8 sha256:a64a64a64a64, linux/amd64 sha256:7ef272bc7be8"),
            "{}",
            lint.report
        );
        // The same platform named twice must name one image; a platform and
        // a digest must be valid.
        let e = errors(
            "a.yaml",
            &doc(&format!(
                "            - {{platform: linux/amd64, digest: {ARM}}}\n            - {{platform: linux/amd64, digest: {B}}}\n            - {{platform: linux, digest: {B}}}\n            - {{platform: linux/s390x, digest: nope}}\n"
            )),
        );
        let said: Vec<String> = e.iter().map(ToString::to_string).collect();
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(
            said[0].contains("platforms[1]: the linux/amd64 image of quay.io/a/b@"),
            "{said:?}"
        );
        assert!(
            said[1].contains("platforms[2].platform: 'linux' is not a platform"),
            "{said:?}"
        );
        assert!(
            said[2].contains("platforms[3].digest: 'nope' is not a valid digest"),
            "{said:?}"
        );
    }

    #[test]
    fn a_mirror_rule_says_whether_nodes_may_contact_the_source() {
        let doc = |policy: &str| {
            format!(
                "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nmetadata: {{name: x}}\nspec:\n  repositories: []\n  mirrors:\n    - source: registry.redhat.io/rhods\n      mirrors: [quay.io/modh]\n{policy}"
            )
        };
        let rules = |text: &str| {
            load_text("a.yaml", text)
                .unwrap()
                .allowlist
                .mirror_rules()
                .to_vec()
        };
        assert!(!rules(&doc(""))[0].never_contact_source);
        assert!(!rules(&doc("      mirrorSourcePolicy: AllowContactingSource\n"))[0].never_contact_source);
        let never = load_text("a.yaml", &doc("      mirrorSourcePolicy: NeverContactSource\n")).unwrap();
        assert!(never.allowlist.mirror_rules()[0].never_contact_source);
        // convert keeps it, and what it writes loads the same.
        let converted = crate::inventory::to_native_yaml(&never.allowlist, "x", &[]);
        assert!(
            converted.contains("      mirrorSourcePolicy: NeverContactSource\n"),
            "{converted}"
        );
        assert!(rules(&converted)[0].never_contact_source);
        let e = errors("a.yaml", &doc("      mirrorSourcePolicy: Never\n"));
        assert_eq!(
            e[0].to_string(),
            "a.yaml:9: spec.mirrors[0].mirrorSourcePolicy: 'Never' is not a mirror source policy: write AllowContactingSource or NeverContactSource"
        );
    }

    #[test]
    fn csvs_linked_by_replaces_order_an_upgrade_whatever_their_names() {
        // The pair's real names are rhods-operator.1.20.1/1.21.0; here the
        // names carry no version, so only spec.replaces says they are one
        // operator.
        let read = |file: &str| {
            std::fs::read_to_string(format!(
                "{}/tests/data/allowlists/{file}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap()
        };
        let (base, old) = (
            read("rhods-operator.csv.yaml"),
            read("rhods-operator.1.20.1.csv.yaml"),
        );
        let text = format!(
            "{}\n---\n{}",
            old.replace("name: rhods-operator.1.20.1", "name: rhods-stable"),
            base.replace("name: rhods-operator.1.21.0", "name: rhods-fast")
                .replace("replaces: rhods-operator.1.20.1", "replaces: rhods-stable")
        );
        assert!(text.contains("replaces: rhods-stable"), "the fixture changed");
        let list = load_text("csvs.yaml", &text).unwrap().allowlist;
        let c = list.candidates("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8");
        let (p, by) = crate::policy::newest_release(&c).expect("replaces links the two releases");
        assert!(p.digest().starts_with("sha256:8af20e48bb48"), "{}", p.digest());
        assert_eq!(by.release().as_deref(), Some("rhods-fast 1.21.0"));
        assert_eq!(by.origin, "ClusterServiceVersion rhods-fast");

        let unlinked = text.replace("replaces: rhods-stable", "replaces: rhods-operator.1.19.0");
        let list = load_text("csvs.yaml", &unlinked).unwrap().allowlist;
        assert!(
            crate::policy::newest_release(
                &list.candidates("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8")
            )
            .is_none()
        );
    }

    #[test]
    fn native_errors_name_line_and_entry() {
        let text = "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nspec:\n  repositories:\n    - name: quay.io/x\n      digests:\n        - sha256:abc\n    - name: nginx\n      digests: [sha256:0000000000000000000000000000000000000000000000000000000000000000]\n    - name: quay.io/y\n      digestz: []\n";
        let errs = errors("bad.yaml", text);
        let shown: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert!(
            shown
                .iter()
                .any(|e| e.starts_with("bad.yaml:7: spec.repositories[0].digests[0]: 'sha256:abc'")),
            "{shown:#?}"
        );
        assert!(shown.iter().any(|e| e.starts_with("bad.yaml:8: spec.repositories[1].name: 'nginx' has no registry host")), "{shown:#?}");
        assert!(
            shown
                .iter()
                .any(|e| e.contains("bad.yaml:11: spec.repositories[2].digestz: unknown field 'digestz'")),
            "{shown:#?}"
        );
    }

    #[test]
    fn rewrite_to_must_be_promoted() {
        let text = format!(
            "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nspec:\n  repositories:\n    - name: quay.io/x\n      digests: [{A}]\n      rewriteTo: {B}\n"
        );
        let errs = errors("a.yaml", &text);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].line, Some(7));
        assert!(
            errs[0].message.contains("not one of its promoted digests"),
            "{}",
            errs[0]
        );
    }

    #[test]
    fn csv_related_images_and_env_load() {
        let text = format!(
            "apiVersion: operators.coreos.com/v1alpha1\nkind: ClusterServiceVersion\nmetadata: {{name: rhods-operator.1.21.0}}\nspec:\n  relatedImages:\n    - name: ovms\n      image: registry.redhat.io/rhods/ovms:v1.21.0-15@{A}\n    - name: tagged\n      image: registry.redhat.io/rhods/other:latest\n  install:\n    strategy: deployment\n    spec:\n      deployments:\n        - name: rhods-operator\n          spec:\n            template:\n              spec:\n                containers:\n                  - name: manager\n                    image: registry.redhat.io/rhods/operator@{B}\n                    env:\n                      - name: RELATED_IMAGE_ODH_DASHBOARD_IMAGE\n                        value: registry.redhat.io/rhods/dashboard@{B}\n                      - name: OTHER\n                        value: not-an-image\n"
        );
        let loaded = load_text("csv.yaml", &text).unwrap();
        assert_eq!(loaded.sources[0].format, Format::ClusterServiceVersion);
        assert_eq!(loaded.sources[0].entries, 2);
        let list = &loaded.allowlist;
        assert_eq!(
            list.candidates("registry.redhat.io/rhods/ovms")
                .digest_for_tag("v1.21.0-15")
                .unwrap()
                .digest(),
            A
        );
        assert!(
            list.candidates("registry.redhat.io/rhods/dashboard")
                .is_promoted(B)
        );
        // The operator's own image is not a related image.
        assert!(list.candidates("registry.redhat.io/rhods/operator").is_empty());
        assert_eq!(loaded.warnings.len(), 1);
        assert!(
            loaded.warnings[0]
                .to_string()
                .contains("spec.relatedImages[1].image"),
            "{}",
            loaded.warnings[0]
        );
    }

    #[test]
    fn image_set_configuration_loads() {
        let text = format!(
            "kind: ImageSetConfiguration\napiVersion: mirror.openshift.io/v1alpha2\nmirror:\n  additionalImages:\n    - name: quay.io/modh/openvino_model_server@{A}\n    - name: registry.redhat.io/ubi8/ubi:latest\n"
        );
        let loaded = load_text("isc.yaml", &text).unwrap();
        assert_eq!(loaded.sources[0].format, Format::ImageSetConfiguration);
        assert!(
            loaded
                .allowlist
                .candidates("quay.io/modh/openvino_model_server")
                .is_promoted(A)
        );
        assert_eq!(loaded.warnings.len(), 1);
    }

    /// Issue 60: an ImageSetConfiguration's `mirror.operators` was ignored
    /// without a word (`allowlist lint`: "1 promoted image(s)", exit 0):
    /// its catalog's images are not in the set. Now a warning, per catalog,
    /// saying how to promote them.
    #[test]
    fn operator_catalogs_of_an_image_set_are_said_not_read() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/allowlists/imageset.yaml");
        let loaded = load_text("imageset.yaml", &std::fs::read_to_string(path).unwrap()).unwrap();
        let said: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains(
                "mirror.operators[0]: packages rhods-operator of registry.redhat.io/redhat/redhat-operator-index:v4.12 not read: their images are in the catalog; promote them with the catalog itself (`opm render registry.redhat.io/redhat/redhat-operator-index:v4.12 > catalog.json`, then name catalog.json as an allowlist with --catalog-package rhods-operator)"
            ),
            "{said:?}"
        );
    }

    /// Files are parsed as they are read: text that turns out not to be
    /// UTF-8 half-way gives that one error, not the parser's view of a
    /// document cut short, nor the errors of the part before.
    #[test]
    fn a_file_that_stops_being_utf8_is_one_error() {
        let dir = std::env::temp_dir().join(format!("digest-gate-load-utf8-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let native = dir.join("native.yaml");
        let mut bytes = format!(
            "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nspec:\n  repositories:\n    - name: quay.io/a/b\n      digests: [{A}]\n    - name: quay.io/c/d\n      digests: [\""
        )
        .into_bytes();
        bytes.extend_from_slice(b"\xff\xfe\"]\n");
        std::fs::write(&native, &bytes).unwrap();
        let plain = dir.join("plain.txt");
        std::fs::write(&plain, b"nginx:latest\nquay.io/x/y@\xc3(\n").unwrap();
        for (path, name) in [(&native, "native.yaml"), (&plain, "plain.txt")] {
            let errors = load_paths(&[path]).expect_err("not UTF-8").0;
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].file.ends_with(name));
            assert_eq!(errors[0].message, "is not UTF-8 text");
        }
    }

    #[test]
    fn plain_lists_load_with_comments() {
        let text = format!(
            "# promoted for 1.21\nregistry.redhat.io/rhods/ovms:v1.21.0-15@{A}  # the runtime\n\nquay.io/modh/x@{B}\n"
        );
        let loaded = load_text("list.txt", &text).unwrap();
        assert_eq!(loaded.sources[0].format, Format::PlainList);
        assert_eq!(loaded.sources[0].entries, 2);
        let errs = errors(
            "list.txt",
            "quay.io/x:v1\nnginx@sha256:0000000000000000000000000000000000000000000000000000000000000000\n",
        );
        assert_eq!(errs.len(), 2);
        assert_eq!((errs[0].line, errs[1].line), (Some(1), Some(2)));
        assert!(errs[0].message.contains("not pinned by digest"));
        assert!(errs[1].message.contains("no registry host"));
    }

    #[test]
    fn unknown_kinds_and_bad_yaml_are_errors() {
        let errs = errors("x.yaml", "apiVersion: v1\nkind: ConfigMap\n");
        assert!(
            errs[0]
                .message
                .contains("kind 'ConfigMap' is not an allowlist source")
        );
        let errs = errors("x.yaml", "apiVersion: v1\nkind: [\n");
        assert!(errs[0].message.starts_with("not valid YAML"));
        assert!(errs[0].line.is_some());
    }

    const HEAD: &str = "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\n";

    #[test]
    fn every_way_to_write_a_native_document_reads_the_same() {
        let plain = format!(
            "{HEAD}spec:\n  repositories:\n    - name: quay.io/a/b\n      digests: [{A}, {B}]\n      rewriteTo: {A}\n"
        );
        let kind_last = format!(
            "spec:\n  repositories:\n    - name: quay.io/a/b\n      digests: [{A}, {B}]\n      rewriteTo: {A}\n{HEAD}"
        );
        let anchored = format!(
            "{HEAD}spec:\n  repositories:\n    - name: quay.io/x/y\n      digests: &d [{A}, {B}]\n      rewriteTo: {A}\n    - name: quay.io/a/b\n      digests: *d\n      rewriteTo: {A}\n"
        );
        let merged = format!(
            "{HEAD}spec:\n  repositories:\n    - &r {{name: quay.io/x/y, digests: [{A}, {B}], rewriteTo: {A}}}\n    - <<: *r\n      name: quay.io/a/b\n"
        );
        let listed = format!(
            "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: digest-gate.dev/v1alpha1\n    kind: Allowlist\n    spec: {{repositories: [{{name: quay.io/a/b, digests: [{A}, {B}], rewriteTo: {A}}}]}}\n"
        );
        let json = format!(
            "{{\"apiVersion\": \"digest-gate.dev/v1alpha1\", \"kind\": \"Allowlist\", \"spec\": {{\"repositories\": [{{\"name\": \"quay.io/a/b\", \"digests\": [\"{A}\", \"{B}\"], \"rewriteTo\": \"{A}\"}}]}}}}"
        );
        for (name, text) in [
            ("plain", plain),
            ("kind last", kind_last),
            ("anchored", anchored),
            ("merged", merged),
            ("listed", listed),
            ("json", json),
        ] {
            let loaded = load_text(name, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(loaded.sources[0].format, Format::Native, "{name}");
            let c = loaded.allowlist.candidates("quay.io/a/b");
            assert!(c.is_promoted(A) && c.is_promoted(B), "{name}");
            assert_eq!(crate::policy::default_target(&c).unwrap().digest(), A, "{name}");
        }
    }

    #[test]
    fn entries_in_a_list_are_named_by_their_item() {
        let item = "  - apiVersion: digest-gate.dev/v1alpha1\n    kind: Allowlist\n";
        let text = format!(
            "apiVersion: v1\nkind: List\nitems:\n{item}    spec:\n      repositories:\n        - name: quay.io/a/b\n          digests: [sha256:abc]\n{item}    spec: {{repositories: [{{name: quay.io/x/y, digests: [{A}], extra: 1}}]}}\n"
        );
        let shown: Vec<String> = errors("l.yaml", &text).iter().map(ToString::to_string).collect();
        assert!(
            shown
                .iter()
                .any(|e| e.starts_with("l.yaml:9: items[0].spec.repositories[0].digests[0]: 'sha256:abc'")),
            "{shown:#?}"
        );
        assert!(
            shown
                .iter()
                .any(|e| e
                    .starts_with("l.yaml:12: items[1].spec.repositories[0].extra: unknown field 'extra'")),
            "{shown:#?}"
        );
    }

    #[test]
    fn a_shape_error_ends_its_document_but_not_the_stream() {
        let text = format!(
            "{HEAD}spec: {{repositories: [{{name: nginx, digests: [{A}]}}, {{name: quay.io/a/b, digests: [3]}}, {{name: quay.io/c/d, digests: [sha256:1]}}]}}\n---\n{HEAD}spec:\n  repositories: []\n  repositories: []\n---\n{HEAD}spec: {{repositories: [{{digests: [{A}]}}]}}\n"
        );
        let shown: Vec<String> = errors("s.yaml", &text).iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "s.yaml:3: spec.repositories[0].name: 'nginx' has no registry host: Docker and containerd pull it from docker.io/library/nginx, CRI-O from its configured search registries; write the registry, e.g. docker.io/library/nginx",
                "s.yaml:3: spec.repositories[1].digests[0]: expected a digest or a mapping with 'digest', 'tags' and 'platforms', found a number",
                "s.yaml:9: spec: duplicate key 'repositories'",
                "s.yaml:13: spec.repositories[0].name: is required",
            ],
        );
    }

    #[test]
    fn null_means_not_set() {
        let text = format!(
            "{HEAD}spec: {{repositories: [{{name: quay.io/a/b, digests: [{A}], rewriteTo: null}}], mirrors: null, exemptImages: ~, shortNameRegistry: null}}\n"
        );
        let loaded = load_text("n.yaml", &text).unwrap();
        assert_eq!(loaded.allowlist.digest_count(), 1);
        assert!(loaded.allowlist.short_name_registry().is_none());
        let errs = errors(
            "n.yaml",
            &format!("{HEAD}spec: {{repositories: [{{name: quay.io/a/b, digests: null}}]}}\n"),
        );
        assert_eq!(errs[0].message, "quay.io/a/b lists no promoted digests");
    }

    use proptest::prelude::*;

    fn yamlish() -> impl Strategy<Value = String> {
        let token = prop_oneof![
            Just("apiVersion: digest-gate.dev/v1alpha1\n".to_owned()),
            Just("kind: Allowlist\n".to_owned()),
            Just("kind: ClusterServiceVersion\n".to_owned()),
            Just("kind: ImageSetConfiguration\n".to_owned()),
            Just("spec:\n".to_owned()),
            Just("  repositories:\n".to_owned()),
            Just("    - name: quay.io/x/y\n".to_owned()),
            Just(
                "      digests: [sha256:0000000000000000000000000000000000000000000000000000000000000000]\n"
                    .to_owned()
            ),
            Just("      rewriteTo: sha256:1\n".to_owned()),
            Just("  mirrors: [{source: quay.io, mirrors: [x]}]\n".to_owned()),
            Just("  exemptImages: [\"**\", 3, null]\n".to_owned()),
            Just("  relatedImages: [{image: 7}]\n".to_owned()),
            Just("mirror: {additionalImages: [{name: [1]}]}\n".to_owned()),
            Just("---\n".to_owned()),
            Just("&a [*a]\n".to_owned()),
            "[ -~]{0,40}\n",
        ];
        prop::collection::vec(token, 0..12).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn loaders_never_panic_on_any_text(text in "\\PC{0,400}") {
            let _ = load_text("fuzz.txt", &text);
        }

        #[test]
        fn loaders_never_panic_on_allowlist_shaped_yaml(text in yamlish()) {
            match load_text("fuzz.yaml", &text) {
                Ok(loaded) => {
                    // Whatever loads converts and loads again the same.
                    let yaml = crate::inventory::to_native_yaml(&loaded.allowlist, "fuzz", &[]);
                    let again = load_text("again.yaml", &yaml).unwrap();
                    prop_assert_eq!(again.allowlist.digest_count(), loaded.allowlist.digest_count());
                }
                Err(errors) => prop_assert!(!errors.0.is_empty()),
            }
        }
    }

    #[test]
    fn dotted_paths_read_like_yaml() {
        assert_eq!(
            dotted("/spec/repositories/2/digests/0"),
            "spec.repositories[2].digests[0]"
        );
        assert_eq!(
            dotted("/items/1/spec/relatedImages/0/image"),
            "items[1].spec.relatedImages[0].image"
        );
    }
}
