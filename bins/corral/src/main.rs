//! `corral`: the server and admin CLI (see `corral --help`).

use std::process::ExitCode;

use clap::Parser as _;

/// mimalloc returns freed memory to the system (see `Cargo.toml`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Started as a `local` sandbox's init: that, and nothing else (before any thread).
    corral_provider_local::run_init_if_requested();
    let cli = corral::cli::Cli::parse();
    corral::commands::run(cli)
}
