//! The connection `audit` reads through: a kube client from a kubeconfig
//! (or the pod's in-cluster config), and errors worded for the person who
//! has to fix them, each naming the server and the context.

use crate::text::error_chain;
use std::path::PathBuf;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, client::ClientBuilder};

/// How long a cluster request may take when `--cluster-timeout` is not given.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest response body read when `--cluster-max-response-bytes` is
/// not given: a page of 500 Pods is a few MiB, discovery less.
pub const MAX_RESPONSE_BYTES: u64 = 64 << 20;

/// How `audit`, `cleanup` and `serve`'s cluster tasks reach the cluster.
/// `--context` is declared by each command: its help differs.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ClusterArgs {
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the pod's
    /// service account inside a pod).
    #[arg(long, env = "DIGEST_GATE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Gives up on a cluster request after this long in all, e.g. 30s:
    /// connecting, waiting for the answer and reading it (a page of a
    /// list, an exec credential plugin's run) [default: 30s].
    #[arg(long, env = "DIGEST_GATE_CLUSTER_TIMEOUT", value_name = "DURATION",
          value_parser = crate::flags::parse_positive_duration)]
    pub cluster_timeout: Option<Duration>,
    /// Refuses a cluster answer larger than this many bytes (a page of a
    /// list, discovery) [default: 67108864, 64 MiB].
    #[arg(long, env = "DIGEST_GATE_CLUSTER_MAX_RESPONSE_BYTES", value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(1024..))]
    pub cluster_max_response_bytes: Option<u64>,
}

impl ClusterArgs {
    /// The connection settings for `context`, each request bounded.
    pub fn settings(&self, context: Option<String>) -> ClusterSettings {
        ClusterSettings {
            kubeconfig: self.kubeconfig.clone(),
            context,
            timeout: Some(self.cluster_timeout.unwrap_or(CLUSTER_TIMEOUT)),
            max_response: self.cluster_max_response_bytes.unwrap_or(MAX_RESPONSE_BYTES),
            own_retries: false,
            one_run: false,
        }
    }

    /// The settings of a command's one run against `context` (`audit`,
    /// `preflight`, `cleanup`): as [`ClusterArgs::settings`], and an exec
    /// credential plugin run once by [`super::credential`].
    pub fn run_settings(&self, context: Option<String>) -> ClusterSettings {
        ClusterSettings {
            one_run: true,
            ..self.settings(context)
        }
    }

    /// The settings for a watch, which waits minutes for an event: kube's
    /// read timeout (longer than the watch's own) applies, not a request's;
    /// and the watch retries on its own schedule (see [`ClusterSettings::own_retries`]).
    pub fn watch_settings(&self, context: Option<String>) -> ClusterSettings {
        ClusterSettings {
            timeout: None,
            own_retries: true,
            ..self.settings(context)
        }
    }
}

/// Where to connect, as the command line says it.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// `--kubeconfig`; without it `$KUBECONFIG`, `~/.kube/config`, and
    /// inside a pod the in-cluster config.
    pub kubeconfig: Option<PathBuf>,
    /// `--context`; without it the kubeconfig's current context.
    pub context: Option<String>,
    /// Bounds each request, from connecting to the end of its body.
    pub timeout: Option<Duration>,
    /// Bounds each response body.
    pub max_response: u64,
    /// The caller retries failed requests with its own backoff, so kube's
    /// retry of 429 and 503 answers is off: it honours a `Retry-After`, and
    /// an apiserver still starting answers 503 with `Retry-After: 10`,
    /// seconds during which the installed CSVs stay stale.
    pub own_retries: bool,
    /// A command's one run: an exec credential plugin is run once, within
    /// `timeout`, its output bounded ([`super::credential`]), instead of by
    /// kube at every refresh. A long-lived `serve` leaves it to kube.
    pub one_run: bool,
}

/// A client and what error messages name it by.
#[derive(Clone)]
pub struct Connection {
    pub client: Client,
    /// The context's name, or `in-cluster`.
    pub context: String,
    /// The apiserver's URL.
    pub server: String,
    /// The context's namespace (`default` when it names none).
    pub namespace: String,
}

