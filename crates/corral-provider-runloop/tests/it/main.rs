#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! The Runloop adapter against its loopback fake: conformance, faults, traps, and an opt-in
//! live test.

mod conformance;
mod faults;
mod live;
mod traps;

use corral_domain::ProviderContext;
use corral_provider::{CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_runloop::fake::FAKE_API_KEY;
use corral_provider_runloop::{RunloopConfig, RunloopProvider};

/// A context carrying the fake's API key.
pub(crate) fn ctx() -> CallContext {
    CallContext::new(
        Some(SecretString::from(FAKE_API_KEY)),
        ProviderContext::default(),
    )
}

/// The adapter pointed at `base_url`.
pub(crate) fn provider(base_url: &str) -> RunloopProvider {
    provider_with(base_url, HttpConfig::default())
}

/// The adapter pointed at `base_url` with these HTTP settings.
pub(crate) fn provider_with(base_url: &str, http: HttpConfig) -> RunloopProvider {
    RunloopProvider::new(RunloopConfig {
        base_url: base_url.to_owned(),
        http,
        ..RunloopConfig::default()
    })
    .unwrap()
}
