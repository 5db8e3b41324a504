//! The `X-Provider-Bridge-Url` guard: a loopback canary listener never hears from a refused URL.

use std::sync::Arc;
use std::time::Duration;

use actix_web::test;
use corral_domain::{Provider, ProviderContext};
use corral_provider::SandboxProvider;
use corral_registry::ProfileInput;
use corral_service::ServiceConfig;
use corral_service::bridge::BridgeGuard;
use serde_json::json;
use tokio::net::TcpListener;

use crate::support::{Counting, Providers, World, post, send};

async fn canary() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

async fn assert_no_connection(l: &TcpListener) {
    let got = tokio::time::timeout(Duration::from_millis(300), l.accept()).await;
    assert!(got.is_err(), "the canary listener received a connection");
}

#[tokio::test]
async fn loopback_private_metadata_and_odd_spellings_are_refused() {
    let (listener, port) = canary().await;
    let guard = BridgeGuard::new(&[]);
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
        format!("http://[::1]:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://2130706433:{port}/"),
        format!("http://0x7f.1:{port}/"),
        format!("http://127.1:{port}/"),
        format!("http://0177.0.0.1:{port}/"),
        format!("http://user@127.0.0.1:{port}/"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.0.0.1/".to_owned(),
        "http://192.168.1.1/".to_owned(),
        "http://[fd00:ec2::254]/".to_owned(),
        "file:///etc/passwd".to_owned(),
        "gopher://example.com/".to_owned(),
        "not a url".to_owned(),
    ] {
        let e = guard.check(&url).await.expect_err(&url);
        assert_eq!(e.code().as_str(), "invalid_request", "{url}");
    }
    assert_no_connection(&listener).await;
    // The operator can allow-list a host (and port).
    let allowed = BridgeGuard::new(&[format!("127.0.0.1:{port}")]);
    assert!(
        allowed
            .check(&format!("http://127.0.0.1:{port}/"))
            .await
            .is_ok()
    );
    assert!(
        allowed
            .check(&format!("http://127.0.0.1:{}/", port.wrapping_add(1)))
            .await
            .is_err()
    );
}

#[actix_web::test]
async fn a_refused_bridge_url_never_reaches_the_provider_or_the_address() {
    let (listener, port) = canary().await;
    let bridge = Arc::new(Counting::new(Provider::Cloudflare, false));
    let b2 = bridge.clone();
    let w = World::with(
        move |_| {
            let mut m = Providers::new();
            m.insert(Provider::Cloudflare, b2 as Arc<dyn SandboxProvider>);
            m
        },
        ServiceConfig::default(),
    )
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let url = format!("http://127.0.0.1:{port}/");
    let r = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "cloudflare"}))
            .insert_header(("X-Provider-Credential", "bridge-token"))
            .insert_header(("X-Provider-Bridge-Url", url.as_str())),
    )
    .await;
    r.expect_error(400, "invalid_request");
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("X-Provider-Bridge-Url")
    );
    // Every other spelling of this machine is refused the same way, through HTTP.
    for url in [
        format!("http://2130706433:{port}/"),
        format!("http://0x7f000001:{port}/"),
        format!("http://0177.0.0.1:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://[2002:7f00:1::]:{port}/"),
        format!("http://bridge.example.com@127.0.0.1:{port}/"),
        format!("http://127.0.0.1:{port}#@bridge.example.com/"),
        format!("http://localhost:{port}/"),
    ] {
        let r = send(
            &app,
            post(&w, "/v1/sandboxes", json!({"provider": "cloudflare"}))
                .insert_header(("X-Provider-Credential", "bridge-token"))
                .insert_header(("X-Provider-Bridge-Url", url.as_str())),
        )
        .await;
        r.expect_error(400, "invalid_request");
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("X-Provider-Bridge-Url") && message.contains("is refused"),
            "{url}: {message}"
        );
    }

    // A stored credential is never sent to a URL the caller supplies.
    w.registry
        .put_profile(
            w.project,
            Provider::Cloudflare,
            ProfileInput {
                context: ProviderContext {
                    bridge_url: Some("https://bridge.example.com".into()),
                    ..Default::default()
                },
                settings: serde_json::Map::new(),
                credential: Some("stored-bridge-token".to_owned().into()),
            },
        )
        .await
        .unwrap();
    let r = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "cloudflare"}))
            .insert_header(("X-Provider-Bridge-Url", "https://evil.example.net")),
    )
    .await;
    r.expect_error(400, "invalid_request");
    assert_eq!(bridge.count("create"), 0);
    assert_no_connection(&listener).await;
}
