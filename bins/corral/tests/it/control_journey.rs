//! Every one of the 41 operations answering its success, through HTTP, in the order a new
//! organization would use them.

use std::collections::BTreeSet;

use actix_web::test::{self, TestRequest};
use serde_json::{Value, json};

use crate::control_support::{Browser, ORIGIN, set_session_cookie, sign_in, with_outbox};
use crate::support::{World, send};

/// Records which operations answered a success.
#[derive(Default)]
struct Seen(BTreeSet<&'static str>);

impl Seen {
    #[track_caller]
    fn ok(&mut self, op: &'static str, r: &crate::support::Resp, status: u16) -> Value {
        assert_eq!(r.status.as_u16(), status, "{op}: {}", r.text);
        self.0.insert(op);
        r.json.clone()
    }
}

fn items(v: &Value) -> &Vec<Value> {
    v["items"]
        .as_array()
        .expect("a list answers {\"items\": [...]}")
}

#[actix_web::test]
async fn control_journey_answers_every_operation() {
    // Webhook endpoints on loopback are allowed here (operations 37–41).
    let mut w = World::with(
        |_| Default::default(),
        corral_service::ServiceConfig {
            webhooks: corral_service::webhooks::WebhooksConfig {
                allow: vec!["127.0.0.1".into()],
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await;
    let outbox = with_outbox(&mut w);
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let mut seen = Seen::default();
    let terms = w
        .state
        .control
        .publish_legal("terms", "Terms of service", "Be nice.")
        .await
        .unwrap();

    // 1: a sign-in link is requested (for an unknown address too: the same answer).
    for email in ["owner@example.com", "nobody@example.com"] {
        let r = send(
            &app,
            TestRequest::post()
                .uri("/v1/control/sign-in/email")
                .set_json(json!({"email": email})),
        )
        .await;
        assert_eq!(
            seen.ok("requestSignInLink", &r, 202),
            json!({"accepted": true})
        );
    }
    // 2: sign in with a link's token.
    let owner: Browser = sign_in(&app, &w, "owner@example.com").await;
    seen.0.insert("signInWithToken");
    // 7 then 3: set a password and sign in with it.
    let r = send(
        &app,
        owner.put(
            "/v1/control/me/password",
            json!({"password": "a long enough passphrase"}),
        ),
    )
    .await;
    seen.ok("setPassword", &r, 204);
    let r = send(
        &app,
        TestRequest::post()
            .uri("/v1/control/sign-in/password")
            .insert_header(("Origin", ORIGIN))
            .set_json(
                json!({"email": "owner@example.com", "password": "a long enough passphrase"}),
            ),
    )
    .await;
    let body = seen.ok("signInWithPassword", &r, 200);
    assert_eq!(body["userId"], json!(owner.user_id));
    assert!(set_session_cookie(&r).is_some());
    // 6: me.
    let r = send(&app, owner.get("/v1/control/me")).await;
    let me = seen.ok("getMe", &r, 200);
    assert_eq!(me["hasPassword"], true);
    assert_eq!(me["accounts"].as_array().unwrap().len(), 1, "{me}");

    // 8, 9, 10: legal.
    let r = send(&app, owner.get("/v1/control/legal")).await;
    let status = seen.ok("getLegalStatus", &r, 200);
    assert_eq!(status["items"][0]["accepted"], false);
    let r = send(
        &app,
        owner.get(&format!("/v1/control/legal/terms/releases/{terms}")),
    )
    .await;
    assert_eq!(
        seen.ok("getLegalRelease", &r, 200)["title"],
        "Terms of service"
    );
    let r = send(
        &app,
        owner.post(
            "/v1/control/legal/acceptances",
            json!({"document": "terms", "release": terms}),
        ),
    )
    .await;
    seen.ok("acceptLegalRelease", &r, 204);

    // 11, 12, 13: accounts.
    let r = send(
        &app,
        owner.post("/v1/control/accounts", json!({"name": "Acme"})),
    )
    .await;
    let org = seen.ok("createAccount", &r, 201);
    let acc = org["id"].as_str().unwrap().to_owned();
    assert_eq!(org["role"], "owner");
    let r = send(
        &app,
        owner.patch(
            &format!("/v1/control/accounts/{acc}"),
            json!({"name": "Acme Inc", "version": org["version"]}),
        ),
    )
    .await;
    assert_eq!(seen.ok("updateAccount", &r, 200)["name"], "Acme Inc");
    let r = send(&app, owner.get("/v1/control/accounts")).await;
    assert_eq!(items(&seen.ok("listAccounts", &r, 200)).len(), 2);

    // 19–22: invitations; a second user joins.
    let r = send(
        &app,
        owner.post(
            &format!("/v1/control/accounts/{acc}/invitations"),
            json!({"email": "later@example.com", "role": "member"}),
        ),
    )
    .await;
    let later = seen.ok("createInvitation", &r, 201);
    let r = send(
        &app,
        owner.delete(&format!(
            "/v1/control/accounts/{acc}/invitations/{}",
            later["id"].as_str().unwrap()
        )),
    )
    .await;
    seen.ok("revokeInvitation", &r, 204);
    // The token is only mailed, never in an answer.
    let r = send(
        &app,
        owner.post(
            &format!("/v1/control/accounts/{acc}/invitations"),
            json!({"email": "admin@example.com", "role": "member"}),
        ),
    )
    .await;
    let invite_token = outbox.last_token("admin@example.com");
    assert!(!r.text.contains(&invite_token), "{}", r.text);
    let r = send(
        &app,
        owner.get(&format!("/v1/control/accounts/{acc}/invitations")),
    )
    .await;
    assert_eq!(items(&seen.ok("listInvitations", &r, 200)).len(), 1);
    let admin = sign_in(&app, &w, "admin@example.com").await;
    accept_all(&app, &admin).await;
    let r = send(
        &app,
        admin.post(
            "/v1/control/invitations/accept",
            json!({"token": invite_token}),
        ),
    )
    .await;
    assert_eq!(seen.ok("acceptInvitation", &r, 200)["id"], json!(acc));

    // 15–18: members.
    let r = send(
        &app,
        owner.get(&format!("/v1/control/accounts/{acc}/members")),
    )
    .await;
    assert_eq!(items(&seen.ok("listMembers", &r, 200)).len(), 2);
    let r = send(
        &app,
        owner.patch(
            &format!("/v1/control/accounts/{acc}/members/{}", admin.user_id),
            json!({"role": "admin"}),
        ),
    )
    .await;
    seen.ok("updateMember", &r, 204);
    let r = send(
        &app,
        owner.post(
            &format!("/v1/control/accounts/{acc}/ownership-transfer"),
            json!({"userId": admin.user_id}),
        ),
    )
    .await;
    seen.ok("transferOwnership", &r, 204);
    // The former owner (now admin) leaves; the new owner stays.
    let r = send(
        &app,
        owner.delete(&format!(
            "/v1/control/accounts/{acc}/members/{}",
            owner.user_id
        )),
    )
    .await;
    seen.ok("removeMember", &r, 204);
    let owner = admin;

    // 23: the audit log shows what happened.
    let r = send(
        &app,
        owner.get(&format!("/v1/control/accounts/{acc}/audit?limit=50")),
    )
    .await;
    assert!(!items(&seen.ok("getAuditLog", &r, 200)).is_empty());

    // 24–27: projects.
    let r = send(
        &app,
        owner.post(
            &format!("/v1/control/accounts/{acc}/projects"),
            json!({"name": "web"}),
        ),
    )
    .await;
    let prj = seen.ok("createProject", &r, 201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = send(
        &app,
        owner.patch(
            &format!("/v1/control/projects/{prj}"),
            json!({"name": "website"}),
        ),
    )
    .await;
    assert_eq!(seen.ok("updateProject", &r, 200)["name"], "website");
    let r = send(
        &app,
        owner.get(&format!("/v1/control/accounts/{acc}/projects")),
    )
    .await;
    assert_eq!(items(&seen.ok("listProjects", &r, 200)).len(), 1);

    // 28–30: keys; the new key opens the sandbox API.
    let r = send(
        &app,
        owner.post(&format!("/v1/control/projects/{prj}/keys"), json!({})),
    )
    .await;
    assert_eq!(
        r.headers.get("cache-control").unwrap(),
        "no-store",
        "a new key is never cached"
    );
    let key = seen.ok("createKey", &r, 201);
    let api_key = key["key"].as_str().unwrap().to_owned();
    let r = send(&app, owner.get(&format!("/v1/control/projects/{prj}/keys"))).await;
    let listed = seen.ok("listKeys", &r, 200);
    assert!(
        !listed.to_string().contains(&api_key),
        "a listing never shows the key"
    );
    assert!(
        items(&listed)[0].get("lastUsedAt").is_none(),
        "an unused key has no last use: {listed}"
    );

    // 31–34: a profile for `local` (no credential needed), tested.
    let r = send(
        &app,
        owner.put(
            &format!("/v1/control/projects/{prj}/profiles/local"),
            json!({}),
        ),
    )
    .await;
    assert_eq!(seen.ok("putProfile", &r, 200)["provider"], "local");
    let r = send(
        &app,
        owner.get(&format!("/v1/control/projects/{prj}/profiles")),
    )
    .await;
    assert_eq!(items(&seen.ok("listProfiles", &r, 200)).len(), 1);
    let r = send(
        &app,
        owner.post(
            &format!("/v1/control/projects/{prj}/profiles/local/test"),
            json!({}),
        ),
    )
    .await;
    let tested = seen.ok("testProfile", &r, 200);
    assert!(
        !tested["verifications"].as_array().unwrap().is_empty(),
        "{tested}"
    );

    // 35, 36: a sandbox made with the key, seen read-only from the control plane.
    let r = send(
        &app,
        TestRequest::post()
            .uri("/v1/sandboxes")
            .insert_header(("Authorization", format!("Bearer {api_key}")))
            .set_json(json!({"provider": "local"})),
    )
    .await;
    let sbx = r.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let r = send(
        &app,
        owner.get(&format!("/v1/control/projects/{prj}/sandboxes")),
    )
    .await;
    assert_eq!(
        items(&seen.ok("listProjectSandboxes", &r, 200))[0]["id"],
        json!(sbx)
    );
    let r = send(
        &app,
        owner.get(&format!("/v1/control/projects/{prj}/sandboxes/{sbx}")),
    )
    .await;
    assert_eq!(seen.ok("getProjectSandbox", &r, 200)["id"], json!(sbx));
    // The key's use shows in the listing (recorded in the background, to within a minute).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let r = send(&app, owner.get(&format!("/v1/control/projects/{prj}/keys"))).await;
        let listed = r.expect_ok(200);
        if items(listed)[0]["lastUsedAt"].is_string() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the key's use was never recorded: {listed}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // 37–41: the project's webhook endpoints: added (the secret once), listed without it,
    // rotated, their deliveries read (the sandbox above made none: the endpoint is newer),
    // removed.
    let r = send(
        &app,
        owner.post(
            &format!("/v1/control/projects/{prj}/webhooks"),
            json!({"url": "http://127.0.0.1:9/hook", "types": ["sandbox.deleted"]}),
        ),
    )
    .await;
    let hook = seen.ok("createProjectWebhook", &r, 201);
    assert_eq!(r.headers.get("cache-control").unwrap(), "no-store");
    let hook_id = hook["id"].as_str().unwrap().to_owned();
    let secret = hook["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{hook}");
    let r = send(
        &app,
        owner.get(&format!("/v1/control/projects/{prj}/webhooks")),
    )
    .await;
    assert_eq!(
        items(&seen.ok("listProjectWebhooks", &r, 200))[0]["id"],
        json!(hook_id)
    );
    assert!(!r.text.contains(&secret), "a listing shows the secret");
    let r = send(
        &app,
        owner.post(
            &format!("/v1/control/projects/{prj}/webhooks/{hook_id}/rotate"),
            json!({}),
        ),
    )
    .await;
    assert_ne!(
        seen.ok("rotateProjectWebhook", &r, 200)["secret"],
        json!(secret)
    );
    let r = send(
        &app,
        owner.get(&format!(
            "/v1/control/projects/{prj}/webhooks/{hook_id}/deliveries"
        )),
    )
    .await;
    assert_eq!(
        items(&seen.ok("listProjectWebhookDeliveries", &r, 200)).len(),
        0
    );
    let r = send(
        &app,
        owner.delete(&format!("/v1/control/projects/{prj}/webhooks/{hook_id}")),
    )
    .await;
    assert_eq!(
        seen.ok("deleteProjectWebhook", &r, 200)["id"],
        json!(hook_id)
    );

    // 30, 33, 27, 14: revoke, remove, delete.
    let r = send(
        &app,
        owner.delete(&format!(
            "/v1/control/projects/{prj}/keys/{}",
            key["keyId"].as_str().unwrap()
        )),
    )
    .await;
    assert!(seen.ok("revokeKey", &r, 200)["revokedAt"].is_string());
    let r = send(
        &app,
        owner.delete(&format!("/v1/control/projects/{prj}/profiles/local")),
    )
    .await;
    seen.ok("deleteProfile", &r, 204);
    let r = send(&app, owner.delete(&format!("/v1/control/projects/{prj}"))).await;
    assert!(seen.ok("deleteProject", &r, 202)["deletingAt"].is_string());
    let r = send(&app, owner.delete(&format!("/v1/control/accounts/{acc}"))).await;
    assert!(seen.ok("deleteAccount", &r, 202)["deletingAt"].is_string());

    // 4, 5: sign out here, then everywhere.
    let other = sign_in(&app, &w, "owner@example.com").await;
    let r = send(&app, owner.post("/v1/control/sign-out", json!({}))).await;
    seen.ok("signOut", &r, 204);
    let again = sign_in(&app, &w, "owner@example.com").await;
    let r = send(&app, again.delete("/v1/control/sessions")).await;
    seen.ok("signOutEverywhere", &r, 204);
    send(&app, other.get("/v1/control/me"))
        .await
        .expect_error(401, "authentication_error");

    assert_eq!(seen.0.len(), 41, "{:?}", seen.0);
}

/// Accepts the current release of every published document.
async fn accept_all<S, B>(app: &S, b: &Browser)
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: actix_web::body::MessageBody,
{
    let status = send(app, b.get("/v1/control/legal")).await;
    for doc in items(status.expect_ok(200)).clone() {
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
