//! TLS for the webhook port: a certificate resolver whose key pair can be
//! swapped while the server runs, the rustls configuration, and the
//! throwaway CA that `serve --dev` generates.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why TLS material cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no PEM private key: {reason}")]
    NoKey { path: PathBuf, reason: String },
    #[error("the key in {key} cannot be used with the certificate in {cert}: {reason}")]
    Unusable {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
    #[error("client CA {path}: {reason}")]
    ClientCa { path: PathBuf, reason: String },
    #[error("cannot build the TLS configuration: {0}")]
    Config(String),
    #[error("cannot generate the development certificates: {0}")]
    Generate(String),
}

/// The crypto provider digest-gate uses everywhere: ring, TLS 1.2 and 1.3
/// with its default (AEAD-only, forward-secret) cipher suites.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A PEM file's bytes, or a [`TlsError::Read`] naming it.
pub fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Reads a PEM certificate chain and key, and checks that they belong together.
pub fn load_key_pair(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let cert_pem = read(cert)?;
    let key_pem = read(key)?;
    parse_key_pair(cert, &cert_pem, key, &key_pem, provider)
}

/// [`load_key_pair`] on bytes already read.
pub fn parse_key_pair(
    cert: &Path,
    cert_pem: &[u8],
    key: &Path,
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|_| TlsError::NoCertificate {
            path: cert.to_owned(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_owned(),
        });
    }
    let private = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::NoKey {
        path: key.to_owned(),
        reason: e.to_string(),
    })?;
    CertifiedKey::from_der(chain, private, provider).map_err(|e| TlsError::Unusable {
        cert: cert.to_owned(),
        key: key.to_owned(),
        reason: e.to_string(),
    })
}

/// When the chain in `key` stops being valid, as Unix seconds: the earliest
/// notAfter in it, since an intermediate that expires first breaks the chain
/// as surely as the leaf. `None` when a certificate's validity cannot be read
/// (rustls accepted it, so that is not expected).
pub fn chain_expiry(key: &CertifiedKey) -> Option<i64> {
    key.cert.iter().try_fold(None, |earliest: Option<i64>, der| {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let ends = cert.validity().not_after.timestamp();
        Some(Some(earliest.map_or(ends, |e| e.min(ends))))
    })?
}

/// Serves whatever key pair was loaded last. A handshake costs one atomic
/// load; a reload swaps the pair only once the new one has parsed.
#[derive(Debug)]
pub struct CertStore {
    current: ArcSwap<CertifiedKey>,
}

impl CertStore {
    /// Starts with `key`.
    pub fn new(key: CertifiedKey) -> Self {
        Self {
            current: ArcSwap::from_pointee(key),
        }
    }

