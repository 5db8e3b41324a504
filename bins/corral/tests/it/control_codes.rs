//! Every control-plane error code, produced through HTTP: the scenario is written once and run
//! on SQLite and on PostgreSQL.

use std::time::Duration;

use actix_web::test::{self, TestRequest};
use base64::Engine as _;
use corral_registry::testing::TestDb;
use corral_registry::{Database, DatabaseConfig};
use corral_service::ServiceConfig;
use serde_json::json;

use crate::control_support::{Browser, sign_in};
use crate::support::{Providers, Resp, World, send};

/// The code and, for the envelope's own fields, the body of a failure.
#[track_caller]
fn code(r: &Resp, status: u16, code: &str) {
    r.expect_error(status, code);
}

async fn world_on(db: Database) -> World {
    let dir = tempfile::tempdir().unwrap();
    World::with_db(
        dir,
        db,
        |_| Providers::new(),
        ServiceConfig::default(),
        None,
    )
    .await
}

async fn sqlite_world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("corral.db").display());
    let db = Database::connect(DatabaseConfig::new(url)).await.unwrap();
    World::with_db(
        dir,
        db,
        |_| Providers::new(),
        ServiceConfig::default(),
        None,
    )
    .await
}

/// Organizations, members and legal releases: every code of the account rules.
async fn account_and_legal_codes(w: World) {
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let owner = sign_in(&app, &w, "owner@example.com").await;
    let admin = sign_in(&app, &w, "admin@example.com").await;

    let org = send(
        &app,
        owner.post("/v1/control/accounts", json!({"name": "Acme"})),
    )
    .await;
    let org = org.expect_ok(201).clone();
    let acc = org["id"].as_str().unwrap().to_owned();
    let version = org["version"].as_i64().unwrap();

    // control_plane_conflict: a stale version.
    let renamed = send(
        &app,
        owner.patch(
            &format!("/v1/control/accounts/{acc}"),
            json!({"name": "Acme 2", "version": version}),
        ),
    )
    .await;
    assert_eq!(renamed.expect_ok(200)["version"], json!(version + 1));
    let stale = send(
        &app,
        owner.patch(
            &format!("/v1/control/accounts/{acc}"),
            json!({"name": "Acme 3", "version": version}),
        ),
    )
    .await;
    code(&stale, 409, "control_plane_conflict");

    // last_account_owner: the only owner steps down, or leaves.
    let me = &owner.user_id;
    let r = send(
        &app,
        owner.patch(
            &format!("/v1/control/accounts/{acc}/members/{me}"),
            json!({"role": "admin"}),
        ),
    )
    .await;
    code(&r, 409, "last_account_owner");
    let r = send(
        &app,
        owner.delete(&format!("/v1/control/accounts/{acc}/members/{me}")),
    )
    .await;
    code(&r, 409, "last_account_owner");

    // personal_account_immutable: the owner's personal account cannot be deleted or shared.
    let accounts = send(&app, owner.get("/v1/control/accounts")).await;
    let personal = accounts.expect_ok(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "personal")
        .expect("a personal account")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = send(
        &app,
        owner.delete(&format!("/v1/control/accounts/{personal}")),
    )
    .await;
    code(&r, 403, "personal_account_immutable");
    let r = send(
        &app,
        owner.post(
            &format!("/v1/control/accounts/{personal}/invitations"),
            json!({"email": "admin@example.com", "role": "member"}),
        ),
    )
    .await;
    code(&r, 403, "personal_account_immutable");

    // legal_acceptance_required, legal_not_found, legal_release_changed.
    let first = w
        .state
        .control
        .publish_legal("terms", "Terms", "Be nice.")
        .await
        .unwrap();
    let r = send(
        &app,
        admin.post("/v1/control/accounts", json!({"name": "Admin's"})),
    )
    .await;
    code(&r, 403, "legal_acceptance_required");
    let r = send(&app, admin.get("/v1/control/legal/terms/releases/99")).await;
    code(&r, 404, "legal_not_found");
    let r = send(&app, admin.get("/v1/control/legal/nonsense/releases/1")).await;
    code(&r, 404, "legal_not_found");
    let r = send(
        &app,
        admin.post(
            "/v1/control/legal/acceptances",
            json!({"document": "privacy", "release": 1}),
        ),
    )
    .await;
    code(&r, 404, "legal_not_found");
    let release = send(
        &app,
        admin.get(&format!("/v1/control/legal/terms/releases/{first}")),
    )
    .await;
    assert_eq!(release.expect_ok(200)["body"], "Be nice.");
    w.state
        .control
        .publish_legal("terms", "Terms", "Be nicer.")
        .await
        .unwrap();
    let r = send(
        &app,
        admin.post(
            "/v1/control/legal/acceptances",
            json!({"document": "terms", "release": first}),
        ),
    )
    .await;
    code(&r, 409, "legal_release_changed");
    let status = send(&app, admin.get("/v1/control/legal")).await;
    let current = status.expect_ok(200)["items"][0]["release"]
        .as_i64()
        .unwrap();
    let r = send(
        &app,
        admin.post(
            "/v1/control/legal/acceptances",
            json!({"document": "terms", "release": current}),
        ),
    )
    .await;
    assert_eq!(r.status.as_u16(), 204, "{}", r.text);
    accept_terms(&app, &owner).await;

    // account_deleting: a deleted organization refuses every mutation while it goes.
    let r = send(&app, owner.delete(&format!("/v1/control/accounts/{acc}"))).await;
    assert!(r.expect_ok(202)["deletingAt"].is_string(), "{}", r.text);
    let r = send(
        &app,
        owner.patch(
            &format!("/v1/control/accounts/{acc}"),
            json!({"name": "Too late", "version": version + 1}),
        ),
    )
    .await;
    code(&r, 409, "account_deleting");
    let r = send(
        &app,
        owner.post(
            &format!("/v1/control/accounts/{acc}/projects"),
            json!({"name": "late"}),
        ),
    )
    .await;
    code(&r, 409, "account_deleting");
}

