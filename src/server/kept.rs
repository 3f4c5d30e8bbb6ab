//! `--state-dir`: the last allowlist files that were put in force. The
//! running server keeps them, so that a container restarted with a mounted
//! allowlist that no longer loads (a bad edit, then an OOM kill) serves
//! them instead of exiting: with two replicas restarting, exiting would
//! block every model namespace until someone noticed.
//!
//! One file: a line of JSON naming each file and its length in bytes, then
//! the files' text, end to end. It is written and read a chunk at a time,
//! so keeping a copy never holds the allowlist's text.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::allowlist::{Input, OpenFile};

/// Why the kept copy cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum KeptError {
    #[error(
        "the allowlist is {bytes} bytes, more than the {max} kept in --state-dir (a catalog on a volume of its own needs no copy); a restart that finds it broken has no copy to fall back on"
    )]
    TooLarge { bytes: u64, max: u64 },
    #[error("cannot keep the last good allowlist in {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Its first line cannot be read or is not the JSON this writes.
    #[error("{}: {reason}", path.display())]
    Header { path: PathBuf, reason: String },
    #[error("{}: written in layout {format}, which this version does not read", path.display())]
    Layout { path: PathBuf, format: u32 },
    /// Cut short (a full disk) or grown since it was written.
    #[error("{}: holds {holds} bytes where its first line names {names}: it is damaged", path.display())]
    Damaged { path: PathBuf, holds: u64, names: u64 },
}

impl KeptError {
    /// A stable name for the kind of failure.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Write { .. } => "write",
            Self::Read { .. } => "read",
            Self::Header { .. } => "header",
            Self::Layout { .. } => "layout",
            Self::Damaged { .. } => "damaged",
            Self::TooLarge { .. } => "too_large",
        }
    }
}

/// Where the copy is kept.
pub struct LastGood {
    path: PathBuf,
}

/// The first line of the kept copy.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    /// Which layout follows; another is refused, not guessed at.
    format: u32,
    files: Vec<KeptFile>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct KeptFile {
    name: String,
    bytes: u64,
}

const KEPT_FORMAT: u32 = 1;

/// The longest first line read: far more than any list of file names.
const KEPT_HEADER_MAX: u64 = 1024 * 1024;

/// The most allowlist text kept. The chart's state directory is an emptyDir
/// of 16 MiB, and a volume over its sizeLimit gets the pod evicted: with the
/// copy being written beside the previous one, half of it. A file-based
/// catalog mounted beside the ConfigMap can be hundreds of MiB; it lives on
/// a volume of its own and is not copied.
pub const MAX_KEPT_BYTES: u64 = 8 * 1024 * 1024;

// === impl LastGood ===

