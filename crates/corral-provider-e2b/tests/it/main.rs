//! The E2B adapter against its fake: conformance, faults and E2B's traps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.

mod conformance;
mod faults;
mod live;
mod traps;

use corral_domain::{CreateSandboxRequest, OperationId, Provider, ProviderContext};
use corral_provider::{CallContext, CreateSpec, SecretString};
use corral_provider_e2b::fake::{API_KEY, E2bFake};
use corral_provider_e2b::{E2bConfig, E2bProvider};

/// A context holding the fake's API key.
pub fn ctx() -> CallContext {
    CallContext::new(
        Some(SecretString::from(API_KEY)),
        ProviderContext::default(),
    )
}

/// A fake and an adapter pointed at it.
pub async fn world() -> (E2bFake, E2bProvider) {
    let fake = E2bFake::start().await;
    let provider = E2bProvider::new(fake.config()).unwrap();
    (fake, provider)
}

/// An adapter for `config` (fault tests tweak timeouts).
pub fn provider(config: E2bConfig) -> E2bProvider {
    E2bProvider::new(config).unwrap()
}

/// A create spec with `timeout` seconds (or none) and no image.
pub fn spec(timeout: Option<u64>) -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::E2b, None, timeout),
        timeout_seconds: timeout,
    }
}
