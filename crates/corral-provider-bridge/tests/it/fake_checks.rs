//! The fake rejects what the bridge's description rejects.

use corral_provider_bridge::api;
use corral_provider_bridge::fake::API_KEY;
use corral_provider_http::reqwest::{Client, StatusCode};

use crate::Fake;

async fn created(client: &Client, base: &str) -> String {
    let resp = client
        .post(format!("{base}/v1/sandbox"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json::<api::Created>().await.unwrap().id
}

async fn error_code(resp: corral_provider_http::reqwest::Response) -> (StatusCode, String) {
    let status = resp.status();
    let body: api::ErrorBody = resp.json().await.unwrap();
    (status, body.code)
}

#[tokio::test]
async fn the_fake_refuses_missing_or_wrong_keys_with_the_contract_body() {
    let fake = Fake::start().await;
    let client = Client::new();
    let base = fake.base_url();
    let none = client
        .post(format!("{base}/v1/sandbox"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(none).await,
        (StatusCode::UNAUTHORIZED, "unauthorized".into())
    );
    let wrong = client
        .post(format!("{base}/v1/sandbox"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(wrong).await.0, StatusCode::UNAUTHORIZED);
    // Health needs no key.
    let health = client.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
}

#[tokio::test]
async fn the_fake_refuses_malformed_ids_and_exec_requests() {
    let fake = Fake::start().await;
    let client = Client::new();
    let base = fake.base_url();
    let id = created(&client, &base).await;
    let bad_id = client
        .get(format!("{base}/v1/sandbox/ABC1/running"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(bad_id).await,
        (StatusCode::BAD_REQUEST, "invalid_request".into())
    );
    for body in [
        serde_json::json!({"argv": []}),
        serde_json::json!({"argv": "echo"}),
        serde_json::json!({"argv": ["true"], "timeout_ms": "30"}),
        serde_json::json!({"argv": ["true"], "cwd": 1}),
        serde_json::json!({"argv": ["true"], "shell": true}),
        serde_json::json!({"command": "true"}),
    ] {
        let resp = client
            .post(format!("{base}/v1/sandbox/{id}/exec"))
            .bearer_auth(API_KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            error_code(resp).await,
            (StatusCode::BAD_REQUEST, "invalid_request".into()),
            "{body}"
        );
    }
}

#[tokio::test]
async fn the_fake_answers_the_worker_shapes_for_files_running_and_delete() {
    let fake = Fake::start().await;
    let client = Client::new();
    let base = fake.base_url();
    let id = created(&client, &base).await;
    let missing = client
        .get(format!("{base}/v1/sandbox/{id}/file/no/such/file"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(missing).await,
        (StatusCode::NOT_FOUND, "workspace_read_not_found".into())
    );
    let untyped = client
        .put(format!("{base}/v1/sandbox/{id}/file/tmp/x"))
        .bearer_auth(API_KEY)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(untyped).await.0, StatusCode::BAD_REQUEST);
    let unknown = "unknownsandbox";
    let running = client
        .get(format!("{base}/v1/sandbox/{unknown}/running"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(running.status(), StatusCode::OK);
    let running: api::RunningResponse = running.json().await.unwrap();
    assert!(!running.running);
    // Deleting an unknown id is 204, as the Worker's best-effort destroy.
    let deleted = client
        .delete(format!("{base}/v1/sandbox/{unknown}"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
}
