//! The lifecycle extension's traps: a bridge without it, a stopped sandbox, unknown ids, the
//! requests Corral sends and the answers it checks.

use axum::Router;
use axum::routing::post;
use corral_domain::{Provider, ProviderContext, SandboxStatus, SnapshotId, SnapshotStatus};
use corral_provider::{
    Adapter, CallContext, CreateSpec, ExecSpec, ProviderError, SandboxProvider, SecretString,
    SnapshotSpec,
};
use corral_provider_bridge::fake::API_KEY;
use corral_provider_bridge::{BridgeConfig, api};
use corral_provider_testkit::fake::FakeServer;

use crate::{Fake, TestBridge};

fn spec() -> CreateSpec {
    corral_provider_testkit::helpers::spec(Provider::Cloudflare, None, None)
}

fn snap() -> SnapshotSpec {
    SnapshotSpec {
        snapshot_id: SnapshotId::new(Provider::Cloudflare),
        name: Some("before the change".into()),
    }
}

fn adapter(fake: &Fake) -> TestBridge {
    TestBridge::from_config(fake.config()).unwrap()
}

fn unsupported_naming(e: ProviderError, extension: &str) {
    match &e {
        ProviderError::Unsupported { reason, .. }
            if reason.contains(extension) && reason.contains("docs/bridge-contract.md") => {}
        other => panic!("expected Unsupported naming `{extension}`, got {other:?}"),
    }
}

#[tokio::test]
async fn a_bridge_without_the_lifecycle_extension_answers_unsupported_naming_it() {
    for fake in [
        Fake::start_without_lifecycle().await,
        Fake::start_plain().await,
    ] {
        let p = adapter(&fake);
        let ctx = fake.context();
        let id = p.create(&ctx, &spec()).await.unwrap().native_id;
        let sandboxes = fake.handle().sandbox_count();
        // The adapter asks (its capabilities are the kind's, static): the bridge's 404 for an
        // unknown route says the extension is missing, never "sandbox not found".
        unsupported_naming(p.stop(&ctx, &id).await.unwrap_err(), "stop-and-resume");
        unsupported_naming(p.resume(&ctx, &id).await.unwrap_err(), "stop-and-resume");
        unsupported_naming(
            p.snapshot(&ctx, &id, &snap()).await.unwrap_err(),
            "snapshots",
        );
        unsupported_naming(
            p.get_snapshot(&ctx, "snap-1").await.unwrap_err(),
            "snapshots",
        );
        unsupported_naming(
            p.delete_snapshot(&ctx, "snap-1").await.unwrap_err(),
            "snapshots",
        );
        unsupported_naming(
            p.restore(&ctx, &spec(), "snap-1").await.unwrap_err(),
            "snapshots",
        );
        // A restore is its own route, never a create's body (the Worker ignores that body and
        // would make an empty sandbox).
        assert_eq!(fake.handle().sandbox_count(), sandboxes);
        assert!(
            fake.server()
                .log()
                .matching(&axum::http::Method::POST, "/v1/sandbox")
                .iter()
                .filter(|r| r.path == "/v1/sandbox")
                .count()
                == 1
        );
    }
}

#[tokio::test]
async fn the_contract_wrapper_passes_the_missing_extension_on_for_every_kind() {
    Fake::check_bridge_without_the_lifecycle_extension_answers_unsupported().await;
}

#[tokio::test]
async fn a_stopped_sandbox_refuses_exec_and_files_until_it_resumes() {
    let fake = Fake::start().await;
    let p = adapter(&fake);
    let ctx = fake.context();
    let id = p.create(&ctx, &spec()).await.unwrap().native_id;
    let dir = String::from_utf8(
        p.exec(&ctx, &id, &ExecSpec::new("printf kept > f; pwd"))
            .await
            .unwrap()
            .stdout,
    )
    .unwrap();
    let stopped = p.stop(&ctx, &id).await.unwrap();
    assert_eq!(
        (stopped.native_id.as_str(), stopped.status),
        (id.as_str(), SandboxStatus::Stopped)
    );
    assert_eq!(
        p.get(&ctx, &id).await.unwrap().status,
        SandboxStatus::Stopped
    );
    let refused = p.exec(&ctx, &id, &ExecSpec::new("true")).await.unwrap_err();
    assert!(
        matches!(&refused, ProviderError::InvalidRequest { message, .. } if message.contains("stopped")),
        "{refused:?}"
    );
    let path = format!("{}/f", dir.trim_end());
    assert!(p.read_file(&ctx, &id, &path, 100).await.is_err());
    // Idempotent both ways.
    assert_eq!(
        p.stop(&ctx, &id).await.unwrap().status,
        SandboxStatus::Stopped
    );
    assert_eq!(
        p.resume(&ctx, &id).await.unwrap().status,
        SandboxStatus::Running
    );
    assert_eq!(
        p.resume(&ctx, &id).await.unwrap().status,
        SandboxStatus::Running
    );
    assert_eq!(p.read_file(&ctx, &id, &path, 100).await.unwrap(), b"kept");
}