/// Accepts the current release of every published document.
async fn accept_terms<S, B>(app: &S, b: &Browser)
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: actix_web::body::MessageBody,
{
    let status = send(app, b.get("/v1/control/legal")).await;
    for doc in status.expect_ok(200)["items"].as_array().unwrap().clone() {
        let r = send(
            app,
            b.post(
                "/v1/control/legal/acceptances",
                json!({"document": doc["document"], "release": doc["release"]}),
            ),
        )
        .await;
        assert_eq!(r.status.as_u16(), 204, "{}", r.text);
    }
}

#[actix_web::test]
async fn every_account_and_legal_code_through_http_on_sqlite() {
    account_and_legal_codes(sqlite_world().await).await;
}

#[actix_web::test]
async fn every_account_and_legal_code_through_http_on_postgres() {
    let Some(db) = TestDb::postgres("control_codes_accounts").await else {
        return;
    };
    account_and_legal_codes(world_on(db.connect().await).await).await;
}

#[actix_web::test]
async fn sign_in_failures_are_throttled_with_retry_after() {
    let w = sqlite_world().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    w.state
        .control
        .invite_user("ada@example.com")
        .await
        .unwrap();
    let attempt = || {
        TestRequest::post()
            .uri("/v1/control/sign-in/password")
            .set_json(json!({"email": "ada@example.com", "password": "not the password"}))
    };
    let mut last = send(&app, attempt()).await;
    code(&last, 401, "authentication_error");
    for _ in 0..10 {
        last = send(&app, attempt()).await;
        if last.status.as_u16() == 429 {
            break;
        }
    }
    code(&last, 429, "rate_limited");
    let after: u64 = last
        .headers
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(after > 0);
}

