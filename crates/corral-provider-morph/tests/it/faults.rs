//! The shared fault suite against the Morph fake, and Morph's own refusals before any call.

use corral_provider::{ProviderError, SandboxProvider};
use corral_provider_http::reqwest::Method;
use corral_provider_morph::fake;
use corral_provider_testkit::fake::FakeServer;
use corral_provider_testkit::faults::FaultSuite;

use crate::{KEY, ctx, provider_at, setup, spec};

async fn world() -> FakeServer {
    fake::start(KEY).await
}

fn suite(server: &FakeServer) -> FaultSuite<'_> {
    FaultSuite::new(server, fake::base_url(server), |url: &str, http| {
        provider_at(url.to_owned(), http)
    })
    .with_context(ctx())
    .create_call(Method::POST, "/api/instance")
    .get_call(Method::GET, "/api/instance/")
    .unknown_id("morphvm_nope")
    .wrong_credential("not-the-key")
}

corral_provider_testkit::fault_suite_tests!(world: world, suite: suite);

#[tokio::test]
async fn create_without_image_or_default_snapshot_is_refused_before_any_call() {
    let (server, _) = setup().await;
    let provider = corral_provider_morph::MorphProvider::new(corral_provider_morph::MorphConfig {
        base_url: format!("{}/api", server.base_url()),
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
