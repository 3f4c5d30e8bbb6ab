//! Where allowlist sources come from: files opened once and read a chunk at
//! a time (a directory's files, a mounted ConfigMap's keys), the keys of a
//! ConfigMap under review, and the installed operators' CSVs. `load` reads
//! what these hand it.

use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::error::{LoadError, LoadErrors, file_error};

/// An allowlist source to load: its name for messages, and its text from
/// the start, as often as the loader asks (once to tell its format, once to
/// parse it).
pub trait Input {
    fn name(&self) -> &str;
    fn open(&self) -> io::Result<Box<dyn BufRead + '_>>;
    /// What the source is; a file unless said otherwise.
    fn kind(&self) -> SourceKind {
        SourceKind::File
    }
}

/// What an allowlist source is, which its provenance names: a CSV read from
/// the cluster is `ClusterServiceVersion <name> (installed)`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// A file (in the cluster: a mounted ConfigMap's key).
    #[default]
    File,
    /// A key of an allowlist ConfigMap under review (`/validate-allowlist`).
    ConfigMapKey,
    /// An installed operator's ClusterServiceVersion, read from the cluster:
    /// which one, so nothing reads it back out of the source's name.
    InstalledCsv { namespace: String, name: String },
    /// The CSV `preflight` judges as the target: what would install it, as
    /// reports name it (`InstallPlan ns/name`, `CSV file F`, `bundle D`),
    /// and which CSV.
    PlannedCsv { by: String, name: String },
}

/// Each of `sources` as an [`Input`], for [`load_sources`](super::load_sources).
pub fn inputs<T: Input>(sources: &[T]) -> impl Iterator<Item = &dyn Input> {
    sources.iter().map(|s| s as &dyn Input)
}

/// One allowlist source's name and text, held in memory: an installed CSV,
/// a ConfigMap under review.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Source {
    pub name: String,
    pub text: String,
    pub kind: SourceKind,
}

impl Input for Source {
    fn name(&self) -> &str {
        &self.name
    }

    fn open(&self) -> io::Result<Box<dyn BufRead + '_>> {
        Ok(Box::new(self.text.as_bytes()))
    }

    fn kind(&self) -> SourceKind {
        self.kind.clone()
    }
}

/// An allowlist file opened once, read a chunk at a time: its text is never
/// held whole, and every read of it (to see whether it changed, to parse
/// it, to keep a copy of it) sees the same file, even if the kubelet swaps
/// the mounted ConfigMap in between.
#[derive(Debug, Clone)]
pub struct OpenFile {
    name: String,
    file: Arc<File>,
    /// Where its text starts in `file`, and how long it is: a file is read
    /// whole as it was when opened; a part of a file (a copy kept in
    /// `--state-dir`) is one of several texts in it.
    offset: u64,
    len: u64,
}

impl OpenFile {
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        let name = path.display().to_string();
        let opened = File::open(path).and_then(|f| Ok((f.metadata()?.len(), f)));
        match opened {
            Ok((len, file)) => Ok(Self {
                name,
                file: Arc::new(file),
                offset: 0,
                len,
            }),
            Err(e) => Err(file_error(&name, format!("cannot read: {e}"))),
        }
    }

    /// The text of `len` bytes at `offset` in `file`, named `name`.
    pub fn part(name: String, file: Arc<File>, offset: u64, len: u64) -> Self {
        Self {
            name,
            file,
            offset,
            len,
        }
    }

    /// Its length in bytes.
    pub fn bytes(&self) -> u64 {
        self.len
    }

    /// Feeds its name and text to `hasher`, a chunk at a time.
    pub fn hash_into(&self, hasher: &mut impl Hasher) -> Result<(), LoadError> {
        let feed = |hasher: &mut _| -> io::Result<()> {
            let mut text = self.open()?;
            loop {
                let chunk = text.fill_buf()?;
                if chunk.is_empty() {
                    return Ok(());
                }
                Hasher::write(hasher, chunk);
                let n = chunk.len();
                text.consume(n);
            }
        };
        self.name.hash(hasher);
        self.len.hash(hasher);
        feed(hasher).map_err(|e| file_error(&self.name, format!("cannot read: {e}")))
    }
}

impl Input for OpenFile {
    fn name(&self) -> &str {
        &self.name
    }

    fn open(&self) -> io::Result<Box<dyn BufRead + '_>> {
        let mut file = &*self.file;
        file.seek(SeekFrom::Start(self.offset))?;
        Ok(Box::new(BufReader::with_capacity(64 * 1024, file.take(self.len))))
    }
}

