#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Together adapter against its loopback fake.

mod conformance;
mod fake_checks;
mod faults;
mod live;
mod traps;

use corral_domain::{CreateSandboxRequest, OperationId, Provider, ProviderContext};
use corral_provider::{CallContext, CreateSpec, SandboxProvider, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::fake::FakeServer;
use corral_provider_together::{TogetherConfig, TogetherProvider};

pub(crate) const KEY: &str = "together_test_key_0123";
pub(crate) const ALIAS: &str = "corral-test@v1";

pub(crate) fn ctx() -> CallContext {
    CallContext::new(Some(SecretString::from(KEY)), ProviderContext::default())
}

pub(crate) fn provider_at(base_url: String, http: HttpConfig) -> TogetherProvider {
    TogetherProvider::new(TogetherConfig {
        base_url,
        http,
        default_snapshot: Some(ALIAS.into()),
    })
    .unwrap()
}

pub(crate) async fn setup() -> (FakeServer, TogetherProvider) {
    let server = corral_provider_together::fake::start(KEY, &[ALIAS]).await;
    let provider = provider_at(
        corral_provider_together::fake::base_url(&server),
        HttpConfig::default(),
    );
    (server, provider)
}

pub(crate) fn spec(image: Option<&str>, timeout: Option<u64>) -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Together, image.map(Into::into), timeout),
        timeout_seconds: timeout,
    }
}

/// Creates a sandbox and observes it once, so the fake reports it running.
pub(crate) async fn running(provider: &TogetherProvider) -> String {
    let created = provider
        .create(&ctx(), &spec(None, Some(60)))
        .await
        .unwrap();
    provider.get(&ctx(), &created.native_id).await.unwrap();
    created.native_id
}
