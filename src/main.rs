//! The `digest-gate` binary: everything lives in the library.

fn main() -> std::process::ExitCode {
    digest_gate::cli::main()
}