    /// Puts `key` in force for new handshakes.
    pub fn swap(&self, key: CertifiedKey) {
        self.current.store(Arc::new(key));
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The webhook's rustls configuration: TLS 1.2+, ALPN `h2` and `http/1.1`
/// (the apiserver pins HTTP/1.1 for service webhooks), and client
/// certificates required when `client_ca` is given.
pub fn server_config(
    store: Arc<CertStore>,
    client_ca: Option<&Path>,
    provider: Arc<CryptoProvider>,
) -> Result<ServerConfig, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let pem = read(path)?;
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| TlsError::ClientCa {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })?;
                roots.add(cert).map_err(|e| TlsError::ClientCa {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })?;
            }
            if roots.is_empty() {
                return Err(TlsError::ClientCa {
                    path: path.to_owned(),
                    reason: "holds no PEM certificate".into(),
                });
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::ClientCa {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(store);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Files written by [`generate_dev_certificates`].
#[derive(Debug, Clone)]
pub struct DevCertificates {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What a certificate issued by a [`DevCa`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// A serving certificate (TLS server authentication).
    Server,
    /// A client certificate (as an apiserver may present).
    Client,
}

/// A certificate and its key, as PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A throwaway certificate authority: `serve --dev`'s, and the tests' PKI.
pub struct DevCa {
    /// The CA certificate, as PEM (what a `caBundle` holds).
    pub ca_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

fn generate_error(e: rcgen::Error) -> TlsError {
    TlsError::Generate(e.to_string())
}

impl DevCa {
    /// A new CA named `name`, with a fresh key.
    pub fn new(name: &str) -> Result<Self, TlsError> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(generate_error)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().map_err(generate_error)?;
        let cert = params.self_signed(&key).map_err(generate_error)?;
        Ok(Self {
            ca_pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        })
    }

    /// A certificate for `names` (DNS names or IP addresses; the first is
    /// also the common name), signed by this CA.
    pub fn issue(&self, names: &[&str], usage: Usage) -> Result<Issued, TlsError> {
        use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose};
        let owned: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(owned).map_err(generate_error)?;
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("localhost"));
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![match usage {
            Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        let key = KeyPair::generate().map_err(generate_error)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(generate_error)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Generates a throwaway CA and a serving certificate for `names` (DNS names
/// or IP addresses) into `dir`. For development only: the CA key is discarded.
pub fn generate_dev_certificates(dir: &Path, names: &[&str]) -> Result<DevCertificates, TlsError> {
    let ca = DevCa::new("digest-gate development CA")?;
    let issued = ca.issue(names, Usage::Server)?;
    std::fs::create_dir_all(dir).map_err(|e| TlsError::Generate(format!("{}: {e}", dir.display())))?;
    let files = DevCertificates {
        ca: dir.join("ca.crt"),
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|e| TlsError::Generate(format!("{}: {e}", path.display())))
    };
    write(&files.ca, &ca.ca_pem)?;
    write(&files.cert, &issued.cert_pem)?;
    write(&files.key, &issued.key_pem)?;
    restrict(&files.key);
    Ok(files)
}

#[cfg(unix)]
fn restrict(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
}

#[cfg(not(unix))]
fn restrict(_path: &Path) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("digest-gate-tls-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn generated_certificates_load_and_match() {
        let dir = scratch("gen");
        let files = generate_dev_certificates(&dir, &["localhost", "127.0.0.1"]).unwrap();
        let key = load_key_pair(&files.cert, &files.key, &provider()).unwrap();
        assert_eq!(key.cert.len(), 1);
        let store = Arc::new(CertStore::new(key));
        server_config(store, Some(&files.ca), provider()).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_chain_expires_with_its_first_certificate_to_expire() {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        // An intermediate that ends before the leaf it signs, as happens
        // when a CA is rotated late.
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.not_after = rcgen::date_time_ymd(2030, 1, 1);
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let mut leaf = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        leaf.not_after = rcgen::date_time_ymd(2035, 1, 1);
        let leaf_key = KeyPair::generate().unwrap();
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
        let p = provider();
        let key_pem = leaf_key.serialize_pem();
        let (c, k) = (Path::new("c"), Path::new("k"));

        let alone = parse_key_pair(c, leaf_cert.pem().as_bytes(), k, key_pem.as_bytes(), &p).unwrap();
        assert_eq!(chain_expiry(&alone), Some(2_051_222_400));
        let chain = format!("{}{}", leaf_cert.pem(), ca_cert.pem());
        let chained = parse_key_pair(c, chain.as_bytes(), k, key_pem.as_bytes(), &p).unwrap();
        assert_eq!(chain_expiry(&chained), Some(1_893_456_000));
        // rustls does not parse the chain beyond the leaf: a broken second
        // certificate loads, and its expiry is unknown rather than made up.
        let mut broken = chained.clone();
        broken.cert[1] = CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00]);
        assert_eq!(chain_expiry(&broken), None);
    }

    #[test]
    fn mismatched_or_garbage_material_is_refused() {
        let a = generate_dev_certificates(&scratch("a"), &["localhost"]).unwrap();
        let b = generate_dev_certificates(&scratch("b"), &["localhost"]).unwrap();
        let err = load_key_pair(&a.cert, &b.key, &provider()).unwrap_err();
        assert!(matches!(err, TlsError::Unusable { .. }), "{err}");
        let p = provider();
        let garbage = parse_key_pair(Path::new("c"), b"not pem", Path::new("k"), b"", &p).unwrap_err();
        assert!(matches!(garbage, TlsError::NoCertificate { .. }), "{garbage}");
        let cert = std::fs::read(&a.cert).unwrap();
        let nokey = parse_key_pair(
            Path::new("c"),
            &cert,
            Path::new("k"),
            b"-----BEGIN NOTHING-----",
            &p,
        )
        .unwrap_err();
        assert!(matches!(nokey, TlsError::NoKey { .. }), "{nokey}");
        let missing = load_key_pair(Path::new("/nonexistent/tls.crt"), &a.key, &p).unwrap_err();
        assert!(
            missing
                .to_string()
                .starts_with("cannot read /nonexistent/tls.crt"),
            "{missing}"
        );
    }
}
