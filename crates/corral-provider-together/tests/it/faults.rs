//! Together's own refusals before any call (the shared fault suite runs through the harness).

use corral_provider::{Adapter, ProviderError, SandboxProvider};
use corral_provider_testkit::harness::Harness as _;
use corral_provider_together::{TogetherConfig, TogetherProvider};

use crate::{ctx, setup, spec};

#[tokio::test]
async fn create_without_image_or_default_snapshot_is_refused_before_any_call() {
    let (fake, _) = setup().await;
    let provider = TogetherProvider::from_config(TogetherConfig {
        default_snapshot: None,
        ..fake.config()
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
    assert!(fake.server().log().all().is_empty());
}

#[tokio::test]
async fn a_malformed_id_is_not_found_without_a_call() {
    let (fake, provider) = setup().await;
    let err = provider.get(&ctx(), "../etc").await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    let err = provider.delete(&ctx(), "not-a-uuid").await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    // As the server wraps it, deleting what cannot exist is Ok.
    fake.provider().delete(&ctx(), "not-a-uuid").await.unwrap();
    assert!(fake.server().log().all().is_empty());
}
