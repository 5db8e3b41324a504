use corral_domain::ProviderContext;
use corral_provider::{CallContext, SecretString};
use corral_provider_morph::{MorphConfig, MorphProvider};
use corral_provider_testkit::Conformance;

/// Runs the conformance suite against the real Morph Cloud when `CORRAL_LIVE_MORPH_API_KEY`
/// (and `CORRAL_LIVE_MORPH_SNAPSHOT_ID`, the snapshot to start from) are set.
#[tokio::test]
async fn live_morph_passes_the_conformance_suite() {
    let (Ok(key), Ok(snapshot)) = (
        std::env::var("CORRAL_LIVE_MORPH_API_KEY"),
        std::env::var("CORRAL_LIVE_MORPH_SNAPSHOT_ID"),
    ) else {
        eprintln!(
            "skipped: set CORRAL_LIVE_MORPH_API_KEY and CORRAL_LIVE_MORPH_SNAPSHOT_ID to run"
        );
        return;
    };
    let provider = MorphProvider::new(MorphConfig {
        default_snapshot_id: Some(snapshot),
        ..MorphConfig::default()
    })
    .unwrap();
    let ctx = CallContext::new(Some(SecretString::from(key)), ProviderContext::default());
    Conformance::new(&provider)
        .with_context(ctx)
        .with_ready_within(std::time::Duration::from_secs(300))
        .run_all()
        .await;
}
