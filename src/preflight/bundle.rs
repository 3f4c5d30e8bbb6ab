//! The ConfigMap OLM unpacks a bundle into: one key per file of the
//! bundle's `manifests/` and `metadata/`. OLM runs `opm alpha bundle extract
//! -z`, which keeps each file gzipped and base64-encoded under `binaryData`
//! and says so in the `olm.contentEncoding: gzip+base64` annotation (so the
//! API serves each value base64-encoded twice); without it (older OLM, and
//! operator-registry's own test data) the files are plain text under `data`.

use std::io::Read;

use base64::Engine;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::Value;

/// The annotation opm sets when the files are gzip+base64.
pub const ENCODING_ANNOTATION: &str = "olm.contentEncoding";
pub const GZIP_BASE64: &str = "gzip+base64";

/// The most one bundle file may inflate to, and what `preflight --csv`
/// reads of a file: the largest CSVs (RHOAI's, with ~100 related images)
/// are under 1 MiB of text, the largest CRDs a few MiB.
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// The most a ConfigMap's files may inflate to together. A ConfigMap holds
/// at most 1 MiB, which gzip can make a thousand times larger: checked as
/// each file is inflated, so a bomb costs this much inflating, not memory.
pub const MAX_BUNDLE_BYTES: u64 = 64 << 20;
/// The most nodes the file that holds the CSV may make. RHOAI 3.3.5's CSV
/// (48 KB, in tests/fixtures/olm) makes a few thousand; read without
/// positions a node costs ~100 bytes, so this is ~10 MiB.
pub const MAX_CSV_NODES: usize = 100_000;

/// A bundle ConfigMap that does not hold the CSV it was referred to for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("ConfigMap {at}: key {key}: {why}")]
    Key { at: String, key: String, why: String },
    /// Past [`MAX_FILE_BYTES`], [`MAX_BUNDLE_BYTES`] or [`MAX_CSV_NODES`]:
    /// its plan is not judged.
    #[error("ConfigMap {at}: key {key}: bundle too large or too complex: {why}; not judged")]
    TooLarge { at: String, key: String, why: String },
    #[error("ConfigMap {at} holds no ClusterServiceVersion {csv} (keys: {keys})")]
    NoCsv { at: String, csv: String, keys: String },
    #[error(
        "ConfigMap {at}: unknown {ENCODING_ANNOTATION} {encoding:?} (opm writes {GZIP_BASE64:?} or nothing)"
    )]
    Encoding { at: String, encoding: String },
}

/// What a bundle ConfigMap holds: its CSVs by name, and its keys for a
/// message about one it does not hold.
#[derive(Debug, Clone)]
pub struct Bundle {
    at: String,
    keys: Vec<String>,
    csvs: Vec<(String, Value)>,
}

impl Bundle {
    /// The ClusterServiceVersion named `csv`.
    pub fn csv(&self, csv: &str) -> Result<Value, BundleError> {
        match self.csvs.iter().find(|(name, _)| name == csv) {
            Some((_, value)) => Ok(value.clone()),
            None => Err(BundleError::NoCsv {
                at: self.at.clone(),
                csv: csv.to_owned(),
                keys: self.keys.join(", "),
            }),
        }
    }
}

/// The ClusterServiceVersions among a bundle ConfigMap's files, by name. A
/// file that is not a Kubernetes object (OLM skips those too) is passed
/// over; one that cannot be decoded is an error, as it may be a CSV. The
/// files are inflated and read one at a time, only those that name the kind
/// parsed, each within [`MAX_CSV_NODES`] and all within
/// [`MAX_BUNDLE_BYTES`]: what the bundle costs is bounded whatever it holds.
pub fn read(cm: &ConfigMap) -> Result<Bundle, BundleError> {
    let at = format!(
        "{}/{}",
        cm.metadata.namespace.as_deref().unwrap_or_default(),
        cm.metadata.name.as_deref().unwrap_or_default()
    );
    let encoding = cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ENCODING_ANNOTATION))
        .map(String::as_str);
    let mut files = Files {
        at: at.clone(),
        inflated: 0,
        found: Vec::new(),
    };
    let mut keys = Vec::new();
    match encoding {
        Some(GZIP_BASE64) => {
            for (key, bytes) in cm.binary_data.iter().flatten() {
                let left = MAX_BUNDLE_BYTES.saturating_sub(files.inflated);
                let text = gunzip_base64(&bytes.0, left.min(MAX_FILE_BYTES)).map_err(|why| match why {
                    Inflate::TooLarge(why) => BundleError::TooLarge {
                        at: at.clone(),
                        key: key.clone(),
                        why: match left < MAX_FILE_BYTES {
                            true => format!("its files hold over {} MiB", MAX_BUNDLE_BYTES >> 20),
                            false => why,
                        },
                    },
                    Inflate::Broken(why) => BundleError::Key {
                        at: at.clone(),
                        key: key.clone(),
                        why,
                    },
                })?;
                files.read(key, &text)?;
                keys.push(key.clone());
            }
        }
        None | Some("") => {
            for (key, text) in cm.data.iter().flatten() {
                files.read(key, text)?;
                keys.push(key.clone());
            }
        }
        Some(other) => {
            return Err(BundleError::Encoding {
                at,
                encoding: other.to_owned(),
            });
        }
    }
    Ok(Bundle {
        at,
        keys,
        csvs: files.found,
    })
}

