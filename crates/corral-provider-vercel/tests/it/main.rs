#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! The Vercel Sandbox adapter against its loopback fake: conformance, faults, traps, and an
//! opt-in live test.

mod conformance;
mod faults;
mod live;
mod traps;

use corral_domain::ProviderContext;
use corral_provider::{CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_vercel::fake::{FAKE_PROJECT_ID, FAKE_TEAM_ID, FAKE_TOKEN};
use corral_provider_vercel::{VercelConfig, VercelProvider};

/// A context carrying the fake's token, team and project.
pub(crate) fn ctx() -> CallContext {
    CallContext::new(
        Some(SecretString::from(FAKE_TOKEN)),
        ProviderContext {
            team_id: Some(FAKE_TEAM_ID.into()),
            project_id: Some(FAKE_PROJECT_ID.into()),
            ..ProviderContext::default()
        },
    )
}

/// The adapter pointed at `base_url`.
pub(crate) fn provider(base_url: &str) -> VercelProvider {
    provider_with(base_url, HttpConfig::default())
}

/// The adapter pointed at `base_url` with these HTTP settings.
pub(crate) fn provider_with(base_url: &str, http: HttpConfig) -> VercelProvider {
    VercelProvider::new(VercelConfig {
        base_url: base_url.to_owned(),
        http,
    })
    .unwrap()
}
