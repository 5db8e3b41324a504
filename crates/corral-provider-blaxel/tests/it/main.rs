#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Blaxel adapter against its loopback fake: the shared suites through the harness, then
//! Blaxel's own traps.

mod traps;

use corral_domain::{CreateSandboxRequest, OperationId, Provider};
use corral_provider::{Adapter, CallContext, CreateSpec, SandboxProvider};
use corral_provider_blaxel::BlaxelProvider;
use corral_provider_blaxel::fake::Fake;

corral_provider_testkit::adapter_tests!(corral_provider_blaxel::fake::Fake);

pub(crate) async fn setup() -> (Fake, BlaxelProvider, CallContext) {
    let fake = Fake::start().await;
    let provider = BlaxelProvider::from_config(fake.config()).unwrap();
    let ctx = fake.context();
    (fake, provider, ctx)
}

pub(crate) fn spec(image: Option<&str>) -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Blaxel, image.map(Into::into), None),
        timeout_seconds: None,
    }
}

/// Creates a sandbox and observes it once, so the fake reports it deployed.
pub(crate) async fn running(provider: &BlaxelProvider, ctx: &CallContext) -> String {
    let created = provider.create(ctx, &spec(None)).await.unwrap();
    provider.get(ctx, &created.native_id).await.unwrap();
    created.native_id
}
