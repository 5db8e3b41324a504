#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Sprites adapter against its loopback fake: the shared suites through the harness, then
//! Sprites' own traps.

mod commands;
mod traps;

use corral_domain::Provider;
use corral_provider::{CallContext, CreateSpec, SandboxProvider};
use corral_provider_sprites::SpritesProvider;
use corral_provider_sprites::fake::Fake;

corral_provider_testkit::adapter_tests!(corral_provider_sprites::fake::Fake);

pub(crate) async fn setup() -> (Fake, SpritesProvider, CallContext) {
    corral_provider_testkit::helpers::setup().await
}

pub(crate) fn spec() -> CreateSpec {
    corral_provider_testkit::helpers::spec(Provider::Sprites, None, None)
}

pub(crate) async fn created(provider: &SpritesProvider, ctx: &CallContext) -> String {
    provider.create(ctx, &spec()).await.unwrap().native_id
}
