//! `digest-gate serve`: its flags, logging, and `--dev`.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::args::PolicyArgs;
use super::missing_allowlist;
use crate::server;

/// Log line formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `digest-gate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// PEM certificate (chain) for the webhook port; reloaded when it changes.
    #[arg(long, env = "DIGEST_GATE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, env = "DIGEST_GATE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Development mode: generate a throwaway CA and localhost certificate, and
    /// use the bundled example allowlist unless --allowlist is given.
    #[arg(long, env = "DIGEST_GATE_DEV", conflicts_with_all = ["tls_cert", "tls_key"])]
    pub dev: bool,
    /// Where --dev writes its CA, certificate and allowlist.
    #[arg(long, env = "DIGEST_GATE_DEV_DIR", requires = "dev")]
    pub dev_dir: Option<PathBuf>,
    #[command(flatten)]
    pub server: server::ServerArgs,
    /// Log line format.
    #[arg(long, env = "DIGEST_GATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log filter, e.g. info or info,digest_gate=debug.
    #[arg(long, env = "DIGEST_GATE_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

/// A `--log-level` filter's bare words must be levels: tracing reads a
/// bare `verbose` as a module named so, logged at every level, and the
/// server would log nothing of its own at all.
fn check_levels(filter: &str) -> Result<(), String> {
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bare = !directive.contains(['=', '[']);
        if bare
            && directive
                .parse::<tracing_subscriber::filter::LevelFilter>()
                .is_err()
        {
            return Err(format!(
                "--log-level '{filter}': '{directive}' is not a level (trace, debug, info, warn, error, off); name a module with its level, e.g. digest_gate=debug"
            ));
        }
    }
    Ok(())
}

fn init_logging(format: LogFormat, filter: &str) -> Result<(), String> {
    check_levels(filter)?;
    // kube's watcher warns of each failure it retries in Rust debug form; the
    // CSV watch logs the same failure worded for people. Asked for by name,
    // its lines are kept.
    let directives = match filter.contains("kube_runtime") {
        true => filter.to_owned(),
        false => format!("{filter},kube_runtime=error"),
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .map_err(|e| format!("--log-level '{filter}': {e}"))?;
    use std::io::IsTerminal;
    let sink = crate::logsink::stderr().map_err(|e| format!("cannot start the log writer: {e}"))?;
    // Nothing written straight to stderr from a task: a closed log pipe
    // would make tracing `eprintln!` its own error, and that panics.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(sink)
        .log_internal_errors(false)
        .with_ansi(std::io::stderr().is_terminal());
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|e| e.to_string())
}

/// The bundled example allowlist, for `serve --dev` on a fresh checkout.
const EXAMPLE_ALLOWLIST: &str = include_str!("../../examples/allowlist.yaml");

/// Which of `serve`'s addresses were given (a flag or its variable)
/// rather than left at their defaults.
pub(super) struct Given {
    pub(super) listen: bool,
    pub(super) admin_listen: bool,
}

/// `--dev` listens on loopback unless an address is given: its CA is a
/// throwaway one, and the admin port has no authentication at all. An
/// address given that reaches further is said, with what it exposes.
fn dev_addresses(server: &mut server::ServerArgs, given: &Given) {
    let loopback = |addr: &mut std::net::SocketAddr| addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    let warn = |flag: &str, addr: std::net::SocketAddr, what: &str| {
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "--dev with {flag} {addr} exposes {what} to every network this host reaches");
        }
    };
    match given.listen {
        true => warn(
            "--listen",
            server.listen,
            "a webhook whose certificate is signed by a throwaway CA",
        ),
        false => loopback(&mut server.listen),
    }
    match given.admin_listen {
        true => warn(
            "--admin-listen",
            server.admin_listen,
            "/metrics and /readyz, unauthenticated,",
        ),
        false => loopback(&mut server.admin_listen),
    }
}

