use corral_provider::{CallContext, ExposeSecret as _, SecretString};
use corral_provider_e2b::{E2bConfig, E2bProvider};
use corral_provider_testkit::Conformance;

/// Runs the conformance suite against the real E2B when `CORRAL_LIVE_E2B_API_KEY` is set.
#[tokio::test]
async fn live_e2b_passes_the_conformance_suite() {
    let Ok(key) = std::env::var("CORRAL_LIVE_E2B_API_KEY") else {
        eprintln!("skipped: set CORRAL_LIVE_E2B_API_KEY to run against the real E2B");
        return;
    };
    let key = SecretString::from(key);
    assert!(!key.expose_secret().is_empty());
    let provider = E2bProvider::new(E2bConfig::default()).unwrap();
    let ctx = CallContext::new(Some(key), Default::default());
    Conformance::new(&provider)
        .with_context(ctx)
        .run_all()
        .await;
}