#[tokio::test]
async fn unknown_sandboxes_and_snapshots_are_not_found_not_unsupported() {
    let fake = Fake::start().await;
    let p = adapter(&fake);
    let ctx = fake.context();
    let not_found = |e: ProviderError, what: &str| {
        assert!(
            matches!(&e, ProviderError::NotFound { resource, .. } if resource.contains(what)),
            "{e:?}"
        );
    };
    not_found(p.stop(&ctx, "unknownsandbox").await.unwrap_err(), "sandbox");
    not_found(
        p.resume(&ctx, "unknownsandbox").await.unwrap_err(),
        "sandbox",
    );
    not_found(
        p.snapshot(&ctx, "unknownsandbox", &snap())
            .await
            .unwrap_err(),
        "sandbox",
    );
    not_found(
        p.get_snapshot(&ctx, "snap-x").await.unwrap_err(),
        "snapshot snap-x",
    );
    not_found(
        p.delete_snapshot(&ctx, "snap-x").await.unwrap_err(),
        "snapshot snap-x",
    );
    not_found(
        p.restore(&ctx, &spec(), "snap-x").await.unwrap_err(),
        "snapshot snap-x",
    );
}

#[tokio::test]
async fn snapshots_carry_corrals_ids_and_restores_are_found_by_their_operation() {
    let fake = Fake::start().await;
    let p = adapter(&fake);
    let ctx = fake.context();
    let id = p.create(&ctx, &spec()).await.unwrap().native_id;
    let asked = snap();
    let taken = p.snapshot(&ctx, &id, &asked).await.unwrap();
    assert_eq!(taken.status, SnapshotStatus::Creating);
    assert!(taken.size_bytes.is_some());
    let sent = fake
        .server()
        .log()
        .matching(&axum::http::Method::POST, "/snapshots");
    let body: api::SnapshotRequest = serde_json::from_slice(&sent[0].body).unwrap();
    assert_eq!(body.tag, Some(asked.snapshot_id.to_string()));
    assert_eq!(body.name, asked.name);
    // Not ready yet: a restore is refused, and creates nothing.
    let early = p
        .restore(&ctx, &spec(), &taken.native_id)
        .await
        .unwrap_err();
    assert!(
        matches!(early, ProviderError::InvalidRequest { .. }),
        "{early:?}"
    );
    assert_eq!(fake.handle().sandbox_count(), 1);
    let ready = p.get_snapshot(&ctx, &taken.native_id).await.unwrap();
    assert_eq!(ready.status, SnapshotStatus::Ready);
    let restore = spec();
    let copy = p.restore(&ctx, &restore, &taken.native_id).await.unwrap();
    assert_ne!(copy.native_id, id);
    assert_eq!(copy.operation_id, Some(restore.operation_id));
    let found = p
        .find_by_operation_id(&ctx, &restore.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].native_id, copy.native_id);
    p.delete_snapshot(&ctx, &taken.native_id).await.unwrap();
    assert_eq!(fake.handle().snapshot_count(), 0);
    // The copy lives on without its snapshot.
    let out = p
        .exec(&ctx, &copy.native_id, &ExecSpec::new("echo ok"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"ok\n");
}

/// A bridge answering the lifecycle routes with `answer` (status, JSON body).
async fn scripted(status: u16, body: serde_json::Value) -> (FakeServer, TestBridge) {
    let answer = move || {
        let body = body.clone();
        async move {
            (
                axum::http::StatusCode::from_u16(status).unwrap(),
                axum::Json(body),
            )
        }
    };
    let router = Router::new()
        .route("/v1/sandbox/{id}/stop", post(answer.clone()))
        .route("/v1/sandbox/{id}/snapshots", post(answer));
    let server = FakeServer::start(router).await;
    let p = TestBridge::from_config(BridgeConfig {
        bridge_url: Some(server.base_url()),
        ..Default::default()
    })
    .unwrap();
    (server, p)
}

fn key_ctx() -> CallContext {
    CallContext::new(
        Some(SecretString::from(API_KEY)),
        ProviderContext::default(),
    )
}

#[tokio::test]
async fn answers_outside_the_extension_are_protocol_errors_not_guesses() {
    let ctx = key_ctx();
    // A stop answered without `state` (the running bit alone would read as asleep).
    let (_s, p) = scripted(200, serde_json::json!({"id": "abc", "running": false})).await;
    let e = p.stop(&ctx, "abc").await.unwrap_err();
    assert!(matches!(e, ProviderError::Protocol { .. }), "{e:?}");
    // A stop answered as still running.
    let (_s, p) = scripted(
        200,
        serde_json::json!({"id": "abc", "running": true, "state": "running"}),
    )
    .await;
    let e = p.stop(&ctx, "abc").await.unwrap_err();
    assert!(matches!(e, ProviderError::Protocol { .. }), "{e:?}");
    // A snapshot with a status outside the contract, or an id outside its pattern.
    for body in [
        serde_json::json!({"id": "snap-1", "status": "done"}),
        serde_json::json!({"id": "../x", "status": "ready"}),
    ] {
        let (_s, p) = scripted(200, body).await;
        let e = p.snapshot(&ctx, "abc", &snap()).await.unwrap_err();
        assert!(matches!(e, ProviderError::Protocol { .. }), "{e:?}");
    }
}

#[tokio::test]
async fn a_backend_that_cannot_do_it_is_unsupported_and_its_message_loses_the_key() {
    let ctx = key_ctx();
    let (_s, p) = scripted(
        501,
        serde_json::json!({
            "error": format!("no stop here for {API_KEY}"),
            "code": "lifecycle_unsupported",
        }),
    )
    .await;
    let e = p.stop(&ctx, "abc").await.unwrap_err();
    unsupported_naming(e, "stop-and-resume");
    let e = p.stop(&ctx, "abc").await.unwrap_err();
    assert!(!e.to_string().contains(API_KEY), "{e}");
    assert!(e.to_string().contains("no stop here"), "{e}");
}
