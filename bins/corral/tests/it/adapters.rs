//! Every registered adapter, built by the server's own wiring from a TOML configuration that
//! points it at its loopback fake (the adapter's test harness), driven through HTTP with an
//! inline credential and the context headers its harness uses.

use std::time::{Duration, Instant};

use actix_web::test::{self, TestRequest};
use corral::config::{FileConfig, Overrides};
use corral::wiring::FakeVisitor;
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::{Adapter, ExposeSecret as _};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::harness::Harness;
use corral_registry::{Database, DatabaseConfig, MasterKey, Registry};
use corral_web::AppState;
use serde_json::json;

use crate::support::send;

/// The server's state for `local` plus the adapter `id` configured by `table`, and a key.
async fn world(id: &str, table: toml::Table) -> (tempfile::TempDir, AppState, String) {
    world_allowing(id, table, &[]).await
}

/// As [`world`], with `bridge_allow` as the `[bridge] allow` list.
pub(crate) async fn world_allowing(
    id: &str,
    table: toml::Table,
    bridge_allow: &[String],
) -> (tempfile::TempDir, AppState, String) {
    let mut providers = toml::Table::new();
    providers.insert(
        "enabled".into(),
        toml::Value::try_from(["local", id]).unwrap(),
    );
    providers.insert(id.into(), toml::Value::Table(table));
    let mut doc = toml::Table::new();
    doc.insert("providers".into(), toml::Value::Table(providers));
    let mut bridge = toml::Table::new();
    bridge.insert("allow".into(), toml::Value::try_from(bridge_allow).unwrap());
    doc.insert("bridge".into(), toml::Value::Table(bridge));
    state_for(doc).await
}

/// The server's state for the configuration file `doc`, and a project key.
async fn state_for(doc: toml::Table) -> (tempfile::TempDir, AppState, String) {
    let dir = tempfile::tempdir().unwrap();
    let file: FileConfig = doc.try_into().unwrap();
    let settings = corral::config::resolve(
        file,
        &Overrides {
            data_dir: Some(dir.path().to_path_buf()),
            ..Overrides::default()
        },
        &corral::wiring::compiled_in(),
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
    let service = corral::server::service(&settings, providers, registry.clone(), store);
    let control = corral::server::control(&settings, registry, service.clone()).unwrap();
    let state = AppState {
        service,
        control,
        metrics: std::sync::Arc::new(corral_web::request_metrics()),
        build: corral::server::build_info(),
        e2b: None,
    };
    (dir, state, key)
}

/// The whole public journey for the adapter behind harness `H`.
async fn journey<H: Harness>() {
    let harness = H::start().await;
    let id = H::Adapter::PROVIDER.as_str();
    let config = harness.config_at(&harness.base_url(), HttpConfig::default());
    let table = toml::Table::try_from(config).unwrap();
    let (_dir, state, key) = world(id, table).await;
    let ctx = harness.context();
    let credential = ctx.credential().unwrap().expose_secret().to_owned();
    let routing = ctx.context().clone();
    let headers: Vec<(&str, String)> = [
        ("X-Provider-Workspace", routing.workspace),
        ("X-Provider-Team-Id", routing.team_id),
        ("X-Provider-Project-Id", routing.project_id),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some((name, value?)))
    .collect();
    let body = serde_json::to_value(harness.request()).unwrap();
    let app = test::init_service(corral::server::app(state)).await;
    // The credential goes with every request; the context headers only with create and get
    // (the spec's header table): exec, files and delete run with the context recorded at
    // create time, which the fakes that need it (Vercel's teamId on every call) check.
    let bare = |r: TestRequest| {
        r.insert_header(("Authorization", format!("Bearer {key}")))
            .insert_header(("X-Provider-Credential", credential.clone()))
    };
    let req = |r: TestRequest| {
        let mut r = bare(r);
        for (name, value) in &headers {
            r = r.insert_header((*name, value.clone()));
        }
        r
    };

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
            .set_json(body.clone())),
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
    for (name, value) in headers.iter().filter(|(n, _)| *n != "X-Provider-Workspace") {
        let refused = send(&app, exec("true").insert_header((*name, value.clone()))).await;
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

struct Journey;

impl FakeVisitor for Journey {
    async fn visit<H: Harness>(&mut self) {
        journey::<H>().await;
    }
}

#[actix_web::test]
async fn by_default_the_catalog_lists_all_twelve_providers_and_local() {
    let (_dir, state, key) = state_for(toml::Table::new()).await;
    let app = test::init_service(corral::server::app(state)).await;
    let cat = send(
        &app,
        TestRequest::get()
            .uri("/v1/providers")
            .insert_header(("Authorization", format!("Bearer {key}"))),
    )
    .await;
    let mut listed: Vec<String> = cat.expect_ok(200)["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["provider"].as_str().unwrap().to_owned())
        .collect();
    listed.sort();
    let mut all: Vec<String> = corral_domain::Provider::ALL
        .iter()
        .map(|p| p.as_str().to_owned())
        .collect();
    all.sort();
    assert_eq!(listed, all);
}

#[actix_web::test]
async fn every_registered_adapter_serves_the_public_api_through_its_fake() {
    corral::wiring::visit_fakes(&mut Journey).await;
}

#[actix_web::test]
async fn a_create_answer_lost_at_morph_is_reconciled_by_operation_id_on_retry() {
    let fake = corral_provider_morph::fake::Fake::start_with_key("morph-key-2").await;
    let config = corral_provider_morph::MorphConfig {
        http: HttpConfig {
            request_timeout: Duration::from_secs(1),
            ..HttpConfig::default()
        },
        ..fake.config()
    };
    let (_dir, state, key) = world("morph", toml::Table::try_from(config).unwrap()).await;
    let app = test::init_service(corral::server::app(state)).await;
    // The instance is started, but its answer comes after the client's timeout.
    fake.server().faults().arm(
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
        .server()
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
