//! Idempotency-Key semantics (DESIGN.md §4) through HTTP.

use std::sync::Arc;
use std::time::Duration;

use actix_web::test;
use corral_domain::Provider;
use corral_provider::SandboxProvider;
use corral_service::ServiceConfig;
use serde_json::json;

use crate::support::{Counting, Providers, World, get, post, send};

/// A world whose `local` is a scripted double (no credential needed, so the reconciler can
/// act on it), with `gate` holding creates when set.
async fn scripted_local(gate: bool, config: ServiceConfig) -> (World, Arc<Counting>) {
    let s = Arc::new(Counting::new(Provider::Local, gate));
    let s2 = s.clone();
    let w = World::with(
        move |_| {
            let mut m = Providers::new();
            m.insert(Provider::Local, s2 as Arc<dyn SandboxProvider>);
            m
        },
        config,
    )
    .await;
    (w, s)
}

fn keyed(w: &World, key: &str, body: serde_json::Value) -> actix_web::test::TestRequest {
    post(w, "/v1/sandboxes", body).insert_header(("Idempotency-Key", key))
}

#[actix_web::test]
async fn replay_returns_the_same_body_byte_for_byte_with_200_and_the_header() {
    let (w, s) = scripted_local(false, ServiceConfig::default()).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let first = send(&app, keyed(&w, "k-1", json!({"provider": "local"}))).await;
    first.expect_ok(201);
    assert!(first.headers.get("idempotent-replayed").is_none());
    // Key order and whitespace do not change the fingerprint.
    let again = send(
        &app,
        post(&w, "/v1/sandboxes", json!(null))
            .insert_header(("Idempotency-Key", "k-1"))
            .insert_header(("content-type", "application/json"))
            .set_payload("{ \"provider\" : \"local\" }"),
    )
    .await;
    again.expect_ok(200);
    assert_eq!(again.headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(again.text, first.text);
    assert_eq!(s.count("create"), 1);
    // A different request under the same key conflicts; nothing reaches the provider.
    send(
        &app,
        keyed(&w, "k-1", json!({"provider": "local", "timeout": 60})),
    )
    .await
    .expect_error(422, "idempotency_conflict");
    assert_eq!(s.count("create"), 1);
    // The same key in another project is independent.
    let other = format!("Bearer {}", w.other_project_key("other").await);
    let r = send(
        &app,
        keyed(&w, "k-1", json!({"provider": "local"})).insert_header(("Authorization", other)),
    )
    .await;
    r.expect_ok(201);
    assert_ne!(r.json["id"], first.json["id"]);
}

#[actix_web::test]
async fn malformed_keys_are_refused_before_any_work() {
    let (w, s) = scripted_local(false, ServiceConfig::default()).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let long = "k".repeat(256);
    for bad in [long.as_str(), "tab\there", "é"] {
        let req = post(&w, "/v1/sandboxes", json!({"provider": "local"}));
        let req = req.insert_header((
            actix_web::http::header::HeaderName::from_static("idempotency-key"),
            actix_web::http::header::HeaderValue::from_bytes(bad.as_bytes()).unwrap(),
        ));
        send(&app, req)
            .await
            .expect_error(400, "invalid_idempotency_key");
    }
    assert_eq!(s.count("create"), 0);
    let k255 = "k".repeat(255);
    send(&app, keyed(&w, &k255, json!({"provider": "local"})))
        .await
        .expect_ok(201);
}

#[actix_web::test]
async fn a_duplicate_while_the_first_runs_is_in_progress_with_retry_after() {
    let (w, s) = scripted_local(true, ServiceConfig::default()).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let gate = s.gate.clone().unwrap();
    let first = send(&app, keyed(&w, "k-2", json!({"provider": "local"})));
    let second = async {
        // Let the first claim the key and reach the provider.
        while s.count("create_arrived") == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let r = send(&app, keyed(&w, "k-2", json!({"provider": "local"}))).await;
        gate.add_permits(1);
        r
    };
    let (first, second) = futures::join!(first, second);
    first.expect_ok(201);
    second.expect_error(409, "idempotency_in_progress");
    assert!(second.headers.get("retry-after").is_some());
    assert_eq!(s.count("create"), 1);
}

#[actix_web::test]
async fn twenty_concurrent_creates_with_one_key_make_exactly_one_sandbox_and_no_5xx() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let all = futures::future::join_all(
        (0..20).map(|_| send(&app, keyed(&w, "same", json!({"provider": "local"})))),
    )
    .await;
    let mut ids = std::collections::BTreeSet::new();
    for r in &all {
        assert!(r.status.as_u16() < 500, "{} {}", r.status, r.text);
        match r.status.as_u16() {
            200 | 201 => {
                ids.insert(r.json["id"].as_str().unwrap().to_owned());
            }
            409 => assert_eq!(r.code(), "idempotency_in_progress"),
            other => panic!("unexpected {other}: {}", r.text),
        }
    }
    assert!(ids.len() <= 1, "{ids:?}");
    let page = send(&app, get(&w, "/v1/sandboxes")).await;
    assert_eq!(page.expect_ok(200)["items"].as_array().unwrap().len(), 1);
    assert_eq!(all.iter().filter(|r| r.status == 201).count(), 1);
}

