use corral_provider_testkit::Conformance;

use crate::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_passes_the_conformance_suite() {
    let world = World::new();
    Conformance::new(&world.provider).run_all().await;
}