impl LastGood {
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            path: dir.join("last-good-allowlist"),
        }
    }

    /// Keeps `files`, replacing the previous copy whole (written beside it,
    /// then renamed), so a crash mid-write leaves the old copy.
    pub fn save(&self, files: &[OpenFile]) -> Result<(), KeptError> {
        use std::io::Write;
        let bytes: u64 = files.iter().map(OpenFile::bytes).sum();
        if bytes > MAX_KEPT_BYTES {
            // A copy of an older allowlist would be served after a restart
            // as if it were the last good one: none is better.
            let _ = std::fs::remove_file(&self.path);
            return Err(KeptError::TooLarge {
                bytes,
                max: MAX_KEPT_BYTES,
            });
        }
        let partial = self.path.with_extension("partial");
        let write = || -> std::io::Result<()> {
            let mut out = std::io::BufWriter::new(std::fs::File::create(&partial)?);
            let kept = Kept {
                format: KEPT_FORMAT,
                files: files
                    .iter()
                    .map(|f| KeptFile {
                        name: f.name().to_owned(),
                        bytes: f.bytes(),
                    })
                    .collect(),
            };
            serde_json::to_writer(&mut out, &kept)?;
            out.write_all(b"\n")?;
            for f in files {
                let copied = std::io::copy(&mut f.open()?, &mut out)?;
                if copied != f.bytes() {
                    return Err(std::io::Error::other(format!(
                        "{} was cut short while it was copied",
                        f.name()
                    )));
                }
            }
            out.flush()?;
            std::fs::rename(&partial, &self.path)
        };
        write().map_err(|source| KeptError::Write {
            path: self.path.clone(),
            source,
        })
    }

    /// The copy kept, and when it was written; `None` when there is none.
    pub fn load(&self) -> Result<Option<(Vec<OpenFile>, String)>, KeptError> {
        use std::io::BufRead;
        let path = || self.path.clone();
        let header = |e: &dyn std::fmt::Display| KeptError::Header {
            path: path(),
            reason: e.to_string(),
        };
        let file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(KeptError::Read { path: path(), source }),
        };
        let meta = file.metadata().map_err(|e| header(&e))?;
        let mut line = Vec::new();
        std::io::BufReader::new(std::io::Read::take(&file, KEPT_HEADER_MAX))
            .read_until(b'\n', &mut line)
            .map_err(|e| header(&e))?;
        let kept: Kept = serde_json::from_slice(&line).map_err(|e| header(&e))?;
        if kept.format != KEPT_FORMAT {
            return Err(KeptError::Layout {
                path: path(),
                format: kept.format,
            });
        }
        let file = Arc::new(file);
        let mut offset = line.len() as u64;
        let mut files = Vec::new();
        for f in kept.files {
            files.push(OpenFile::part(f.name, file.clone(), offset, f.bytes));
            offset = offset.saturating_add(f.bytes);
        }
        if offset != meta.len() {
            return Err(KeptError::Damaged {
                path: path(),
                holds: meta.len(),
                names: offset,
            });
        }
        let saved = meta
            .modified()
            .map(|t| humantime::format_rfc3339_seconds(t).to_string())
            .unwrap_or_else(|_| "an unknown time".into());
        Ok(Some((files, saved)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::DefaultHasher;
    use std::hash::Hasher;

    use super::*;
    use crate::allowlist;

    const REPOSITORY: &str = "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8";
    const DIGEST_1_20_1: &str = "sha256:1201000000000000000000000000000000000000000000000000000000000000";
    const DIGEST_1_21_0: &str = "sha256:8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6";

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("digest-gate-kept-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// An allowlist larger than the state directory may hold is not
    /// copied (the chart's emptyDir would get the pod evicted), and the
    /// older copy goes: it is not the last good allowlist any more.
    #[test]
    fn an_allowlist_too_large_to_keep_is_not_kept_and_leaves_no_older_copy() {
        let dir = scratch("keep-large");
        let small = dir.join("small.txt");
        std::fs::write(&small, format!("{REPOSITORY}@{DIGEST_1_21_0}\n")).unwrap();
        let state = scratch("keep-large-state");
        let last_good = LastGood::in_dir(&state);
        last_good
            .save(&allowlist::open_files(std::slice::from_ref(&small)).unwrap())
            .unwrap();
        assert!(last_good.load().unwrap().is_some());
        let large = dir.join("catalog.json");
        std::fs::write(&large, vec![b' '; usize::try_from(MAX_KEPT_BYTES).unwrap() + 1]).unwrap();
        let files = allowlist::open_files(&[small, large]).unwrap();
        let error = last_good.save(&files).unwrap_err();
        assert_eq!(error.metric_label(), "too_large");
        assert!(
            error
                .to_string()
                .contains("more than the 8388608 kept in --state-dir"),
            "{error}"
        );
        assert!(last_good.load().unwrap().is_none());
        assert!(!state.join("last-good-allowlist.partial").exists());
    }

    /// What the kept copy holds is the text that was opened and loaded,
    /// even when the mount is swapped before it is written; it reads back
    /// as the same allowlist.
    #[test]
    fn the_kept_copy_is_the_text_that_loaded_and_reads_back_as_it() {
        let dir = scratch("keep");
        let (plain, native) = (dir.join("a.txt"), dir.join("b.yaml"));
        std::fs::write(
            &plain,
            format!("# ünïcode comment\n{REPOSITORY}:1.21@{DIGEST_1_21_0}\n"),
        )
        .unwrap();
        std::fs::write(
            &native,
            format!("apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nspec:\n  repositories:\n    - name: quay.io/org/x\n      digests: [{DIGEST_1_20_1}]\n"),
        )
        .unwrap();
        let opened = allowlist::open_files(std::slice::from_ref(&dir)).unwrap();
        let loaded = allowlist::load_sources(allowlist::inputs(&opened)).unwrap();
        let fingerprint = |files: &[OpenFile]| {
            let mut h = DefaultHasher::new();
            for f in files {
                f.hash_into(&mut h).unwrap();
            }
            h.finish()
        };
        let seen = fingerprint(&opened);
        // The kubelet swaps in a new version before the copy is written.
        let swapped = dir.join("a.txt.new");
        std::fs::write(
            &swapped,
            "quay.io/org/other@sha256:00000000000000000000000000000000000000000000000000000000000000aa\n",
        )
        .unwrap();
        std::fs::rename(&swapped, &plain).unwrap();
        let state = scratch("keep-state");
        let last_good = LastGood::in_dir(&state);
        last_good.save(&opened).unwrap();

        let (kept, _) = last_good.load().unwrap().expect("kept");
        let names: Vec<&str> = kept.iter().map(Input::name).collect();
        assert_eq!(names, [plain.display().to_string(), native.display().to_string()]);
        let again = allowlist::load_sources(allowlist::inputs(&kept)).unwrap();
        assert!(again.allowlist.candidates(REPOSITORY).is_promoted(DIGEST_1_21_0));
        assert!(again.allowlist.repository("quay.io/org/other").is_none());
        assert_eq!(
            (again.allowlist.repository_count(), again.allowlist.digest_count()),
            (
                loaded.allowlist.repository_count(),
                loaded.allowlist.digest_count()
            )
        );
        // Its lines are the files' own.
        assert_eq!(
            again.allowlist.candidates(REPOSITORY).promoted()[0]
                .promotions()
                .next()
                .unwrap()
                .line,
            2
        );
        // Kept again, it is the same text: nothing changed.
        assert_eq!(fingerprint(&kept), seen);
    }

    /// A copy cut short (a full disk), or written by a later layout, is
    /// refused whole, never half read; no copy is no copy.
    #[test]
    fn a_damaged_kept_copy_is_refused() {
        let dir = scratch("damaged");
        let list = dir.join("a.txt");
        std::fs::write(&list, format!("{REPOSITORY}@{DIGEST_1_21_0}\n")).unwrap();
        let last_good = LastGood::in_dir(&dir.join("state"));
        std::fs::create_dir_all(dir.join("state")).unwrap();
        assert!(last_good.load().unwrap().is_none());
        last_good.save(&allowlist::open_files(&[&list]).unwrap()).unwrap();
        let path = dir.join("state/last-good-allowlist");
        let whole = std::fs::read(&path).unwrap();

        std::fs::write(&path, &whole[..whole.len() - 5]).unwrap();
        let error = last_good.load().expect_err("cut short");
        assert!(matches!(error, KeptError::Damaged { .. }), "{error}");
        assert!(error.to_string().ends_with("it is damaged"), "{error}");

        let later = String::from_utf8(whole.clone())
            .unwrap()
            .replacen("\"format\":1", "\"format\":2", 1);
        std::fs::write(&path, later).unwrap();
        let error = last_good.load().expect_err("a later layout");
        assert!(matches!(error, KeptError::Layout { format: 2, .. }), "{error}");
        assert!(error.to_string().contains("layout 2"), "{error}");

        std::fs::write(&path, b"not json\n").unwrap();
        assert_eq!(last_good.load().unwrap_err().metric_label(), "header");
        std::fs::write(&path, &whole).unwrap();
        assert_eq!(last_good.load().unwrap().unwrap().0.len(), 1);
    }
}