#[actix_web::test]
async fn a_lost_answer_is_outcome_unknown_and_a_same_key_retry_adopts_the_sandbox() {
    let (w, s) = scripted_local(false, ServiceConfig::default()).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    *s.lose_next_create_answer.lock().unwrap() = true;
    let r = send(&app, keyed(&w, "k-3", json!({"provider": "local"}))).await;
    r.expect_error(502, "sandbox_create_outcome_unknown");
    let op = r.json["error"]["operationId"].as_str().unwrap().to_owned();
    let retry = send(&app, keyed(&w, "k-3", json!({"provider": "local"}))).await;
    let body = retry.expect_ok(201);
    assert_eq!(body["metadata"]["operationId"], op.as_str());
    assert!(body["metadata"]["nativeProviderId"].is_string());
    assert_eq!(s.count("create"), 1, "reconciled, never re-created");
    assert_eq!(s.count("find_by_operation_id"), 1);
    let replay = send(&app, keyed(&w, "k-3", json!({"provider": "local"}))).await;
    replay.expect_ok(200);
    assert_eq!(replay.text, retry.text);
}

#[actix_web::test]
async fn when_nothing_is_found_the_key_stays_unknown_until_the_reconciler_gives_up() {
    let config = ServiceConfig {
        reconcile_grace: Duration::from_secs(1),
        ..ServiceConfig::default()
    };
    let (w, s) = scripted_local(false, config).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let p = Provider::Local;
    s.fail_next("create", move || {
        corral_provider::ProviderError::TimedOutAfterSend { provider: p }
    });
    let r = send(&app, keyed(&w, "k-4", json!({"provider": "local"}))).await;
    r.expect_error(502, "sandbox_create_outcome_unknown");
    let op = r.json["error"]["operationId"].clone();
    let retry = send(&app, keyed(&w, "k-4", json!({"provider": "local"}))).await;
    retry.expect_error(409, "idempotency_outcome_unknown");
    assert_eq!(retry.json["error"]["operationId"], op);
    assert_eq!(s.count("create"), 1);
    // The record shows the unconfirmed create; the reconciler gives it up after the grace.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let report = w.service.reconcile_once().await;
    assert_eq!(report.failed, 1, "{report:?}");
    let page = send(&app, get(&w, "/v1/sandboxes")).await;
    assert_eq!(page.expect_ok(200)["items"][0]["status"], "failed");
}

#[actix_web::test]
async fn the_background_reconciler_adopts_a_lost_create_without_the_client() {
    let config = ServiceConfig {
        reconcile_grace: Duration::ZERO,
        ..ServiceConfig::default()
    };
    let (w, s) = scripted_local(false, config).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    *s.lose_next_create_answer.lock().unwrap() = true;
    let r = send(&app, keyed(&w, "k-5", json!({"provider": "local"}))).await;
    r.expect_error(502, "sandbox_create_outcome_unknown");
    let report = w.service.reconcile_once().await;
    assert_eq!(report.adopted, 2, "the record and the key: {report:?}");
    let page = send(&app, get(&w, "/v1/sandboxes")).await;
    let item = &page.expect_ok(200)["items"][0];
    assert_eq!(item["status"], "running");
    // The key now replays the adopted sandbox.
    let replay = send(&app, keyed(&w, "k-5", json!({"provider": "local"}))).await;
    replay.expect_ok(200);
    assert_eq!(replay.json["id"], item["id"]);
    assert_eq!(s.count("create"), 1);
}

