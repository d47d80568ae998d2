//! The `driftless` binary: all wiring lives in [`driftless::cli`].

fn main() -> std::process::ExitCode {
    driftless::cli::main()
}
