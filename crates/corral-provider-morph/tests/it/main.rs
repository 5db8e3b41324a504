#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Morph adapter against its loopback fake: the shared suites through the harness, then
//! Morph's own traps.

mod fake_checks;
mod faults;
mod traps;

use corral_domain::Provider;
use corral_provider::{CallContext, CreateSpec, SandboxProvider};
use corral_provider_morph::MorphProvider;
use corral_provider_morph::fake::{self, Fake};

pub(crate) const KEY: &str = fake::API_KEY;
pub(crate) const SNAPSHOT: &str = fake::SNAPSHOT;

corral_provider_testkit::adapter_tests!(corral_provider_morph::fake::Fake);

pub(crate) fn ctx() -> CallContext {
    corral_provider_testkit::helpers::ctx(KEY)
}

pub(crate) async fn setup() -> (Fake, MorphProvider) {
    let (fake, provider, _) = corral_provider_testkit::helpers::setup().await;
    (fake, provider)
}

pub(crate) fn spec(image: Option<&str>, timeout: Option<u64>) -> CreateSpec {
    corral_provider_testkit::helpers::spec(Provider::Morph, image, timeout)
}

/// Creates an instance and observes it once, so the fake reports it `ready`.
pub(crate) async fn running(provider: &MorphProvider) -> String {
    let created = provider
        .create(&ctx(), &spec(None, Some(60)))
        .await
        .unwrap();
    provider.get(&ctx(), &created.native_id).await.unwrap();
    created.native_id
}