impl Connection {
    /// The connection `settings` describe. Nothing is sent yet: an
    /// unreachable server shows on the first request.
    pub async fn open(settings: &ClusterSettings) -> Result<Connection, AuditError> {
        rustls_provider();
        let (mut config, context) = config(settings).await.map_err(AuditError::Config)?;
        if let Some(t) = settings.timeout {
            config.connect_timeout = Some(t);
            config.read_timeout = Some(t);
            config.write_timeout = Some(t);
        }
        config.default_retry = !settings.own_retries;
        let server = config.cluster_url.to_string();
        let server = server.trim_end_matches('/').to_owned();
        let namespace = config.default_namespace.clone();
        if settings.one_run {
            let within = settings.timeout.unwrap_or(CLUSTER_TIMEOUT);
            super::credential::resolve(&mut config.auth_info, within)
                .await
                .map_err(|e| AuditError::Config(format!("context \"{context}\": {e}")))?;
        }
        let set_up = |e: kube::Error| {
            AuditError::Config(format!(
                "cannot set up a client for {server} (context \"{context}\"): {}",
                error_chain(&e)
            ))
        };
        // Settings without a timeout are a watch's: it waits minutes for an
        // event and streams for as long, each event decoded as it comes, so
        // neither its time nor its bytes in all are bounded (kube bounds
        // connecting, and the watcher how long one watch lasts).
        let bounds = super::bounded::Bounds {
            total: settings.timeout,
            bytes: match settings.timeout {
                Some(_) => settings.max_response,
                None => u64::MAX,
            },
        };
        let client = ClientBuilder::try_from(config)
            .map_err(set_up)?
            .with_layer(&super::bounded::Layer(bounds))
            .build();
        Ok(Connection {
            client,
            context,
            server,
            namespace,
        })
    }

    /// Words a failed request `doing` (e.g. `list Pods in namespace "x"`)
    /// for a person: the apiserver's own message when it answered, what
    /// could not be reached when it did not.
    pub fn describe(&self, doing: &str, e: &kube::Error) -> RequestFailure {
        let at = format!("{} (context \"{}\")", self.server, self.context);
        match e {
            kube::Error::Api(status) if status.code == 401 => RequestFailure::Fatal(format!(
                "the cluster at {at} refused the credentials (401 Unauthorized: {}); the token may have expired: log in again or refresh the kubeconfig",
                status.message
            )),
            kube::Error::Api(status) => RequestFailure::Request(format!(
                "cannot {doing}: {} ({} {})",
                status.message, status.code, status.reason
            )),
            // kube's own "ServiceError:"/"HyperError:" prefixes say nothing
            // to the reader; the causes do.
            kube::Error::HyperError(cause) => RequestFailure::Fatal(format!(
                "cannot reach the cluster at {at}: {}",
                error_chain(cause)
            )),
            kube::Error::Service(cause) => RequestFailure::Fatal(format!(
                "cannot reach the cluster at {at}: {}",
                error_chain(cause.as_ref())
            )),
            other => RequestFailure::Request(format!("cannot {doing} from {at}: {}", error_chain(other))),
        }
    }
}

/// Why an audit, a report write or a cleanup cannot go on. `Display` is
/// the message a person reads; it names the server and the context.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditError {
    /// The kubeconfig (or the pod's service account) cannot be used.
    #[error("{0}")]
    Config(String),
    /// The cluster cannot be reached, or refuses the credentials.
    #[error("{0}")]
    Unreachable(String),
    /// A request the run cannot go on without failed, or was refused.
    #[error("{0}")]
    Request(String),
}

impl AuditError {
    /// A stable name for the kind of failure.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Config(_) => "config",
            Self::Unreachable(_) => "unreachable",
            Self::Request(_) => "request",
        }
    }
}

impl From<RequestFailure> for AuditError {
    fn from(failure: RequestFailure) -> Self {
        match failure {
            RequestFailure::Fatal(m) => Self::Unreachable(m),
            RequestFailure::Request(m) => Self::Request(m),
        }
    }
}

/// How bad a failed request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestFailure {
    /// Nothing more can be read: the server is unreachable or refuses the
    /// credentials.
    Fatal(String),
    /// This request failed (e.g. RBAC forbids a kind); others may work.
    Request(String),
}

impl RequestFailure {
    pub fn message(&self) -> &str {
        match self {
            RequestFailure::Fatal(m) | RequestFailure::Request(m) => m,
        }
    }
}

/// The continue tokens one list was given, so a server that hands one out
/// again — a list that would never end — is caught: one answering
/// `continue: "again"` forever drew ~200,000 requests in 30 s.
#[derive(Debug, Default)]
pub struct Continues {
    seen: std::collections::HashSet<u64>,
}

/// A continue token a list was given twice (shown on one line, bounded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the server gave the continue token {token} twice: a list that does not advance; stopped")]
pub struct RepeatedToken {
    pub token: String,
}

