use corral_domain::ProviderContext;
use corral_provider::{CallContext, SecretString};
use corral_provider_testkit::Conformance;
use corral_provider_together::{TogetherConfig, TogetherProvider};

/// Runs the conformance suite against the real Together Sandbox when
/// `CORRAL_LIVE_TOGETHER_API_KEY` and `CORRAL_LIVE_TOGETHER_SNAPSHOT` (a snapshot UUID or
/// alias to boot) are set.
#[tokio::test]
async fn live_together_passes_the_conformance_suite() {
    let (Ok(key), Ok(snapshot)) = (
        std::env::var("CORRAL_LIVE_TOGETHER_API_KEY"),
        std::env::var("CORRAL_LIVE_TOGETHER_SNAPSHOT"),
    ) else {
        eprintln!(
            "skipped: set CORRAL_LIVE_TOGETHER_API_KEY and CORRAL_LIVE_TOGETHER_SNAPSHOT to run"
        );
        return;
    };
    let provider = TogetherProvider::new(TogetherConfig {
        default_snapshot: Some(snapshot),
        ..TogetherConfig::default()
    })
    .unwrap();
    let ctx = CallContext::new(Some(SecretString::from(key)), ProviderContext::default());
    Conformance::new(&provider)
        .with_context(ctx)
        .with_ready_within(std::time::Duration::from_secs(300))
        .run_all()
        .await;
}
