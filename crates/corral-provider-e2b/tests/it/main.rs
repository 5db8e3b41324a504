//! The E2B adapter against its fake: the shared suites through the harness (one test per
//! conformance and fault scenario, and the opt-in live test), then E2B's own faults and traps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.

mod commands;
mod faults;
mod traps;

use corral_domain::Provider;
use corral_provider::{Adapter, CallContext, CreateSpec};
use corral_provider_e2b::E2bProvider;
use corral_provider_e2b::fake::Fake;

corral_provider_testkit::adapter_tests!(corral_provider_e2b::fake::Fake);

/// A context holding the fake's API key.
pub fn ctx() -> CallContext {
    corral_provider_testkit::helpers::ctx(corral_provider_e2b::fake::API_KEY)
}

/// A fake and an adapter pointed at it.
pub async fn world() -> (Fake, E2bProvider) {
    let fake = Fake::start().await;
    let provider = E2bProvider::from_config(fake.config()).unwrap();
    (fake, provider)
}

/// A create spec with `timeout` seconds (or none) and no image.
pub fn spec(timeout: Option<u64>) -> CreateSpec {
    corral_provider_testkit::helpers::spec(Provider::E2b, None, timeout)
}
