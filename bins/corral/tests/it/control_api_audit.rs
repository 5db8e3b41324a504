//! Sandbox creates and deletes made through `/v1/sandboxes` with a project's API key appear
//! in the owning account's audit log (`getAuditLog`), with the key as the actor; an
//! idempotent replay of a create is not audited again; the console's audit page names the key,
//! links the sandbox and filters by it. The E2B door's creates and kills are audited the same
//! way.

use actix_web::test::{self, TestRequest};
use serde_json::{Value, json};

use crate::control_support::sign_in;
use crate::support::{World, send};

fn with_key(req: TestRequest, key: &str) -> TestRequest {
    req.insert_header(("Authorization", format!("Bearer {key}")))
}

/// A signed-in owner's personal account with a project `name` (local profile stored) and an
/// API key of it: the owner, the account, the project, the key and its public id.
struct Owned {
    owner: crate::control_support::Browser,
    acc: String,
    prj: String,
    key: String,
    key_id: String,
}

async fn owned_project<S, B>(app: &S, w: &World, name: &str) -> Owned
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: actix_web::body::MessageBody,
{
    let owner = sign_in(app, w, "owner@example.com").await;
    let me = send(app, owner.get("/v1/control/me")).await;
    let acc = me.expect_ok(200)["personalAccountId"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = send(
        app,
        owner.post(
            &format!("/v1/control/accounts/{acc}/projects"),
            json!({"name": name}),
        ),
    )
    .await;
    let prj = r.expect_ok(201)["id"].as_str().unwrap().to_owned();
    send(
        app,
        owner.put(
            &format!("/v1/control/projects/{prj}/profiles/local"),
            json!({}),
        ),
    )
    .await
    .expect_ok(200);
    let r = send(
        app,
        owner.post(&format!("/v1/control/projects/{prj}/keys"), json!({})),
    )
    .await;
    let created_key = r.expect_ok(201).clone();
    Owned {
        owner,
        acc,
        prj,
        key: created_key["key"].as_str().unwrap().to_owned(),
        key_id: created_key["keyId"].as_str().unwrap().to_owned(),
    }
}

#[actix_web::test]
async fn api_sandbox_creates_and_deletes_are_audited_with_the_key_as_actor() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let Owned {
        owner,
        acc,
        prj,
        key,
        key_id,
    } = owned_project(&app, &w, "web").await;
    let secret = key.rsplit('_').next().unwrap().to_owned();

    let create = || {
        with_key(TestRequest::post().uri("/v1/sandboxes"), &key)
            .insert_header(("Idempotency-Key", "audit-create-1"))
            .set_json(json!({"provider": "local"}))
    };
    let r = send(&app, create()).await;
    let sbx = r.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let r = send(&app, create()).await;
    assert_eq!(
        r.expect_ok(200)["id"],
        json!(sbx),
        "the replay answers the same sandbox"
    );
    assert_eq!(r.headers.get("idempotent-replayed").unwrap(), "true");
    send(
        &app,
        with_key(
            TestRequest::delete().uri(&format!("/v1/sandboxes/{sbx}")),
            &key,
        ),
    )
    .await
    .expect_ok(200);

    let r = send(
        &app,
        owner.get(&format!("/v1/control/accounts/{acc}/audit?limit=50")),
    )
    .await;
    let log = r.expect_ok(200).clone();
    let sandbox_events: Vec<&Value> = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["target"] == json!(sbx))
        .collect();
    let actions: Vec<&str> = sandbox_events
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["sandbox.delete", "sandbox.create"],
        "newest first, one create despite the replay: {log}"
    );
    for e in &sandbox_events {
        assert_eq!(e["actorApiKey"], json!(key_id), "{e}");
        assert!(e.get("actor").is_none(), "no user acted: {e}");
        assert_eq!(e["detail"]["projectId"], json!(prj), "{e}");
        assert_eq!(e["detail"]["provider"], json!("local"), "{e}");
    }
    assert!(
        !log.to_string().contains(&secret),
        "the key's secret is never in the audit log"
    );

    // The console's audit page names the key and links the sandbox; its "who" filter keeps
    // exactly the key's entries.
    let who = format!("API key crl_{key_id}");
    let page = send(&app, owner.get(&format!("/console/accounts/{acc}/audit"))).await;
    assert_eq!(page.status.as_u16(), 200, "{}", page.text);
    assert!(page.text.contains(&who), "{}", page.text);
    assert!(
        page.text.contains(&format!(
            "href=\"/console/accounts/{acc}/projects/{prj}/sandboxes/{sbx}\""
        )),
        "the target links to the sandbox page: {}",
        page.text
    );
    let filtered = send(
        &app,
        owner.get(&format!(
            "/console/accounts/{acc}/audit?actor={}",
            who.replace(' ', "+")
        )),
    )
    .await;
    assert_eq!(filtered.status.as_u16(), 200);
    let rows = filtered.text.split("<tbody").nth(1).unwrap_or_default();
    assert_eq!(
        rows.matches("<tr ").count(),
        2,
        "only the key's two entries: {}",
        filtered.text
    );
    assert!(rows.contains("<code>sandbox.create</code>"), "{rows}");
    assert!(rows.contains("<code>sandbox.delete</code>"), "{rows}");
}

#[actix_web::test]
async fn e2b_door_creates_and_kills_are_audited_with_the_key_as_actor() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let Owned {
        owner,
        acc,
        key,
        key_id,
        ..
    } = owned_project(&app, &w, "door").await;

    let create = || {
        TestRequest::post()
            .uri("/e2b/v2/sandboxes")
            .insert_header(("X-API-KEY", key.as_str()))
            .insert_header(("Idempotency-Key", "door-create-1"))
            .set_json(json!({"templateID": "local"}))
    };
    let r = send(&app, create()).await;
    let sbx = r.expect_ok(201)["sandboxID"].as_str().unwrap().to_owned();
    // A replay answers the same sandbox and is not audited again.
    let r = send(&app, create()).await;
    assert_eq!(r.expect_ok(201)["sandboxID"], json!(sbx));
    let r = send(
        &app,
        TestRequest::delete()
            .uri(&format!("/e2b/sandboxes/{sbx}"))
            .insert_header(("X-API-KEY", key.as_str())),
    )
    .await;
    assert_eq!(r.status.as_u16(), 204, "{}", r.text);

    let r = send(
        &app,
        owner.get(&format!("/v1/control/accounts/{acc}/audit?limit=50")),
    )
    .await;
    let log = r.expect_ok(200).clone();
    let entries: Vec<&Value> = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["target"] == json!(sbx))
        .collect();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["sandbox.delete", "sandbox.create"], "{log}");
    for e in &entries {
        assert_eq!(e["actorApiKey"], json!(key_id), "{e}");
        assert_eq!(e["detail"]["provider"], json!("local"), "{e}");
    }
}
