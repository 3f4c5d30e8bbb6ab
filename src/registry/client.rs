//! Asking registries, over the OCI distribution API, through `oci-client`.
//!
//! The thin layer beside the crate, and why:
//! - `oci-client` keeps one credential per registry host, the first it is
//!   given; an auth file may hold several for one host (by path prefix, as
//!   the kubelet matches them). So there is one client per credential used.
//! - It has no limit on requests in flight and no retries: both are here
//!   (a global and a per-host semaphore; 1, 2, 4 s backoff on 429, 5xx and
//!   timeouts). Its errors carry no response headers, so `Retry-After` cannot
//!   be honoured; the backoff applies instead.
//! - Its errors are sorted here into what the verifier may conclude: only
//!   `MANIFEST_UNKNOWN` (or `BLOB_UNKNOWN`) to an authorised request is an
//!   absence; everything else it could not check is unverifiable.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio::sync::Semaphore;

use super::auth::{AuthError, AuthFile};
use super::manifest::ACCEPTED;
use crate::published::Trouble;

/// How to reach registries.
#[derive(Debug, Clone)]
pub struct RegistrySettings {
    pub auth: AuthFile,
    /// PEM files whose certificates are trusted beside the system's roots.
    pub ca: Vec<PathBuf>,
    /// Longest one request may take (connect and each read).
    pub timeout: Duration,
    /// Requests in flight, in all.
    pub concurrency: usize,
    /// Requests in flight to one registry host.
    pub per_host: usize,
    /// Waits before the retries of a request that may succeed later.
    pub backoff: Vec<Duration>,
}

impl RegistrySettings {
    pub fn new(auth: AuthFile, ca: Vec<PathBuf>, timeout: Duration, concurrency: usize) -> Self {
        Self {
            auth,
            ca,
            timeout,
            concurrency: concurrency.max(1),
            per_host: 4.min(concurrency.max(1)),
            backoff: vec![
                Duration::from_secs(1),
                Duration::from_secs(2),
                Duration::from_secs(4),
            ],
        }
    }
}

/// Why registries cannot be asked at all.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error("--registry-ca {path}: cannot read it: {source}")]
    CaRead { path: PathBuf, source: std::io::Error },
    #[error("--registry-ca {path}: no PEM certificate in it")]
    CaEmpty { path: PathBuf },
    #[error("--registry-ca {path}: {message}")]
    CaInvalid { path: PathBuf, message: String },
    #[error("cannot set up the registry client: {0}")]
    Client(String),
}

/// What a registry answered, sorted by what may be concluded from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    Found(T),
    /// The registry said, to a request it authorised, that it does not have
    /// it (its error code, e.g. `MANIFEST_UNKNOWN`).
    Unknown(String),
    /// It could not be asked to the end: why.
    Unverifiable(String),
}

/// Clients for every credential, and the limits they share.
pub struct Registries {
    settings: RegistrySettings,
    certificates: Vec<oci_client::client::Certificate>,
    clients: Mutex<HashMap<Option<String>, Arc<Client>>>,
    all: Semaphore,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
    requests: AtomicU64,
    troubles: Mutex<HashMap<Trouble, u64>>,
}

