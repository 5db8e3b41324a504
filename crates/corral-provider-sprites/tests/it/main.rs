#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Sprites adapter against its loopback fake: the shared suites through the harness, then
//! Sprites' own traps.

mod commands;
mod traps;

use corral_domain::{CreateSandboxRequest, OperationId, Provider};
use corral_provider::{Adapter, CallContext, CreateSpec, SandboxProvider};
use corral_provider_sprites::SpritesProvider;
use corral_provider_sprites::fake::Fake;

corral_provider_testkit::adapter_tests!(corral_provider_sprites::fake::Fake);

pub(crate) async fn setup() -> (Fake, SpritesProvider, CallContext) {
    let fake = Fake::start().await;
    let provider = SpritesProvider::from_config(fake.config()).unwrap();
    let ctx = fake.context();
    (fake, provider, ctx)
}

pub(crate) fn spec() -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Sprites, None, None),
        timeout_seconds: None,
    }
}

pub(crate) async fn created(provider: &SpritesProvider, ctx: &CallContext) -> String {
    provider.create(ctx, &spec()).await.unwrap().native_id
}
