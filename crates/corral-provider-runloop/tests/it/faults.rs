use std::time::Duration;

use corral_domain::{CreateSandboxRequest, OperationId, Provider, ProviderContext};
use corral_provider::{CallContext, CreateSpec, ProviderError, SandboxProvider, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_runloop::fake;
use corral_provider_testkit::fake::{Fault, FaultKind, refused_base_url};

use crate::{ctx, provider, provider_with};

fn spec() -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Runloop, None, None),
        timeout_seconds: Some(3600),
    }
}

fn short(timeout_ms: u64) -> HttpConfig {
    HttpConfig {
        request_timeout: Duration::from_millis(timeout_ms),
        ..HttpConfig::default()
    }
}

#[tokio::test]
async fn rate_limit_carries_retry_after_and_was_not_applied() {
    let server = fake::start().await;
    server.faults().arm(Fault::status(429).retry_after(7));
    let err = provider(&server.base_url())
        .create(&ctx(), &spec())
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
    let server = fake::start().await;
    server.faults().arm(Fault::status(500));
    let err = provider(&server.base_url())
        .create(&ctx(), &spec())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ServerError { status: 500, .. }),
        "{err:?}"
    );
    assert!(err.may_have_been_applied());
}

#[tokio::test]
async fn timeout_after_create_was_sent_is_not_a_clean_failure_and_is_found_again() {
    let server = fake::start().await;
    server.faults().arm(
        Fault::new(FaultKind::DelayAfterHandler(Duration::from_secs(2))).on_path("/v1/devboxes"),
    );
    let spec = spec();
    let err = provider_with(&server.base_url(), short(300))
        .create(&ctx(), &spec)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::TimedOutAfterSend { .. }),
        "{err:?}"
    );
    assert!(err.may_have_been_applied());
    // The devbox was created: reconciliation finds it by its operation id.
    let found = provider(&server.base_url())
        .find_by_operation_id(&ctx(), &spec.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].operation_id, Some(spec.operation_id));
}

#[tokio::test]
async fn connection_refused_is_unavailable_and_not_applied() {
    let err = provider(&refused_base_url().await)
        .create(&ctx(), &spec())
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unavailable { .. }), "{err:?}");
    assert!(!err.may_have_been_applied());
}

#[tokio::test]
async fn a_slow_body_times_out_after_send() {
    let server = fake::start().await;
    let created = provider(&server.base_url())
        .create(&ctx(), &spec())
        .await
        .unwrap();
    server
        .faults()
        .arm(Fault::new(FaultKind::SlowBody(Duration::from_millis(50))));
    let err = provider_with(&server.base_url(), short(400))
        .get(&ctx(), &created.native_id)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::TimedOutAfterSend { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_oversized_body_is_a_protocol_error() {
    let server = fake::start().await;
    server
        .faults()
        .arm(Fault::new(FaultKind::Oversized(64 * 1024)));
    let http = HttpConfig {
        max_response_bytes: 4096,
        ..HttpConfig::default()
    };
    let err = provider_with(&server.base_url(), http)
        .create(&ctx(), &spec())
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
    assert!(err.may_have_been_applied());
}

#[tokio::test]
async fn a_malformed_body_on_create_is_a_protocol_error_that_may_have_been_applied() {
    let server = fake::start().await;
    server.faults().arm(Fault::new(FaultKind::Malformed));
    let err = provider(&server.base_url())
        .create(&ctx(), &spec())
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
    assert!(err.may_have_been_applied());
}

#[tokio::test]
async fn a_wrong_key_is_unauthorized_and_a_missing_one_is_refused_before_any_request() {
    let server = fake::start().await;
    let wrong = CallContext::new(
        Some(SecretString::from("ak_wrong")),
        ProviderContext::default(),
    );
    let runloop = provider(&server.base_url());
    let err = runloop.create(&wrong, &spec()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
    assert!(!err.to_string().contains("ak_wrong"));
    let err = runloop
        .create(&CallContext::anonymous(), &spec())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::MissingCredential { .. }),
        "{err:?}"
    );
    assert_eq!(
        server.log().all().len(),
        1,
        "no request without a credential"
    );
}

#[tokio::test]
async fn an_unknown_devbox_is_not_found_and_deleting_it_succeeds() {
    let server = fake::start().await;
    let runloop = provider(&server.base_url());
    let err = runloop.get(&ctx(), "dbx_nope").await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    runloop.delete(&ctx(), "dbx_nope").await.unwrap();
}
