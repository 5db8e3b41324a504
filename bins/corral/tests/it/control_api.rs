//! The control plane's surface: the 41 operations in the document, the separation of cookies
//! and API keys, and the session, CSRF and origin checks.

use actix_web::test::{self, TestRequest};
use serde_json::{Value, json};

use crate::control_support::{ORIGIN, set_session_cookie, sign_in};
use crate::support::{World, get, send};

/// The sign-in operations, the only control-plane operations without a session.
const ANONYMOUS: [&str; 3] = ["requestSignInLink", "signInWithToken", "signInWithPassword"];

#[test]
fn the_document_has_36_control_plane_operations_all_behind_the_session_cookie() {
    let doc: Value = serde_json::from_str(&corral_web::openapi::document_json(&[])).unwrap();
    let scheme = &doc["components"]["securitySchemes"]["session"];
    assert_eq!(
        (&scheme["type"], &scheme["in"], &scheme["name"]),
        (&json!("apiKey"), &json!("cookie"), &json!("corral_session"))
    );
    let mut control = Vec::new();
    let mut webhooks = Vec::new();
    let mut with_csrf = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let tags = op["tags"].as_array().unwrap();
            let id = op["operationId"].as_str().unwrap().to_owned();
            if tags.contains(&json!("control-plane")) {
                assert!(path.starts_with("/v1/control/"), "{method} {path}");
                let expected = if ANONYMOUS.contains(&id.as_str()) {
                    json!([{}])
                } else {
                    json!([{"session": []}])
                };
                assert_eq!(op["security"], expected, "{id}: never the project key");
                // A state-changing operation with a session documents its CSRF header.
                let csrf = op["parameters"].as_array().is_some_and(|ps| {
                    ps.iter().any(|p| {
                        p["in"] == "header" && p["name"] == "X-CSRF-Token" && p["required"] == true
                    })
                });
                let needs_csrf = method != "get" && !ANONYMOUS.contains(&id.as_str());
                assert_eq!(csrf, needs_csrf, "{id}: X-CSRF-Token documented iff needed");
                if needs_csrf {
                    with_csrf += 1;
                }
                // Every operation documents the common failures with the envelope.
                for status in ["400", "401", "429", "500", "503"] {
                    assert!(op["responses"][status].is_object(), "{id} lacks {status}");
                }
                control.push(id);
            } else if tags.contains(&json!("webhooks")) {
                assert_eq!(op["security"], json!([{}]));
                webhooks.push(format!("{method} {path}"));
            } else {
                assert!(!path.starts_with("/v1/control"), "{path} is untagged");
                assert!(op.get("security").is_none(), "{id} keeps the project key");
            }
        }
    }
    control.sort();
    control.dedup();
    assert_eq!(control.len(), 41, "{control:?}");
    assert_eq!(
        with_csrf, 24,
        "the state-changing operations behind a session"
    );
    assert_eq!(webhooks, ["post /v1/webhooks/email"]);
    assert_eq!(doc["security"], json!([{"projectKey": []}]));
}

#[actix_web::test]
async fn cookies_never_open_the_sandbox_api_and_api_keys_never_open_the_control_plane() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let b = sign_in(&app, &w, "ada@example.com").await;
    // The session is good for the control plane …
    send(&app, b.get("/v1/control/me")).await.expect_ok(200);
    // … and nothing for the sandbox API.
    for path in ["/v1/sandboxes", "/v1/providers"] {
        send(&app, b.get(path))
            .await
            .expect_error(401, "missing_api_key");
    }
    send(&app, b.post("/v1/sandboxes", json!({"provider": "local"})))
        .await
        .expect_error(401, "missing_api_key");
    // A valid API key is nothing to the control plane.
    send(&app, get(&w, "/v1/sandboxes")).await.expect_ok(200);
    send(&app, get(&w, "/v1/control/me"))
        .await
        .expect_error(401, "authentication_error");
    send(&app, get(&w, "/v1/control/accounts"))
        .await
        .expect_error(401, "authentication_error");
}