impl Registries {
    /// Reads the CA files and builds a first client, so that a bad
    /// certificate is an error now rather than a client silently built
    /// without it (`Client::new` falls back to defaults).
    pub fn new(settings: RegistrySettings) -> Result<Self, SetupError> {
        let mut certificates = Vec::new();
        for path in &settings.ca {
            let pem = std::fs::read(path).map_err(|source| SetupError::CaRead {
                path: path.clone(),
                source,
            })?;
            let found = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| SetupError::CaInvalid {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
            if found.is_empty() {
                return Err(SetupError::CaEmpty { path: path.clone() });
            }
            for der in found {
                certificates.push(oci_client::client::Certificate {
                    encoding: oci_client::client::CertificateEncoding::Der,
                    data: der.to_vec(),
                });
            }
        }
        let registries = Self {
            all: Semaphore::new(settings.concurrency),
            settings,
            certificates,
            clients: Mutex::default(),
            hosts: Mutex::default(),
            requests: AtomicU64::new(0),
            troubles: Mutex::default(),
        };
        registries.client(None)?;
        Ok(registries)
    }

    /// Requests sent so far, retries included.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Requests that ended unverifiable so far, by why.
    pub fn troubles(&self) -> HashMap<Trouble, u64> {
        self.troubles.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Counts a request that ended unverifiable, and says why.
    fn unverifiable<T>(&self, trouble: Trouble, why: String) -> Answer<T> {
        *self
            .troubles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(trouble)
            .or_default() += 1;
        Answer::Unverifiable(why)
    }

    /// Warnings about the credentials file (helpers not run).
    pub fn warnings(&self) -> &[String] {
        &self.settings.auth.warnings
    }

    fn client(&self, key: Option<&str>) -> Result<Arc<Client>, SetupError> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&key.map(str::to_owned)) {
            return Ok(c.clone());
        }
        let config = oci_client::client::ClientConfig {
            protocol: oci_client::client::ClientProtocol::Https,
            extra_root_certificates: self.certificates.clone(),
            // Verification never resolves an index for this machine's
            // platform: it reads every entry itself.
            platform_resolver: None,
            read_timeout: Some(self.settings.timeout),
            connect_timeout: Some(self.settings.timeout),
            user_agent: concat!("digest-gate/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        let client = Arc::new(Client::try_from(config).map_err(|e| SetupError::Client(e.to_string()))?);
        clients.insert(key.map(str::to_owned), client.clone());
        Ok(client)
    }

    fn host_limit(&self, host: &str) -> Arc<Semaphore> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        hosts
            .entry(host.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.settings.per_host)))
            .clone()
    }

    /// The client and credential for `repository`.
    fn for_repository(&self, repository: &str) -> Result<(Arc<Client>, RegistryAuth), String> {
        let found = self.settings.auth.lookup(repository);
        let client = self.client(found.map(|(k, _)| k)).map_err(|e| e.to_string())?;
        let auth = match found {
            Some((_, c)) => RegistryAuth::Basic(c.username.clone(), c.password.clone()),
            None => RegistryAuth::Anonymous,
        };
        Ok((client, auth))
    }

    /// The manifest `digest` of `repository`, its bytes checked against the
    /// digest (by the client).
    pub async fn manifest(&self, repository: &str, digest: &str) -> Answer<Vec<u8>> {
        let reference = reference(repository, None, Some(digest));
        self.ask(repository, |client, auth| {
            let reference = reference.clone();
            async move {
                client
                    .pull_manifest_raw(&reference, &auth, ACCEPTED)
                    .await
                    .map(|(bytes, _)| bytes.to_vec())
            }
        })
        .await
    }

    /// The digest `tag` of `repository` names now.
    pub async fn tag(&self, repository: &str, tag: &str) -> Answer<String> {
        let reference = reference(repository, Some(tag), None);
        self.ask(repository, |client, auth| {
            let reference = reference.clone();
            async move { client.fetch_manifest_digest(&reference, &auth).await }
        })
        .await
    }

    /// Whether blob `digest` is in `repository` (HEAD).
    pub async fn blob_exists(&self, repository: &str, digest: &str) -> Answer<()> {
        let reference = reference(repository, None, None);
        let answer = self
            .ask(repository, |client, _| {
                let reference = reference.clone();
                let digest = digest.to_owned();
                async move { client.blob_exists(&reference, &digest).await }
            })
            .await;
        match answer {
            Answer::Found(true) => Answer::Found(()),
            Answer::Found(false) => Answer::Unknown("BLOB_UNKNOWN".into()),
            Answer::Unknown(why) => Answer::Unknown(why),
            Answer::Unverifiable(why) => Answer::Unverifiable(why),
        }
    }

    /// Blob `digest` of `repository`, whole (an image config: small),
    /// checked against its digest (by the client).
    pub async fn blob(&self, repository: &str, digest: &str) -> Answer<Vec<u8>> {
        let reference = reference(repository, None, None);
        self.ask(repository, |client, _| {
            let reference = reference.clone();
            let digest = digest.to_owned();
            async move {
                let mut out = Vec::new();
                client
                    .pull_blob(&reference, digest.as_str(), &mut out)
                    .await
                    .map(|()| out)
            }
        })
        .await
    }

    /// One request, within the limits, retried while it may succeed later.
    async fn ask<T, F, Fut>(&self, repository: &str, request: F) -> Answer<T>
    where
        F: Fn(Arc<Client>, RegistryAuth) -> Fut,
        Fut: std::future::Future<Output = Result<T, OciDistributionError>>,
    {
        let (client, auth) = match self.for_repository(repository) {
            Ok(c) => c,
            Err(why) => return self.unverifiable(Trouble::Setup, why),
        };
        // The client's blob calls take no credential: they use the one it
        // stored for the registry, which the manifest calls store too.
        let registry = reference(repository, None, None);
        client
            .store_auth_if_needed(registry.resolve_registry(), &auth)
            .await;
        let host = repository.split('/').next().unwrap_or(repository);
        let limit = self.host_limit(host);
        let mut retries = self.settings.backoff.iter();
        loop {
            let outcome = {
                let _all = self.all.acquire().await;
                let _host = limit.acquire().await;
                self.requests.fetch_add(1, Ordering::Relaxed);
                // The client's timeouts cover connect and each read; this
                // bounds a request that trickles.
                let deadline = self.settings.timeout * 2;
                match tokio::time::timeout(deadline, request(client.clone(), auth.clone())).await {
                    Ok(Ok(found)) => return Answer::Found(found),
                    Ok(Err(e)) => sort(&e, host),
                    Err(_) => Failure::Retry(
                        Trouble::Unreachable,
                        format!("no answer from {host} within {deadline:?}"),
                    ),
                }
            };
            match outcome {
                Failure::Unknown(code) => return Answer::Unknown(code),
                Failure::Unverifiable(trouble, why) => return self.unverifiable(trouble, why),
                Failure::Retry(trouble, why) => match retries.next() {
                    Some(wait) => tokio::time::sleep(*wait).await,
                    None => {
                        let tries = self.settings.backoff.len() + 1;
                        return self.unverifiable(trouble, format!("{why} ({tries} tries)"));
                    }
                },
            }
        }
    }
}