pub(super) fn run(mut args: ServeArgs, given: Given) -> u8 {
    if let Err(e) = init_logging(args.log_format, &args.log_level) {
        eprintln!("error: {e}");
        return 2;
    }
    // The key pair given, or None for --dev's; said here rather than by
    // clap, whose usage line would name only the key pair and never --dev.
    let given_pair = match (args.dev, args.tls_cert.clone(), args.tls_key.clone()) {
        (true, _, _) => None,
        (false, Some(cert), Some(key)) => Some((cert, key)),
        (false, _, _) => {
            eprintln!(
                "error: serve needs the webhook's key pair, --tls-cert FILE --tls-key FILE (the chart mounts them), or --dev to try it here with a throwaway CA and the example allowlist"
            );
            return 2;
        }
    };
    let mut allowlists = args.policy.allowlist.allowlists.clone();
    if allowlists.is_empty() && args.server.csvs.allowlist_csv.is_empty() && !args.dev {
        missing_allowlist(&["serve"]);
    }
    let background = &args.server.audit;
    if background.preflight && (background.interval.is_zero() || args.server.csvs.allowlist_csv.is_empty()) {
        eprintln!(
            "error: --audit-preflight judges the upgrades of the installed operators after each audit: it needs --audit-interval and --allowlist-csv"
        );
        return 2;
    }
    let mut bound = None;
    let (cert, key) = if let Some(pair) = given_pair {
        pair
    } else {
        dev_addresses(&mut args.server, &given);
        // Bound before anything is written: a second `serve --dev` whose
        // ports are taken must not replace the running one's CA.
        match server::Bound::bind(args.server.listen, args.server.admin_listen) {
            Ok(b) => bound = Some(b),
            Err(e) => {
                eprintln!("error: {e}");
                return 1;
            }
        }
        match dev_files(&args, &mut allowlists) {
            Ok(files) => files,
            Err(code) => return code,
        }
    };
    let inputs = server::Inputs {
        cert,
        key,
        allowlists,
        policy: args.policy.policy(),
        bound,
    };
    let code = server::run(args.server, inputs);
    // The drain's last lines, if the log pipe still takes them.
    crate::logsink::flush(std::time::Duration::from_secs(2));
    code
}

/// `--dev`'s throwaway CA and certificate, and the bundled allowlist when
/// none is given, written to `--dev-dir`; the key pair's paths.
fn dev_files(args: &ServeArgs, allowlists: &mut Vec<PathBuf>) -> Result<(PathBuf, PathBuf), u8> {
    let dir = args
        .dev_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("digest-gate-dev"));
    let names = ["localhost", "127.0.0.1", "::1", "digest-gate.default.svc"];
    let files = server::tls::generate_dev_certificates(&dir, &names).map_err(|e| {
        eprintln!("error: {e}");
        1
    })?;
    if allowlists.is_empty() {
        let path = dir.join("allowlist.yaml");
        std::fs::write(&path, EXAMPLE_ALLOWLIST).map_err(|e| {
            eprintln!("error: {}: {e}", path.display());
            1
        })?;
        allowlists.push(path);
    }
    // Not eprintln!: a closed standard error must not stop the server.
    let _ = writeln!(
        std::io::stderr(),
        "development mode: throwaway CA at {ca} (certificate for localhost, 127.0.0.1, ::1)\n  allowlist: {list}\n  try: curl --cacert {ca} -H 'Content-Type: application/json' --data @examples/review.json https://localhost:{port}/mutate",
        ca = files.ca.display(),
        list = allowlists
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        port = args.server.listen.port(),
    );
    Ok((files.cert, files.key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_listens_on_loopback_unless_an_address_is_given() {
        let defaults = server::ServerArgs::default();
        let mut config = defaults.clone();
        let nothing = Given {
            listen: false,
            admin_listen: false,
        };
        dev_addresses(&mut config, &nothing);
        assert_eq!(config.listen, "127.0.0.1:8443".parse().unwrap());
        assert_eq!(config.admin_listen, "127.0.0.1:8080".parse().unwrap());
        // What is given stands, wherever it reaches (a warning says so).
        let mut config = defaults.clone();
        let both = Given {
            listen: true,
            admin_listen: true,
        };
        dev_addresses(&mut config, &both);
        assert_eq!(
            (config.listen, config.admin_listen),
            (defaults.listen, defaults.admin_listen)
        );
    }

    #[test]
    fn log_levels_are_levels_or_modules_with_theirs() {
        for good in [
            "info",
            "DEBUG",
            "info,digest_gate=debug",
            "warn,kube_runtime=error",
            "off",
        ] {
            assert_eq!(check_levels(good), Ok(()), "{good}");
        }
        let error = check_levels("verbose").unwrap_err();
        assert!(
            error.contains("'verbose' is not a level (trace, debug, info, warn, error, off)"),
            "{error}"
        );
        assert!(check_levels("info,digest_gate").is_err());
    }
}
