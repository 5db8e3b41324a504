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

/// A receiver on `listener` that answers 204 to every request and records (webhook-id, body).
fn receive_on(
    listener: std::net::TcpListener,
) -> std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>> {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut id, mut length) = (String::new(), 0_usize);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("webhook-id:") {
                    id = v.trim().to_owned();
                } else if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            seen.lock()
                .unwrap()
                .push((id, String::from_utf8_lossy(&body).into_owned()));
            let _ = stream.write_all(
                b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    got
}

/// The outbox is in the database: a delivery whose destination was down when the server was
/// killed with SIGKILL is delivered by the restarted server, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_pending_when_the_server_is_killed_arrives_once_after_the_restart() {
    use crate::serve::{Api, start};
    use reqwest::Method;
    use std::time::{Duration, Instant};

    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let config = tmp.path().join("corral.toml");
    std::fs::write(
        &config,
        "[webhooks]\nallow = [\"127.0.0.1\"]\nfirst_backoff_seconds = 1\n[rate_limits]\nenabled = false\n",
    )
    .unwrap();
    // A port with nobody listening yet: every attempt before the restart is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = start(&data, &config, 1);
    let api = Api {
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        base: server.base.clone(),
        key: server.first_key(),
    };
    let hook = api
        .json(
            Method::POST,
            "/v1/webhook-endpoints",
            Some(json!({"url": format!("http://127.0.0.1:{port}/hook"), "types": ["sandbox.created"]})),
            &[],
            201,
        )
        .await;
    let hook_id = hook["id"].as_str().unwrap().to_owned();
    let sandbox = api
        .json(
            Method::POST,
            "/v1/sandboxes",
            Some(json!({"provider": "local"})),
            &[],
            201,
        )
        .await;
    // Wait for a refused attempt to be recorded, then kill the server mid-retry.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let d = api
            .json(
                Method::GET,
                &format!("/v1/webhook-endpoints/{hook_id}/deliveries"),
                None,
                &[],
                200,
            )
            .await;
        if d["items"][0]["attempts"].as_u64().unwrap_or(0) >= 1 {
            assert_ne!(d["items"][0]["state"], json!("delivered"), "{d}");
            break;
        }
        assert!(Instant::now() < deadline, "no attempt recorded: {d}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.crash();

    let got = receive_on(std::net::TcpListener::bind(("127.0.0.1", port)).unwrap());
    let restarted = start(&data, &config, 2);
    let deadline = Instant::now() + Duration::from_secs(40);
    while got.lock().unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "nothing delivered after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Time for a duplicate to show up, were one sent.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "delivered once: {got:?}");
    let body: serde_json::Value = serde_json::from_str(&got[0].1).unwrap();
    assert_eq!(body["type"], json!("sandbox.created"));
    assert_eq!(body["data"]["sandboxId"], sandbox["id"]);
    assert!(got[0].0.starts_with("msg_"), "{got:?}");
    drop(restarted);
}
