//! The fake rejects what Together's descriptions reject, so the traps would catch a wrong
//! request.

use corral_provider::{ExecSpec, SandboxProvider};
use corral_provider_http::reqwest::{Client, StatusCode};
use serde_json::json;

use crate::{ALIAS, KEY, ctx, running, setup};

#[tokio::test]
async fn fake_rejects_bad_creates_and_the_project_key_on_the_agent() {
    let (fake, provider) = setup().await;
    let url = format!("{}/sandboxes", fake.base_url());
    let client = Client::new();
    for bad in [
        json!({}),
        json!({ "snapshot_id": "not-a-uuid" }),
        json!({ "snapshot_id": "3f1c8a9e-5b2d-4e7a-9c10-6d8f2b4a1e33", "snapshot_alias": ALIAS }),
        json!({ "snapshot_alias": ALIAS, "ttl": "60" }),
        json!({ "snapshot_alias": ALIAS, "ttl": 0 }),
        json!({ "snapshot_alias": ALIAS, "ttl": 60000.5 }),
        json!({ "snapshot_alias": ALIAS, "tags": { "-bad": "x" } }),
        json!({ "snapshot_alias": ALIAS, "tags": { "k": 1 } }),
    ] {
        let r = client
            .post(&url)
            .bearer_auth(KEY)
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let unknown = client
        .post(&url)
        .bearer_auth(KEY)
        .json(&json!({ "snapshot_alias": "nope@v9" }))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let anonymous = client.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);

    // The agent accepts only the sandbox's own token.
    let id = running(&provider).await;
    provider
        .exec(&ctx(), &id, &ExecSpec::new("true"))
        .await
        .unwrap();
    let execs = format!("{}/agent/{id}/api/v1/execs", fake.server().base_url());
    let body = json!({ "command": "true", "args": [] });
    let with_key = client
        .post(&execs)
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(with_key.status(), StatusCode::UNAUTHORIZED);
    let sandbox: serde_json::Value = client
        .get(format!("{url}/{id}"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = sandbox["agent"]["token"].as_str().unwrap();
    let missing_args = client
        .post(&execs)
        .bearer_auth(token)
        .json(&json!({ "command": "true" }))
        .send()
        .await
        .unwrap();
    assert_eq!(missing_args.status(), StatusCode::BAD_REQUEST);
    let text_body = client
        .post(format!(
            "{}/agent/{id}/api/v1/files/%2Ftmp%2Fx",
            fake.server().base_url()
        ))
        .bearer_auth(token)
        .header("content-type", "text/plain")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(text_body.status(), StatusCode::BAD_REQUEST);
}
