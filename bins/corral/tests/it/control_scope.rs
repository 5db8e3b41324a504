//! Membership scoping through HTTP: for every operation that names a target, a member of
//! account A asking for account B's objects gets exactly the answer a non-existent target
//! gets ("no such …"), so nothing is learned about B. Run on SQLite and PostgreSQL.

use actix_web::test;
use corral_registry::testing::TestDb;
use corral_service::ServiceConfig;
use serde_json::{Value, json};

use crate::control_support::sign_in;
use crate::support::{Providers, World, send};

/// (method, path template, body, what is "not found"). `{acc}`, `{usr}`, `{inv}`, `{prj}`,
/// `{key}`, `{sbx}` are B's objects (or ghosts).
const TARGETED: &[(&str, &str, &str)] = &[
    (
        "PATCH",
        "/v1/control/accounts/{acc}",
        r#"{"name":"x","version":1}"#,
    ),
    ("DELETE", "/v1/control/accounts/{acc}", ""),
    ("GET", "/v1/control/accounts/{acc}/members", ""),
    (
        "PATCH",
        "/v1/control/accounts/{acc}/members/{usr}",
        r#"{"role":"admin"}"#,
    ),
    ("DELETE", "/v1/control/accounts/{acc}/members/{usr}", ""),
    (
        "POST",
        "/v1/control/accounts/{acc}/ownership-transfer",
        r#"{"userId":"{usr}"}"#,
    ),
    ("GET", "/v1/control/accounts/{acc}/invitations", ""),
    (
        "POST",
        "/v1/control/accounts/{acc}/invitations",
        r#"{"email":"z@example.com","role":"member"}"#,
    ),
    ("DELETE", "/v1/control/accounts/{acc}/invitations/{inv}", ""),
    ("GET", "/v1/control/accounts/{acc}/audit", ""),
    ("GET", "/v1/control/accounts/{acc}/projects", ""),
    (
        "POST",
        "/v1/control/accounts/{acc}/projects",
        r#"{"name":"intruder"}"#,
    ),
    (
        "PATCH",
        "/v1/control/projects/{prj}",
        r#"{"name":"renamed"}"#,
    ),
    ("DELETE", "/v1/control/projects/{prj}", ""),
    ("GET", "/v1/control/projects/{prj}/keys", ""),
    ("POST", "/v1/control/projects/{prj}/keys", ""),
    ("DELETE", "/v1/control/projects/{prj}/keys/{key}", ""),
    ("GET", "/v1/control/projects/{prj}/profiles", ""),
    ("PUT", "/v1/control/projects/{prj}/profiles/local", "{}"),
    ("DELETE", "/v1/control/projects/{prj}/profiles/local", ""),
    ("POST", "/v1/control/projects/{prj}/profiles/local/test", ""),
    ("GET", "/v1/control/projects/{prj}/sandboxes", ""),
    ("GET", "/v1/control/projects/{prj}/sandboxes/{sbx}", ""),
];

/// The ids of B's objects.
struct Targets {
    acc: String,
    usr: String,
    inv: String,
    prj: String,
    key: String,
    sbx: String,
}

impl Targets {
    fn fill(&self, template: &str) -> String {
        template
            .replace("{acc}", &self.acc)
            .replace("{usr}", &self.usr)
            .replace("{inv}", &self.inv)
            .replace("{prj}", &self.prj)
            .replace("{key}", &self.key)
            .replace("{sbx}", &self.sbx)
    }
}

