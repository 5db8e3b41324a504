//! The lifecycle extension forwarded to the backend's port: over a backend that has it (the
//! bridge client over the contract's fake, which keeps each sandbox in a directory of its
//! own) the conformance scenarios pass end to end; over one that has not (the bridge client
//! over a bridge without the extension), each route answers `501 lifecycle_unsupported`,
//! which the client reads as the extension missing.

use std::sync::Arc;

use axum::http::Method;
use corral_domain::{Provider, ProviderContext, SandboxStatus, SnapshotId};
use corral_provider::contract::NoObserver;
use corral_provider::{
    Adapter, CallContext, Contracted, ExecSpec, ProviderError, SandboxProvider, SecretString,
    SnapshotSpec,
};
use corral_provider_bridge::{BridgeConfig, BridgeProvider, api};
use corral_provider_cloudflare::CloudflareProvider;
use corral_provider_testkit::fake::FakeServer;

use crate::{KEY, client, ctx, spec};

/// The `cloudflare` kind's capabilities with every lifecycle operation advertised, so the
/// contract wrapper lets each one through.
fn every_lifecycle_operation() -> corral_domain::ProviderCapabilities {
    let mut caps = CloudflareProvider::from_config(BridgeConfig::default())
        .unwrap()
        .capabilities()
        .clone();
    caps.supports_explicit_stop = true;
    caps.supports_snapshots = true;
    caps.supports_restore = true;
    caps
}

fn bridge_client(url: String) -> BridgeProvider {
    BridgeProvider::new(
        Provider::Cloudflare,
        BridgeConfig {
            bridge_url: Some(url),
            ..Default::default()
        },
        every_lifecycle_operation(),
    )
    .unwrap()
}

/// The reference bridge over a backend with the lifecycle (the bridge client over the
/// contract's fake); the fake's server too, to see what reached the backend.
async fn lifecycle_bridge() -> (FakeServer, FakeServer) {
    backend_bridge(true).await
}

/// As [`lifecycle_bridge`], over a backend with (`lifecycle`) or without the extension.
async fn backend_bridge(lifecycle: bool) -> (FakeServer, FakeServer) {
    let (router, _handle) = corral_provider_bridge::fake::router_with(
        corral_provider_bridge::fake::API_KEY,
        true,
        lifecycle,
    );
    let backend_server = FakeServer::start(router).await;
    let backend = bridge_client(backend_server.base_url());
    let backend_ctx = CallContext::new(
        Some(SecretString::from(corral_provider_bridge::fake::API_KEY)),
        ProviderContext::default(),
    );
    let router =
        corral_bridge::router_with_context(Arc::new(backend), SecretString::from(KEY), backend_ctx);
    (FakeServer::start(router).await, backend_server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_resume_snapshot_and_restore_forward_to_the_backends_port() {
    let (server, backend) = lifecycle_bridge().await;
    let client = Contracted::new(
        Arc::new(bridge_client(server.base_url())),
        Arc::new(NoObserver),
    );
    let suite = corral_provider_testkit::Conformance::new(&client).with_context(ctx(KEY));
    suite.stop_then_resume_keeps_a_file().await;
    suite.snapshot_then_restore_sees_the_old_content().await;
    suite.forks_are_independent().await;
    // Each route reached the backend's own.
    let log = backend.log();
    for (method, path) in [
        (Method::POST, "/stop"),
        (Method::POST, "/resume"),
        (Method::POST, "/snapshots"),
        (Method::GET, "/v1/snapshots/"),
        (Method::DELETE, "/v1/snapshots/"),
        (Method::POST, "/restore"),
    ] {
        assert!(
            !log.matching(&method, path).is_empty(),
            "{method} {path} did not reach the backend"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_sandbox_is_refused_exec_by_the_bridge_until_it_resumes() {
    let (server, backend) = lifecycle_bridge().await;
    let p = bridge_client(server.base_url());
    let ctx = ctx(KEY);
    let id = p.create(&ctx, &spec()).await.unwrap().native_id;
    assert_eq!(
        p.stop(&ctx, &id).await.unwrap().status,
        SandboxStatus::Stopped
    );
    assert_eq!(
        p.get(&ctx, &id).await.unwrap().status,
        SandboxStatus::Stopped
    );
    let execs = backend.log().matching(&Method::POST, "/exec").len();
    let err = p.exec(&ctx, &id, &ExecSpec::new("true")).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::InvalidRequest { message, .. } if message.contains("stopped")),
        "{err:?}"
    );
    // Refused by the bridge itself: the backend was not asked.
    assert_eq!(backend.log().matching(&Method::POST, "/exec").len(), execs);
    assert_eq!(
        p.resume(&ctx, &id).await.unwrap().status,
        SandboxStatus::Running
    );
    let out = p
        .exec(&ctx, &id, &ExecSpec::new("echo back"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"back\n");
    // Unknown snapshots are not found, not unsupported.
    let unknown = api::base32(b"no-such-snapshot");
    let err = p.get_snapshot(&ctx, &unknown).await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    let err = p.restore(&ctx, &spec(), &unknown).await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_without_the_lifecycle_answers_501_read_as_the_extension_missing() {
    let (server, backend) = backend_bridge(false).await;
    // The raw adapter: it asks whatever it is asked, so every route is tried.
    let p = client(&server);
    let ctx = ctx(KEY);
    let id = p.create(&ctx, &spec()).await.unwrap().native_id;
    let unsupported = |e: ProviderError, extension: &str| match &e {
        ProviderError::Unsupported { reason, .. }
            if reason.contains(extension) && reason.contains("backend cannot do it") => {}
        other => panic!("expected Unsupported naming `{extension}`, got {other:?}"),
    };
    unsupported(p.stop(&ctx, &id).await.unwrap_err(), "stop-and-resume");
    unsupported(p.resume(&ctx, &id).await.unwrap_err(), "stop-and-resume");
    let snap = SnapshotSpec {
        snapshot_id: SnapshotId::new(Provider::Cloudflare),
        name: None,
    };
    unsupported(p.snapshot(&ctx, &id, &snap).await.unwrap_err(), "snapshots");
    let some = api::base32(b"snapshot");
    unsupported(p.get_snapshot(&ctx, &some).await.unwrap_err(), "snapshots");
    unsupported(
        p.delete_snapshot(&ctx, &some).await.unwrap_err(),
        "snapshots",
    );
    unsupported(
        p.restore(&ctx, &spec(), &some).await.unwrap_err(),
        "snapshots",
    );
    // The sandbox was neither stopped nor copied.
    assert_eq!(
        p.get(&ctx, &id).await.unwrap().status,
        SandboxStatus::Running
    );
    let creates = backend
        .log()
        .all()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/v1/sandbox")
        .count();
    assert_eq!(
        creates, 1,
        "a refused restore created a sandbox in the backend"
    );
}
