//! The service's own limits, through HTTP: request rates per API key and per project with
//! `Retry-After` and the IETF draft `RateLimit`/`RateLimit-Policy` headers, the throttle on
//! failed authentication per source address, and quotas on live sandboxes refused before any
//! provider call.

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::test::{self, TestRequest};
use corral_domain::Provider;
use corral_provider::{ExposeSecret as _, SandboxProvider};
use corral_service::ServiceConfig;
use corral_service::limiter::{Quotas, Rate, RateLimits};
use serde_json::json;

use crate::support::{Counting, Providers, Resp, World, delete, get, post, send};

/// A rate that does not refill within a test: exactly `burst` requests pass.
fn burst(burst: u32) -> Option<Rate> {
    Some(Rate {
        per_second: 0.001,
        burst,
    })
}

fn header<'a>(r: &'a Resp, name: &str) -> &'a str {
    r.headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", r.headers))
        .to_str()
        .unwrap()
}

#[actix_web::test]
async fn the_per_key_rate_answers_rate_limited_with_retry_after_and_ratelimit_headers() {
    let w = World::with(
        |_| Providers::new(),
        ServiceConfig {
            rate_limits: RateLimits {
                per_key: burst(3),
                ..RateLimits::default()
            },
            ..ServiceConfig::default()
        },
    )
    .await;
    let app = test::init_service(corral::http::app(w.state.clone())).await;
    for left in [2, 1, 0] {
        let r = send(&app, get(&w, "/v1/sandboxes")).await;
        r.expect_ok(200);
        assert_eq!(header(&r, "ratelimit-policy"), "\"per-key\";q=3;w=3000");
        assert!(
            header(&r, "ratelimit").starts_with(&format!("\"per-key\";r={left};t=")),
            "{:?}",
            r.headers
        );
    }
    let refused = send(&app, get(&w, "/v1/sandboxes")).await;
    refused.expect_error(429, "rate_limited");
    assert!(header(&refused, "retry-after").parse::<u64>().unwrap() >= 1);
    assert!(header(&refused, "ratelimit").starts_with("\"per-key\";r=0;"));
    assert_eq!(refused.json["error"]["retryable"], true);
    // Another key of the same project has its own bucket.
    let other = w.registry.issue_api_key(w.project).await.unwrap();
    let r = send(
        &app,
        TestRequest::get().uri("/v1/sandboxes").insert_header((
            "Authorization",
            format!("Bearer {}", other.key.expose_secret()),
        )),
    )
    .await;
    r.expect_ok(200);
}

#[actix_web::test]
async fn the_per_project_rate_counts_every_key_of_the_project() {
    let w = World::with(
        |_| Providers::new(),
        ServiceConfig {
            rate_limits: RateLimits {
                per_project: burst(2),
                ..RateLimits::default()
            },
            ..ServiceConfig::default()
        },
    )
    .await;
    let app = test::init_service(corral::http::app(w.state.clone())).await;
    let other = w.registry.issue_api_key(w.project).await.unwrap();
    let with_other = || {
        TestRequest::get().uri("/v1/providers").insert_header((
            "Authorization",
            format!("Bearer {}", other.key.expose_secret()),
        ))
    };
    send(&app, get(&w, "/v1/providers")).await.expect_ok(200);
    send(&app, with_other()).await.expect_ok(200);
    let refused = send(&app, with_other()).await;
    refused.expect_error(429, "rate_limited");
    assert!(header(&refused, "ratelimit").starts_with("\"per-project\";r=0;"));
    // Another project is not affected.
    let stranger = w.other_project_key("stranger").await;
    let r = send(
        &app,
        TestRequest::get()
            .uri("/v1/providers")
            .insert_header(("Authorization", format!("Bearer {stranger}"))),
    )
    .await;
    r.expect_ok(200);
}

#[actix_web::test]
async fn failed_authentications_are_throttled_per_source_address() {
    let w = World::with(
        |_| Providers::new(),
        ServiceConfig {
            rate_limits: RateLimits {
                auth_failures: burst(2),
                ..RateLimits::default()
            },
            ..ServiceConfig::default()
        },
    )
    .await;
    let app = test::init_service(corral::http::app(w.state.clone())).await;
    let from = |ip: &str, key: &str| {
        TestRequest::get()
            .uri("/v1/sandboxes")
            .peer_addr(format!("{ip}:40000").parse::<SocketAddr>().unwrap())
            .insert_header(("Authorization", format!("Bearer {key}")))
    };
    let wrong = "crl_aaaaaaaaaaaaaaaa_wrong";
    for _ in 0..2 {
        send(&app, from("10.0.0.1", wrong))
            .await
            .expect_error(401, "authentication_error");
    }
    // The third attempt from that address is refused before the key is looked at, even a
    // good key.
    let refused = send(&app, from("10.0.0.1", &w.key)).await;
    refused.expect_error(429, "rate_limited");
    assert!(header(&refused, "retry-after").parse::<u64>().unwrap() >= 1);
    // Another address is unaffected; successful requests do not count.
    for _ in 0..3 {
        send(&app, from("10.0.0.2", &w.key)).await.expect_ok(200);
    }
    send(&app, from("10.0.0.2", wrong))
        .await
        .expect_error(401, "authentication_error");
}

