//! Every error code reachable through the public API, one scenario each, in process.

use std::sync::Arc;
use std::time::Duration;

use actix_web::test::{self, TestRequest};
use base64::Engine as _;
use chrono::Utc;
use corral_domain::{Provider, ProviderContext};
use corral_provider::{ProviderError, SandboxProvider};
use corral_registry::{Database, DatabaseConfig, ProfileInput, Verification};
use corral_service::ServiceConfig;
use serde_json::json;

use crate::support::{Counting, Providers, World, delete, get, post, send};

/// `local` plus a scripted double posing as E2B (a provider that needs a credential).
async fn world_with_scripted(config: ServiceConfig) -> (World, Arc<Counting>) {
    let scripted = Arc::new(Counting::new(Provider::E2b, false));
    let s2 = scripted.clone();
    let w = World::with(
        move |_| {
            let mut m = Providers::new();
            m.insert(Provider::E2b, s2 as Arc<dyn SandboxProvider>);
            m
        },
        config,
    )
    .await;
    (w, scripted)
}

fn inline(req: TestRequest) -> TestRequest {
    req.insert_header(("X-Provider-Credential", "inline-cred-1"))
}

#[actix_web::test]
async fn request_contract_failures_are_invalid_request_envelopes() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let auth = ("Authorization", w.bearer());
    let cases: Vec<(TestRequest, u16, &str)> = vec![
        // Malformed JSON, wrong content type, unknown field, missing field, unknown provider.
        (
            TestRequest::post()
                .uri("/v1/sandboxes")
                .insert_header(auth.clone())
                .insert_header(("content-type", "application/json"))
                .set_payload("{\"provider\":"),
            400,
            "invalid_request",
        ),
        (
            TestRequest::post()
                .uri("/v1/sandboxes")
                .insert_header(auth.clone())
                .insert_header(("content-type", "text/plain"))
                .set_payload("{\"provider\":\"local\"}"),
            400,
            "invalid_request",
        ),
        (
            TestRequest::post()
                .uri("/v1/sandboxes")
                .insert_header(auth.clone())
                .set_json(json!({"provider": "local", "imag": "x"})),
            400,
            "invalid_request",
        ),
        (
            TestRequest::post()
                .uri("/v1/sandboxes")
                .insert_header(auth.clone())
                .set_json(json!({"provider": "nope"})),
            400,
            "invalid_request",
        ),
        (
            TestRequest::post()
                .uri("/v1/sandboxes")
                .insert_header(auth.clone())
                .set_json(json!({})),
            400,
            "invalid_request",
        ),
        // A field the capabilities rule out (local's image is fixed).
        (
            TestRequest::post()
                .uri("/v1/sandboxes")
                .insert_header(auth.clone())
                .set_json(json!({"provider": "local", "image": "ubuntu"})),
            400,
            "invalid_request",
        ),
        // A provider this server has not configured.
        (
            TestRequest::post()
                .uri("/v1/sandboxes")
                .insert_header(auth.clone())
                .set_json(json!({"provider": "daytona"})),
            400,
            "invalid_request",
        ),
        // Bad queries.
        (
            TestRequest::get()
                .uri("/v1/sandboxes?limit=0")
                .insert_header(auth.clone()),
            400,
            "invalid_request",
        ),
        (
            TestRequest::get()
                .uri("/v1/sandboxes?limit=201")
                .insert_header(auth.clone()),
            400,
            "invalid_request",
        ),
        (
            TestRequest::get()
                .uri("/v1/sandboxes?limit=ten")
                .insert_header(auth.clone()),
            400,
            "invalid_request",
        ),
        (
            TestRequest::get()
                .uri("/v1/sandboxes?cursor=garbage")
                .insert_header(auth.clone()),
            400,
            "invalid_request",
        ),
        (
            TestRequest::get()
                .uri("/v1/sandboxes?colour=red")
                .insert_header(auth.clone()),
            400,
            "invalid_request",
        ),
        // Unknown route and wrong method.
        (
            TestRequest::get()
                .uri("/v2/sandboxes")
                .insert_header(auth.clone()),
            404,
            "invalid_request",
        ),
        (
            TestRequest::get().uri("/").insert_header(auth.clone()),
            404,
            "invalid_request",
        ),
        (
            TestRequest::put()
                .uri("/v1/sandboxes")
                .insert_header(auth.clone()),
            405,
            "invalid_request",
        ),
        (
            TestRequest::patch()
                .uri("/v1/providers")
                .insert_header(auth.clone()),
            405,
            "invalid_request",
        ),
    ];
    let r = send(
        &app,
        TestRequest::put()
            .uri("/v1/sandboxes")
            .insert_header(auth.clone()),
    )
    .await;
    assert_eq!(r.headers.get("allow").unwrap(), "GET, POST");
    for (req, status, code) in cases {
        let r = send(&app, req).await;
        assert_eq!(
            r.headers.get("content-type").unwrap(),
            "application/json",
            "{}",
            r.text
        );
        r.expect_error(status, code);
        assert_eq!(r.json["error"]["retryable"], false);
    }
}