/// Opens the files [`load_paths`](super::load_paths) would load, without reading them.
pub fn open_files<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<OpenFile>, LoadErrors> {
    let files = source_files(paths)?;
    let mut errors = Vec::new();
    let mut opened = Vec::new();
    for file in files {
        match OpenFile::open(&file) {
            Ok(f) => opened.push(f),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(opened)
    } else {
        Err(LoadErrors(errors))
    }
}

/// The files [`load_paths`](super::load_paths) reads: each path, or a directory's visible files.
pub fn source_files<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<PathBuf>, LoadErrors> {
    let mut errors = Vec::new();
    let mut files = Vec::new();
    for path in paths {
        match expand(path.as_ref()) {
            Ok(found) => files.extend(found),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(files)
    } else {
        Err(LoadErrors(errors))
    }
}

/// The name prefix of an installed CSV's source, `cluster:<namespace>/<name>`:
/// where messages and provenance say it came from.
pub const INSTALLED_PREFIX: &str = "cluster:";

impl Source {
    /// An installed operator's ClusterServiceVersion in `namespace`, as
    /// read from the cluster (pruned to what the loader reads).
    pub fn installed_csv(namespace: &str, csv: &Value) -> Self {
        let name = csv_name(csv);
        Self {
            name: Self::installed_csv_name(namespace, name),
            text: csv.to_string(),
            kind: SourceKind::InstalledCsv {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            },
        }
    }

    /// CSV `csv` as `by` (`InstallPlan ns/name`, `CSV file F`) would
    /// install it.
    pub fn planned_csv(by: &str, csv: &Value) -> Self {
        let name = csv_name(csv);
        Self {
            name: format!("{by}: {name}"),
            text: csv.to_string(),
            kind: SourceKind::PlannedCsv {
                by: by.to_owned(),
                name: name.to_owned(),
            },
        }
    }

    /// The source name of installed CSV `name` in `namespace`.
    pub fn installed_csv_name(namespace: &str, name: &str) -> String {
        format!("{INSTALLED_PREFIX}{namespace}/{name}")
    }

    /// `namespace/name` of an installed CSV; the source's name otherwise.
    pub fn short_name(&self) -> std::borrow::Cow<'_, str> {
        match &self.kind {
            SourceKind::InstalledCsv { namespace, name } => format!("{namespace}/{name}").into(),
            _ => self.name.as_str().into(),
        }
    }
}

fn csv_name(csv: &Value) -> &str {
    csv.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// A ConfigMap's keys as the files the kubelet mounts: `data` as text,
/// `binaryData` decoded (and refused, as a file that is not UTF-8 text is),
/// keys starting with `.` left out as the hidden files the loader skips, in
/// name order. What `/validate-allowlist` checks an edit by.
pub fn configmap_sources(object: &serde_json::Map<String, Value>) -> Result<Vec<Source>, LoadErrors> {
    use base64::Engine;
    let mut sources = Vec::new();
    let mut errors = Vec::new();
    let entries = |field: &str| {
        object
            .get(field)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(key, _)| !key.starts_with('.'))
    };
    let source = |name: &str, text: String| Source {
        name: name.to_owned(),
        text,
        kind: SourceKind::ConfigMapKey,
    };
    for (key, value) in entries("data") {
        match value.as_str() {
            Some(text) => sources.push(source(key, text.to_owned())),
            None => errors.push(file_error(key, "is not a string")),
        }
    }
    for (key, value) in entries("binaryData") {
        let bytes = value
            .as_str()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
        match bytes.map(String::from_utf8) {
            Some(Ok(text)) => sources.push(source(key, text)),
            _ => errors.push(file_error(key, "is not UTF-8 text")),
        }
    }
    if !errors.is_empty() {
        return Err(LoadErrors(errors));
    }
    sources.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(sources)
}

fn expand(path: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let name = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| file_error(&name, format!("cannot read: {e}")))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    walk(path, 0, &mut files)?;
    Ok(files)
}

/// How deep a directory's subdirectories are read: a catalog tree is
/// `configs/<package>/catalog.json`; a symlink loop must end.
const MAX_DEPTH: usize = 8;

/// A directory's visible files, in name order; then, in its visible
/// subdirectories, the `*.json`, `*.yaml` and `*.yml` files (a file-based
/// catalog's tree, which also holds other files), to [`MAX_DEPTH`].
fn walk(dir: &Path, depth: usize, files: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let name = dir.display().to_string();
    let listing = |e: io::Error| file_error(&name, format!("cannot list directory: {e}"));
    let mut entries: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(listing)? {
        let entry = entry.map_err(listing)?;
        if !entry.file_name().to_string_lossy().starts_with('.') {
            entries.push(entry.path());
        }
    }
    entries.sort();
    let mut subdirectories = Vec::new();
    for p in entries {
        // Follow the kubelet's symlinks to the files behind them.
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() && (depth == 0 || is_document(&p)) => files.push(p),
            Ok(m) if m.is_dir() && depth < MAX_DEPTH => subdirectories.push(p),
            _ => {}
        }
    }
    for sub in subdirectories {
        walk(&sub, depth + 1, files)?;
    }
    Ok(())
}

fn is_document(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "json" | "yaml" | "yml"))
}
