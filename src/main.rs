//! The `digest-gate` binary: everything lives in the library.

fn main() -> std::process::ExitCode {
    // One crypto provider for every TLS client the process builds (the
    // registry client's reqwest takes the process default): ring, as the
    // server and the cluster client use. Fails only if one is installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    digest_gate::cli::main()
}