#[actix_web::test]
async fn missing_sessions_bad_csrf_tokens_and_foreign_origins_are_authentication_errors() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let b = sign_in(&app, &w, "ada@example.com").await;
    let body = json!({"name": "Acme"});
    let cookie = format!("corral_session={}", b.cookie);

    // No cookie, an unknown cookie.
    send(&app, TestRequest::get().uri("/v1/control/me"))
        .await
        .expect_error(401, "authentication_error");
    send(
        &app,
        TestRequest::get()
            .uri("/v1/control/me")
            .insert_header(("Cookie", "corral_session=not-a-session")),
    )
    .await
    .expect_error(401, "authentication_error");

    // Without a session, a body is not even looked at: no rule of it is learned.
    for bad in [json!({"bogus": 1}), json!({"name": "x", "version": 1.5})] {
        let r = send(
            &app,
            TestRequest::patch()
                .uri("/v1/control/accounts/acc_nope")
                .set_json(bad),
        )
        .await;
        r.expect_error(401, "authentication_error");
    }

    // A state-changing request without the CSRF header, or with another session's token.
    let no_csrf = TestRequest::post()
        .uri("/v1/control/accounts")
        .insert_header(("Cookie", cookie.clone()))
        .set_json(body.clone());
    let r = send(&app, no_csrf).await;
    r.expect_error(401, "authentication_error");
    assert!(r.text.contains("X-CSRF-Token"), "{}", r.text);
    let other = sign_in(&app, &w, "bob@example.com").await;
    let wrong_csrf = TestRequest::post()
        .uri("/v1/control/accounts")
        .insert_header(("Cookie", cookie.clone()))
        .insert_header(("X-CSRF-Token", other.csrf.clone()))
        .set_json(body.clone());
    send(&app, wrong_csrf)
        .await
        .expect_error(401, "authentication_error");

    // The right token from a foreign origin (or referer), and a foreign origin on sign-in.
    for (header, value) in [
        ("Origin", "https://evil.example.com"),
        ("Origin", "null"),
        ("Referer", "http://127.0.0.1:8081/console"),
    ] {
        let req = TestRequest::post()
            .uri("/v1/control/accounts")
            .insert_header(("Cookie", cookie.clone()))
            .insert_header(("X-CSRF-Token", b.csrf.clone()))
            .insert_header((header, value))
            .set_json(body.clone());
        send(&app, req)
            .await
            .expect_error(401, "authentication_error");
    }
    send(
        &app,
        TestRequest::post()
            .uri("/v1/control/sign-in/password")
            .insert_header(("Origin", "https://evil.example.com"))
            .set_json(json!({"email": "ada@example.com", "password": "correct horse battery"})),
    )
    .await
    .expect_error(401, "authentication_error");

    // The same request from the console's origin, or from no browser at all, passes.
    let ok = TestRequest::post()
        .uri("/v1/control/accounts")
        .insert_header(("Cookie", cookie.clone()))
        .insert_header(("X-CSRF-Token", b.csrf.clone()))
        .insert_header(("Referer", format!("{ORIGIN}/console/accounts")))
        .set_json(body);
    send(&app, ok).await.expect_ok(201);

    // Reads need no CSRF token.
    send(
        &app,
        TestRequest::get()
            .uri("/v1/control/accounts")
            .insert_header(("Cookie", cookie.clone())),
    )
    .await
    .expect_ok(200);
}

#[actix_web::test]
async fn sign_in_sets_a_strict_cookie_and_sign_out_clears_and_revokes_it() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let link = w
        .state
        .control
        .invite_user("ada@example.com")
        .await
        .unwrap();
    let token = crate::control_support::link_token(&link);
    let r = send(
        &app,
        TestRequest::post()
            .uri("/v1/control/sign-in/token")
            .set_json(json!({"token": token})),
    )
    .await;
    let body = r.expect_ok(200);
    let set = set_session_cookie(&r).unwrap();
    let value = set
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("corral_session=");
    assert!(value.len() >= 43, "a 256-bit token: {set}");
    assert!(
        set.ends_with("; HttpOnly; SameSite=Lax; Path=/; Max-Age=604800"),
        "http public URL: no Secure; {set}"
    );
    assert!(!r.text.contains(value), "the token is only in the cookie");
    assert!(body["csrfToken"].as_str().unwrap().len() >= 43);
    // The link is single use.
    send(
        &app,
        TestRequest::post()
            .uri("/v1/control/sign-in/token")
            .set_json(json!({"token": token})),
    )
    .await
    .expect_error(401, "authentication_error");

    let b = sign_in(&app, &w, "ada@example.com").await;
    let me = send(&app, b.get("/v1/control/me")).await;
    assert_eq!(me.expect_ok(200)["csrfToken"], json!(b.csrf));
    assert_eq!(me.json["email"], "ada@example.com");
    let r = send(&app, b.post("/v1/control/sign-out", json!({}))).await;
    assert_eq!(r.status.as_u16(), 204, "{}", r.text);
    let cleared = set_session_cookie(&r).unwrap();
    assert!(cleared.starts_with("corral_session=;") && cleared.contains("Max-Age=0"));
    send(&app, b.get("/v1/control/me"))
        .await
        .expect_error(401, "authentication_error");
}

#[actix_web::test]
async fn an_https_public_url_makes_the_cookie_secure() {
    let mut w = World::new().await;
    let config = corral_control::ControlConfig {
        public_url: "https://corral.example.com".into(),
        ..Default::default()
    };
    w.state.control = corral_control::Control::new(
        corral_control_store::ControlStore::new(w.registry.database().clone()),
        w.registry.clone(),
        w.service.clone(),
        config,
    );
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let link = w
        .state
        .control
        .invite_user("ada@example.com")
        .await
        .unwrap();
    let r = send(
        &app,
        TestRequest::post()
            .uri("/v1/control/sign-in/token")
            .insert_header(("Origin", "https://corral.example.com"))
            .set_json(json!({"token": crate::control_support::link_token(&link)})),
    )
    .await;
    r.expect_ok(200);
    assert!(set_session_cookie(&r).unwrap().ends_with("; Secure"));
}