enum Failure {
    Unknown(String),
    Retry(Trouble, String),
    Unverifiable(Trouble, String),
}

fn reference(repository: &str, tag: Option<&str>, digest: Option<&str>) -> Reference {
    let (registry, path) = repository.split_once('/').unwrap_or((repository, ""));
    match (tag, digest) {
        (Some(t), _) => Reference::with_tag(registry.to_owned(), path.to_owned(), t.to_owned()),
        (None, Some(d)) => Reference::with_digest(registry.to_owned(), path.to_owned(), d.to_owned()),
        // A blob request names its digest itself; the reference only
        // names the repository.
        (None, None) => Reference::with_tag(registry.to_owned(), path.to_owned(), "latest".to_owned()),
    }
}

/// What may be concluded from a failed request.
fn sort(e: &OciDistributionError, host: &str) -> Failure {
    use OciDistributionError as E;
    match e {
        E::RegistryError { envelope, .. } => {
            let first = envelope.errors.first();
            // The code as the registry wrote it.
            let code = |c: &OciErrorCode| match serde_json::to_value(c) {
                Ok(serde_json::Value::String(s)) => s,
                _ => format!("{c:?}"),
            };
            match first.map(|e| &e.code) {
                Some(OciErrorCode::ManifestUnknown) => Failure::Unknown("MANIFEST_UNKNOWN".into()),
                Some(OciErrorCode::BlobUnknown) => Failure::Unknown("BLOB_UNKNOWN".into()),
                Some(OciErrorCode::Toomanyrequests) => Failure::Retry(
                    Trouble::RateLimited,
                    format!("{host} is rate limiting (TOOMANYREQUESTS)"),
                ),
                Some(OciErrorCode::NameUnknown) => Failure::Unverifiable(
                    Trouble::Denied,
                    format!(
                        "{host} does not show this repository (NAME_UNKNOWN): it does not exist, or these credentials may not see it"
                    ),
                ),
                Some(OciErrorCode::Unauthorized) => Failure::Unverifiable(
                    Trouble::Credentials,
                    format!(
                        "{host} refused the request (UNAUTHORIZED): give credentials with --registry-auth"
                    ),
                ),
                Some(OciErrorCode::Denied) => Failure::Unverifiable(
                    Trouble::Denied,
                    format!("{host} denied access (DENIED): these credentials may not read this repository"),
                ),
                Some(other) => {
                    let message = first.map(|e| e.message.as_str()).unwrap_or_default();
                    Failure::Unverifiable(
                        Trouble::UnexpectedAnswer,
                        format!("{host} answered {}: {message}", code(other)),
                    )
                }
                None => Failure::Unverifiable(
                    Trouble::UnexpectedAnswer,
                    format!("{host} answered an empty error list"),
                ),
            }
        }
        E::UnauthorizedError { .. } => Failure::Unverifiable(
            Trouble::Credentials,
            format!(
                "{host} asks for credentials (401): none were found for it, or it refused them (see --registry-auth)"
            ),
        ),
        E::AuthenticationFailure(message) => Failure::Unverifiable(
            Trouble::Credentials,
            format!(
                "{host}'s token service refused the credentials: {}",
                message.trim()
            ),
        ),
        E::ServerError { code, message, .. } => match code {
            429 => Failure::Retry(Trouble::RateLimited, format!("{host} is rate limiting (429)")),
            500..=599 => Failure::Retry(
                Trouble::ServerError,
                format!("{host} failed ({code}): {}", first_line(message)),
            ),
            _ => Failure::Unverifiable(
                Trouble::UnexpectedAnswer,
                format!("{host} answered {code}: {}", first_line(message)),
            ),
        },
        E::DigestError(d) => Failure::Unverifiable(
            Trouble::DigestMismatch,
            format!("{host} served bytes that are not the digest asked for: {d}"),
        ),
        E::RequestError(r) => request_failure(r, host),
        other => Failure::Unverifiable(Trouble::UnexpectedAnswer, format!("{host}: {other}")),
    }
}

fn request_failure(e: &reqwest::Error, host: &str) -> Failure {
    let chain = crate::text::error_chain(e);
    if chain.contains("InvalidContentType") || chain.contains("corrupt message") {
        return Failure::Unverifiable(
            Trouble::Tls,
            format!(
                "{host} does not speak TLS: digest-gate asks registries over HTTPS only, never plain HTTP"
            ),
        );
    }
    if chain.contains("certificate") || chain.contains("UnknownIssuer") {
        return Failure::Unverifiable(
            Trouble::Tls,
            format!("{host}'s certificate is not trusted: {chain} (add its CA with --registry-ca)"),
        );
    }
    if e.is_timeout() || e.is_connect() {
        return Failure::Retry(Trouble::Unreachable, format!("cannot reach {host}: {chain}"));
    }
    Failure::Unverifiable(Trouble::UnexpectedAnswer, format!("{host}: {chain}"))
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default().trim()
}
