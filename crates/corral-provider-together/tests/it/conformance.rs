use corral_provider_testkit::Conformance;

use crate::{ctx, setup};

#[tokio::test]
async fn together_adapter_passes_the_conformance_suite_against_the_fake() {
    let (_server, provider) = setup().await;
    Conformance::new(&provider)
        .with_context(ctx())
        .run_all()
        .await;
}
