//! Webhook endpoints over HTTP, in process: made with the secret shown once, listed without
//! it, rotated, deliveries read, removed; a loopback destination refused unless allowed; and
//! another project's endpoint not found.

use actix_web::test;
use corral_service::ServiceConfig;
use corral_service::webhooks::WebhooksConfig;
use serde_json::json;

use crate::support::{World, delete, get, post, send};

#[actix_web::test]
async fn endpoints_are_made_listed_rotated_and_removed_by_their_project_only() {
    let w = World::with(
        |_| Default::default(),
        ServiceConfig {
            webhooks: WebhooksConfig {
                allow: vec!["127.0.0.1".into()],
                ..WebhooksConfig::default()
            },
            ..ServiceConfig::default()
        },
    )
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let made = send(
        &app,
        post(
            &w,
            "/v1/webhook-endpoints",
            json!({"url": "http://127.0.0.1:9/hook", "types": ["command.exited"]}),
        ),
    )
    .await;
    let made = made.expect_ok(201).clone();
    let id = made["id"].as_str().unwrap().to_owned();
    let secret = made["secret"].as_str().unwrap().to_owned();
    assert!(id.starts_with("whe_") && secret.starts_with("whsec_"));
    assert_eq!(made["types"], json!(["command.exited"]));

    let list = send(&app, get(&w, "/v1/webhook-endpoints")).await;
    assert_eq!(list.expect_ok(200)["items"][0]["id"], id.as_str());
    assert!(!list.text.contains(&secret), "a listing shows the secret");

    let rotated = send(
        &app,
        post(&w, &format!("/v1/webhook-endpoints/{id}/rotate"), json!({})),
    )
    .await;
    assert_ne!(rotated.expect_ok(200)["secret"], secret.as_str());
    let deliveries = send(
        &app,
        get(
            &w,
            &format!("/v1/webhook-endpoints/{id}/deliveries?limit=5"),
        ),
    )
    .await;
    assert_eq!(deliveries.expect_ok(200)["items"], json!([]));
    send(
        &app,
        get(
            &w,
            &format!("/v1/webhook-endpoints/{id}/deliveries?limit=0"),
        ),
    )
    .await
    .expect_error(400, "invalid_request");

    // Another project cannot see, rotate or remove it.
    let other = w.other_project_key("other").await;
    let theirs =
        |req: test::TestRequest| req.insert_header(("Authorization", format!("Bearer {other}")));
    send(
        &app,
        theirs(test::TestRequest::delete().uri(&format!("/v1/webhook-endpoints/{id}"))),
    )
    .await
    .expect_error(404, "sandbox_not_found");
    send(
        &app,
        theirs(test::TestRequest::get().uri(&format!("/v1/webhook-endpoints/{id}/deliveries"))),
    )
    .await
    .expect_error(404, "sandbox_not_found");

    send(&app, delete(&w, &format!("/v1/webhook-endpoints/{id}")))
        .await
        .expect_ok(200);
    send(&app, delete(&w, &format!("/v1/webhook-endpoints/{id}")))
        .await
        .expect_error(404, "sandbox_not_found");
    // Unknown fields and private destinations are refused.
    send(
        &app,
        post(
            &w,
            "/v1/webhook-endpoints",
            json!({"url": "https://a.example/", "colour": 1}),
        ),
    )
    .await
    .expect_error(400, "invalid_request");
    send(
        &app,
        post(
            &w,
            "/v1/webhook-endpoints",
            json!({"url": "http://10.0.0.1/"}),
        ),
    )
    .await
    .expect_error(400, "invalid_request");
}

#[actix_web::test]
async fn without_an_allow_list_a_loopback_destination_is_refused() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let refused = send(
        &app,
        post(
            &w,
            "/v1/webhook-endpoints",
            json!({"url": "http://127.0.0.1:9/hook"}),
        ),
    )
    .await;
    refused.expect_error(400, "invalid_request");
    assert!(refused.text.contains("webhook url"), "{}", refused.text);
}
