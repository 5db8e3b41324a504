//! `corral-fuzz`: runs the fuzz targets (see the crate docs); `cargo xtask fuzz` builds and
//! runs it in release mode.
//!
//! ```text
//! corral-fuzz [--seconds N] [--iterations N] [--target NAME]... [--seed S] [--list]
//! ```
//!
//! `--seconds` is the whole run's budget, shared equally by the selected targets (default
//! 60); `--iterations` instead runs exactly that many mutated inputs per target (a
//! reproducible run). A finding is saved under `fuzz/artifacts/<target>/` and ends the run
//! with exit code 1.
#![allow(clippy::print_stdout)] // A command-line tool reports on stdout.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use corral_fuzz::driver::{corpus_dir, load_corpus, save_finding};
use corral_fuzz::{Budget, TARGETS, run};

fn main() -> ExitCode {
    match main_inner() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("corral-fuzz: {e}");
            ExitCode::from(2)
        }
    }
}

fn main_inner() -> Result<ExitCode, String> {
    let mut seconds: u64 = 60;
    let mut iterations: Option<u64> = None;
    let mut names: Vec<String> = Vec::new();
    let mut seed: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    let number = |v: Option<String>, what: &str| -> Result<u64, String> {
        v.ok_or(format!("{what} needs a value"))?
            .parse()
            .map_err(|_| format!("{what} needs a number"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => seconds = number(args.next(), "--seconds")?,
            "--iterations" => iterations = Some(number(args.next(), "--iterations")?),
            "--seed" => seed = Some(number(args.next(), "--seed")?),
            "--target" => names.push(args.next().ok_or("--target needs a name")?),
            "--list" => {
                for t in TARGETS {
                    println!("{:<16} {}", t.name, t.about);
                }
                return Ok(ExitCode::SUCCESS);
            }
            other => return Err(format!("unknown argument `{other}` (see --list)")),
        }
    }
    let selected: Vec<_> = if names.is_empty() {
        TARGETS.iter().collect()
    } else {
        names
            .iter()
            .map(|n| {
                TARGETS
                    .iter()
                    .find(|t| t.name == n)
                    .ok_or(format!("no target `{n}` (see --list)"))
            })
            .collect::<Result<_, _>>()?
    };
    let seed = seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let budget = match iterations {
        Some(n) => Budget::Iterations(n),
        None => Budget::Time(Duration::from_secs(seconds) / selected.len().max(1) as u32),
    };
    println!("seed {seed}, {budget:?} per target");
    for target in selected {
        let corpus = load_corpus(&corpus_dir(), target.name)
            .map_err(|e| format!("cannot read the corpus of {}: {e}", target.name))?;
        match run(target, &corpus, budget, seed) {
            Ok(report) => println!(
                "{:<16} ok: {} inputs, {} outcomes, {} kept ({} seeds)",
                target.name,
                report.executions,
                report.outcomes,
                report.kept,
                corpus.len()
            ),
            Err(finding) => {
                let artifacts = corpus_dir().with_file_name("artifacts");
                let saved = save_finding(&artifacts, &finding)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|e| format!("(not saved: {e})"));
                println!(
                    "{} FAILED: {}\n  input {:?}\n  saved to {saved}\n  reproduce: corral-fuzz --target {} --seed {seed} {}",
                    finding.target,
                    finding.message,
                    String::from_utf8_lossy(&finding.input),
                    finding.target,
                    match budget {
                        Budget::Iterations(n) => format!("--iterations {n}"),
                        Budget::Time(_) => "(or copy the saved input into the corpus)".to_owned(),
                    }
                );
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
