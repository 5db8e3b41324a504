use corral_provider_testkit::Conformance;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_passes_the_conformance_suite_against_the_fake() {
    let (_fake, provider) = crate::world().await;
    Conformance::new(&provider)
        .with_context(crate::ctx())
        .run_all()
        .await;
}
