//! Every endpoint's happy path, in process, on the `local` provider.

use actix_web::test::{self, TestRequest};
use base64::Engine as _;
use corral_domain::{
    CommandResult, ProviderCatalog, ReadFileResult, Sandbox, SandboxPage, SandboxStatus,
    WriteFileResult,
};
use serde_json::json;

use crate::support::{World, delete, get, post, send};

fn sandbox(v: &serde_json::Value) -> Sandbox {
    serde_json::from_value(v.clone()).expect("a Sandbox")
}

#[actix_web::test]
async fn create_get_exec_files_list_delete_round_trip_on_local() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;

    let created = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await;
    let sb = sandbox(created.expect_ok(201));
    assert_eq!(sb.provider.as_str(), "local");
    // The spec's state table: an accepted create answers `creating`, without an observation
    // time; the provider's own status is recorded and shown by get and list.
    assert_eq!(sb.status, SandboxStatus::Creating, "{}", created.text);
    assert!(
        !created.text.contains("statusObservedAt"),
        "{}",
        created.text
    );
    assert!(sb.metadata.native_provider_id.is_some());
    let id = sb.id.to_string();
    assert!(id.starts_with("sbx_local_"));
    // List, which never calls the provider, already shows what the provider reported to the
    // create, with its freshness.
    let listed = send(&app, get(&w, "/v1/sandboxes")).await;
    let listed: SandboxPage = serde_json::from_value(listed.expect_ok(200).clone()).unwrap();
    assert_eq!(listed.items[0].status, SandboxStatus::Running);
    assert!(listed.items[0].status_observed_at >= listed.items[0].created_at);

    let got = sandbox(
        send(&app, get(&w, &format!("/v1/sandboxes/{id}")))
            .await
            .expect_ok(200),
    );
    assert_eq!(got.status, SandboxStatus::Running);
    assert!(got.status_observed_at.is_some());

    let ran = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/exec"),
            json!({"command": "echo out; echo err >&2; cd /tmp && pwd; echo $GREETING; exit 7", "env": {"GREETING": "hi"}}),
        ),
    )
    .await;
    let ran: CommandResult = serde_json::from_value(ran.expect_ok(200).clone()).unwrap();
    assert_eq!(ran.stdout, "out\n/tmp\nhi\n");
    assert_eq!(ran.stderr, "err\n");
    assert_eq!(ran.exit_code, 7);
    assert!(!ran.truncated);

    // The filesystem persists across commands.
    let ran = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/exec"),
            json!({"command": "echo kept > /workspace/k"}),
        ),
    )
    .await;
    ran.expect_ok(200);
    let read = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/files/read"),
            json!({"path": "/workspace/k"}),
        ),
    )
    .await;
    let read: ReadFileResult = serde_json::from_value(read.expect_ok(200).clone()).unwrap();
    assert_eq!(read.content, "kept\n");

    let bin = vec![0u8, 159, 146, 150, 255];
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bin);
    let wrote = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/files/write"),
            json!({"path": "/workspace/b.bin", "content": b64, "encoding": "base64"}),
        ),
    )
    .await;
    let wrote: WriteFileResult = serde_json::from_value(wrote.expect_ok(200).clone()).unwrap();
    assert_eq!(wrote.bytes_written, 5);
    let read = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/files/read"),
            json!({"path": "/workspace/b.bin", "encoding": "base64"}),
        ),
    )
    .await;
    assert_eq!(read.expect_ok(200)["content"], b64);

    let page = send(&app, get(&w, "/v1/sandboxes")).await;
    let page: SandboxPage = serde_json::from_value(page.expect_ok(200).clone()).unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.next_cursor, None);
    assert_eq!(page.items[0].id.to_string(), id);

    let gone = sandbox(
        send(&app, delete(&w, &format!("/v1/sandboxes/{id}")))
            .await
            .expect_ok(200),
    );
    assert_eq!(gone.status, SandboxStatus::Deleted);
    assert!(gone.deleted_at.is_some());
    // Deleting again returns the same tombstone; get returns it without the provider.
    let again = send(&app, delete(&w, &format!("/v1/sandboxes/{id}"))).await;
    assert_eq!(sandbox(again.expect_ok(200)), gone);
    let tomb = sandbox(
        send(&app, get(&w, &format!("/v1/sandboxes/{id}")))
            .await
            .expect_ok(200),
    );
    assert_eq!(tomb, gone);
    // Tombstones stay listed; exec and files on them are not found.
    let page = send(&app, get(&w, "/v1/sandboxes")).await;
    assert_eq!(page.expect_ok(200)["items"][0]["status"], "deleted");
    assert!(page.json["items"][0]["deletedAt"].is_string());
    send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/exec"),
            json!({"command": "true"}),
        ),
    )
    .await
    .expect_error(404, "sandbox_not_found");
    send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/files/read"),
            json!({"path": "/workspace/k"}),
        ),
    )
    .await
    .expect_error(404, "sandbox_not_found");
}

