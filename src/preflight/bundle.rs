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

/// The most one bundle file may inflate to: the largest CSVs (RHOAI's, with
/// ~100 related images) are under 1 MiB of text.
const MAX_FILE_BYTES: u64 = 64 << 20;

/// A bundle ConfigMap that does not hold the CSV it was referred to for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("ConfigMap {at}: key {key}: {why}")]
    Key { at: String, key: String, why: String },
    #[error("ConfigMap {at} holds no ClusterServiceVersion {csv} (keys: {keys})")]
    NoCsv { at: String, csv: String, keys: String },
    #[error(
        "ConfigMap {at}: unknown {ENCODING_ANNOTATION} {encoding:?} (opm writes {GZIP_BASE64:?} or nothing)"
    )]
    Encoding { at: String, encoding: String },
}

/// The ClusterServiceVersion named `csv` among a bundle ConfigMap's files.
/// A file that is not a Kubernetes object (OLM skips those too) is passed
/// over; one that cannot be decoded is an error, as it may be the CSV.
pub fn csv(cm: &ConfigMap, csv: &str) -> Result<Value, BundleError> {
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
    let files: Vec<(&String, String)> = match encoding {
        Some(GZIP_BASE64) => {
            let mut files = Vec::new();
            for (key, bytes) in cm.binary_data.iter().flatten() {
                let text = gunzip_base64(&bytes.0).map_err(|why| BundleError::Key {
                    at: at.clone(),
                    key: key.clone(),
                    why,
                })?;
                files.push((key, text));
            }
            files
        }
        None | Some("") => cm.data.iter().flatten().map(|(k, v)| (k, v.clone())).collect(),
        Some(other) => {
            return Err(BundleError::Encoding {
                at,
                encoding: other.to_owned(),
            });
        }
    };
    let keys: Vec<&str> = files.iter().map(|(k, _)| k.as_str()).collect();
    for (_, text) in &files {
        let Ok(documents) = crate::yaml::parse_stream(text) else {
            continue;
        };
        for doc in documents {
            let value = doc.value;
            let is_csv = value.get("kind").and_then(Value::as_str) == Some("ClusterServiceVersion");
            let name = value.pointer("/metadata/name").and_then(Value::as_str);
            if is_csv && name == Some(csv) {
                return Ok(value);
            }
        }
    }
    Err(BundleError::NoCsv {
        at,
        csv: csv.to_owned(),
        keys: keys.join(", "),
    })
}

/// Bytes that are base64 text of a gzip stream, as UTF-8 text.
fn gunzip_base64(bytes: &[u8]) -> Result<String, String> {
    // Base64 text may be wrapped; whitespace is not part of it.
    let compact: Vec<u8> = bytes
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    let gzipped = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|e| format!("not base64 ({e})"))?;
    let mut text = String::new();
    // A ConfigMap holds at most 1 MiB; what it inflates to is bounded too,
    // so a crafted one cannot take the memory of the run.
    flate2::read::GzDecoder::new(gzipped.as_slice())
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("not gzip of UTF-8 text ({e})"))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("inflates to over {} MiB", MAX_FILE_BYTES >> 20));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use k8s_openapi::ByteString;

    use super::*;

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

    #[test]
    fn what_a_file_inflates_to_is_bounded() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![b' '; 1 << 20];
        for _ in 0..=(MAX_FILE_BYTES >> 20) {
            gz.write_all(&zeros).unwrap();
        }
        let b64 = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
        let err = gunzip_base64(b64.as_bytes()).unwrap_err();
        assert_eq!(err, "inflates to over 64 MiB");
    }
}
