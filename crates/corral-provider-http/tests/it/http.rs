//! The shared client against a fake: deadlines, caps and fault mapping.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use corral_domain::Provider;
use corral_provider::{CallContext, ProviderError};
use corral_provider_http::{HttpConfig, ProviderHttp, reqwest::Method};
use corral_provider_testkit::fake::{FakeServer, Fault, FaultKind, refused_base_url};

async fn server() -> FakeServer {
    FakeServer::start(Router::new().route(
        "/thing",
        get(|| async { axum::Json(serde_json::json!({"ok": true})) }),
    ))
    .await
}

fn client(base: &str) -> ProviderHttp {
    let config = HttpConfig {
        request_timeout: Duration::from_millis(500),
        max_response_bytes: 1024,
        ..HttpConfig::default()
    };
    ProviderHttp::new(Provider::E2b, base, config).unwrap()
}

async fn get_thing(http: &ProviderHttp) -> Result<serde_json::Value, ProviderError> {
    http.send_json(
        &CallContext::anonymous(),
        http.request(Method::GET, "/thing"),
    )
    .await
}

#[tokio::test]
async fn faults_map_to_the_port_taxonomy() {
    let s = server().await;
    let http = client(&s.base_url());
    assert_eq!(get_thing(&http).await.unwrap()["ok"], true);

    s.faults().arm(Fault::status(429).retry_after(7));
    match get_thing(&http).await {
        Err(ProviderError::RateLimited { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)))
        }
        other => panic!("{other:?}"),
    }
    s.faults().arm(Fault::status(500));
    let e = get_thing(&http).await.unwrap_err();
    assert!(
        matches!(e, ProviderError::ServerError { status: 500, .. }) && e.may_have_been_applied()
    );

    s.faults().arm(Fault::new(FaultKind::DelayAfterHandler(
        Duration::from_secs(3),
    )));
    let e = get_thing(&http).await.unwrap_err();
    assert!(
        matches!(e, ProviderError::TimedOutAfterSend { .. }),
        "{e:?}"
    );
    assert!(e.may_have_been_applied());

    s.faults().arm(Fault::new(FaultKind::Oversized(4096)));
    assert!(matches!(
        get_thing(&http).await,
        Err(ProviderError::Protocol { .. })
    ));

    s.faults().arm(Fault::new(FaultKind::Malformed));
    assert!(matches!(
        get_thing(&http).await,
        Err(ProviderError::Protocol { .. })
    ));

    s.faults()
        .arm(Fault::new(FaultKind::SlowBody(Duration::from_millis(100))));
    let e = get_thing(&http).await.unwrap_err();
    assert!(e.may_have_been_applied(), "{e:?}");
    assert_eq!(s.log().matching(&Method::GET, "/thing").len(), 7);
}

#[tokio::test]
async fn connection_refused_is_unavailable_and_not_applied() {
    let http = client(&refused_base_url().await);
    let e = get_thing(&http).await.unwrap_err();
    assert!(matches!(e, ProviderError::Unavailable { .. }), "{e:?}");
    assert!(!e.may_have_been_applied());
}

#[tokio::test]
async fn an_expired_deadline_sends_nothing() {
    let s = server().await;
    let http = client(&s.base_url());
    let ctx = CallContext::anonymous().with_timeout(Duration::ZERO);
    let e = http
        .send_json::<serde_json::Value>(&ctx, http.request(Method::GET, "/thing"))
        .await
        .unwrap_err();
    assert!(matches!(e, ProviderError::Unavailable { .. }));
    assert!(s.log().all().is_empty());
}

#[test]
fn multipart_bodies_round_trip_through_the_fake_parser() {
    let content: Vec<u8> = (0..=255u8).chain(*b"\r\n--x\r\n").collect();
    let (content_type, body) =
        corral_provider_http::multipart_file("file", "a \"b\".bin", &content);
    let parts = corral_provider_testkit::fake::parse_multipart(&content_type, &body).unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].name, "file");
    assert_eq!(parts[0].filename.as_deref(), Some("a _b_.bin"));
    assert_eq!(parts[0].data.as_ref(), content.as_slice());
    assert!(corral_provider_testkit::fake::parse_multipart("multipart/form-data", &body).is_none());
}

#[tokio::test]
async fn a_credential_echoed_in_an_error_body_is_redacted() {
    // Some APIs quote the key they refused; it must not travel into Corral's errors.
    let router = Router::new().route(
        "/echo",
        get(|headers: axum::http::HeaderMap| async move {
            let key = headers
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            (
                axum::http::StatusCode::UNAUTHORIZED,
                format!("{{\"message\":\"invalid api key {key}\"}}"),
            )
        }),
    );
    let s = FakeServer::start(router).await;
    let http = client(&s.base_url());
    let secret = "sk-canary-echo-31337";
    let ctx = CallContext::new(
        Some(corral_provider::SecretString::from(secret)),
        Default::default(),
    );
    let req = http
        .request(Method::GET, "/echo")
        .header("x-api-key", secret);
    let err = http
        .send_json::<serde_json::Value>(&ctx, req)
        .await
        .unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{shown}");
    assert!(!shown.contains(secret), "{shown}");
    assert!(shown.contains("invalid api key [redacted]"), "{shown}");
}
