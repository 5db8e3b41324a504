use std::time::Duration;

use corral_provider_testkit::Conformance;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_passes_the_conformance_suite_against_the_fake() {
    let (fake, provider) = crate::world().await;
    // Create answers before `started`: the suite's wait has to see `starting` first.
    fake.set_warmup(2);
    Conformance::new(&provider)
        .with_context(crate::ctx())
        .with_ready_within(Duration::from_secs(10))
        .run_all()
        .await;
}