/// A store that cannot be reached: `sandbox_registry_unavailable` for the session lookup,
/// `legal_unavailable` for legal releases.
#[actix_web::test]
async fn unreachable_stores_answer_registry_and_legal_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("corral.db").display());
    let mut tight = DatabaseConfig::new(url);
    tight.max_connections = 1;
    tight.wait_timeout = Duration::from_millis(200);
    let db = Database::connect(tight).await.unwrap();
    let w = World::with_db(
        dir,
        db.clone(),
        |_| Providers::new(),
        ServiceConfig::default(),
        None,
    )
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let b = sign_in(&app, &w, "ada@example.com").await;
    let held = db.connection().await.unwrap();
    let r = send(&app, b.get("/v1/control/me")).await;
    code(&r, 503, "sandbox_registry_unavailable");
    drop(held);
    send(&app, b.get("/v1/control/me")).await.expect_ok(200);

    // The legal tables alone gone: the session still works, legal reads do not.
    raw_sql(
        w.registry.database(),
        "ALTER TABLE legal_releases RENAME TO legal_releases_gone",
    )
    .await;
    let r = send(&app, b.get("/v1/control/legal")).await;
    code(&r, 503, "legal_unavailable");
    let r = send(&app, b.get("/v1/control/legal/terms/releases/1")).await;
    code(&r, 503, "legal_unavailable");
}

/// Runs one statement on `db`.
async fn raw_sql(db: &Database, sql: &str) {
    use diesel_async::RunQueryDsl as _;
    let mut conn = db.connection().await.unwrap();
    match &mut conn {
        corral_registry::PooledConnection::Sqlite(c) => {
            diesel::sql_query(sql).execute(&mut **c).await.unwrap()
        }
        corral_registry::PooledConnection::Postgres(c) => {
            diesel::sql_query(sql).execute(&mut **c).await.unwrap()
        }
    };
}

/// `whsec_` + base64 of the key.
fn secret() -> (String, Vec<u8>) {
    let key = b"0123456789abcdef0123456789abcdef".to_vec();
    (
        format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(&key)
        ),
        key,
    )
}