#[actix_web::test]
async fn project_key_failures() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    send(&app, TestRequest::get().uri("/v1/sandboxes"))
        .await
        .expect_error(401, "missing_api_key");
    send(
        &app,
        TestRequest::get()
            .uri("/v1/providers")
            .insert_header(("Authorization", "Basic abc")),
    )
    .await
    .expect_error(401, "missing_api_key");
    let wrong = format!("Bearer {}x", w.key);
    send(
        &app,
        TestRequest::get()
            .uri("/v1/sandboxes")
            .insert_header(("Authorization", wrong)),
    )
    .await
    .expect_error(401, "authentication_error");
    send(
        &app,
        TestRequest::get()
            .uri("/v1/sandboxes")
            .insert_header(("Authorization", "Bearer crl_nope_nope")),
    )
    .await
    .expect_error(401, "authentication_error");
    // A revoked key is refused at once.
    let info = w.registry.list_api_keys(w.project).await.unwrap();
    w.registry.revoke_api_key(&info[0].key_id).await.unwrap();
    send(&app, get(&w, "/v1/sandboxes"))
        .await
        .expect_error(401, "authentication_error");
}

#[actix_web::test]
async fn a_profile_that_cannot_be_loaded_is_provider_profiles_unavailable() {
    let (w, scripted) = world_with_scripted(ServiceConfig::default()).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    // Stored under another master key: it does not decrypt with the server's.
    let foreign = corral_registry::Registry::new(
        w.registry.database().clone(),
        corral_registry::MasterKey::generate().unwrap(),
    );
    foreign
        .put_profile(
            w.project,
            Provider::E2b,
            ProfileInput {
                context: ProviderContext::default(),
                settings: serde_json::Map::new(),
                credential: Some("sealed-elsewhere".to_owned().into()),
            },
        )
        .await
        .unwrap();
    let r = send(&app, post(&w, "/v1/sandboxes", json!({"provider": "e2b"}))).await;
    r.expect_error(503, "provider_profiles_unavailable");
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(scripted.count("create"), 0);
}

#[actix_web::test]
async fn size_limits_are_payload_too_large() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let id = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await
    .expect_ok(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Command over 64 KiB.
    send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/exec"),
            json!({"command": format!("echo {}", "a".repeat(70 * 1024))}),
        ),
    )
    .await
    .expect_error(413, "payload_too_large");
    // A body over the endpoint's limit (create takes 64 KiB).
    let big = json!({"provider": "local", "image": "x".repeat(100 * 1024)});
    send(&app, post(&w, "/v1/sandboxes", big))
        .await
        .expect_error(413, "payload_too_large");
    // A file over the 8 MiB read limit.
    let r = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/exec"),
            json!({"command": "head -c 8388609 /dev/zero > /workspace/big"}),
        ),
    )
    .await;
    assert_eq!(r.expect_ok(200)["exitCode"], 0);
    send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/files/read"),
            json!({"path": "/workspace/big", "encoding": "base64"}),
        ),
    )
    .await
    .expect_error(413, "payload_too_large");
}

