#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! The Runloop adapter against its loopback fake: the shared suites through the harness (a
//! test per conformance scenario, the fault suite, the opt-in live test), then Runloop's own
//! traps.

mod traps;

use corral_provider::CallContext;
use corral_provider_runloop::RunloopProvider;
use corral_provider_runloop::fake::{API_KEY, Fake};

corral_provider_testkit::adapter_tests!(corral_provider_runloop::fake::Fake);

/// A context carrying the fake's API key.
pub(crate) fn ctx() -> CallContext {
    corral_provider_testkit::helpers::ctx(API_KEY)
}

/// A fresh fake and the adapter pointed at it.
pub(crate) async fn setup() -> (Fake, RunloopProvider) {
    let (fake, provider, _) = corral_provider_testkit::helpers::setup().await;
    (fake, provider)
}