#[actix_web::test]
async fn quotas_on_live_sandboxes_are_refused_before_any_provider_call() {
    let scripted = Arc::new(Counting::new(Provider::E2b, false));
    let s2 = scripted.clone();
    let w = World::with(
        move |_| {
            let mut m = Providers::new();
            m.insert(Provider::E2b, s2 as Arc<dyn SandboxProvider>);
            m
        },
        ServiceConfig {
            quotas: Quotas {
                live_sandboxes: Some(2),
                live_sandboxes_per_provider: [(Provider::E2b, 1)].into(),
            },
            ..ServiceConfig::default()
        },
    )
    .await;
    let app = test::init_service(corral::http::app(w.state.clone())).await;
    let create = |provider: &str| {
        post(&w, "/v1/sandboxes", json!({"provider": provider}))
            .insert_header(("X-Provider-Credential", "inline-cred-1"))
    };
    let e2b = send(&app, create("e2b")).await;
    let e2b_id = e2b.expect_ok(201)["id"].as_str().unwrap().to_owned();
    // The per-provider quota: refused with a clear message, the provider never asked.
    let refused = send(&app, create("e2b")).await;
    refused.expect_error(429, "rate_limited");
    let message = refused.json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("quota") && message.contains("e2b"),
        "{message}"
    );
    assert_eq!(scripted.count("create"), 1);
    // The project-wide quota.
    send(&app, create("local")).await.expect_ok(201);
    let refused = send(&app, create("local")).await;
    refused.expect_error(429, "rate_limited");
    assert!(
        refused.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("quota"),
        "{}",
        refused.text
    );
    // Deleting frees a place (tombstones do not count).
    send(
        &app,
        delete(&w, &format!("/v1/sandboxes/{e2b_id}"))
            .insert_header(("X-Provider-Credential", "inline-cred-1")),
    )
    .await
    .expect_ok(200);
    send(&app, create("e2b")).await.expect_ok(201);
    assert_eq!(scripted.count("create"), 2);
    // Listing shows the two live sandboxes and the tombstone.
    let page = send(&app, get(&w, "/v1/sandboxes")).await;
    assert_eq!(page.expect_ok(200)["items"].as_array().unwrap().len(), 3);
}

#[actix_web::test]
async fn a_replay_is_never_refused_by_the_quota() {
    let w = World::with(
        |_| Providers::new(),
        ServiceConfig {
            quotas: Quotas {
                live_sandboxes: Some(1),
                ..Quotas::default()
            },
            ..ServiceConfig::default()
        },
    )
    .await;
    let app = test::init_service(corral::http::app(w.state.clone())).await;
    let keyed = |key: &str| {
        post(&w, "/v1/sandboxes", json!({"provider": "local"}))
            .insert_header(("Idempotency-Key", key))
    };
    let first = send(&app, keyed("q-1")).await;
    first.expect_ok(201);
    let replay = send(&app, keyed("q-1")).await;
    replay.expect_ok(200);
    assert_eq!(replay.text, first.text);
    // A new key is a new create: refused, and the key stays free for later.
    send(&app, keyed("q-2"))
        .await
        .expect_error(429, "rate_limited");
    let id = first.json["id"].as_str().unwrap();
    send(&app, delete(&w, &format!("/v1/sandboxes/{id}")))
        .await
        .expect_ok(200);
    send(&app, keyed("q-2")).await.expect_ok(201);
}

/// Two replicas on one PostgreSQL database: the live-sandbox quota is counted in the registry,
/// so a create on one replica counts on the other (request rates are per replica, by design).
#[actix_web::test]
async fn on_postgres_the_quota_holds_across_two_replicas() {
    let Some(db) = corral_registry::testing::TestDb::postgres("quota_two_replicas").await else {
        return;
    };
    let config = ServiceConfig {
        quotas: Quotas {
            live_sandboxes: Some(1),
            ..Quotas::default()
        },
        ..ServiceConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let a = World::with_db(
        dir,
        db.connect().await,
        |_| Providers::new(),
        config.clone(),
        None,
    )
    .await;
    // Replica B: its own service, providers and pools over the same database and master key.
    let mut providers = Providers::new();
    providers.insert(Provider::Local, crate::support::local(a.dir.path()));
    let b_db = db.connect().await;
    let b_service = corral_service::Service::new(
        providers,
        corral_registry::Registry::new(
            b_db.clone(),
            corral_registry::MasterKey::load_or_create(&a.dir.path().join("master.key")).unwrap(),
        ),
        corral_idempotency::IdempotencyStore::new(
            b_db,
            corral_idempotency::IdempotencyConfig::default(),
        ),
        config,
    );
    let b_state = corral::http::AppState {
        service: b_service,
        // The control plane is not exercised here; A's serves as well as any.
        control: a.state.control.clone(),
        metrics: Arc::new(corral::http::request_metrics()),
        build: corral::http::BuildInfo::current(),
    };
    let app_a = test::init_service(corral::http::app(a.state.clone())).await;
    let app_b = test::init_service(corral::http::app(b_state)).await;
    let created = send(
        &app_a,
        post(&a, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await;
    let id = created.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let refused = send(
        &app_b,
        post(&a, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await;
    refused.expect_error(429, "rate_limited");
    assert!(refused.text.contains("quota"), "{}", refused.text);
    send(&app_b, delete(&a, &format!("/v1/sandboxes/{id}")))
        .await
        .expect_ok(200);
    send(
        &app_b,
        post(&a, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await
    .expect_ok(201);
}
