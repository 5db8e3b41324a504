use std::time::Duration;

use corral_domain::{CreateSandboxRequest, OperationId, Provider, ProviderContext};
use corral_provider::{CallContext, CreateSpec, ProviderError, SandboxProvider, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::fake::{Fault, FaultKind, refused_base_url};
use corral_provider_vercel::fake::{self, FAKE_PROJECT_ID, FAKE_TEAM_ID, FAKE_TOKEN};

use crate::{ctx, provider, provider_with};

fn spec() -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Vercel, None, None),
        timeout_seconds: Some(300),
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
    server.faults().arm(Fault::status(429).retry_after(11));
    let err = provider(&server.base_url())
        .create(&ctx(), &spec())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(11)),
        "{err:?}"
    );
    assert!(!err.may_have_been_applied());
}

#[tokio::test]
async fn server_error_on_create_may_have_been_applied() {
    let server = fake::start().await;
    server.faults().arm(Fault::status(502));
    let err = provider(&server.base_url())
        .create(&ctx(), &spec())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ServerError { status: 502, .. }),
        "{err:?}"
    );
    assert!(err.may_have_been_applied());
}

#[tokio::test]
async fn timeout_after_create_was_sent_is_not_a_clean_failure_and_is_found_again() {
    let server = fake::start().await;
    server.faults().arm(
        Fault::new(FaultKind::DelayAfterHandler(Duration::from_secs(2))).on_path("/v3/sandboxes"),
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
async fn a_wrong_token_is_unauthorized_without_leaking_it() {
    let server = fake::start().await;
    let wrong = CallContext::new(
        Some(SecretString::from("vercel_wrong_token")),
        ctx().context().clone(),
    );
    let err = provider(&server.base_url())
        .create(&wrong, &spec())
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("vercel_wrong_token"));
}

#[tokio::test]
async fn missing_team_or_project_is_missing_context_and_sends_nothing() {
    let server = fake::start().await;
    let vercel = provider(&server.base_url());
    let token = || Some(SecretString::from(FAKE_TOKEN));
    let no_team = CallContext::new(
        token(),
        ProviderContext {
            project_id: Some(FAKE_PROJECT_ID.into()),
            ..ProviderContext::default()
        },
    );
    let err = vercel.create(&no_team, &spec()).await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::MissingContext {
                field: "teamId",
                ..
            }
        ),
        "{err:?}"
    );
    let no_project = CallContext::new(
        token(),
        ProviderContext {
            team_id: Some(FAKE_TEAM_ID.into()),
            ..ProviderContext::default()
        },
    );
    let err = vercel.get(&no_project, "sandbox-1").await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::MissingContext {
                field: "projectId",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(server.log().all().is_empty());
    // Another team is refused by Vercel.
    let other = CallContext::new(
        token(),
        ProviderContext {
            team_id: Some("team_other".into()),
            project_id: Some(FAKE_PROJECT_ID.into()),
            ..ProviderContext::default()
        },
    );
    let err = vercel.create(&other, &spec()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
}

#[tokio::test]
async fn an_unknown_sandbox_is_not_found_and_deleting_it_succeeds() {
    let server = fake::start().await;
    let vercel = provider(&server.base_url());
    let err = vercel.get(&ctx(), "sandbox-nope").await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    vercel.delete(&ctx(), "sandbox-nope").await.unwrap();
}