/// A bundle's files as they are read: what they inflated to so far, the
/// CSVs found.
struct Files {
    at: String,
    inflated: u64,
    found: Vec<(String, Value)>,
}

impl Files {
    fn read(&mut self, key: &str, text: &str) -> Result<(), BundleError> {
        let too_large = |why: String| BundleError::TooLarge {
            at: self.at.clone(),
            key: key.to_owned(),
            why,
        };
        self.inflated += text.len() as u64;
        if self.inflated > MAX_BUNDLE_BYTES {
            return Err(too_large(format!(
                "its files hold over {} MiB",
                MAX_BUNDLE_BYTES >> 20
            )));
        }
        // Most of a bundle is CRDs, which need no parse.
        if !text.contains("ClusterServiceVersion") {
            return Ok(());
        }
        let mut documents = crate::yaml::documents_capped(text, MAX_CSV_NODES).values_only();
        for doc in documents.by_ref() {
            let Ok(doc) = doc else { break };
            let value = doc.value;
            if value.get("kind").and_then(Value::as_str) == Some("ClusterServiceVersion")
                && let Some(name) = value.pointer("/metadata/name").and_then(Value::as_str)
            {
                self.found.push((name.to_owned(), value));
            }
        }
        match documents.too_large() {
            true => Err(too_large(format!("over {MAX_CSV_NODES} YAML nodes"))),
            false => Ok(()),
        }
    }
}

/// Why a file did not inflate.
#[derive(Debug, PartialEq, Eq)]
enum Inflate {
    Broken(String),
    TooLarge(String),
}