#[actix_web::test]
async fn list_pages_newest_first_with_an_opaque_cursor_and_null_on_the_last_page() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        let r = send(
            &app,
            post(&w, "/v1/sandboxes", json!({"provider": "local"})),
        )
        .await;
        ids.push(r.expect_ok(201)["id"].as_str().unwrap().to_owned());
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/sandboxes?limit=2&cursor={c}"),
            None => "/v1/sandboxes?limit=2".to_owned(),
        };
        let page: SandboxPage =
            serde_json::from_value(send(&app, get(&w, &path)).await.expect_ok(200).clone())
                .unwrap();
        assert!(page.items.len() <= 2);
        seen.extend(page.items.iter().map(|i| i.id.to_string()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    // The default page holds all five; a list never calls a provider, so it works with none.
    let page = send(&app, get(&w, "/v1/sandboxes")).await;
    assert_eq!(page.expect_ok(200)["items"].as_array().unwrap().len(), 5);
    assert!(page.json["nextCursor"].is_null());
}

#[actix_web::test]
async fn another_projects_sandbox_is_not_found_anywhere() {
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
    let other = format!("Bearer {}", w.other_project_key("other").await);
    let as_other = |req: TestRequest| req.insert_header(("Authorization", other.clone()));
    for req in [
        TestRequest::get().uri(&format!("/v1/sandboxes/{id}")),
        TestRequest::delete().uri(&format!("/v1/sandboxes/{id}")),
        TestRequest::post()
            .uri(&format!("/v1/sandboxes/{id}/exec"))
            .set_json(json!({"command": "true"})),
        TestRequest::post()
            .uri(&format!("/v1/sandboxes/{id}/files/read"))
            .set_json(json!({"path": "/x"})),
        TestRequest::post()
            .uri(&format!("/v1/sandboxes/{id}/files/write"))
            .set_json(json!({"path": "/x", "content": ""})),
    ] {
        send(&app, as_other(req))
            .await
            .expect_error(404, "sandbox_not_found");
    }
    let page = send(&app, as_other(TestRequest::get().uri("/v1/sandboxes"))).await;
    assert_eq!(page.expect_ok(200)["items"].as_array().unwrap().len(), 0);
    // Still there for its owner.
    send(&app, get(&w, &format!("/v1/sandboxes/{id}")))
        .await
        .expect_ok(200);
}

#[actix_web::test]
async fn write_accepts_exactly_one_mebibyte_and_refuses_one_byte_more() {
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
    let mib = 1024 * 1024;
    let exact = base64::engine::general_purpose::STANDARD.encode(vec![7u8; mib]);
    let r = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/files/write"),
            json!({"path": "/workspace/m", "content": exact, "encoding": "base64"}),
        ),
    )
    .await;
    assert_eq!(r.expect_ok(200)["bytesWritten"], mib);
    let over = "x".repeat(mib + 1);
    send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/files/write"),
            json!({"path": "/workspace/m", "content": over}),
        ),
    )
    .await
    .expect_error(413, "payload_too_large");
}

#[actix_web::test]
async fn providers_health_readiness_metrics_and_openapi_answer() {
    let w = World::new().await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let cat: ProviderCatalog = serde_json::from_value(
        send(&app, get(&w, "/v1/providers"))
            .await
            .expect_ok(200)
            .clone(),
    )
    .unwrap();
    assert_eq!(cat.providers.len(), 1);
    assert_eq!(cat.providers[0].provider.as_str(), "local");
    assert!(cat.providers[0].check().is_ok());

    let h = send(&app, TestRequest::get().uri("/healthz")).await;
    assert_eq!(
        h.expect_ok(200)["build"]["version"],
        env!("CARGO_PKG_VERSION")
    );
    send(&app, TestRequest::get().uri("/readyz"))
        .await
        .expect_ok(200);

    send(&app, get(&w, "/v1/sandboxes/sbx_local_nope"))
        .await
        .expect_error(400, "invalid_sandbox_id");
    let m = send(&app, TestRequest::get().uri("/metrics")).await;
    assert_eq!(m.status, 200);
    assert!(
        m.text.contains(
            "corral_http_request_duration_seconds_count{operation=\"listProviders\",code=\"ok\"} 1"
        ),
        "{}",
        m.text
    );
    assert!(
        m.text
            .contains("operation=\"getSandbox\",code=\"invalid_sandbox_id\""),
        "{}",
        m.text
    );
    assert!(
        m.text.contains("corral_provider_call_duration_seconds"),
        "{}",
        m.text
    );

    let doc = send(&app, TestRequest::get().uri("/v1/openapi.json")).await;
    assert_eq!(doc.status, 200);
    for op in [
        "createSandbox",
        "listSandboxes",
        "getSandbox",
        "deleteSandbox",
        "runSandboxCommand",
        "readSandboxFile",
        "writeSandboxFile",
        "listProviders",
    ] {
        assert!(
            doc.text.contains(&format!("\"operationId\": \"{op}\"")),
            "{op} missing"
        );
    }
    // The served document describes this server: its create union has one variant per
    // configured provider (here `local` alone), discriminated by `provider`, with exactly the
    // fields that provider accepts (`local` has a fixed image: no `image`).
    let schemas = &doc.json["components"]["schemas"];
    let union = &schemas["CreateSandboxRequest"];
    assert_eq!(union["discriminator"]["propertyName"], "provider");
    assert_eq!(
        union["oneOf"],
        json!([{"$ref": "#/components/schemas/CreateSandboxRequestLocal"}])
    );
    let local = &schemas["CreateSandboxRequestLocal"]["properties"];
    assert!(
        local["timeout"].is_object() && local["image"].is_null(),
        "{local}"
    );
    assert!(schemas["CreateSandboxRequestE2b"].is_null());
}

#[test]
fn committed_openapi_document_matches_the_generated_one() {
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/openapi.json"
    ))
    .expect("docs/openapi.json exists (regenerate: cargo xtask openapi)");
    let generated = corral_web::openapi::document_json(&corral::wiring::compiled_in_capabilities());
    assert!(
        committed == generated,
        "docs/openapi.json is stale: run `cargo xtask openapi` and review the diff"
    );
}
