//! E2B's own faults, on envd (the shared fault suite runs through the harness).

use corral_provider::{ExecSpec, ProviderError, SandboxProvider};
use corral_provider_testkit::fake::{Fault, FaultKind};

use crate::{ctx, spec};

#[tokio::test]
async fn a_broken_exec_stream_is_a_protocol_error() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    fake.envd()
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
    fake.envd().faults().arm(Fault::status(401));
    let err = p
        .exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
}
