use corral_provider_testkit::Conformance;
use corral_provider_vercel::fake;

use crate::{ctx, provider};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_conformance_suite_passes_against_the_fake() {
    let server = fake::start().await;
    let vercel = provider(&server.base_url());
    Conformance::new(&vercel)
        .with_context(ctx())
        .run_all()
        .await;
}