/// Issue #26: keys made over the control plane carry a name and an expiry; an expired key is
/// refused by the sandbox API like an unknown one; the list shows names, expiry and last use,
/// newest first.
#[actix_web::test]
async fn keys_have_names_expiries_and_last_uses_and_an_expired_key_is_refused() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let b = sign_in(&app, &w, "ada@example.com").await;
    let r = send(&app, b.get("/v1/control/accounts")).await;
    let acc = r.expect_ok(200)["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = send(
        &app,
        b.post(
            &format!("/v1/control/accounts/{acc}/projects"),
            json!({"name": "named-keys"}),
        ),
    )
    .await;
    let prj = r.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let keys = format!("/v1/control/projects/{prj}/keys");

    // No body at all, as before: an unnamed key that never expires.
    let r = send(&app, b.send("POST", &keys, None)).await;
    let plain = r.expect_ok(201).clone();
    assert!(plain.get("name").is_none() && plain.get("expiresAt").is_none());
    assert_eq!(plain["expired"], false);
    // `null` (which the document allows) is no body too.
    let r = send(&app, b.post(&keys, Value::Null)).await;
    assert!(r.expect_ok(201).get("name").is_none());

    // A name (trimmed) and an expiry.
    let expires = (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339();
    let r = send(
        &app,
        b.post(&keys, json!({"name": "  ci bot ", "expiresAt": expires})),
    )
    .await;
    let named = r.expect_ok(201).clone();
    assert_eq!(named["name"], "ci bot");
    assert!(named["expiresAt"].is_string());
    let named_key = named["key"].as_str().unwrap().to_owned();

    // Refusals are invalid_request with a message saying what is wrong; nothing is issued.
    for (body, says) in [
        (
            json!({"expiresAt": "2000-01-01T00:00:00Z"}),
            "in the future",
        ),
        (json!({"expiresAt": "3000-01-01T00:00:00Z"}), "days ahead"),
        (json!({"expiresAt": "soon"}), "RFC 3339"),
        (json!({"name": "a\u{1b}b"}), "control characters"),
        (json!({"name": "x".repeat(65)}), "at most 64"),
        (json!({"bogus": 1}), "unknown field"),
    ] {
        let r = send(&app, b.post(&keys, body.clone())).await;
        r.expect_error(400, "invalid_request");
        assert!(r.text.contains(says), "{body}: {}", r.text);
    }

    // The named key opens the sandbox API, and its last use shows in the list.
    let bearer = |k: &str| {
        TestRequest::get()
            .uri("/v1/sandboxes")
            .insert_header(("Authorization", format!("Bearer {k}")))
    };
    send(&app, bearer(&named_key)).await.expect_ok(200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let listed = loop {
        let r = send(&app, b.get(&keys)).await;
        let listed = r.expect_ok(200)["items"].as_array().unwrap().clone();
        if listed[0].get("lastUsedAt").is_some() || std::time::Instant::now() > deadline {
            break listed;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    // Newest first.
    let ids: Vec<&str> = listed
        .iter()
        .map(|k| k["keyId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], named["keyId"].as_str().unwrap());
    assert_eq!(ids[2], plain["keyId"].as_str().unwrap());
    assert_eq!(listed[0]["name"], "ci bot");
    assert!(listed[0]["lastUsedAt"].is_string(), "{listed:?}");
    assert!(listed[2].get("lastUsedAt").is_none());

    // A key whose expiry has passed (only the registry can make one) is refused exactly like
    // an unknown key, and listed as expired.
    let expired = w
        .registry
        .issue_api_key_with(
            prj.parse().unwrap(),
            corral_registry::ApiKeyOptions {
                name: Some("old".to_owned()),
                expires_at: Some(chrono::Utc::now() - chrono::Duration::seconds(1)),
            },
        )
        .await
        .unwrap();
    let refused = send(
        &app,
        bearer(corral_provider::ExposeSecret::expose_secret(&expired.key)),
    )
    .await;
    refused.expect_error(401, "authentication_error");
    let unknown = send(&app, bearer("crl_nope_nope")).await;
    unknown.expect_error(401, "authentication_error");
    assert_eq!(
        refused.json["error"]["message"], unknown.json["error"]["message"],
        "the same answer as an unknown key"
    );
    let r = send(&app, b.get(&keys)).await;
    let listed = r.expect_ok(200)["items"].as_array().unwrap().clone();
    assert_eq!(listed[0]["name"], "old");
    assert_eq!(listed[0]["expired"], true);
    assert_eq!(listed[1]["expired"], false);
}
