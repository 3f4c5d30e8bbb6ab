//! Registry credentials: the auth file podman and the kubelet read, found
//! where podman looks, its keys matched as the kubelet matches them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

/// Why the credentials file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("{path}: cannot read the registry credentials: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error(
        "{path}: not a registry credentials file (containers-auth.json or .docker/config.json): {message}"
    )]
    Parse { path: PathBuf, message: String },
    #[error("{path}: the credentials for {key} are not usable: {message}")]
    Entry {
        path: PathBuf,
        key: String,
        message: String,
    },
}

/// A user name and password (or token) for one registry scope.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credential {
    // Never print the secret, not even in a debug log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({}, <redacted>)", self.username)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    auths: BTreeMap<String, RawEntry>,
    #[serde(default)]
    cred_helpers: BTreeMap<String, String>,
    #[serde(default)]
    creds_store: Option<String>,
}

#[derive(Deserialize)]
struct RawEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// One `auths` key, parsed as the kubelet parses it.
#[derive(Debug, Clone)]
struct Key {
    /// The key as written, to name it.
    written: String,
    /// Host labels, each possibly a glob (`*.example.com`).
    host: Vec<String>,
    port: Option<String>,
    /// Path segments the image's repository must start with.
    path: Vec<String>,
}

/// A registry credentials file, read.
#[derive(Debug, Clone, Default)]
pub struct AuthFile {
    pub path: Option<PathBuf>,
    entries: Vec<(Key, Credential)>,
    /// What the file asks for that is not done (credential helpers).
    pub warnings: Vec<String>,
}

impl AuthFile {
    /// The file to use: `explicit` (the flag or its env var), else the
    /// first of podman's places that exists, used whole. `None` when there
    /// is none: every registry is asked anonymously.
    pub fn discover(explicit: Option<&Path>) -> Result<Self, AuthError> {
        match Self::locate(explicit) {
            Some(path) => Self::read(&path),
            None => Ok(Self::default()),
        }
    }

    /// Where [`AuthFile::discover`] reads: `explicit`, else the first of
    /// podman's places that exists.
    pub fn locate(explicit: Option<&Path>) -> Option<PathBuf> {
        if let Some(path) = explicit {
            return Some(path.to_owned());
        }
        let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let home = env("HOME");
        let candidates = [
            env("REGISTRY_AUTH_FILE"),
            env("XDG_RUNTIME_DIR").map(|d| d.join("containers/auth.json")),
            home.as_ref().map(|h| h.join(".config/containers/auth.json")),
            home.as_ref().map(|h| h.join(".docker/config.json")),
        ];
        candidates.into_iter().flatten().find(|p| p.exists())
    }

    /// Reads one credentials file.
    pub fn read(path: &Path) -> Result<Self, AuthError> {
        let text = std::fs::read(path).map_err(|source| AuthError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    fn parse(path: &Path, text: &[u8]) -> Result<Self, AuthError> {
        let raw: Raw = serde_json::from_slice(text).map_err(|e| AuthError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let mut warnings = Vec::new();
        if let Some(store) = raw.creds_store {
            warnings.push(format!(
                "{}: credsStore \"{store}\" is not run (digest-gate runs no credential helper); registries it serves are asked anonymously",
                path.display()
            ));
        }
        for (registry, helper) in raw.cred_helpers {
            warnings.push(format!(
                "{}: credHelpers runs \"{helper}\" for {registry}, which digest-gate does not run; {registry} is asked anonymously unless `auths` has it",
                path.display()
            ));
        }
        let mut entries = Vec::new();
        for (written, entry) in raw.auths {
            let credential = credential(&entry).map_err(|message| AuthError::Entry {
                path: path.to_owned(),
                key: written.clone(),
                message,
            })?;
            if let Some(credential) = credential {
                entries.push((Key::parse(&written), credential));
            }
        }
        Ok(Self {
            path: Some(path.to_owned()),
            entries,
            warnings,
        })
    }

    /// The credential for `repository` (`host[:port]/path`), by the
    /// kubelet's rule: the host (globs per label), the port and a path
    /// prefix must all match; of several, the longest path wins, then the
    /// host with fewer globs. Also the key that matched, to name it.
    pub fn lookup(&self, repository: &str) -> Option<(&str, &Credential)> {
        let (hostport, path) = repository.split_once('/').unwrap_or((repository, ""));
        let (host, port) = split_port(hostport);
        let host = docker_hub(host);
        let path: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        self.entries
            .iter()
            .filter(|(key, _)| key.matches(&host, port, &path))
            .max_by_key(|(key, _)| {
                let globs = key.host.iter().filter(|l| l.contains('*')).count();
                (key.path.len(), std::cmp::Reverse(globs))
            })
            .map(|(key, c)| (key.written.as_str(), c))
    }
}

/// `auth` (base64 of `user:password`) or `username` and `password`; an
/// entry with neither (e.g. only an `identitytoken`) gives none.
fn credential(entry: &RawEntry) -> Result<Option<Credential>, String> {
    if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|e| format!("`auth` is not base64: {e}"))?;
        let decoded = String::from_utf8(decoded).map_err(|_| "`auth` is not UTF-8 text".to_owned())?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| "`auth` is not base64 of user:password".to_owned())?;
        return Ok(Some(Credential {
            username: username.to_owned(),
            password: password.to_owned(),
        }));
    }
    match (&entry.username, &entry.password) {
        (Some(u), Some(p)) => Ok(Some(Credential {
            username: u.clone(),
            password: p.clone(),
        })),
        _ => Ok(None),
    }
}

