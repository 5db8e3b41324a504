//! The shared fault suite against the E2B fake, and E2B's own faults (envd's).

use corral_provider::{ExecSpec, ProviderError, SandboxProvider};
use corral_provider_e2b::E2bConfig;
use corral_provider_e2b::fake::E2bFake;
use corral_provider_http::reqwest::Method;
use corral_provider_testkit::fake::{Fault, FaultKind};
use corral_provider_testkit::faults::FaultSuite;

use crate::{ctx, spec};

fn suite(fake: &E2bFake) -> FaultSuite<'_> {
    let config = fake.config();
    FaultSuite::new(
        &fake.control,
        fake.control.base_url(),
        move |url: &str, http| {
            crate::provider(E2bConfig {
                base_url: url.to_owned(),
                http,
                ..config.clone()
            })
        },
    )
    .with_context(ctx())
    .create_call(Method::POST, "/sandboxes")
    .get_call(Method::GET, "/sandboxes/")
    .unknown_id("inope0000000000000000")
    .wrong_credential("e2b_wrong")
}

corral_provider_testkit::fault_suite_tests!(world: E2bFake::start, suite: suite);

#[tokio::test]
async fn a_broken_exec_stream_is_a_protocol_error() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    fake.envd
        .faults()
        .arm(Fault::new(FaultKind::Malformed).on_path("/process.Process/Start"));
    let err = p
        .exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
}

#[tokio::test]
async fn an_envd_rejection_of_the_token_is_unauthorized() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    fake.envd.faults().arm(Fault::status(401));
    let err = p
        .exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
}