async fn scoping(w: World) {
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let a = sign_in(&app, &w, "a@example.com").await;
    let b = sign_in(&app, &w, "b@example.com").await;

    // B: an organization with a member, an invitation, a project, a key, a profile and a
    // sandbox.
    let acc = send(
        &app,
        b.post("/v1/control/accounts", json!({"name": "B Corp"})),
    )
    .await;
    let acc = acc.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let inv = send(
        &app,
        b.post(
            &format!("/v1/control/accounts/{acc}/invitations"),
            json!({"email": "c@example.com", "role": "member"}),
        ),
    )
    .await;
    let inv = inv.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let prj = send(
        &app,
        b.post(
            &format!("/v1/control/accounts/{acc}/projects"),
            json!({"name": "b-project"}),
        ),
    )
    .await;
    let prj = prj.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let key = send(
        &app,
        b.post(&format!("/v1/control/projects/{prj}/keys"), json!({})),
    )
    .await;
    let key = key.expect_ok(201).clone();
    let api_key = key["key"].as_str().unwrap().to_owned();
    let key = key["keyId"].as_str().unwrap().to_owned();
    let sbx = send(
        &app,
        actix_web::test::TestRequest::post()
            .uri("/v1/sandboxes")
            .insert_header(("Authorization", format!("Bearer {api_key}")))
            .set_json(json!({"provider": "local"})),
    )
    .await;
    let sbx = sbx.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let real = Targets {
        acc,
        usr: b.user_id.clone(),
        inv,
        prj,
        key,
        sbx,
    };
    let ghost = Targets {
        acc: "acc_01jzzzzzzzzzzzzzzzzzzzzzzz".into(),
        usr: "usr_01jzzzzzzzzzzzzzzzzzzzzzzz".into(),
        inv: "inv_01jzzzzzzzzzzzzzzzzzzzzzzz".into(),
        prj: "prj_01jzzzzzzzzzzzzzzzzzzzzzzz".into(),
        key: "zzzzzzzzzzzz".into(),
        sbx: real.sbx.clone(),
    };
    // Ids that do not even parse answer the same.
    let malformed = Targets {
        acc: "acc_nope".into(),
        usr: "usr_nope".into(),
        inv: "inv_nope".into(),
        prj: "prj_nope".into(),
        key: "nope".into(),
        sbx: "nope".into(),
    };

    // A sees none of it: B's account is not in A's list …
    let listed = send(&app, a.get("/v1/control/accounts")).await;
    assert!(
        !listed.expect_ok(200).to_string().contains(&real.acc),
        "{}",
        listed.text
    );
    // … and every operation on B's objects answers as for objects that do not exist.
    for (method, template, body) in TARGETED {
        let ask = |t: &Targets| {
            let path = t.fill(template);
            let body: Option<Value> =
                (!body.is_empty()).then(|| serde_json::from_str(&t.fill(body)).unwrap());
            if *method == "GET" {
                a.get(&path)
            } else {
                a.send(method, &path, body)
            }
        };
        let on_b = send(&app, ask(&real)).await;
        let on_ghost = send(&app, ask(&ghost)).await;
        let on_malformed = send(&app, ask(&malformed)).await;
        assert_eq!(
            (
                on_malformed.status,
                on_malformed.code(),
                &on_malformed.json["error"]["message"]
            ),
            (
                on_ghost.status,
                on_ghost.code(),
                &on_ghost.json["error"]["message"]
            ),
            "{method} {template}: a malformed id and a ghost must look alike"
        );
        assert!(
            on_b.status.is_client_error(),
            "{method} {template}: {}",
            on_b.text
        );
        assert_eq!(
            (on_b.status, on_b.code(), &on_b.json["error"]["message"]),
            (
                on_ghost.status,
                on_ghost.code(),
                &on_ghost.json["error"]["message"]
            ),
            "{method} {template}: B's object and a ghost must look alike"
        );
        let message = on_b.json["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("no such "),
            "{method} {template}: {message}"
        );
    }
    // B's invitation token is no use to A either (the tokens are mailed; A has none), and
    // B's objects are intact.
    let members = send(
        &app,
        b.get(&format!("/v1/control/accounts/{}/members", real.acc)),
    )
    .await;
    assert_eq!(members.expect_ok(200)["items"].as_array().unwrap().len(), 1);
    let got = send(
        &app,
        b.get(&format!(
            "/v1/control/projects/{}/sandboxes/{}",
            real.prj, real.sbx
        )),
    )
    .await;
    assert_eq!(got.expect_ok(200)["id"], json!(real.sbx));
}

#[actix_web::test]
async fn control_members_of_one_account_see_nothing_of_another_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("corral.db").display());
    let db = corral_registry::Database::connect(corral_registry::DatabaseConfig::new(url))
        .await
        .unwrap();
    scoping(
        World::with_db(
            dir,
            db,
            |_| Providers::new(),
            ServiceConfig::default(),
            None,
        )
        .await,
    )
    .await;
}

#[actix_web::test]
async fn control_members_of_one_account_see_nothing_of_another_on_postgres() {
    let Some(db) = TestDb::postgres("control_scope").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    scoping(
        World::with_db(
            dir,
            db.connect().await,
            |_| Providers::new(),
            ServiceConfig::default(),
            None,
        )
        .await,
    )
    .await;
}
