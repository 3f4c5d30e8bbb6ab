//! What a manifest's bytes are: an image a node can run, an index of
//! images, or something else (a signature, an attestation, an artifact).
//!
//! Only the fields that decide are read, and leniently: a registry serves
//! what was pushed, and a field this does not need must not make a verdict
//! unverifiable.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::published::Platform;

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// What a manifest request accepts: the media types a container runtime
/// pulls. (A Docker schema 1 manifest is not asked for: containerd 2 no
/// longer pulls it.)
pub const ACCEPTED: &[&str] = &[OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST];

/// The configs of images a runtime starts.
const IMAGE_CONFIGS: &[&str] = &[
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.docker.container.image.v1+json",
];

/// Filesystem layers, in every form a runtime unpacks.
const FILESYSTEM_LAYERS: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
];

/// A cosign signature's payload (the `.sig` tag). Its manifest carries an
/// image config: the config alone does not tell a signature from an image.
const COSIGN_SIGNATURE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// A cosign attestation's envelope (the `.att` tag).
const DSSE_ENVELOPE: &str = "application/vnd.dsse.envelope.v1+json";
/// An in-toto statement: BuildKit's attestation manifests, legacy form.
const IN_TOTO: &str = "application/vnd.in-toto+json";

/// A content descriptor, as manifests and indexes list them.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    #[serde(default)]
    pub platform: Option<DescribedPlatform>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// A platform as a descriptor or an image config states it.
#[derive(Debug, Clone, Deserialize)]
pub struct DescribedPlatform {
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub variant: Option<String>,
}

