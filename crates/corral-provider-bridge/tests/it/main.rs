#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! The bridge client against the contract's fake: the shared suites through a test adapter,
//! then the contract's traps (a bridge without Corral's extensions, broken event streams,
//! pinning, credentials).

mod fake_checks;
mod lifecycle;
mod props;
mod traps;

use corral_domain::{
    ImageMode, OutputStreams, PricingEvidence, Provider, ProviderCapabilities, TimeoutMode,
};

fn caps() -> ProviderCapabilities {
    ProviderCapabilities {
        lifecycle: corral_domain::LifecycleCapabilities::default(),
        provider: Provider::Cloudflare,
        display_name: "Test bridge".into(),
        pricing: PricingEvidence {
            summary: "test".into(),
            source_url: "https://example.com/pricing".into(),
            read_on: "2026-11-23".into(),
            rates: Vec::new(),
            size: None,
        },
        image_mode: ImageMode::Fixed,
        timeout_mode: TimeoutMode::ProviderManaged,
        timeout_default_seconds: None,
        timeout_maximum_seconds: None,
        timeout_granularity_seconds: None,
        supports_cwd: true,
        supports_env: true,
        output_streams: OutputStreams::Separate,
        supports_persistent_resume: false,
        // The fake serves the lifecycle extension: the conformance suite runs it all.
        supports_explicit_stop: true,
        supports_snapshots: true,
        supports_restore: true,
        supports_delete: true,
        images: Vec::new(),
        commands: corral_domain::CommandCapabilities::emulated(),
    }
}

corral_provider_bridge::bridge_adapter!(
    /// A bridge kind for these tests.
    TestBridge,
    Provider::Cloudflare,
    caps
);

pub(crate) type Fake = corral_provider_bridge::fake::Fake<TestBridge>;

corral_provider_testkit::adapter_tests!(crate::Fake);