#[actix_web::test]
async fn file_failures_have_their_codes() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let id = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await
    .expect_ok(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let write = format!("/v1/sandboxes/{id}/files/write");
    let read = format!("/v1/sandboxes/{id}/files/read");
    send(
        &app,
        post(
            &w,
            &write,
            json!({"path": "/workspace/x", "content": "%%%", "encoding": "base64"}),
        ),
    )
    .await
    .expect_error(400, "invalid_file_content");
    let latin1 = base64::engine::general_purpose::STANDARD.encode([0xffu8, 0xfe, 0x41]);
    send(
        &app,
        post(
            &w,
            &write,
            json!({"path": "/workspace/l1", "content": latin1, "encoding": "base64"}),
        ),
    )
    .await
    .expect_ok(200);
    send(&app, post(&w, &read, json!({"path": "/workspace/l1"})))
        .await
        .expect_error(422, "file_not_utf8");
    send(&app, post(&w, &read, json!({"path": "/workspace/missing"})))
        .await
        .expect_error(422, "file_operation_failed");
    send(
        &app,
        post(
            &w,
            &write,
            json!({"path": "/no/such/dir/f", "content": "x"}),
        ),
    )
    .await
    .expect_error(422, "file_operation_failed");
}

#[actix_web::test]
async fn an_exec_past_its_deadline_is_request_timeout() {
    let config = ServiceConfig {
        exec_deadline: Duration::from_secs(1),
        ..ServiceConfig::default()
    };
    let w = World::with(|_| Providers::new(), config).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let id = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await
    .expect_ok(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/exec"),
            json!({"command": "sleep 3"}),
        ),
    )
    .await;
    r.expect_error(504, "request_timeout");
    assert_eq!(r.json["error"]["retryable"], true);
}

#[actix_web::test]
async fn sandbox_ids_that_do_not_parse_are_invalid_sandbox_id_and_unknown_ones_not_found() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    for bad in [
        "nope",
        "sbx_aws_01m80pewwq3j0wt49msw408rk1",
        "sbx_local_01M80PEWWQ3J0WT49MSW408RK1",
    ] {
        send(&app, get(&w, &format!("/v1/sandboxes/{bad}")))
            .await
            .expect_error(400, "invalid_sandbox_id");
    }
    send(
        &app,
        get(&w, "/v1/sandboxes/sbx_local_01m80pewwq3j0wt49msw408rk1"),
    )
    .await
    .expect_error(404, "sandbox_not_found");
    send(
        &app,
        delete(&w, "/v1/sandboxes/sbx_e2b_01m80pewwq3j0wt49msw408rk1"),
    )
    .await
    .expect_error(404, "sandbox_not_found");
}

#[actix_web::test]
async fn provider_credentials_come_inline_or_from_the_profile() {
    let (w, scripted) = world_with_scripted(ServiceConfig::default()).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    // Neither a profile nor an inline credential.
    send(&app, post(&w, "/v1/sandboxes", json!({"provider": "e2b"})))
        .await
        .expect_error(422, "provider_profile_not_found");
    assert_eq!(scripted.count("create"), 0);
    // Inline works and is what the provider receives.
    let r = send(
        &app,
        inline(post(&w, "/v1/sandboxes", json!({"provider": "e2b"}))),
    )
    .await;
    assert_eq!(r.expect_ok(201)["metadata"]["credentialSource"], "inline");
    assert_eq!(
        scripted
            .credentials
            .lock()
            .unwrap()
            .last()
            .unwrap()
            .as_deref(),
        Some("inline-cred-1")
    );
    // A stored profile works without the header; inline context overrides the profile's.
    w.registry
        .put_profile(
            w.project,
            Provider::E2b,
            ProfileInput {
                context: ProviderContext {
                    team_id: Some("team-profile".into()),
                    ..Default::default()
                },
                settings: serde_json::Map::new(),
                credential: Some("profile-cred-2".to_owned().into()),
            },
        )
        .await
        .unwrap();
    let r = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "e2b"}))
            .insert_header(("X-Provider-Team-Id", "team-inline")),
    )
    .await;
    let body = r.expect_ok(201);
    assert_eq!(body["metadata"]["credentialSource"], "profile");
    assert_eq!(body["metadata"]["teamId"], "team-inline");
    assert_eq!(
        scripted
            .credentials
            .lock()
            .unwrap()
            .last()
            .unwrap()
            .as_deref(),
        Some("profile-cred-2")
    );
    // The last deep verification says the stored credential cannot create.
    w.registry
        .record_verification(
            w.project,
            Provider::E2b,
            Verification {
                operation: "create".into(),
                ok: false,
                reason: Some("the key lacks the sandbox:create scope".into()),
                remediation: Some("issue a key with sandbox:create".into()),
                checked_at: Utc::now(),
            },
        )
        .await
        .unwrap();
    let r = send(&app, post(&w, "/v1/sandboxes", json!({"provider": "e2b"}))).await;
    r.expect_error(403, "provider_operation_unavailable");
    assert_eq!(r.json["error"]["operation"], "create");
    assert_eq!(
        r.json["error"]["reason"],
        "the key lacks the sandbox:create scope"
    );
    assert_eq!(
        r.json["error"]["remediation"],
        "issue a key with sandbox:create"
    );
    // An inline credential is not bound by the profile's verification.
    send(
        &app,
        inline(post(&w, "/v1/sandboxes", json!({"provider": "e2b"}))),
    )
    .await
    .expect_ok(201);
}

