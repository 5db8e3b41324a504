use std::time::Duration;

use corral_domain::ProviderContext;
use corral_provider::{CallContext, ExecSpec, ProviderError, SandboxProvider, SecretString};
use corral_provider_daytona::DaytonaConfig;
use corral_provider_daytona::fake::DaytonaFake;
use corral_provider_http::HttpConfig;
use corral_provider_http::reqwest::Method;
use corral_provider_testkit::fake::{Fault, FaultKind, refused_base_url};

use crate::{ctx, spec};

async fn world_with(http: HttpConfig) -> (DaytonaFake, corral_provider_daytona::DaytonaProvider) {
    let fake = DaytonaFake::start().await;
    let provider = crate::provider(DaytonaConfig {
        http,
        ..fake.config()
    });
    (fake, provider)
}

#[tokio::test]
async fn rate_limit_carries_retry_after_and_was_not_applied() {
    let (fake, p) = crate::world().await;
    fake.control
        .faults()
        .arm(Fault::status(429).retry_after(7).on_path("/sandbox"));
    let err = p.create(&ctx(), &spec(None)).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(7)),
        "{err:?}"
    );
    assert!(!err.may_have_been_applied());
}

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
async fn server_error_on_create_may_have_been_applied() {
    let (fake, p) = crate::world().await;
    fake.control.faults().arm(Fault::status(500));
    let err = p.create(&ctx(), &spec(None)).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::ServerError { status: 500, .. }),
        "{err:?}"
    );
    assert!(err.may_have_been_applied());
}

#[tokio::test]
async fn timeout_after_create_was_sent_is_not_a_clean_failure_and_can_be_reconciled() {
    let (fake, p) = world_with(HttpConfig {
        request_timeout: Duration::from_millis(300),
        ..HttpConfig::default()
    })
    .await;
    fake.control.faults().arm(
        Fault::new(FaultKind::DelayAfterHandler(Duration::from_secs(2)))
            .on_method(Method::POST)
            .on_path("/sandbox"),
    );
    let s = spec(None);
    let err = p.create(&ctx(), &s).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::TimedOutAfterSend { .. }),
        "{err:?}"
    );
    assert!(err.may_have_been_applied());
    // The create was applied: reconciliation finds it by its operation id.
    let found = p
        .find_by_operation_id(&ctx(), &s.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
}

#[tokio::test]
async fn connection_refused_is_unavailable_and_not_applied() {
    let p = crate::provider(DaytonaConfig {
        base_url: refused_base_url().await,
        ..DaytonaConfig::default()
    });
    let err = p.create(&ctx(), &spec(None)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Unavailable { .. }), "{err:?}");
    assert!(!err.may_have_been_applied());
}

#[tokio::test]
async fn slow_body_times_out_after_send() {
    let (fake, p) = world_with(HttpConfig {
        request_timeout: Duration::from_millis(400),
        ..HttpConfig::default()
    })
    .await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    fake.control
        .faults()
        .arm(Fault::new(FaultKind::SlowBody(Duration::from_millis(50))).on_method(Method::GET));
    let err = p.get(&ctx(), &created.native_id).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::TimedOutAfterSend { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn oversized_body_is_a_protocol_error() {
    let (fake, p) = world_with(HttpConfig {
        max_response_bytes: 4096,
        ..HttpConfig::default()
    })
    .await;
    fake.control
        .faults()
        .arm(Fault::new(FaultKind::Oversized(64 * 1024)));
    let err = p.create(&ctx(), &spec(None)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
    assert!(err.may_have_been_applied());
}

#[tokio::test]
async fn malformed_body_is_a_protocol_error_that_may_have_been_applied() {
    let (fake, p) = crate::world().await;
    fake.control.faults().arm(Fault::new(FaultKind::Malformed));
    let err = p.create(&ctx(), &spec(None)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
    assert!(err.may_have_been_applied());
}

#[tokio::test]
async fn wrong_credential_is_unauthorized_and_missing_one_is_reported() {
    let (_fake, p) = crate::world().await;
    let wrong = CallContext::new(
        Some(SecretString::from("dtn_wrong")),
        ProviderContext::default(),
    );
    let err = p.create(&wrong, &spec(None)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
    assert!(!err.to_string().contains("dtn_wrong"));
    let none = CallContext::new(None, ProviderContext::default());
    let err = p.create(&none, &spec(None)).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::MissingCredential { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_malformed_exec_answer_is_a_protocol_error() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    crate::started(&p, &created.native_id).await;
    fake.toolbox
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
    fake.toolbox.faults().arm(Fault::status(401));
    let err = p
        .exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
}
