#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! The Vercel Sandbox adapter against its loopback fake: the shared suites through the
//! harness (a test per conformance scenario, the fault suite, the opt-in live test), then
//! Vercel's own faults and traps.

mod faults;
mod traps;

use corral_domain::ProviderContext;
use corral_provider::{CallContext, SecretString};
use corral_provider_vercel::VercelProvider;
use corral_provider_vercel::fake::{API_KEY, Fake, PROJECT_ID, TEAM_ID};

corral_provider_testkit::adapter_tests!(corral_provider_vercel::fake::Fake);

/// A context carrying the fake's token, team and project.
pub(crate) fn ctx() -> CallContext {
    CallContext::new(
        Some(SecretString::from(API_KEY)),
        ProviderContext {
            team_id: Some(TEAM_ID.into()),
            project_id: Some(PROJECT_ID.into()),
            ..ProviderContext::default()
        },
    )
}

/// A fresh fake and the adapter pointed at it.
pub(crate) async fn setup() -> (Fake, VercelProvider) {
    let (fake, provider, _) = corral_provider_testkit::helpers::setup().await;
    (fake, provider)
}