/// Bytes that are base64 text of a gzip stream, as UTF-8 text of at most
/// `max` bytes.
fn gunzip_base64(bytes: &[u8], max: u64) -> Result<String, Inflate> {
    // Base64 text may be wrapped; whitespace is not part of it.
    let compact: Vec<u8> = bytes
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    let gzipped = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|e| Inflate::Broken(format!("not base64 ({e})")))?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(gzipped.as_slice())
        .take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| Inflate::Broken(format!("not gzip of UTF-8 text ({e})")))?;
    if text.len() as u64 > max {
        return Err(Inflate::TooLarge(format!(
            "a file inflates to over {} MiB",
            max >> 20
        )));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use k8s_openapi::ByteString;

    use super::*;

    /// The ClusterServiceVersion named `name` among `cm`'s files.
    fn csv(cm: &ConfigMap, name: &str) -> Result<Value, BundleError> {
        read(cm)?.csv(name)
    }

    /// A bundle ConfigMap dumped from a real cluster (kiali-operator
    /// v1.4.2, operator-registry's loader test data): files under `data`.
    fn plain() -> ConfigMap {
        let text = crate::testing::fixture("tests/fixtures/olm/bundle-unpack-configmap.kiali.yaml");
        serde_json::from_value(crate::yaml::parse_stream(&text).unwrap().remove(0).value).unwrap()
    }

    /// The same bundle as OLM's unpacker writes it (`opm alpha bundle
    /// extract -z`): each file gzipped, base64 text, under `binaryData`.
    fn gzipped() -> ConfigMap {
        let mut cm = plain();
        let mut binary = std::collections::BTreeMap::new();
        for (key, text) in cm.data.take().unwrap() {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(text.as_bytes()).unwrap();
            let b64 = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
            binary.insert(key, ByteString(b64.into_bytes()));
        }
        cm.binary_data = Some(binary);
        cm.metadata
            .annotations
            .get_or_insert_default()
            .insert(ENCODING_ANNOTATION.into(), GZIP_BASE64.into());
        cm
    }

    #[test]
    fn the_csv_is_found_in_plain_and_gzipped_bundles_alike() {
        let from_plain = csv(&plain(), "kiali-operator.v1.4.2").unwrap();
        assert_eq!(
            from_plain.pointer("/spec/version").and_then(Value::as_str),
            Some("1.4.2")
        );
        assert_eq!(csv(&gzipped(), "kiali-operator.v1.4.2").unwrap(), from_plain);
    }

    #[test]
    fn a_bundle_without_the_csv_names_what_it_holds() {
        let err = csv(&plain(), "kiali-operator.v9.9.9").unwrap_err();
        assert_eq!(
            err.to_string(),
            "ConfigMap default/myconfigmap holds no ClusterServiceVersion kiali-operator.v9.9.9 (keys: kiali.crd.yaml, kiali.monitoringdashboards.crd.yaml, kiali.package.yaml, kiali.v1.4.2.clusterserviceversion.yaml)"
        );
    }

    #[test]
    fn a_file_that_is_not_gzip_or_an_unknown_encoding_is_an_error() {
        let mut cm = gzipped();
        cm.binary_data
            .as_mut()
            .unwrap()
            .insert("kiali.package.yaml".into(), ByteString(b"bm90IGd6aXA=".to_vec()));
        let err = csv(&cm, "kiali-operator.v1.4.2").unwrap_err().to_string();
        assert!(
            err.starts_with("ConfigMap default/myconfigmap: key kiali.package.yaml: not gzip of UTF-8 text"),
            "{err}"
        );
        let mut cm = plain();
        cm.metadata
            .annotations
            .get_or_insert_default()
            .insert(ENCODING_ANNOTATION.into(), "zstd".into());
        assert!(matches!(
            csv(&cm, "kiali-operator.v1.4.2"),
            Err(BundleError::Encoding { .. })
        ));
    }

    fn gzip_base64(text: &[u8]) -> ByteString {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(text).unwrap();
        ByteString(
            base64::engine::general_purpose::STANDARD
                .encode(gz.finish().unwrap())
                .into_bytes(),
        )
    }

    /// Issue 57: what a hostile bundle ConfigMap costs is bounded by the
    /// whole ConfigMap, not by each file, and it says "too large".
    #[test]
    fn a_hostile_bundle_is_too_large_not_expensive() {
        let with = |files: Vec<(String, ByteString)>| {
            let mut cm = gzipped();
            cm.binary_data = Some(files.into_iter().collect());
            cm
        };
        // Five files of 15 MiB each: every one under the file's bound,
        // together over the ConfigMap's.
        let spaces = gzip_base64(&vec![b' '; 15 << 20]);
        let many = with((0..5).map(|i| (format!("f{i}.yaml"), spaces.clone())).collect());
        let err = read(&many).unwrap_err();
        assert!(matches!(err, BundleError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("its files hold over 64 MiB"), "{err}");
        // A CSV of 300,000 `- 0` lines: too complex, read no further.
        let mut text =
            String::from("kind: ClusterServiceVersion\nmetadata:\n  name: x\nspec:\n  relatedImages:\n");
        text.push_str(&"  - 0\n".repeat(300_000));
        let err = read(&with(vec![("csv.yaml".into(), gzip_base64(text.as_bytes()))])).unwrap_err();
        assert!(
            err.to_string().contains("bundle too large or too complex"),
            "{err}"
        );
        // An alias bomb in a CSV: refused as it expands.
        let mut bomb = String::from("kind: ClusterServiceVersion\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            bomb.push_str(&format!(
                "a{i}: &a{i} [{}]\n",
                vec![format!("*a{}", i - 1); 10].join(", ")
            ));
        }
        let plain = {
            let mut cm = plain();
            cm.data = Some([("bomb.yaml".to_owned(), bomb)].into_iter().collect());
            cm
        };
        assert!(matches!(read(&plain), Err(BundleError::TooLarge { .. })));
        // The real bundle is still read whole.
        assert_eq!(read(&gzipped()).unwrap().csvs.len(), 1);
    }

    #[test]
    fn what_a_file_inflates_to_is_bounded() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![b' '; 1 << 20];
        for _ in 0..=(MAX_FILE_BYTES >> 20) {
            gz.write_all(&zeros).unwrap();
        }
        let b64 = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
        let err = gunzip_base64(b64.as_bytes(), MAX_FILE_BYTES).unwrap_err();
        assert_eq!(err, Inflate::TooLarge("a file inflates to over 16 MiB".into()));
    }
}