impl Continues {
    /// The token to ask for the next page with, if any; `Err` says the
    /// server gave this one before.
    pub fn next(&mut self, token: Option<&str>) -> Result<Option<String>, RepeatedToken> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        // Hashes, not tokens: a list of many pages keeps 8 bytes a page.
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(token);
        if !self.seen.insert(hash) {
            return Err(RepeatedToken {
                token: crate::text::one_line(token, 40, crate::text::Cut::End).into_owned(),
            });
        }
        Ok(Some(token.to_owned()))
    }
}

/// kube's client builds rustls configs from the process default provider:
/// make it ring, the server's provider, so no second crypto library links.
fn rustls_provider() {
    // Err means one is installed already, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

async fn config(settings: &ClusterSettings) -> Result<(Config, String), String> {
    let options = KubeConfigOptions {
        context: settings.context.clone(),
        ..KubeConfigOptions::default()
    };
    let (kubeconfig, from) = match read_kubeconfig(settings.kubeconfig.as_deref())? {
        Some(found) => found,
        None if settings.context.is_some() => {
            return Err("--context needs a kubeconfig: none at $KUBECONFIG or ~/.kube/config".into());
        }
        None => {
            let config = Config::incluster().map_err(|e| {
                format!(
                    "no kubeconfig ($KUBECONFIG, ~/.kube/config or --kubeconfig) and not in a pod: {}",
                    error_chain(&e)
                )
            })?;
            return Ok((config, "in-cluster".into()));
        }
    };
    let context = match settings
        .context
        .clone()
        .or_else(|| kubeconfig.current_context.clone())
    {
        Some(c) => c,
        None => return Err(format!("{from}: no current context; pass --context")),
    };
    if !kubeconfig.contexts.iter().any(|c| c.name == context) {
        let known: Vec<&str> = kubeconfig.contexts.iter().map(|c| c.name.as_str()).collect();
        return Err(format!(
            "{from}: no context \"{context}\" (contexts: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ));
    }
    let config = Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| format!("{from}: context \"{context}\": {}", error_chain(&e)))?;
    Ok((config, context))
}

/// `--kubeconfig`, else [`kubeconfig_from_env`], with what messages call it.
fn read_kubeconfig(path: Option<&std::path::Path>) -> Result<Option<(Kubeconfig, String)>, String> {
    match path {
        Some(path) => Kubeconfig::read_from(path)
            .map(|k| Some((k, path.display().to_string())))
            .map_err(|e| format!("--kubeconfig {}: {}", path.display(), error_chain(&e))),
        None => kubeconfig_from_env(),
    }
}

/// A kubeconfig context and the server its cluster names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    pub name: String,
    /// Empty when [`Context::unusable`] says why there is none.
    pub server: String,
    /// Why the context cannot be used (not in the kubeconfig, its cluster
    /// names no server): a fleet run reports it and reads the others.
    pub unusable: Option<String>,
}

/// The contexts `named` (in that order, each once) or, with `all`, every
/// context of the kubeconfig (`--kubeconfig`, else `$KUBECONFIG`'s files
/// merged as kubectl merges them, else `~/.kube/config`), each with its
/// cluster's server or why it has none. `Err`: no kubeconfig, or no
/// context in it.
pub fn contexts(
    kubeconfig: Option<&std::path::Path>,
    named: &[String],
    all: bool,
) -> Result<Vec<Context>, AuditError> {
    let (config, from) = read_kubeconfig(kubeconfig)
        .map_err(AuditError::Config)?
        .ok_or_else(|| {
            AuditError::Config(
                "several contexts need a kubeconfig: none at $KUBECONFIG or ~/.kube/config".into(),
            )
        })?;
    let server_of = |name: &str| -> Result<String, String> {
        let context = config.contexts.iter().find(|c| c.name == name).ok_or_else(|| {
            let known: Vec<&str> = config.contexts.iter().map(|c| c.name.as_str()).collect();
            format!("{from}: no context \"{name}\" (contexts: {})", known.join(", "))
        })?;
        let cluster = context
            .context
            .as_ref()
            .map(|c| c.cluster.as_str())
            .unwrap_or_default();
        config
            .clusters
            .iter()
            .find(|c| c.name == cluster)
            .and_then(|c| c.cluster.as_ref()?.server.clone())
            .map(|server| server.trim_end_matches('/').to_owned())
            .ok_or_else(|| {
                format!("{from}: context \"{name}\" names cluster \"{cluster}\", which has no server")
            })
    };
    let names: Vec<&str> = if all {
        config.contexts.iter().map(|c| c.name.as_str()).collect()
    } else {
        named.iter().map(String::as_str).collect()
    };
    if names.is_empty() {
        return Err(AuditError::Config(format!("{from}: no contexts")));
    }
    let mut found: Vec<Context> = Vec::new();
    for name in names {
        if !found.iter().any(|c| c.name == name) {
            let (server, unusable) = match server_of(name) {
                Ok(server) => (server, None),
                Err(why) => (String::new(), Some(why)),
            };
            found.push(Context {
                name: name.to_owned(),
                server,
                unusable,
            });
        }
    }
    Ok(found)
}

/// `$KUBECONFIG` (its files merged, as kubectl merges them, and better:
/// see [`merged`]) or `~/.kube/config`, with what messages call it.
fn kubeconfig_from_env() -> Result<Option<(Kubeconfig, String)>, String> {
    kubeconfig_and_notes().map(|(found, _)| found)
}

/// What reading the kubeconfig from the environment had to say (a file
/// named and missing, a name an earlier file took): warnings for the
/// commands to print before they connect. Nothing when `--kubeconfig`
/// names one file, or when it cannot be read (that error comes when the
/// command connects).
pub fn kubeconfig_notes(kubeconfig: Option<&std::path::Path>) -> Vec<String> {
    match kubeconfig {
        Some(_) => Vec::new(),
        None => kubeconfig_and_notes().map(|(_, notes)| notes).unwrap_or_default(),
    }
}

/// A kubeconfig and what messages call it.
type Found = Option<(Kubeconfig, String)>;

fn kubeconfig_and_notes() -> Result<(Found, Vec<String>), String> {
    if let Some(paths) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) {
        let shown = paths.to_string_lossy().into_owned();
        let (merged, notes) =
            merged(std::env::split_paths(&paths)).map_err(|e| format!("$KUBECONFIG {shown}: {e}"))?;
        return Ok((merged.map(|k| (k, shown)), notes));
    }
    let Some(home) = std::env::var_os("HOME") else {
        return Ok((None, Vec::new()));
    };
    let path = PathBuf::from(home).join(".kube").join("config");
    if !path.exists() {
        return Ok((None, Vec::new()));
    }
    let shown = path.display().to_string();
    Kubeconfig::read_from(&path)
        .map(|k| (Some((k, shown.clone())), Vec::new()))
        .map_err(|e| format!("{shown}: {}", error_chain(&e)))
}