fn signed(key: &[u8], id: &str, ts: i64, body: &str) -> String {
    use hmac::{KeyInit as _, Mac as _};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(format!("{id}.{ts}.{body}").as_bytes());
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

fn event(id: &str, ts: i64, signature: &str, body: &str) -> TestRequest {
    TestRequest::post()
        .uri("/v1/webhooks/email")
        .insert_header(("webhook-id", id))
        .insert_header(("webhook-timestamp", ts.to_string()))
        .insert_header(("webhook-signature", signature))
        .insert_header(("content-type", "application/json"))
        .set_payload(body.to_owned())
}

#[actix_web::test]
async fn the_email_webhook_refuses_bad_signatures_stale_replayed_and_malformed_events() {
    let (whsec, key) = secret();
    let mut w = sqlite_world().await;
    let config = corral_control::ControlConfig {
        email_webhook_secret: Some(whsec.into()),
        ..Default::default()
    };
    w.state.control = corral_control::Control::new(
        corral_control_store::ControlStore::new(w.registry.database().clone()),
        w.registry.clone(),
        w.service.clone(),
        config,
    );
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let now = chrono::Utc::now().timestamp();
    let body = r#"{"type":"email.bounced","data":{"email":"gone@example.com"}}"#;

    let r = send(&app, event("msg_1", now, "v1,AAAA", body)).await;
    code(&r, 400, "invalid_email_webhook");
    let r = send(
        &app,
        event(
            "msg_1",
            now - 3600,
            &signed(&key, "msg_1", now - 3600, body),
            body,
        ),
    )
    .await;
    code(&r, 400, "invalid_email_webhook");
    let r = send(
        &app,
        event("msg_2", now, &signed(&key, "msg_2", now, "{"), "{"),
    )
    .await;
    code(&r, 400, "invalid_email_webhook");
    let r = send(
        &app,
        TestRequest::post()
            .uri("/v1/webhooks/email")
            .set_payload(body.to_owned()),
    )
    .await;
    code(&r, 400, "invalid_email_webhook");

    let good = event("msg_1", now, &signed(&key, "msg_1", now, body), body);
    let r = send(&app, good).await;
    assert_eq!(r.status.as_u16(), 204, "{}", r.text);
    let replay = event("msg_1", now, &signed(&key, "msg_1", now, body), body);
    code(&send(&app, replay).await, 400, "invalid_email_webhook");

    // Without a configured secret every event is refused, however it is signed.
    let w2 = sqlite_world().await;
    let app2 = test::init_service(corral::server::app(w2.state.clone())).await;
    let r = send(
        &app2,
        event("msg_9", now, &signed(&key, "msg_9", now, body), body),
    )
    .await;
    code(&r, 400, "invalid_email_webhook");
}

/// After a profile test found `exec` failing with the stored credential, a public exec with
/// that profile answers `provider_operation_unavailable` with operation, reason and
/// remediation, without calling the provider.
#[actix_web::test]
async fn a_failed_verification_makes_public_requests_answer_provider_operation_unavailable() {
    use std::sync::Arc;

    use corral_domain::Provider;
    use corral_provider::{ProviderError, SandboxProvider};

    use crate::support::Counting;

    let scripted = Arc::new(Counting::new(Provider::E2b, false));
    let s2 = scripted.clone();
    let w = World::with(
        move |_| {
            let mut m = Providers::new();
            m.insert(Provider::E2b, s2 as Arc<dyn SandboxProvider>);
            m
        },
        ServiceConfig::default(),
    )
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let owner = sign_in(&app, &w, "owner@example.com").await;
    let org = send(
        &app,
        owner.post("/v1/control/accounts", json!({"name": "Acme"})),
    )
    .await;
    let acc = org.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let prj = send(
        &app,
        owner.post(
            &format!("/v1/control/accounts/{acc}/projects"),
            json!({"name": "probe"}),
        ),
    )
    .await;
    let prj = prj.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let r = send(
        &app,
        owner.put(
            &format!("/v1/control/projects/{prj}/profiles/e2b"),
            json!({"credential": "e2b-key-without-exec"}),
        ),
    )
    .await;
    let profile = r.expect_ok(200);
    assert!(!r.text.contains("e2b-key-without-exec"), "{}", r.text);
    assert_eq!(profile["hasCredential"], true);

    // The profile test: exec is refused by the provider.
    scripted.fail_next("exec", || ProviderError::Unauthorized {
        provider: Provider::E2b,
        message: "this key may not run commands".into(),
    });
    let r = send(
        &app,
        owner.post(
            &format!("/v1/control/projects/{prj}/profiles/e2b/test"),
            json!({}),
        ),
    )
    .await;
    let tested = r.expect_ok(200).clone();
    let exec = tested["verifications"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["operation"] == "exec")
        .unwrap_or_else(|| panic!("no exec verification: {tested}"))
        .clone();
    assert_eq!(exec["ok"], false, "{tested}");
    assert_eq!(
        tested["readiness"]["ready"], false,
        "a failing operation makes the profile not ready: {tested}"
    );

    // The public API with a key of the project: create works, exec is refused up front.
    let key = send(
        &app,
        owner.post(&format!("/v1/control/projects/{prj}/keys"), json!({})),
    )
    .await;
    let key = key.expect_ok(201)["key"].as_str().unwrap().to_owned();
    let bearer = ("Authorization", format!("Bearer {key}"));
    let r = send(
        &app,
        TestRequest::post()
            .uri("/v1/sandboxes")
            .insert_header(bearer.clone())
            .set_json(json!({"provider": "e2b"})),
    )
    .await;
    let sbx = r.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let execs = scripted.count("exec");
    let r = send(
        &app,
        TestRequest::post()
            .uri(format!("/v1/sandboxes/{sbx}/exec").as_str())
            .insert_header(bearer)
            .set_json(json!({"command": "echo hi"})),
    )
    .await;
    code(&r, 403, "provider_operation_unavailable");
    let error = &r.json["error"];
    assert_eq!(error["operation"], "exec", "{}", r.text);
    assert!(
        error["reason"].as_str().is_some_and(|s| !s.is_empty()),
        "{}",
        r.text
    );
    assert!(
        error["remediation"].as_str().is_some_and(|s| !s.is_empty()),
        "{}",
        r.text
    );
    assert_eq!(scripted.count("exec"), execs, "the provider was not called");
}