fn split_port(hostport: &str) -> (&str, Option<&str>) {
    // An IPv6 literal keeps its colons inside brackets.
    match hostport.rfind(':') {
        Some(i) if !hostport[i..].contains(']') => (&hostport[..i], Some(&hostport[i + 1..])),
        _ => (hostport, None),
    }
}

/// Docker Hub answers to several names; the kubelet treats them as one.
fn docker_hub(host: &str) -> String {
    match host {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
        h => h.to_ascii_lowercase(),
    }
}

impl Key {
    fn parse(written: &str) -> Self {
        let rest = written
            .strip_prefix("https://")
            .or_else(|| written.strip_prefix("http://"))
            .unwrap_or(written);
        let (hostport, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (host, port) = split_port(hostport);
        let host = docker_hub(host);
        // Docker's legacy key for Docker Hub, `https://index.docker.io/v1/`,
        // names the registry, not a repository `v1`.
        let path = if host == "docker.io" && (path == "v1/" || path == "v1") {
            ""
        } else {
            path
        };
        Self {
            written: written.to_owned(),
            host: host.split('.').map(str::to_owned).collect(),
            port: port.map(str::to_owned),
            path: path
                .split('/')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        }
    }

    fn matches(&self, host: &str, port: Option<&str>, path: &[&str]) -> bool {
        let labels: Vec<&str> = host.split('.').collect();
        labels.len() == self.host.len()
            && self
                .host
                .iter()
                .zip(&labels)
                .all(|(glob, label)| label_matches(glob, label))
            && self.port.as_deref() == port
            && self.path.len() <= path.len()
            && self.path.iter().zip(path).all(|(a, b)| a == b)
    }
}

/// One host label against a glob with `*` (as path.Match does for the
/// kubelet: `*` within a label, never across a dot).
fn label_matches(glob: &str, label: &str) -> bool {
    fn glob_bytes(p: &[u8], s: &[u8]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((b'*', rest)) => (0..=s.len()).any(|i| glob_bytes(rest, &s[i..])),
            Some((c, rest)) => s.first() == Some(c) && glob_bytes(rest, &s[1..]),
        }
    }
    glob_bytes(glob.as_bytes(), label.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(json: &str) -> AuthFile {
        AuthFile::parse(Path::new("auth.json"), json.as_bytes()).unwrap()
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn keys_match_as_the_kubelet_matches_them() {
        let f = file(&format!(
            r#"{{"auths": {{
                "registry.example.com": {{"auth": "{}"}},
                "https://registry.example.com/team": {{"auth": "{}"}},
                "*.mirror.example": {{"username": "glob", "password": "p"}},
                "127.0.0.1:5000": {{"auth": "{}"}},
                "https://index.docker.io/v1/": {{"auth": "{}"}},
                "quay.io/only-token": {{"identitytoken": "x"}}
            }}}}"#,
            b64("host:a"),
            b64("team:b"),
            b64("local:s3cret-pass"),
            b64("hub:d")
        ));
        let user = |repo: &str| f.lookup(repo).map(|(_, c)| c.username.clone());
        assert_eq!(user("registry.example.com/other/x").as_deref(), Some("host"));
        // The longest path prefix wins, on whole segments.
        assert_eq!(user("registry.example.com/team/x").as_deref(), Some("team"));
        assert_eq!(user("registry.example.com/teams/x").as_deref(), Some("host"));
        // A glob covers one label, never two; the port must match.
        assert_eq!(user("eu.mirror.example/x").as_deref(), Some("glob"));
        assert_eq!(user("a.eu.mirror.example/x"), None);
        assert_eq!(user("127.0.0.1:5000/x").as_deref(), Some("local"));
        assert_eq!(user("127.0.0.1:5001/x"), None);
        assert_eq!(user("127.0.0.1/x"), None);
        assert_eq!(user("docker.io/library/nginx").as_deref(), Some("hub"));
        assert_eq!(user("quay.io/only-token/x"), None);
        assert_eq!(
            f.lookup("registry.example.com/team/x").unwrap().0,
            "https://registry.example.com/team"
        );
        assert!(!format!("{:?}", f.lookup("127.0.0.1:5000/x").unwrap().1).contains("s3cret"));
    }

    #[test]
    fn helpers_are_not_run_and_say_so() {
        let f = file(r#"{"auths": {}, "credsStore": "desktop", "credHelpers": {"gcr.io": "gcloud"}}"#);
        assert_eq!(f.warnings.len(), 2);
        assert!(
            f.warnings[0].contains("credsStore \"desktop\" is not run"),
            "{:?}",
            f.warnings
        );
        assert!(
            f.warnings[1].contains("gcr.io is asked anonymously"),
            "{:?}",
            f.warnings
        );
    }

    #[test]
    fn a_broken_file_or_entry_is_a_clear_error() {
        let e = AuthFile::parse(Path::new("a.json"), b"{").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("a.json: not a registry credentials file"),
            "{e}"
        );
        let e = AuthFile::parse(Path::new("a.json"), br#"{"auths": {"q.io": {"auth": "%%%"}}}"#).unwrap_err();
        assert!(
            e.to_string()
                .contains("credentials for q.io are not usable: `auth` is not base64"),
            "{e}"
        );
        let e = AuthFile::read(Path::new("/nonexistent/auth.json")).unwrap_err();
        assert!(
            e.to_string().contains("cannot read the registry credentials"),
            "{e}"
        );
    }

    #[test]
    fn globs_match_within_a_label() {
        assert!(label_matches("*", "eu"));
        assert!(label_matches("reg*", "registry"));
        assert!(label_matches("*try", "registry"));
        assert!(label_matches("r*g*y", "registry"));
        assert!(!label_matches("r*x", "registry"));
        assert!(!label_matches("reg", "registry"));
    }
}