/// The files of `$KUBECONFIG` merged as kubectl merges them (the first to
/// set a value wins), with two differences that keep a cluster from being
/// dropped or read with another's credentials: a file that does not exist
/// is skipped, as kubectl skips it, and said; and a later file's context,
/// cluster or user whose name an earlier file took for something else is
/// kept under `FILE:NAME` and said, where kubectl drops it (per-cluster
/// installer kubeconfigs all name their context `admin`). `None`: no file.
fn merged(paths: impl Iterator<Item = PathBuf>) -> Result<(Option<Kubeconfig>, Vec<String>), String> {
    let mut merged: Option<Kubeconfig> = None;
    let mut notes = Vec::new();
    for path in paths {
        if !path.exists() {
            notes.push(format!(
                "$KUBECONFIG names {}, which does not exist: skipped",
                path.display()
            ));
            continue;
        }
        let mut next =
            Kubeconfig::read_from(&path).map_err(|e| format!("{}: {}", path.display(), error_chain(&e)))?;
        merged = Some(match merged {
            None => next,
            Some(earlier) => {
                notes.extend(keep_apart(&earlier, &mut next, &path.display().to_string()));
                earlier
                    .merge(next)
                    .map_err(|e| format!("{}: {}", path.display(), error_chain(&e)))?
            }
        });
    }
    Ok((merged, notes))
}

/// Whether two kubeconfig entries are the same, whole (credentials
/// included; compared, never shown).
fn same<T: serde::Serialize>(a: &T, b: &T) -> bool {
    serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
}

/// A named kubeconfig entry (a cluster, a user).
trait Entry: serde::Serialize {
    fn name(&self) -> &str;
    fn name_mut(&mut self) -> &mut String;
}

impl Entry for kube::config::NamedCluster {
    fn name(&self) -> &str {
        &self.name
    }
    fn name_mut(&mut self) -> &mut String {
        &mut self.name
    }
}

impl Entry for kube::config::NamedAuthInfo {
    fn name(&self) -> &str {
        &self.name
    }
    fn name_mut(&mut self) -> &mut String {
        &mut self.name
    }
}

