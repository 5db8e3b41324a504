//! `cargo xtask fuzz [--seconds N] [--target T]... [--seed S] [--iterations N] [--list]`:
//! builds the `corral-fuzz` runner in release mode and runs the fuzz targets (see
//! `fuzz/README.md`). `--seconds` (default 60) is the whole run's budget, shared by the
//! selected targets; a finding is saved under `fuzz/artifacts/<target>/` and fails the command.
//! CI does not call this: the `corral-fuzz` test runs every target for a bounded, seeded
//! number of inputs instead.

use crate::{cargo, run};

pub(crate) fn fuzz(args: &[String]) -> Result<(), String> {
    let cargo = cargo();
    let mut command: Vec<&str> = vec![
        "run",
        "--release",
        "--quiet",
        "-p",
        "corral-fuzz",
        "--bin",
        "corral-fuzz",
        "--",
    ];
    command.extend(args.iter().map(String::as_str));
    run(&cargo, &command)
}