#[actix_web::test]
async fn provider_failures_map_to_one_code_each() {
    let (w, scripted) = world_with_scripted(ServiceConfig::default()).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let create = || inline(post(&w, "/v1/sandboxes", json!({"provider": "e2b"})));
    let p = Provider::E2b;

    scripted.fail_next("create", move || ProviderError::Unauthorized {
        provider: p,
        message: "bad key".into(),
    });
    send(&app, create())
        .await
        .expect_error(401, "authentication_error");
    scripted.fail_next("create", move || ProviderError::InvalidRequest {
        provider: p,
        message: "no such template".into(),
    });
    send(&app, create())
        .await
        .expect_error(422, "provider_invalid_request");
    scripted.fail_next("create", move || ProviderError::RateLimited {
        provider: p,
        retry_after: Some(Duration::from_secs(7)),
    });
    let r = send(&app, create()).await;
    r.expect_error(429, "rate_limited");
    assert_eq!(r.headers.get("retry-after").unwrap(), "7");
    scripted.fail_next("create", move || ProviderError::Unavailable {
        provider: p,
        message: "refused".into(),
        retry_after: None,
    });
    let r = send(&app, create()).await;
    r.expect_error(503, "provider_unavailable");
    assert_eq!(r.headers.get("retry-after").unwrap(), "1");
    scripted.fail_next("create", move || ProviderError::MissingContext {
        provider: p,
        field: "teamId",
    });
    let r = send(&app, create()).await;
    r.expect_error(400, "invalid_request");
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("X-Provider-Team-Id")
    );
    scripted.fail_next("create", move || ProviderError::TimedOutAfterSend {
        provider: p,
    });
    let r = send(&app, create()).await;
    r.expect_error(502, "sandbox_create_outcome_unknown");
    assert!(
        r.json["error"]["operationId"]
            .as_str()
            .unwrap()
            .starts_with("op_")
    );

    let id = send(&app, create()).await.expect_ok(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    scripted.fail_next("get", move || ProviderError::ServerError {
        provider: p,
        status: 500,
        message: "boom".into(),
    });
    send(&app, inline(get(&w, &format!("/v1/sandboxes/{id}"))))
        .await
        .expect_error(502, "provider_error");
    scripted.fail_next("exec", move || ProviderError::MissingCredential {
        provider: p,
    });
    send(
        &app,
        inline(post(
            &w,
            &format!("/v1/sandboxes/{id}/exec"),
            json!({"command": "true"}),
        )),
    )
    .await
    .expect_error(401, "missing_api_key");
    scripted.fail_next("delete", move || ProviderError::TimedOutAfterSend {
        provider: p,
    });
    send(&app, inline(delete(&w, &format!("/v1/sandboxes/{id}"))))
        .await
        .expect_error(504, "request_timeout");
    // A sandbox the provider lost reads as expired, and exec on it is not found.
    scripted.fail_next("get", move || ProviderError::NotFound {
        provider: p,
        resource: "sandbox x".into(),
    });
    let r = send(&app, inline(get(&w, &format!("/v1/sandboxes/{id}")))).await;
    assert_eq!(r.expect_ok(200)["status"], "expired");
    send(
        &app,
        inline(post(
            &w,
            &format!("/v1/sandboxes/{id}/exec"),
            json!({"command": "true"}),
        )),
    )
    .await
    .expect_error(404, "sandbox_not_found");
}

