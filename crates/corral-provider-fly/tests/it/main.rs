#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Fly Machines adapter against its loopback fake: the shared suites through the harness, then
//! Fly's own traps.

mod traps;

use corral_domain::{CreateSandboxRequest, FlyCreate, OperationId};
use corral_provider::{CallContext, CreateSpec, SandboxProvider};
use corral_provider_fly::FlyProvider;
use corral_provider_fly::fake::Fake;

corral_provider_testkit::adapter_tests!(corral_provider_fly::fake::Fake);

pub(crate) async fn setup() -> (Fake, FlyProvider, CallContext) {
    corral_provider_testkit::helpers::setup().await
}

pub(crate) fn spec(create: FlyCreate) -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::Fly(create),
        timeout_seconds: None,
    }
}

/// Creates a machine and observes it once, so the fake reports it started.
pub(crate) async fn running(provider: &FlyProvider, ctx: &CallContext) -> String {
    let created = provider
        .create(ctx, &spec(FlyCreate::default()))
        .await
        .unwrap();
    provider.get(ctx, &created.native_id).await.unwrap();
    created.native_id
}
