use std::time::Duration;

use corral_domain::ProviderContext;
use corral_provider::{CallContext, ProviderError, SandboxProvider, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_http::reqwest::Method;
use corral_provider_testkit::fake::{Fault, FaultKind, refused_base_url};

use crate::{ctx, provider_at, running, setup, short_http, spec};

#[tokio::test]
async fn rate_limit_carries_retry_after() {
    let (server, provider) = setup().await;
    server
        .faults()
        .arm(Fault::status(429).retry_after(7).on_method(Method::POST));
    let err = provider
        .create(&ctx(), &spec(None, None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(7)),
        "{err:?}"
    );
    assert!(!err.may_have_been_applied());
}

#[tokio::test]
async fn server_error_on_create_may_have_been_applied() {
    let (server, provider) = setup().await;
    server
        .faults()
        .arm(Fault::status(502).on_method(Method::POST));
    let err = provider
        .create(&ctx(), &spec(None, None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ServerError { status: 502, .. }),
        "{err:?}"
    );
    assert!(err.may_have_been_applied());
}

#[tokio::test]
async fn timeout_after_create_was_sent_is_not_a_clean_failure_and_can_be_reconciled() {
    let (server, provider) = setup().await;
    let slow = provider_at(format!("{}/v1", server.base_url()), short_http());
    server.faults().arm(
        Fault::new(FaultKind::DelayAfterHandler(Duration::from_secs(2))).on_method(Method::POST),
    );
    let s = spec(None, Some(60));
    let err = slow.create(&ctx(), &s).await.unwrap_err();
    assert!(err.may_have_been_applied(), "{err:?}");
    // The instance exists: reconciliation finds it by the operation id.
    let found = provider
        .find_by_operation_id(&ctx(), &s.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].operation_id, Some(s.operation_id));
}

#[tokio::test]
async fn connection_refused_is_unavailable_and_not_applied() {
    let provider = provider_at(refused_base_url().await, HttpConfig::default());
    let err = provider
        .create(&ctx(), &spec(None, None))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unavailable { .. }), "{err:?}");
    assert!(!err.may_have_been_applied());
}

#[tokio::test]
async fn slow_body_times_out_after_send() {
    let (server, provider) = setup().await;
    let id = running(&provider).await;
    let slow = provider_at(format!("{}/v1", server.base_url()), short_http());
    server
        .faults()
        .arm(Fault::new(FaultKind::SlowBody(Duration::from_millis(50))).on_method(Method::GET));
    let err = slow.get(&ctx(), &id).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::TimedOutAfterSend { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn oversized_body_is_a_protocol_error() {
    let (server, _) = setup().await;
    let small = provider_at(
        format!("{}/v1", server.base_url()),
        HttpConfig {
            max_response_bytes: 4096,
            ..HttpConfig::default()
        },
    );
    server
        .faults()
        .arm(Fault::new(FaultKind::Oversized(100_000)).on_method(Method::POST));
    let err = small.create(&ctx(), &spec(None, None)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
    assert!(err.may_have_been_applied());
}

#[tokio::test]
async fn malformed_body_is_a_protocol_error_that_may_have_been_applied() {
    let (server, provider) = setup().await;
    server
        .faults()
        .arm(Fault::new(FaultKind::Malformed).on_method(Method::POST));
    let err = provider
        .create(&ctx(), &spec(None, None))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
    assert!(err.may_have_been_applied());
}

#[tokio::test]
async fn wrong_or_missing_credential_is_refused() {
    let (_server, provider) = setup().await;
    let wrong = CallContext::new(
        Some(SecretString::from("not-the-key")),
        ProviderContext::default(),
    );
    let err = provider
        .create(&wrong, &spec(None, None))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("not-the-key"));
    let err = provider
        .create(&CallContext::anonymous(), &spec(None, None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::MissingCredential { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn unknown_sandbox_is_not_found_and_deleting_it_is_ok() {
    let (_server, provider) = setup().await;
    let err = provider
        .get(&ctx(), "5a3c0000-0000-4000-8000-0000000fffff")
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    provider
        .delete(&ctx(), "5a3c0000-0000-4000-8000-0000000fffff")
        .await
        .unwrap();
}

#[tokio::test]
async fn create_without_image_or_default_snapshot_is_refused_before_any_call() {
    let (server, _) = setup().await;
    let provider =
        corral_provider_together::TogetherProvider::new(corral_provider_together::TogetherConfig {
            base_url: format!("{}/v1", server.base_url()),
            ..Default::default()
        })
        .unwrap();
    let err = provider
        .create(&ctx(), &spec(None, None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    assert!(server.log().all().is_empty());
}

#[tokio::test]
async fn a_malformed_id_is_not_found_without_a_call() {
    let (server, provider) = setup().await;
    let err = provider.get(&ctx(), "../etc").await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    provider.delete(&ctx(), "not-a-uuid").await.unwrap();
    assert!(server.log().all().is_empty());
}
