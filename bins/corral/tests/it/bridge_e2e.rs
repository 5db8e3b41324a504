//! The whole bridge path on one machine, for each bridge kind: client → `corral` (HTTP) →
//! bridge client → `corral-bridge` (the reference bridge) → a `local` sandbox. The bridge URL
//! comes from `X-Provider-Bridge-Url`, so it goes through the server's guard and the pinned
//! addresses; loopback is allow-listed in this test's configuration only.

use std::sync::Arc;
use std::time::Duration;

use actix_web::test::{self, TestRequest};
use corral_provider::SecretString;
use corral_provider_local::LocalProvider;
use corral_provider_testkit::fake::{FakeServer, Fault, FaultKind};
use reqwest::Method;
use serde_json::json;

use crate::adapters::world_allowing;
use crate::support::send;

const BRIDGE_KEY: &str = "e2e-bridge-key-0123456789abcdef";

/// The reference bridge over a fresh local root, or `None` where local sandboxes cannot run.
async fn reference_bridge() -> Option<(FakeServer, tempfile::TempDir)> {
    let root = tempfile::tempdir().unwrap();
    let local =
        LocalProvider::new(crate::support::small_local(root.path().join("sandboxes"))).unwrap();
    if let Some(why) = local.unavailable_reason() {
        eprintln!("skipped: the local provider cannot run here: {why}");
        return None;
    }
    let router = corral_bridge::router(Arc::new(local), SecretString::from(BRIDGE_KEY));
    Some((FakeServer::start(router).await, root))
}

