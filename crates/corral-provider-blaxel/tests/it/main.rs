#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Blaxel adapter against its loopback fake: the shared suites through the harness, then
//! Blaxel's own traps.

mod traps;

use corral_domain::Provider;
use corral_provider::{CallContext, CreateSpec, SandboxProvider};
use corral_provider_blaxel::BlaxelProvider;
use corral_provider_blaxel::fake::Fake;

corral_provider_testkit::adapter_tests!(corral_provider_blaxel::fake::Fake);

pub(crate) async fn setup() -> (Fake, BlaxelProvider, CallContext) {
    corral_provider_testkit::helpers::setup().await
}

pub(crate) fn spec(image: Option<&str>) -> CreateSpec {
    corral_provider_testkit::helpers::spec(Provider::Blaxel, image, None)
}

/// Creates a sandbox and observes it once, so the fake reports it deployed.
pub(crate) async fn running(provider: &BlaxelProvider, ctx: &CallContext) -> String {
    let created = provider.create(ctx, &spec(None)).await.unwrap();
    provider.get(ctx, &created.native_id).await.unwrap();
    created.native_id
}
