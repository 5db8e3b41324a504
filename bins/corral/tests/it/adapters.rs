//! Every wired adapter, built by the server's own wiring table from a TOML configuration that
//! points it at its loopback fake, driven through HTTP with an inline credential.

use std::time::{Duration, Instant};

use actix_web::test::{self, TestRequest};
use corral::config::{FileConfig, Overrides};
use corral::http::{AppState, BuildInfo};
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::ExposeSecret as _;
use corral_registry::{Database, DatabaseConfig, MasterKey, Registry};
use serde_json::{Value, json};

use crate::support::send;

/// One adapter under test: its config section, credential, context headers and create body.
struct Case {
    id: &'static str,
    section: String,
    credential: String,
    headers: Vec<(&'static str, &'static str)>,
    body: Value,
}

/// The server's state for `local` plus the adapter `id` configured by `section`, and a key.
async fn world(id: &str, section: &str) -> (tempfile::TempDir, AppState, String) {
    let dir = tempfile::tempdir().unwrap();
    let toml_text =
        format!("[providers]\nenabled = [\"local\", \"{id}\"]\n[providers.{id}]\n{section}\n");
    let file: FileConfig = toml::from_str(&toml_text).unwrap();
    let settings = corral::config::resolve(
        file,
        &Overrides {
            data_dir: Some(dir.path().to_path_buf()),
            ..Overrides::default()
        },
    )
    .unwrap();
    let providers = corral::wiring::build(&settings).unwrap();
    let db = Database::connect(DatabaseConfig::new(settings.database_url.clone()))
        .await
        .unwrap();
    let registry = Registry::new(
        db.clone(),
        MasterKey::load_or_create(&dir.path().join("master.key")).unwrap(),
    );
    let store = IdempotencyStore::new(db, IdempotencyConfig::default());
    let project = registry.create_project("p").await.unwrap();
    let key = registry
        .issue_api_key(project.id)
        .await
        .unwrap()
        .key
        .expose_secret()
        .to_owned();
    let service = corral::commands::service(&settings, providers, registry, store);
    let state = AppState {
        service,
        metrics: std::sync::Arc::new(corral::http::request_metrics()),
        build: BuildInfo::current(),
    };
    (dir, state, key)
}

