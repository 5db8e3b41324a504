//! Daytona's own faults: the toolbox's and the per-bucket rate limit (the shared fault suite
//! runs through the harness).

use std::time::Duration;

use corral_provider::{ExecSpec, ProviderError, SandboxProvider};
use corral_provider_testkit::fake::{Fault, FaultKind};

use crate::{ctx, spec};

#[tokio::test]
async fn daytonas_per_bucket_retry_after_is_read() {
    let (fake, p) = crate::world().await;
    fake.rate_limit_next_create(9);
    let err = p.create(&ctx(), &spec(None)).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(9)),
        "{err:?}"
    );
    assert!(!err.may_have_been_applied());
}

#[tokio::test]
async fn a_malformed_exec_answer_is_a_protocol_error() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    crate::started(&p, &created.native_id).await;
    fake.toolbox()
        .faults()
        .arm(Fault::new(FaultKind::Malformed).on_path("/process/execute"));
    let err = p
        .exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
}

#[tokio::test]
async fn a_toolbox_rejection_of_the_key_is_unauthorized() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    crate::started(&p, &created.native_id).await;
    fake.toolbox().faults().arm(Fault::status(401));
    let err = p
        .exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
}
