//! The Daytona adapter against its fake: the shared suites through the harness, then Daytona's
//! own faults and traps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.

mod faults;
mod traps;

use corral_domain::Provider;
use corral_provider::{Adapter, CallContext, CreateSpec};
use corral_provider_daytona::fake::{API_KEY, Fake};
use corral_provider_daytona::{DaytonaConfig, DaytonaProvider};

corral_provider_testkit::adapter_tests!(corral_provider_daytona::fake::Fake);

/// A context holding the fake's API key.
pub fn ctx() -> CallContext {
    corral_provider_testkit::helpers::ctx(API_KEY)
}

/// A fake and an adapter pointed at it.
pub async fn world() -> (Fake, DaytonaProvider) {
    let fake = Fake::start().await;
    let provider = DaytonaProvider::from_config(fake.config()).unwrap();
    (fake, provider)
}

/// An adapter for `config`.
pub fn provider(config: DaytonaConfig) -> DaytonaProvider {
    DaytonaProvider::from_config(config).unwrap()
}

/// A create spec with `timeout` seconds (or none) and no image.
pub fn spec(timeout: Option<u64>) -> CreateSpec {
    corral_provider_testkit::helpers::spec(Provider::Daytona, None, timeout)
}

/// Observes a sandbox until the fake says `started`.
pub async fn started(p: &DaytonaProvider, id: &str) {
    use corral_provider::SandboxProvider as _;
    for _ in 0..20 {
        if p.get(&ctx(), id).await.unwrap().status == corral_domain::SandboxStatus::Running {
            return;
        }
    }
    panic!("sandbox {id} never started");
}
