//! The fake rejects what Morph rejects, so the traps above would catch a wrong request.

use corral_provider_http::reqwest::{Client, StatusCode};
use serde_json::json;

use crate::{KEY, setup};

#[tokio::test]
async fn fake_rejects_missing_snapshot_wrong_ttl_types_unknown_actions_and_bad_auth() {
    let (fake, _) = setup().await;
    let url = format!("{}/instance", fake.base_url());
    let client = Client::new();
    let post = |query: &'static str, body: serde_json::Value| {
        client
            .post(format!("{url}{query}"))
            .bearer_auth(KEY)
            .json(&body)
            .send()
    };
    let status = |r: corral_provider_http::reqwest::Response| r.status();
    assert_eq!(
        status(post("", json!({})).await.unwrap()),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    for bad in [
        json!({ "ttl_seconds": "600" }),
        json!({ "ttl_seconds": 0 }),
        json!({ "ttl_seconds": 1.5 }),
        json!({ "ttl_action": "delete" }),
        json!({ "metadata": { "a": 1 } }),
    ] {
        let r = post("?snapshot_id=snapshot_x", bad.clone()).await.unwrap();
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    }
    let ok = post(
        "?snapshot_id=snapshot_x",
        json!({ "ttl_seconds": 5, "ttl_action": "pause" }),
    );
    assert_eq!(status(ok.await.unwrap()), StatusCode::OK);
    let anonymous = client.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::FORBIDDEN);
    let wrong = client.get(&url).bearer_auth("nope").send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    // No file API: Morph's SDK uses SFTP.
    let files = client
        .get(format!("{url}/morphvm_1/files/tmp"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(files.status(), StatusCode::NOT_FOUND);
    let exec = client
        .post(format!("{url}/morphvm_1/exec"))
        .bearer_auth(KEY)
        .json(&json!({ "command": "echo hi" }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        exec.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "command must be an argv"
    );
}
