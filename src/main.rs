//! The `driftless` binary: all wiring lives in [`driftless::cli`].

/// mimalloc instead of glibc's allocator: a sync of 10,000 objects allocates and frees
/// millions of small JSON values, and measured with `driftless sync` on the bench repository
/// (hyperfine, 15 runs) the median no-op resync went from 964 to 636 ms and the cold sync
/// from 1.04 to 0.73 s (README, Benchmark).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    driftless::cli::main()
}
