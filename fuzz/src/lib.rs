//! Fuzzing of Corral's parsers of untrusted text on the stable toolchain.
//!
//! cargo-fuzz and libFuzzer need nightly; this crate needs nothing but `cargo`. It has two
//! parts:
//!
//! - [`targets`]: one function per parser that takes bytes from outside (a header, a path, a
//!   query, a provider's or bridge's answer), each taking `&[u8]` and asserting the parser's
//!   invariants — it never panics, what it accepts round-trips or keeps the rules, what it
//!   refuses is refused with the right error, what it holds stays bounded. A failed assertion
//!   is a finding.
//! - [`driver`]: a seeded, coverage-less mutation loop over a seed corpus
//!   (`fuzz/corpus/<target>/`): bit flips, byte inserts and deletes, copies, splices of two
//!   inputs and a per-target dictionary of interesting tokens. Without coverage it keeps a
//!   mutated input when the target reports an outcome it had not seen (a cheap signal of a new
//!   path: another error, another event count). A finding is written to
//!   `fuzz/artifacts/<target>/` with the seed that reproduces it.
//!
//! Run it with `cargo xtask fuzz [--seconds N] [--target T] [--seed S]` (release build); the
//! crate's test runs every target for a bounded number of iterations in CI.

pub mod driver;
pub mod targets;

pub use driver::{Budget, Finding, Report, Rng, run};
pub use targets::{TARGETS, Target};