#[actix_web::test]
async fn a_client_that_disconnects_mid_create_does_not_cancel_the_recording() {
    let (w, s) = scripted_local(true, ServiceConfig::default()).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let gate = s.gate.clone().unwrap();
    // The client gives up (its request future is dropped) while the provider works.
    let abandoned = tokio::time::timeout(
        Duration::from_millis(200),
        send(&app, keyed(&w, "k-6", json!({"provider": "local"}))),
    )
    .await;
    assert!(abandoned.is_err());
    gate.add_permits(1);
    let mut status = serde_json::Value::Null;
    for _ in 0..100 {
        let page = send(&app, get(&w, "/v1/sandboxes")).await;
        status = page.json["items"][0]["status"].clone();
        if status == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, "running");
    let replay = send(&app, keyed(&w, "k-6", json!({"provider": "local"}))).await;
    replay.expect_ok(200);
}

#[actix_web::test]
async fn a_clean_provider_failure_releases_the_key_for_a_retry() {
    let (w, s) = scripted_local(false, ServiceConfig::default()).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let p = Provider::Local;
    s.fail_next("create", move || {
        corral_provider::ProviderError::RateLimited {
            provider: p,
            retry_after: Some(Duration::from_secs(2)),
        }
    });
    send(&app, keyed(&w, "k-7", json!({"provider": "local"})))
        .await
        .expect_error(429, "rate_limited");
    let retry = send(&app, keyed(&w, "k-7", json!({"provider": "local"}))).await;
    retry.expect_ok(201);
    assert_eq!(s.count("create"), 2);
}

#[actix_web::test]
async fn a_create_slower_than_the_wait_answers_outcome_unknown_and_is_still_recorded() {
    let config = ServiceConfig {
        create_wait: Duration::from_millis(150),
        ..ServiceConfig::default()
    };
    let (w, s) = scripted_local(true, config).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let r = send(&app, keyed(&w, "k-8", json!({"provider": "local"}))).await;
    r.expect_error(502, "sandbox_create_outcome_unknown");
    let op = r.json["error"]["operationId"].clone();
    // Still running: a same-key retry is told to wait.
    send(&app, keyed(&w, "k-8", json!({"provider": "local"})))
        .await
        .expect_error(409, "idempotency_in_progress");
    s.gate.clone().unwrap().add_permits(1);
    let mut last = None;
    for _ in 0..100 {
        let r = send(&app, keyed(&w, "k-8", json!({"provider": "local"}))).await;
        if r.status == 200 {
            last = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let replay = last.expect("the create finished and was recorded");
    assert_eq!(replay.json["metadata"]["operationId"], op);
    assert_eq!(s.count("create"), 1);
}

#[actix_web::test]
async fn past_the_grace_period_a_same_key_retry_frees_the_key_and_then_creates_afresh() {
    let config = ServiceConfig {
        reconcile_grace: Duration::ZERO,
        ..ServiceConfig::default()
    };
    let (w, s) = scripted_local(false, config).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let p = Provider::Local;
    s.fail_next("create", move || {
        corral_provider::ProviderError::TimedOutAfterSend { provider: p }
    });
    send(&app, keyed(&w, "k-9", json!({"provider": "local"})))
        .await
        .expect_error(502, "sandbox_create_outcome_unknown");
    // Nothing carries the operation id and the grace is over: the key is freed…
    send(&app, keyed(&w, "k-9", json!({"provider": "local"})))
        .await
        .expect_error(409, "idempotency_in_progress");
    // …and the next retry creates.
    send(&app, keyed(&w, "k-9", json!({"provider": "local"})))
        .await
        .expect_ok(201);
    assert_eq!(s.count("create"), 2);
}