impl DescribedPlatform {
    pub fn platform(&self) -> Platform {
        Platform {
            os: self.os.clone(),
            architecture: self.architecture.clone(),
            variant: self.variant.clone().filter(|v| !v.is_empty()),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    artifact_type: Option<String>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
}

/// A manifest, read.
#[derive(Debug, Clone)]
pub enum Manifest {
    Image(Image),
    /// An image index (a Docker manifest list alike): its entries.
    Index(Vec<Descriptor>),
}

/// An image manifest (or an artifact dressed as one).
#[derive(Debug, Clone)]
pub struct Image {
    pub artifact_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

/// Why bytes are not a manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("the registry served something that is not a manifest: {0}")]
    Json(String),
    #[error("the registry served a {0} manifest, which no container runtime pulls")]
    MediaType(String),
    #[error("the registry served a manifest with neither `config` nor `manifests`")]
    Shape,
}

impl Manifest {
    /// Reads a manifest's bytes. The media type is the one the manifest
    /// states, else told by its shape (OCI makes `mediaType` optional).
    pub fn parse(bytes: &[u8]) -> Result<Self, ManifestError> {
        let raw: Raw = serde_json::from_slice(bytes).map_err(|e| ManifestError::Json(e.to_string()))?;
        match raw.media_type.as_deref() {
            Some(OCI_INDEX | DOCKER_LIST) => Ok(Self::Index(raw.manifests.unwrap_or_default())),
            Some(OCI_MANIFEST | DOCKER_MANIFEST) | None => match (raw.config, raw.manifests) {
                (Some(config), _) => Ok(Self::Image(Image {
                    artifact_type: raw.artifact_type,
                    config,
                    layers: raw.layers.unwrap_or_default(),
                })),
                (None, Some(children)) if raw.media_type.is_none() => Ok(Self::Index(children)),
                _ => Err(ManifestError::Shape),
            },
            Some(other) => Err(ManifestError::MediaType(other.to_owned())),
        }
    }
}

/// What a manifest is instead of an image a node can run, in words for
/// the person who pinned it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRunnable {
    #[error("a cosign signature (a `.sig` tag's manifest), not the image it signs")]
    CosignSignature,
    #[error("a cosign attestation (a `.att` tag's manifest), not the image it attests")]
    CosignAttestation,
    #[error("a Notary signature (an OCI artifact), not an image")]
    NotarySignature,
    #[error("a BuildKit attestation (an OCI artifact), not an image")]
    BuildkitArtifact,
    #[error("an OCI artifact of type {0}, not an image")]
    Artifact(String),
    #[error("a BuildKit attestation manifest (in-toto layers), not an image")]
    InToto,
    /// Its config's media type, as served (may be empty).
    #[error("its config is {}, not an image config: not an image", or_unstated(.0))]
    Config(String),
    #[error("an image manifest with no filesystem layer")]
    NoFilesystemLayer,
}

impl Image {
    /// `Ok` when a node can run it; else what it is instead.
    pub fn runnable(&self) -> Result<(), NotRunnable> {
        let is_layer = |kind: &str| self.layers.iter().any(|l| l.media_type == kind);
        let signed = self.layers.iter().any(|l| {
            l.annotations
                .keys()
                .any(|k| k == "dev.cosignproject.cosign/signature" || k == "dev.sigstore.cosign/signature")
        });
        if is_layer(COSIGN_SIGNATURE) || signed {
            return Err(NotRunnable::CosignSignature);
        }
        if is_layer(DSSE_ENVELOPE) {
            return Err(NotRunnable::CosignAttestation);
        }
        if let Some(kind) = &self.artifact_type {
            return Err(match kind.as_str() {
                "application/vnd.cncf.notary.signature" => NotRunnable::NotarySignature,
                "application/vnd.docker.attestation.manifest.v1+json" => NotRunnable::BuildkitArtifact,
                _ => NotRunnable::Artifact(kind.clone()),
            });
        }
        if is_layer(IN_TOTO) {
            return Err(NotRunnable::InToto);
        }
        if !IMAGE_CONFIGS.contains(&self.config.media_type.as_str()) {
            return Err(NotRunnable::Config(self.config.media_type.clone()));
        }
        if !self
            .layers
            .iter()
            .any(|l| FILESYSTEM_LAYERS.contains(&l.media_type.as_str()))
        {
            return Err(NotRunnable::NoFilesystemLayer);
        }
        Ok(())
    }
}

fn or_unstated(media_type: &str) -> &str {
    if media_type.is_empty() {
        "unstated"
    } else {
        media_type
    }
}

/// Whether an index entry is an image a node could pick: not one of the
/// attestation manifests BuildKit lists beside the images (`unknown/unknown`,
/// `vnd.docker.reference.type: attestation-manifest`).
pub fn is_candidate(entry: &Descriptor) -> bool {
    let attestation = entry
        .annotations
        .get("vnd.docker.reference.type")
        .is_some_and(|t| t == "attestation-manifest");
    let unknown = entry
        .platform
        .as_ref()
        .is_some_and(|p| p.os == "unknown" && p.architecture == "unknown");
    !attestation && !unknown
}

/// The platform an image config says the image is for.
pub fn config_platform(bytes: &[u8]) -> Option<Platform> {
    serde_json::from_slice::<DescribedPlatform>(bytes)
        .ok()
        .filter(|p| !p.os.is_empty() && !p.architecture.is_empty())
        .map(|p| p.platform())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!(
            "{}/tests/fixtures/oci/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    fn image(name: &str) -> Image {
        match Manifest::parse(&fixture(name)).unwrap() {
            Manifest::Image(i) => i,
            Manifest::Index(_) => panic!("{name} is an index"),
        }
    }

    #[test]
    fn signatures_attestations_and_artifacts_are_not_runnable_and_say_what_they_are() {
        let cases = [
            (
                "cosign-sig-manifest.falco-cloudtrail.ghcr.json",
                "cosign signature",
            ),
            (
                "cosign-sig-manifest.legacy-2021.cosign-readme.json",
                "cosign signature",
            ),
            (
                "buildx-attestation-manifest.kubewarden-controller.ghcr.json",
                "BuildKit attestation manifest",
            ),
            (
                "oci-attestation-manifest-artifact.buildkit-docs-example.json",
                "BuildKit attestation",
            ),
            (
                "notation-signature-manifest.notary-spec-example.json",
                "Notary signature",
            ),
            (
                "oci11-artifact-subject.oras-e2e.sha256-6aa11331.json",
                "application/vnd.unknown.artifact.v1",
            ),
            (
                "oci11-artifact-referrer-sbom.oras-e2e.sha256-359bac7f.json",
                "sbom/file",
            ),
            (
                "oci11-artifact-referrer-signature.oras-e2e.sha256-938419ae.json",
                "signature/file",
            ),
        ];
        for (name, says) in cases {
            let why = image(name).runnable().unwrap_err().to_string();
            assert!(why.contains(says), "{name}: {why}");
        }
    }

    #[test]
    fn an_image_with_an_image_config_and_a_filesystem_layer_runs() {
        let mut i = image("cosign-sig-manifest.falco-cloudtrail.ghcr.json");
        // The signature's own config is an image config: only its layer
        // tells it apart. With a filesystem layer instead, it is an image.
        i.layers[0].media_type = "application/vnd.oci.image.layer.v1.tar+gzip".into();
        i.layers[0].annotations.clear();
        assert_eq!(i.runnable(), Ok(()));
        i.layers.clear();
        assert_eq!(i.runnable(), Err(NotRunnable::NoFilesystemLayer));
    }

    #[test]
    fn an_index_lists_its_images_apart_from_its_attestations() {
        let Manifest::Index(entries) = Manifest::parse(&fixture(
            "oci-index-multiarch-with-attestations.moby-buildkit-master.buildx-docs.json",
        ))
        .unwrap() else {
            panic!("not an index")
        };
        let images: Vec<String> = entries
            .iter()
            .filter(|e| is_candidate(e))
            .map(|e| e.platform.as_ref().unwrap().platform().to_string())
            .collect();
        assert_eq!(
            images,
            [
                "linux/amd64",
                "linux/arm/v7",
                "linux/arm64",
                "linux/s390x",
                "linux/ppc64le",
                "linux/riscv64"
            ]
        );
        assert_eq!(entries.len() - images.len(), 6);
        let Manifest::Index(one) =
            Manifest::parse(&fixture("oci-index-with-attestation.buildkit-docs-example.json")).unwrap()
        else {
            panic!("not an index")
        };
        assert_eq!(one.iter().filter(|e| is_candidate(e)).count(), 1);
    }

    #[test]
    fn what_is_not_a_manifest_says_so() {
        assert!(matches!(Manifest::parse(b"<html>"), Err(ManifestError::Json(_))));
        let schema1 =
            br#"{"schemaVersion":1,"mediaType":"application/vnd.docker.distribution.manifest.v1+prettyjws"}"#;
        assert!(
            Manifest::parse(schema1)
                .unwrap_err()
                .to_string()
                .contains("v1+prettyjws")
        );
        assert_eq!(Manifest::parse(b"{}").unwrap_err(), ManifestError::Shape);
        assert_eq!(
            config_platform(br#"{"os":"linux","architecture":"arm","variant":"v7","rootfs":{}}"#)
                .unwrap()
                .to_string(),
            "linux/arm/v7"
        );
    }
}