/// Renames each entry of `next` that an entry of `earlier` names the same
/// with other content to `FILE:NAME`; returns each old name's new one.
fn rename_taken<T: Entry>(
    earlier: &[T],
    next: &mut [T],
    file: &str,
) -> std::collections::HashMap<String, String> {
    let mut renamed = std::collections::HashMap::new();
    for entry in next.iter_mut() {
        if earlier
            .iter()
            .any(|e| e.name() == entry.name() && !same(e, entry))
        {
            let new = format!("{file}:{}", entry.name());
            renamed.insert(std::mem::replace(entry.name_mut(), new.clone()), new);
        }
    }
    renamed
}

/// Renames what of `next` (read from `file`) an `earlier` kubeconfig names
/// differently to `FILE:NAME`, its contexts' references following, and
/// says which contexts were renamed. Compared whole, credentials included
/// (never shown): the same entry in two files is one.
fn keep_apart(earlier: &Kubeconfig, next: &mut Kubeconfig, file: &str) -> Vec<String> {
    let clusters = rename_taken(&earlier.clusters, &mut next.clusters, file);
    let users = rename_taken(&earlier.auth_infos, &mut next.auth_infos, file);
    let mut notes = Vec::new();
    for ctx in &mut next.contexts {
        if let Some(c) = ctx.context.as_mut() {
            if let Some(name) = clusters.get(&c.cluster) {
                c.cluster = name.clone();
            }
            if let Some(name) = c.user.as_ref().and_then(|u| users.get(u)) {
                c.user = Some(name.clone());
            }
        }
        if earlier
            .contexts
            .iter()
            .any(|e| e.name == ctx.name && !same(e, ctx))
        {
            let name = format!("{file}:{}", ctx.name);
            notes.push(format!(
                "context \"{}\" of {file} is not the one an earlier $KUBECONFIG file names so: read as \"{name}\"",
                ctx.name
            ));
            ctx.name = name;
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(dir: &std::path::Path, file: &str, server: &str, token: &str) -> PathBuf {
        let path = dir.join(file);
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: admin\nclusters:\n- name: cluster\n  cluster: {{server: \"{server}\"}}\nusers:\n- name: admin\n  user: {{token: {token}}}\ncontexts:\n- name: admin\n  context: {{cluster: cluster, user: admin}}\n"
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Issue 60: two installer kubeconfigs both name their context, cluster
    /// and user `admin`/`cluster`: kubectl's merge keeps the first file's
    /// and drops the second cluster; a missing file failed the whole read.
    #[test]
    fn kubeconfig_files_merge_without_dropping_a_cluster() {
        let dir = std::env::temp_dir().join(format!("dg-kubeconfig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = kubeconfig(&dir, "ukce", "https://ukce:6443", "a");
        let b = kubeconfig(&dir, "frkq", "https://frkq:6443", "b");
        let same = kubeconfig(&dir, "ukce-again", "https://ukce:6443", "a");
        let missing = dir.join("nonexistent");
        let (config, notes) = merged([a, missing.clone(), b.clone(), same].into_iter()).unwrap();
        let config = config.unwrap();
        let b_admin = format!("{}:admin", b.display());
        assert_eq!(
            notes,
            [
                format!(
                    "$KUBECONFIG names {}, which does not exist: skipped",
                    missing.display()
                ),
                format!(
                    "context \"admin\" of {} is not the one an earlier $KUBECONFIG file names so: read as \"{b_admin}\"",
                    b.display()
                ),
            ]
        );
        let names: Vec<&str> = config.contexts.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["admin", b_admin.as_str()]);
        // The second context keeps its own cluster and credentials.
        let ctx = config.contexts[1].context.as_ref().unwrap();
        let cluster = config.clusters.iter().find(|c| c.name == ctx.cluster).unwrap();
        assert_eq!(
            cluster.cluster.as_ref().unwrap().server.as_deref(),
            Some("https://frkq:6443")
        );
        let user = config
            .auth_infos
            .iter()
            .find(|u| Some(&u.name) == ctx.user.as_ref())
            .unwrap();
        assert_eq!(serde_json::to_value(&user.auth_info).unwrap()["token"], "b");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_continue_token_given_twice_ends_the_list() {
        let mut continues = Continues::default();
        assert_eq!(continues.next(Some("a")), Ok(Some("a".into())));
        assert_eq!(continues.next(Some("b")), Ok(Some("b".into())));
        assert_eq!(continues.next(Some("")), Ok(None));
        assert_eq!(continues.next(None), Ok(None));
        let err = continues.next(Some("a")).unwrap_err();
        assert_eq!(err, RepeatedToken { token: "a".into() });
        assert_eq!(
            err.to_string(),
            "the server gave the continue token a twice: a list that does not advance; stopped"
        );
    }
}
