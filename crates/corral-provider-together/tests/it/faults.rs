//! The shared fault suite against the Together fake, and Together's own refusals before any call.

use corral_provider::{ProviderError, SandboxProvider};
use corral_provider_http::reqwest::Method;
use corral_provider_testkit::fake::FakeServer;
use corral_provider_testkit::faults::FaultSuite;
use corral_provider_together::fake;

use crate::{ALIAS, KEY, ctx, provider_at, setup, spec};

async fn world() -> FakeServer {
    fake::start(KEY, &[ALIAS]).await
}

fn suite(server: &FakeServer) -> FaultSuite<'_> {
    FaultSuite::new(server, fake::base_url(server), |url: &str, http| {
        provider_at(url.to_owned(), http)
    })
    .with_context(ctx())
    .create_call(Method::POST, "/v1/sandboxes")
    .get_call(Method::GET, "/v1/sandboxes/")
    .unknown_id("5a3c0000-0000-4000-8000-0000000fffff")
    .wrong_credential("not-the-key")
}

corral_provider_testkit::fault_suite_tests!(world: world, suite: suite);

#[tokio::test]
async fn create_without_image_or_default_snapshot_is_refused_before_any_call() {
    let (server, _) = setup().await;
    let provider =
        corral_provider_together::TogetherProvider::new(corral_provider_together::TogetherConfig {
            base_url: format!("{}/v1", server.base_url()),
            ..Default::default()
        })
        .unwrap();
    let err = provider
        .create(&ctx(), &spec(None, None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    assert!(server.log().all().is_empty());
}

#[tokio::test]
async fn a_malformed_id_is_not_found_without_a_call() {
    let (server, provider) = setup().await;
    let err = provider.get(&ctx(), "../etc").await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    provider.delete(&ctx(), "not-a-uuid").await.unwrap();
    assert!(server.log().all().is_empty());
}
