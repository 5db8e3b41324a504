use corral_provider::{CallContext, SecretString};
use corral_provider_daytona::{DaytonaConfig, DaytonaProvider};
use corral_provider_testkit::Conformance;

/// Runs the conformance suite against the real Daytona when `CORRAL_LIVE_DAYTONA_API_KEY` is
/// set.
#[tokio::test]
async fn live_daytona_passes_the_conformance_suite() {
    let Ok(key) = std::env::var("CORRAL_LIVE_DAYTONA_API_KEY") else {
        eprintln!("skipped: set CORRAL_LIVE_DAYTONA_API_KEY to run against the real Daytona");
        return;
    };
    let provider = DaytonaProvider::new(DaytonaConfig::default()).unwrap();
    let ctx = CallContext::new(Some(SecretString::from(key)), Default::default());
    Conformance::new(&provider)
        .with_context(ctx)
        .with_ready_within(std::time::Duration::from_secs(120))
        .run_all()
        .await;
}
