//! The mutation loop: seeded, deterministic for a given seed and iteration count, and bounded
//! (inputs never grow past [`MAX_INPUT`]).

use std::collections::HashSet;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::targets::{Target, fnv1a};

/// The largest input the driver builds: parsers meet larger bodies only through their
/// callers' caps, which the targets exercise with their own bounds.
pub const MAX_INPUT: usize = 4096;

/// Inputs kept for their new outcomes, on top of the seed corpus.
const MAX_POOL: usize = 2048;

/// A small, fast, seeded PRNG (SplitMix64): reproducible runs without a dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0` when `n` is `0`).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }
}

/// How long to run.
#[derive(Debug, Clone, Copy)]
pub enum Budget {
    /// Exactly this many mutated inputs (after replaying the corpus): reproducible.
    Iterations(u64),
    /// Until this much time has passed.
    Time(Duration),
}

/// A panic or failed invariant, with the input that caused it.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The target's name.
    pub target: &'static str,
    /// The input.
    pub input: Vec<u8>,
    /// The panic message and where it was raised.
    pub message: String,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Inputs tried (corpus replays included).
    pub executions: u64,
    /// Distinct outcomes the target reported.
    pub outcomes: usize,
    /// Inputs kept in the pool besides the corpus.
    pub kept: usize,
}

/// Bytes that tend to matter to text parsers, for single-byte writes.
const INTERESTING: &[u8] = b"\0\t\n\r _-:;/\\@#?%[].0179azAZ~\x7f\x80\xc3\xef\xff";

/// One random edit of `input`, drawing tokens from `dictionary` and splices from `pool`.
pub fn mutate(rng: &mut Rng, input: &mut Vec<u8>, dictionary: &[&[u8]], pool: &[Vec<u8>]) {
    let len = input.len();
    match rng.below(11) {
        0 if len > 0 => {
            let i = rng.below(len);
            input[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            input[i] = rng.byte();
        }
        2 if len > 0 => {
            let i = rng.below(len);
            input[i] = INTERESTING[rng.below(INTERESTING.len())];
        }
        3 => {
            let at = rng.below(len + 1);
            let b = if rng.below(2) == 0 {
                rng.byte()
            } else {
                INTERESTING[rng.below(INTERESTING.len())]
            };
            input.insert(at, b);
        }
        4 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(16));
            input.drain(at..at + n);
        }
        5 if len > 0 => {
            // Copy a range of the input elsewhere in it (repeats grow lines and lists).
            let from = rng.below(len);
            let n = 1 + rng.below((len - from).min(64));
            let piece = input[from..from + n].to_vec();
            let at = rng.below(len + 1);
            input.splice(at..at, piece);
        }
        6 | 7 if !dictionary.is_empty() => {
            let token = dictionary[rng.below(dictionary.len())];
            let at = rng.below(len + 1);
            if rng.below(2) == 0 || at == len {
                input.splice(at..at, token.iter().copied());
            } else {
                let end = (at + token.len()).min(len);
                input.splice(at..end, token.iter().copied());
            }
        }
        8 if !pool.is_empty() => {
            // Splice: a prefix of this input, a suffix of another.
            let other = &pool[rng.below(pool.len())];
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            input.truncate(cut);
            input.extend_from_slice(&other[from..]);
        }
        9 if len > 0 => input.truncate(rng.below(len)),
        _ => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.byte()).collect();
            input.splice(at..at, bytes);
        }
    }
    input.truncate(MAX_INPUT);
}

/// The seed corpus of `target` under `dir` (`<dir>/<target>/*`), in file-name order.
pub fn load_corpus(dir: &Path, target: &str) -> std::io::Result<Vec<Vec<u8>>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(target))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            std::fs::read(p).map(|mut b| {
                b.truncate(MAX_INPUT);
                b
            })
        })
        .collect()
}

/// The crate's own corpus directory (`fuzz/corpus`).
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// Runs `target` on every corpus input, then on mutated inputs until `budget` is spent; the
/// first finding ends the run.
pub fn run(
    target: &Target,
    corpus: &[Vec<u8>],
    budget: Budget,
    seed: u64,
) -> Result<Report, Finding> {
    let last_panic = Arc::new(Mutex::new(String::new()));
    let previous_hook = panic::take_hook();
    {
        let last_panic = last_panic.clone();
        panic::set_hook(Box::new(move |info| {
            let location = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let payload = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(non-string panic)".to_owned());
            *last_panic.lock().unwrap_or_else(PoisonError::into_inner) =
                format!("{payload}{location}");
        }));
    }
    let result = run_inner(target, corpus, budget, seed, &last_panic);
    panic::set_hook(previous_hook);
    result
}

fn run_inner(
    target: &Target,
    corpus: &[Vec<u8>],
    budget: Budget,
    seed: u64,
    last_panic: &Mutex<String>,
) -> Result<Report, Finding> {
    let mut rng = Rng::new(seed);
    let mut seen: HashSet<u64> = HashSet::new();
    let mut pool: Vec<Vec<u8>> = corpus.to_vec();
    if pool.is_empty() {
        pool.push(Vec::new());
    }
    let base = pool.len();
    let mut report = Report::default();
    let execute = |input: &[u8], report: &mut Report| -> Result<u64, Finding> {
        report.executions += 1;
        panic::catch_unwind(AssertUnwindSafe(|| (target.run)(input))).map_err(|_| Finding {
            target: target.name,
            input: input.to_vec(),
            message: last_panic
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        })
    };
    for input in corpus {
        seen.insert(execute(input, &mut report)?);
    }
    let started = Instant::now();
    let mut done: u64 = 0;
    loop {
        match budget {
            Budget::Iterations(n) if done >= n => break,
            // Reading the clock for every input would cost more than most targets.
            Budget::Time(limit) if done.is_multiple_of(256) && started.elapsed() >= limit => break,
            _ => {}
        }
        done += 1;
        let mut input = pool[rng.below(pool.len())].clone();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut input, target.dictionary, &pool);
        }
        let outcome = execute(&input, &mut report)?;
        if seen.insert(outcome) && pool.len() < base + MAX_POOL {
            pool.push(input);
            report.kept += 1;
        }
    }
    report.outcomes = seen.len();
    Ok(report)
}

/// Writes `finding`'s input to `<dir>/<target>/crash-<hash>` and returns the path.
pub fn save_finding(dir: &Path, finding: &Finding) -> std::io::Result<PathBuf> {
    let dir = dir.join(finding.target);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("crash-{:016x}", fnv1a(&finding.input)));
    std::fs::write(&path, &finding.input)?;
    Ok(path)
}
