//! `corral`: the server and admin CLI (see `corral --help`).

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let cli = corral::cli::Cli::parse();
    corral::commands::run(cli)
}