/// The journey for `kind`, naming the bridge by `host` (an address, or a name the server's
/// guard resolves once and the client reaches only at what it resolved).
async fn journey(kind: &str, host: &str) {
    let Some((bridge, _root)) = reference_bridge().await else {
        return;
    };
    let port = bridge.addr().port();
    let bridge_url = format!("http://{host}:{port}");
    // A short request timeout, so that a create answer held back by the bridge is lost.
    let table: toml::Table = toml::from_str("[http]\nrequest_timeout_seconds = 1").unwrap();
    let (_dir, state, key) = world_allowing(kind, table, &[format!("{host}:{port}")]).await;
    let app = test::init_service(corral::server::app(state)).await;
    // The bridge URL goes with create, get, list and delete; exec and files run with the
    // URL recorded at create time (they refuse the header, as the spec's table has it).
    let bare = |r: TestRequest| {
        r.insert_header(("Authorization", format!("Bearer {key}")))
            .insert_header(("X-Provider-Credential", BRIDGE_KEY))
    };
    let req = |r: TestRequest| bare(r).insert_header(("X-Provider-Bridge-Url", bridge_url.clone()));

    let catalog = send(&app, req(TestRequest::get().uri("/v1/providers"))).await;
    let entry = catalog.expect_ok(200)["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["provider"] == kind)
        .cloned()
        .unwrap_or_else(|| panic!("{kind} is not listed"));
    assert_eq!(entry["imageMode"], "fixed", "{entry}");
    assert_eq!(entry["timeoutMode"], "provider_managed", "{entry}");

    let created = send(
        &app,
        req(TestRequest::post()
            .uri("/v1/sandboxes")
            .set_json(json!({"provider": kind}))),
    )
    .await;
    let body = created.expect_ok(201).clone();
    let sid = body["id"].as_str().unwrap().to_owned();
    assert!(sid.starts_with(&format!("sbx_{kind}_")), "{sid}");
    assert_eq!(body["status"], "creating", "{body}");
    let native = body["metadata"]["nativeProviderId"]
        .as_str()
        .unwrap()
        .to_owned();
    // The bridge's own answer says the sandbox exists and carries the operation id.
    let tag = body["metadata"]["operationId"].as_str().unwrap().to_owned();
    let found = bridge.log().matching(&Method::POST, "/v1/sandbox");
    assert!(
        found
            .iter()
            .any(|r| String::from_utf8_lossy(&r.body).contains(&tag)),
        "the create did not carry the operation id as its tag"
    );

    let seen = send(
        &app,
        req(TestRequest::get().uri(&format!("/v1/sandboxes/{sid}"))),
    )
    .await;
    assert_eq!(seen.expect_ok(200)["status"], "running", "{kind}");
    let page = send(&app, req(TestRequest::get().uri("/v1/sandboxes"))).await;
    assert!(
        page.expect_ok(200)["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["id"] == sid.as_str()),
        "{kind}: not listed"
    );

    let exec = send(
        &app,
        bare(
            TestRequest::post()
                .uri(&format!("/v1/sandboxes/{sid}/exec"))
                .set_json(json!({
                    "command": "echo \"hi from $KIND in $(pwd)\"; echo oops >&2; exit 7",
                    "cwd": "/tmp",
                    "env": {"KIND": kind},
                })),
        ),
    )
    .await;
    let out = exec.expect_ok(200);
    assert_eq!(out["stdout"], format!("hi from {kind} in /tmp\n"), "{out}");
    assert_eq!(out["stderr"], "oops\n", "{out}");
    assert_eq!(out["exitCode"], 7, "{out}");

    let path = "/workspace/bridge.txt";
    let w = send(
        &app,
        bare(
            TestRequest::post()
                .uri(&format!("/v1/sandboxes/{sid}/files/write"))
                .set_json(json!({"path": path, "content": "through the bridge ✓"})),
        ),
    )
    .await;
    assert_eq!(
        w.expect_ok(200)["bytesWritten"],
        "through the bridge ✓".len()
    );
    let r = send(
        &app,
        bare(
            TestRequest::post()
                .uri(&format!("/v1/sandboxes/{sid}/files/read"))
                .set_json(json!({"path": path})),
        ),
    )
    .await;
    assert_eq!(r.expect_ok(200)["content"], "through the bridge ✓");

    let gone = send(
        &app,
        req(TestRequest::delete().uri(&format!("/v1/sandboxes/{sid}"))),
    )
    .await;
    assert_eq!(gone.expect_ok(200)["status"], "deleted");
    // The bridge no longer has it.
    assert!(
        bridge
            .log()
            .matching(&Method::DELETE, &format!("/v1/sandbox/{native}"))
            .len()
            == 1
    );

    // A create whose answer is lost: the bridge creates the sandbox but answers after the
    // client's timeout. The same-key retry finds it by its tag and never creates another.
    bridge.faults().arm(
        Fault::new(FaultKind::DelayAfterHandler(Duration::from_secs(3)))
            .on_method(Method::POST)
            .on_path("/v1/sandbox"),
    );
    let keyed = || {
        req(TestRequest::post()
            .uri("/v1/sandboxes")
            .insert_header(("Idempotency-Key", format!("lost-{kind}")))
            .set_json(json!({"provider": kind})))
    };
    let lost = send(&app, keyed()).await;
    lost.expect_error(502, "sandbox_create_outcome_unknown");
    let op = lost.json["error"]["operationId"]
        .as_str()
        .unwrap()
        .to_owned();
    let creates_before = bridge.log().matching(&Method::POST, "/v1/sandbox").len();
    let retry = send(&app, keyed()).await;
    let adopted = retry.expect_ok(201);
    assert_eq!(adopted["metadata"]["operationId"], op.as_str(), "{adopted}");
    let lookups = bridge.log().matching(&Method::GET, "/v1/sandbox");
    assert!(
        lookups.iter().any(|r| r.path == "/v1/sandbox"
            && r.query.as_deref().is_some_and(|q| q.contains(&op))),
        "the retry did not look the operation id up"
    );
    assert_eq!(
        bridge.log().matching(&Method::POST, "/v1/sandbox").len(),
        creates_before,
        "reconciled, never re-created"
    );
    let adopted_id = adopted["id"].as_str().unwrap().to_owned();
    let gone = send(
        &app,
        req(TestRequest::delete().uri(&format!("/v1/sandboxes/{adopted_id}"))),
    )
    .await;
    assert_eq!(gone.expect_ok(200)["status"], "deleted");
}

#[actix_web::test]
async fn cloudflare_runs_end_to_end_through_the_reference_bridge() {
    journey("cloudflare", "127.0.0.1").await;
}

#[actix_web::test]
async fn modal_runs_end_to_end_through_the_reference_bridge() {
    journey("modal", "127.0.0.1").await;
}

#[actix_web::test]
async fn deno_runs_end_to_end_through_the_reference_bridge_named_by_host_name() {
    // `localhost` is refused unless allow-listed; here it is, and it is pinned all the same.
    journey("deno", "localhost").await;
}

/// A bridge with only Cloudflare's Worker routes cannot look a tag up: a create whose answer
/// is lost stays unknown on the same-key retry, and is never created a second time.
#[actix_web::test]
async fn without_the_lookup_extension_a_lost_create_stays_unknown_and_is_never_retried() {
    let fake = corral_provider_cloudflare::fake::Fake::start_plain().await;
    let port = fake.server().addr().port();
    let table: toml::Table = toml::from_str("[http]\nrequest_timeout_seconds = 1").unwrap();
    let (_dir, state, key) =
        world_allowing("cloudflare", table, &[format!("127.0.0.1:{port}")]).await;
    let app = test::init_service(corral::server::app(state)).await;
    fake.server().faults().arm(
        Fault::new(FaultKind::DelayAfterHandler(Duration::from_secs(3)))
            .on_method(Method::POST)
            .on_path("/v1/sandbox"),
    );
    let keyed = || {
        TestRequest::post()
            .uri("/v1/sandboxes")
            .insert_header(("Authorization", format!("Bearer {key}")))
            .insert_header((
                "X-Provider-Credential",
                corral_provider_cloudflare::fake::API_KEY,
            ))
            .insert_header(("X-Provider-Bridge-Url", format!("http://127.0.0.1:{port}")))
            .insert_header(("Idempotency-Key", "plain-lost"))
            .set_json(json!({"provider": "cloudflare"}))
    };
    let lost = send(&app, keyed()).await;
    lost.expect_error(502, "sandbox_create_outcome_unknown");
    let retry = send(&app, keyed()).await;
    retry.expect_error(409, "idempotency_outcome_unknown");
    assert_eq!(
        retry.json["error"]["operationId"],
        lost.json["error"]["operationId"]
    );
    assert_eq!(
        fake.server()
            .log()
            .matching(&Method::POST, "/v1/sandbox")
            .len(),
        1,
        "never re-created blindly"
    );
    assert_eq!(fake.handle().sandbox_count(), 1);
}
