//! Morph's own refusals before any call (the shared fault suite runs through the harness).

use corral_provider::{Adapter, ProviderError, SandboxProvider};
use corral_provider_morph::MorphProvider;

use crate::{ctx, setup, spec};

#[tokio::test]
async fn create_without_image_or_default_snapshot_is_refused_before_any_call() {
    let (fake, _) = setup().await;
    let provider = MorphProvider::from_config(corral_provider_morph::MorphConfig {
        default_snapshot_id: None,
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