#[actix_web::test]
async fn an_unreachable_registry_or_idempotency_store_fails_closed_with_503() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("corral.db").display());
    let mut tight = DatabaseConfig::new(url.clone());
    tight.max_connections = 1;
    tight.wait_timeout = Duration::from_millis(200);
    let db = Database::connect(DatabaseConfig::new(url)).await.unwrap();
    let idem_db = Database::connect(tight.clone()).await.unwrap();
    let w = World::with_db(
        dir,
        db.clone(),
        |_| Providers::new(),
        ServiceConfig::default(),
        Some(idem_db.clone()),
    )
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;

    // Hold the idempotency store's only connection: keyed creates fail closed.
    let held = idem_db.connection().await.unwrap();
    let r = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "local"}))
            .insert_header(("Idempotency-Key", "k")),
    )
    .await;
    r.expect_error(503, "idempotency_unavailable");
    assert!(r.headers.contains_key("retry-after"));
    drop(held);
    assert_eq!(
        send(&app, get(&w, "/v1/sandboxes")).await.expect_ok(200)["items"]
            .as_array()
            .unwrap()
            .len(),
        0,
        "no provider call, no record"
    );

    // A registry whose pool is exhausted.
    let dir2 = tempfile::tempdir().unwrap();
    let url2 = format!("sqlite://{}", dir2.path().join("corral.db").display());
    let mut tight2 = DatabaseConfig::new(url2);
    tight2.max_connections = 1;
    tight2.wait_timeout = Duration::from_millis(200);
    let reg_db = Database::connect(tight2).await.unwrap();
    let w2 = World::with_db(
        dir2,
        reg_db.clone(),
        |_| Providers::new(),
        ServiceConfig::default(),
        None,
    )
    .await;
    let app2 = test::init_service(corral::server::app(w2.state.clone())).await;
    let held = reg_db.connection().await.unwrap();
    let r = send(&app2, get(&w2, "/v1/sandboxes")).await;
    r.expect_error(503, "sandbox_registry_unavailable");
    send(&app2, TestRequest::get().uri("/readyz"))
        .await
        .expect_error(503, "sandbox_registry_unavailable");
    drop(held);
    send(&app2, TestRequest::get().uri("/readyz"))
        .await
        .expect_ok(200);
}

#[actix_web::test]
async fn a_panicking_handler_answers_internal_error() {
    let (w, scripted) = world_with_scripted(ServiceConfig::default()).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let id = send(
        &app,
        inline(post(&w, "/v1/sandboxes", json!({"provider": "e2b"}))),
    )
    .await
    .expect_ok(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    scripted.panic_on.lock().unwrap().push("get");
    let r = send(&app, inline(get(&w, &format!("/v1/sandboxes/{id}")))).await;
    r.expect_error(500, "internal_error");
    assert_eq!(r.json["error"]["retryable"], true);
    // The server keeps answering.
    send(&app, inline(get(&w, &format!("/v1/sandboxes/{id}"))))
        .await
        .expect_ok(200);
}

#[actix_web::test]
async fn list_and_tombstone_reads_never_call_the_provider() {
    let (w, scripted) = world_with_scripted(ServiceConfig::default()).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let id = send(
        &app,
        inline(post(&w, "/v1/sandboxes", json!({"provider": "e2b"}))),
    )
    .await
    .expect_ok(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    send(&app, inline(delete(&w, &format!("/v1/sandboxes/{id}"))))
        .await
        .expect_ok(200);
    let calls = scripted.calls.lock().unwrap().len();
    // No credential needed either: neither call reaches the provider.
    send(&app, get(&w, &format!("/v1/sandboxes/{id}")))
        .await
        .expect_ok(200);
    send(&app, delete(&w, &format!("/v1/sandboxes/{id}")))
        .await
        .expect_ok(200);
    send(&app, get(&w, "/v1/sandboxes")).await.expect_ok(200);
    assert_eq!(scripted.calls.lock().unwrap().len(), calls);
}
