#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Morph adapter against its loopback fake.

mod conformance;
mod fake_checks;
mod faults;
mod live;
mod traps;

use corral_domain::{CreateSandboxRequest, OperationId, Provider, ProviderContext};
use corral_provider::{CallContext, CreateSpec, SandboxProvider, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_morph::{MorphConfig, MorphProvider};
use corral_provider_testkit::fake::FakeServer;

pub(crate) const KEY: &str = "morph_test_key_0123";
pub(crate) const SNAPSHOT: &str = "snapshot_corraltest";

pub(crate) fn ctx() -> CallContext {
    CallContext::new(Some(SecretString::from(KEY)), ProviderContext::default())
}

pub(crate) fn provider_at(base_url: String, http: HttpConfig) -> MorphProvider {
    MorphProvider::new(MorphConfig {
        base_url,
        http,
        default_snapshot_id: Some(SNAPSHOT.into()),
    })
    .unwrap()
}

pub(crate) async fn setup() -> (FakeServer, MorphProvider) {
    let server = corral_provider_morph::fake::start(KEY).await;
    let provider = provider_at(
        corral_provider_morph::fake::base_url(&server),
        HttpConfig::default(),
    );
    (server, provider)
}

pub(crate) fn spec(image: Option<&str>, timeout: Option<u64>) -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Morph, image.map(Into::into), timeout),
        timeout_seconds: timeout,
    }
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
