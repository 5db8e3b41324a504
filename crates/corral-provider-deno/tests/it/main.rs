#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! The `deno` adapter against the bridge contract's fake: the shared suites, then this kind's
//! traps.

mod traps;

corral_provider_testkit::adapter_tests!(corral_provider_deno::fake::Fake);
