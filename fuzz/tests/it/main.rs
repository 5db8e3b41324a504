#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! The fuzz harness in CI: every target over its corpus and a bounded, seeded run of mutated
//! inputs (the same inputs every time), plus checks that the driver itself can find a bug.

use corral_fuzz::driver::{MAX_INPUT, corpus_dir, load_corpus, mutate};
use corral_fuzz::{Budget, Rng, TARGETS, Target, run};

/// Mutated inputs per target in CI: a few seconds in all for a debug build on 2 cores.
const CI_ITERATIONS: u64 = 20_000;

fn run_target(name: &str) {
    let target = TARGETS.iter().find(|t| t.name == name).unwrap();
    let corpus = load_corpus(&corpus_dir(), name).unwrap();
    assert!(!corpus.is_empty(), "{name} has a seed corpus");
    match run(
        target,
        &corpus,
        Budget::Iterations(CI_ITERATIONS),
        0x00c0_55a1,
    ) {
        Ok(report) => {
            assert_eq!(report.executions, corpus.len() as u64 + CI_ITERATIONS);
            assert!(
                report.outcomes > 1,
                "{name}: the run reached more than one outcome"
            );
        }
        Err(finding) => panic!(
            "{name}: {}\ninput: {:?}",
            finding.message,
            String::from_utf8_lossy(&finding.input)
        ),
    }
}

macro_rules! targets {
    ($($name:ident),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                run_target(stringify!($name));
            }
        )+

        #[test]
        fn every_target_has_a_ci_test() {
            let tested = [$(stringify!($name)),+];
            for t in TARGETS {
                assert!(tested.contains(&t.name), "{} is not run in CI", t.name);
            }
        }
    };
}

targets!(
    sandbox_id,
    list_cursor,
    idempotency_key,
    api_key,
    authorization,
    bridge_url,
    trusted_url,
    sse,
    exec_stream,
);

/// A target with a planted bug several mutations deep: the driver must find it from a seed
/// that does not have it, or it would find nothing real either.
#[test]
fn the_driver_finds_a_planted_bug_and_reports_its_input() {
    fn planted(data: &[u8]) -> u64 {
        let s = String::from_utf8_lossy(data);
        if s.contains("sbx_") && s.contains("\r\n") {
            panic!("planted");
        }
        data.len() as u64
    }
    let target = Target {
        name: "planted",
        about: "",
        run: planted,
        dictionary: &[b"sbx_", b"\r\n"],
    };
    let finding = run(&target, &[b"hello".to_vec()], Budget::Iterations(50_000), 7)
        .expect_err("the planted bug is found");
    assert!(finding.message.contains("planted"), "{}", finding.message);
    let s = String::from_utf8_lossy(&finding.input);
    assert!(s.contains("sbx_") && s.contains("\r\n"), "{s:?}");
}

#[test]
fn runs_are_reproducible_from_the_seed_and_inputs_stay_bounded() {
    let dictionary: &[&[u8]] = &[b"event: ", &[b'x'; 300]];
    let mut a = Rng::new(42);
    let mut b = Rng::new(42);
    let (mut x, mut y) = (b"data: 1\n\n".to_vec(), b"data: 1\n\n".to_vec());
    for _ in 0..20_000 {
        mutate(&mut a, &mut x, dictionary, &[]);
        mutate(&mut b, &mut y, dictionary, &[]);
        assert_eq!(x, y);
        assert!(x.len() <= MAX_INPUT);
    }
}
