//! Lifecycle events over HTTP, in process: a JSON page after a sandbox's life, an SSE
//! follower that sees a create as it happens and resumes with `Last-Event-ID`, and the
//! refusals of bad queries and of another project's sandbox.

use std::time::Duration;

use actix_web::dev::Service as _;
use actix_web::test;
use serde_json::{Value, json};

use crate::support::{World, delete, get, post, send};

/// Reads SSE frames from `body` until `n` events arrived (comments skipped), within 10 s.
async fn sse_take<B: actix_web::body::MessageBody>(body: B, n: usize) -> Vec<(u64, String, Value)> {
    let mut body = std::pin::pin!(body);
    let mut text = String::new();
    let read = async {
        loop {
            let events: Vec<_> = text
                .split("\n\n")
                .filter(|b| b.ends_with('}') && !b.starts_with(':'))
                .collect();
            if events.len() >= n && text.ends_with("\n\n") {
                break;
            }
            let chunk = futures::future::poll_fn(|cx| body.as_mut().poll_next(cx))
                .await
                .expect("the stream ended")
                .unwrap_or_else(|_| panic!("the stream failed"));
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("no events within 10 s");
    text.split("\n\n")
        .filter(|b| !b.trim().is_empty() && !b.starts_with(':'))
        .take(n)
        .map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .unwrap_or_default()
                    .to_owned()
            };
            (
                field("id: ").parse().unwrap(),
                field("event: "),
                serde_json::from_str(&field("data: ")).unwrap(),
            )
        })
        .collect()
}

#[actix_web::test]
async fn events_page_as_json_follow_as_sse_and_resume_with_last_event_id() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let sbx = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await;
    let id = sbx.expect_ok(201)["id"].as_str().unwrap().to_owned();
    send(&app, delete(&w, &format!("/v1/sandboxes/{id}")))
        .await
        .expect_ok(200);

    let page = send(&app, get(&w, "/v1/events")).await;
    let page = page.expect_ok(200).clone();
    let items = page["items"].as_array().unwrap();
    let types: Vec<&str> = items
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .filter(|t| *t != "sandbox.status_changed")
        .collect();
    assert_eq!(types, ["sandbox.created", "sandbox.deleted"]);
    assert!(items.iter().all(|e| e["sandboxId"] == id.as_str()));
    let last = items.last().unwrap()["id"].as_u64().unwrap();
    assert_eq!(page["nextAfter"].as_u64(), Some(last));
    let filtered = send(&app, get(&w, &format!("/v1/events?sandboxId={id}&limit=1"))).await;
    assert_eq!(
        filtered.expect_ok(200)["items"].as_array().unwrap().len(),
        1
    );

    // A follower from the last event sees the next create as it happens.
    let res = app
        .call(
            get(&w, "/v1/events")
                .insert_header(("Accept", "text/event-stream"))
                .insert_header(("Last-Event-ID", last.to_string()))
                .to_request(),
        )
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert_eq!(
        res.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    // The app's bodies are not `Send`: the follower runs on this thread's task set.
    let follower = actix_web::rt::spawn(sse_take(res.into_body(), 1));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let next = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await;
    let next_id = next.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let seen = follower.await.unwrap();
    let (event_id, name, data) = &seen[0];
    assert_eq!(name, "sandbox.created");
    assert_eq!(data["sandboxId"], next_id.as_str());
    assert_eq!(data["id"].as_u64(), Some(*event_id));
    assert!(*event_id > last);
}

#[actix_web::test]
async fn bad_queries_and_other_projects_sandboxes_are_refused() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let sbx = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await;
    let id = sbx.expect_ok(201)["id"].as_str().unwrap().to_owned();
    for query in ["limit=0", "limit=501", "after=-1", "colour=red"] {
        send(&app, get(&w, &format!("/v1/events?{query}")))
            .await
            .expect_error(400, "invalid_request");
    }
    send(
        &app,
        get(&w, "/v1/events").insert_header(("Last-Event-ID", "seven")),
    )
    .await
    .expect_error(400, "invalid_request");
    send(&app, get(&w, "/v1/events?sandboxId=nope"))
        .await
        .expect_error(400, "invalid_sandbox_id");
    let other = w.other_project_key("other").await;
    let theirs = send(
        &app,
        test::TestRequest::get()
            .uri(&format!("/v1/events?sandboxId={id}"))
            .insert_header(("Authorization", format!("Bearer {other}"))),
    )
    .await;
    theirs.expect_error(404, "sandbox_not_found");
    let none = send(
        &app,
        test::TestRequest::get()
            .uri("/v1/events")
            .insert_header(("Authorization", format!("Bearer {other}"))),
    )
    .await;
    assert_eq!(none.expect_ok(200)["items"], json!([]));
    send(&app, test::TestRequest::get().uri("/v1/events"))
        .await
        .expect_error(401, "missing_api_key");
}