async fn run(case: Case) {
    let (_dir, state, key) = world(case.id, &case.section).await;
    let app = test::init_service(corral::http::app(state)).await;
    // The credential goes with every request; the context headers only with create and get
    // (the spec's header table): exec, files and delete run with the context recorded at
    // create time, which the fakes that need it (Vercel's teamId on every call) check.
    let bare = |r: TestRequest| {
        r.insert_header(("Authorization", format!("Bearer {key}")))
            .insert_header(("X-Provider-Credential", case.credential.clone()))
    };
    let req = |r: TestRequest| {
        let mut r = bare(r);
        for h in &case.headers {
            r = r.insert_header(*h);
        }
        r
    };
    let id = case.id;

    let cat = send(&app, req(TestRequest::get().uri("/v1/providers"))).await;
    let listed: Vec<&str> = cat.expect_ok(200)["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["provider"].as_str().unwrap())
        .collect();
    assert!(listed.contains(&id), "{listed:?}");

    let created = send(
        &app,
        req(TestRequest::post()
            .uri("/v1/sandboxes")
            .set_json(case.body.clone())),
    )
    .await;
    let sid = created.expect_ok(201)["id"].as_str().unwrap().to_owned();
    assert!(sid.starts_with(&format!("sbx_{id}_")));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let seen = send(
            &app,
            req(TestRequest::get().uri(&format!("/v1/sandboxes/{sid}"))),
        )
        .await;
        if seen.expect_ok(200)["status"] == "running" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{id}: never running: {}",
            seen.text
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let exec = |cmd: &str| {
        bare(
            TestRequest::post()
                .uri(&format!("/v1/sandboxes/{sid}/exec"))
                .set_json(json!({"command": cmd})),
        )
    };
    let out = send(&app, exec("echo hi-from-$((40+2))")).await;
    assert_eq!(out.expect_ok(200)["stdout"], "hi-from-42\n", "{id}");
    // A context header that exec does not take is refused, not silently ignored.
    for (name, value) in case
        .headers
        .iter()
        .filter(|(n, _)| *n != "X-Provider-Workspace")
    {
        let refused = send(&app, exec("true").insert_header((*name, *value))).await;
        refused.expect_error(400, "invalid_request");
        assert!(
            refused.json["error"]["message"]
                .as_str()
                .unwrap()
                .contains(*name),
            "{}",
            refused.text
        );
    }
    let tmp = send(&app, exec("mktemp -d")).await;
    let path = format!(
        "{}/f.txt",
        tmp.expect_ok(200)["stdout"].as_str().unwrap().trim()
    );
    let w = send(
        &app,
        bare(
            TestRequest::post()
                .uri(&format!("/v1/sandboxes/{sid}/files/write"))
                .set_json(json!({"path": path, "content": "round trip ✓"})),
        ),
    )
    .await;
    assert_eq!(
        w.expect_ok(200)["bytesWritten"],
        "round trip ✓".len(),
        "{id}"
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
    assert_eq!(r.expect_ok(200)["content"], "round trip ✓", "{id}");
    let gone = send(
        &app,
        bare(TestRequest::delete().uri(&format!("/v1/sandboxes/{sid}"))),
    )
    .await;
    assert_eq!(gone.expect_ok(200)["status"], "deleted", "{id}");
}

#[actix_web::test]
async fn e2b_through_its_fake() {
    let fake = corral_provider_e2b::fake::E2bFake::start().await;
    run(Case {
        id: "e2b",
        section: format!(
            "base_url = \"{}\"\nenvd_url_template = \"{}\"",
            fake.control.base_url(),
            fake.envd.base_url()
        ),
        credential: corral_provider_e2b::fake::API_KEY.into(),
        headers: vec![],
        body: json!({"provider": "e2b", "timeout": 300}),
    })
    .await;
}

#[actix_web::test]
async fn daytona_through_its_fake() {
    let fake = corral_provider_daytona::fake::DaytonaFake::start().await;
    run(Case {
        id: "daytona",
        section: format!("base_url = \"{}\"", fake.control.base_url()),
        credential: corral_provider_daytona::fake::API_KEY.into(),
        headers: vec![],
        body: json!({"provider": "daytona"}),
    })
    .await;
}

#[actix_web::test]
async fn vercel_through_its_fake_with_team_and_project_headers() {
    let fake = corral_provider_vercel::fake::start().await;
    run(Case {
        id: "vercel",
        section: format!("base_url = \"{}\"", fake.base_url()),
        credential: corral_provider_vercel::fake::FAKE_TOKEN.into(),
        headers: vec![
            (
                "X-Provider-Team-Id",
                corral_provider_vercel::fake::FAKE_TEAM_ID,
            ),
            (
                "X-Provider-Project-Id",
                corral_provider_vercel::fake::FAKE_PROJECT_ID,
            ),
        ],
        body: json!({"provider": "vercel"}),
    })
    .await;
}

#[actix_web::test]
async fn runloop_through_its_fake() {
    let fake = corral_provider_runloop::fake::start().await;
    run(Case {
        id: "runloop",
        section: format!("base_url = \"{}\"", fake.base_url()),
        credential: corral_provider_runloop::fake::FAKE_API_KEY.into(),
        headers: vec![],
        body: json!({"provider": "runloop"}),
    })
    .await;
}

#[actix_web::test]
async fn together_through_its_fake() {
    let fake = corral_provider_together::fake::start("tg-key-1", &["corral-base"]).await;
    run(Case {
        id: "together",
        section: format!(
            "base_url = \"{}\"",
            corral_provider_together::fake::base_url(&fake)
        ),
        credential: "tg-key-1".into(),
        headers: vec![],
        body: json!({"provider": "together", "image": "corral-base"}),
    })
    .await;
}

#[actix_web::test]
async fn morph_through_its_fake() {
    let fake = corral_provider_morph::fake::start("morph-key-1").await;
    run(Case {
        id: "morph",
        section: format!("base_url = \"{}/api\"", fake.base_url()),
        credential: "morph-key-1".into(),
        headers: vec![],
        body: json!({"provider": "morph", "image": "snapshot_1"}),
    })
    .await;
}

#[actix_web::test]
async fn a_create_answer_lost_at_morph_is_reconciled_by_operation_id_on_retry() {
    let fake = corral_provider_morph::fake::start("morph-key-2").await;
    let section = format!(
        "base_url = \"{}/api\"\nrequest_timeout_seconds = 1",
        fake.base_url()
    );
    let (_dir, state, key) = world("morph", &section).await;
    let app = test::init_service(corral::http::app(state)).await;
    // The instance is started, but its answer comes after the client's timeout.
    fake.faults().arm(
        corral_provider_testkit::fake::Fault::new(
            corral_provider_testkit::fake::FaultKind::DelayAfterHandler(Duration::from_secs(3)),
        )
        .on_path("/api/instance"),
    );
    let create = || {
        TestRequest::post()
            .uri("/v1/sandboxes")
            .insert_header(("Authorization", format!("Bearer {key}")))
            .insert_header(("X-Provider-Credential", "morph-key-2"))
            .insert_header(("Idempotency-Key", "lost-1"))
            .set_json(json!({"provider": "morph", "image": "snapshot_1"}))
    };
    let lost = send(&app, create()).await;
    lost.expect_error(502, "sandbox_create_outcome_unknown");
    let op = lost.json["error"]["operationId"].clone();
    let adopted = send(&app, create()).await;
    let body = adopted.expect_ok(201);
    assert_eq!(body["metadata"]["operationId"], op);
    assert!(body["metadata"]["nativeProviderId"].is_string());
    let starts = fake
        .log()
        .all()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/api/instance")
        .count();
    assert_eq!(starts, 1, "reconciled by listing, never started twice");
    let replay = send(&app, create()).await;
    replay.expect_ok(200);
    assert_eq!(replay.text, adopted.text);
}
