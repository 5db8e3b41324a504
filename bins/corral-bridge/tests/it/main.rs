#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! The reference bridge over the `local` provider, driven by the bridge client (the
//! `cloudflare` kind): the whole contract on one machine.

mod lifecycle;

use std::sync::Arc;

use std::time::Duration;

use axum::http::Method;
use corral_domain::{
    CommandId, CreateSandboxRequest, OperationId, Provider, ProviderContext, SandboxStatus, Signal,
};
use corral_provider::{
    Adapter, CallContext, CommandSpec, CreateSpec, ExecSpec, ProviderError, SandboxProvider,
    SecretString,
};
use corral_provider_bridge::BridgeConfig;
use corral_provider_cloudflare::CloudflareProvider;
use corral_provider_local::{LocalConfig, LocalProvider};
use corral_provider_testkit::fake::FakeServer;

pub(crate) const KEY: &str = "reference-bridge-key-0123456789";

/// The bridge on loopback over a fresh local root, or `None` (said on stderr) where this
/// machine cannot run local sandboxes.
async fn bridge() -> Option<(FakeServer, tempfile::TempDir)> {
    let root = tempfile::tempdir().unwrap();
    // A 32 MiB filesystem per sandbox (the 1 GiB default is allocated in full at create).
    let mut config = LocalConfig::new(root.path().join("sandboxes"));
    // The sandbox init is the bridge's own executable (as `corral-bridge` runs it).
    config.init = Some(corral_provider_local::InitProgram {
        path: env!("CARGO_BIN_EXE_corral-bridge").into(),
        args: vec![corral_provider_local::INIT_ARG.into()],
    });
    config.limits.disk_bytes = Some(32 << 20);
    config.limits.disk_reserve_bytes = 256 << 20;
    let local = LocalProvider::new(config).unwrap();
    if let Some(why) = local.unavailable_reason() {
        eprintln!("skipped: the local provider cannot run here: {why}");
        return None;
    }
    let router = corral_bridge::router(Arc::new(local), SecretString::from(KEY));
    Some((FakeServer::start(router).await, root))
}

fn client(server: &FakeServer) -> CloudflareProvider {
    CloudflareProvider::from_config(BridgeConfig {
        bridge_url: Some(server.base_url()),
        ..Default::default()
    })
    .unwrap()
}

fn ctx(key: &str) -> CallContext {
    CallContext::new(Some(SecretString::from(key)), ProviderContext::default())
}

fn spec() -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Cloudflare, None, None),
        timeout_seconds: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_contract_runs_against_local_sandboxes() {
    let Some((server, _root)) = bridge().await else {
        return;
    };
    let p = client(&server);
    let ctx = ctx(KEY);
    let spec = spec();
    let created = p.create(&ctx, &spec).await.unwrap();
    assert!(corral_provider_bridge::api::is_sandbox_id(
        &created.native_id
    ));
    let id = created.native_id;
    let seen = p.get(&ctx, &id).await.unwrap();
    assert_eq!(seen.status, SandboxStatus::Running);
    assert_eq!(seen.operation_id, Some(spec.operation_id));
    let found = p
        .find_by_operation_id(&ctx, &spec.operation_id)
        .await
        .unwrap();
    assert_eq!(
        found
            .iter()
            .map(|s| s.native_id.as_str())
            .collect::<Vec<_>>(),
        [id.as_str()]
    );

    let mut exec =
        ExecSpec::new("echo out; echo err >&2; printf %s \"$GREETING\" > /workspace/g; exit 3");
    exec.env.insert("GREETING".into(), "it's here".into());
    exec.cwd = Some("/workspace".into());
    let out = p.exec(&ctx, &id, &exec).await.unwrap();
    assert_eq!(
        (out.stdout.as_slice(), out.stderr.as_slice(), out.exit_code),
        (&b"out\n"[..], &b"err\n"[..], 3)
    );
    assert_eq!(
        p.read_file(&ctx, &id, "/workspace/g", 1024).await.unwrap(),
        b"it's here"
    );

    let binary: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    p.write_file(&ctx, &id, "/workspace/data.bin", &binary)
        .await
        .unwrap();
    assert_eq!(
        p.read_file(&ctx, &id, "/workspace/data.bin", 4096)
            .await
            .unwrap(),
        binary
    );
    let missing = p
        .read_file(&ctx, &id, "/workspace/nope", 1024)
        .await
        .unwrap_err();
    assert!(
        matches!(missing, ProviderError::FileNotFound { .. }),
        "{missing:?}"
    );
    let orphan = p
        .write_file(&ctx, &id, "/workspace/no/dir.txt", b"x")
        .await
        .unwrap_err();
    assert!(
        matches!(orphan, ProviderError::ParentMissing { .. }),
        "{orphan:?}"
    );
    let too_big = p
        .read_file(&ctx, &id, "/workspace/data.bin", 10)
        .await
        .unwrap_err();
    assert!(
        matches!(too_big, ProviderError::FileTooLarge { .. }),
        "{too_big:?}"
    );

    let mut slow = ExecSpec::new("sleep 30");
    slow.timeout = std::time::Duration::from_secs(1);
    let err = p.exec(&ctx, &id, &slow).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );

    p.delete(&ctx, &id).await.unwrap();
    let gone = p.get(&ctx, &id).await.unwrap_err();
    assert!(matches!(gone, ProviderError::NotFound { .. }), "{gone:?}");
    p.delete(&ctx, &id).await.unwrap();
    assert!(
        p.find_by_operation_id(&ctx, &spec.operation_id)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_wrong_key_and_a_foreign_id_are_refused_as_the_contract_says() {
    let Some((server, _root)) = bridge().await else {
        return;
    };
    let p = client(&server);
    let err = p.create(&ctx("wrong-key"), &spec()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
    // An id this bridge never issued is unknown, not an error of the bridge.
    let err = p
        .get(&ctx(KEY), "mfrggzdfmy2tqnrzgezdgnbv")
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    let health = reqwest_get(&format!("{}/health", server.base_url())).await;
    assert_eq!(health, r#"{"ok":true}"#);
}

async fn reqwest_get(url: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut sock = tokio::net::TcpStream::connect(host).await.unwrap();
    sock.write_all(
        format!("GET /{path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    sock.read_to_string(&mut out).await.unwrap();
    out.split("\r\n\r\n").nth(1).unwrap().to_owned()
}

#[test]
fn the_binary_refuses_to_start_without_a_long_enough_key() {
    let root = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_corral-bridge"))
        .args(["--listen", "127.0.0.1:0", "--root"])
        .arg(root.path())
        .env("CORRAL_BRIDGE_KEY", "short")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("at least 16 characters"), "{stderr}");
    // The key is never echoed.
    assert!(!stderr.contains("short"), "{stderr}");
}

#[tokio::test]
async fn the_binary_serves_the_contract_on_the_address_it_prints() {
    use std::io::{BufRead as _, BufReader};
    let root = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_corral-bridge"))
        .args(["--listen", "127.0.0.1:0", "--root"])
        .arg(root.path())
        .env("CORRAL_BRIDGE_KEY", KEY)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let url = line
        .trim()
        .strip_prefix("corral-bridge: listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    let health = reqwest_get(&format!("{url}/health")).await;
    let p = CloudflareProvider::from_config(BridgeConfig {
        bridge_url: Some(url),
        ..Default::default()
    })
    .unwrap();
    let err = p.create(&ctx("not-the-key"), &spec()).await.unwrap_err();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(health, r#"{"ok":true}"#);
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
}

/// The bridge over another adapter — Blaxel, against its loopback fake — whose commands are
/// native (no stdin, `TERM` and `KILL` only, logs replayed from the start).
async fn blaxel_bridge() -> (FakeServer, corral_provider_blaxel::fake::Fake) {
    let fake = corral_provider_blaxel::fake::Fake::start().await;
    let blaxel = corral_provider_blaxel::BlaxelProvider::from_config(fake.config()).unwrap();
    let router = corral_bridge::router_with_context(
        Arc::new(blaxel),
        SecretString::from(KEY),
        fake.context(),
    );
    (FakeServer::start(router).await, fake)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_as_bridge_processes_over_the_backends_commands() {
    let (server, blaxel) = blaxel_bridge().await;
    let p = client(&server);
    // Every command scenario, through the process routes; the one with stdin through the
    // exec wrapper, since the backend gives processes none (`stdin_unsupported`).
    corral_provider_testkit::Conformance::new(&p)
        .with_context(ctx(KEY))
        .run_commands()
        .await;
    let log = server.log();
    let starts = log.matching(&Method::POST, "/process");
    assert!(
        starts.len() >= 7,
        "{} commands went through the process routes",
        starts.len()
    );
    assert!(!log.matching(&Method::GET, "/logs").is_empty());
    assert!(!log.matching(&Method::POST, "/kill").is_empty());
    // The stdin scenario was refused natively and ran through exec instead.
    assert!(log.matching(&Method::POST, "/stdin").is_empty());
    assert!(!log.matching(&Method::POST, "/exec").is_empty());
    // The backend saw its own process API.
    assert!(
        !blaxel
            .server()
            .log()
            .matching(&Method::GET, "/logs/stream")
            .is_empty()
    );

    let ctx = ctx(KEY);
    let id = p.create(&ctx, &spec()).await.unwrap().native_id;
    p.get(&ctx, &id).await.unwrap();
    // A signal the backend cannot send is refused, before the backend is asked.
    let spec = CommandSpec {
        command_id: CommandId::new(),
        command: "sleep 30".into(),
        cwd: None,
        env: Default::default(),
        stdin: false,
        timeout: Duration::from_secs(60),
    };
    let handle = p.start_command(&ctx, &id, &spec).await.unwrap().handle;
    let err = p
        .signal_command(&ctx, &id, &handle, Signal::Int)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unsupported { .. }), "{err:?}");
    p.signal_command(&ctx, &id, &handle, Signal::Kill)
        .await
        .unwrap();
    // A process id that is not a command id is refused; an unknown one is not found.
    let url = format!("{}/v1/sandbox/{id}/process", server.base_url());
    let bad = post_json(&url, r#"{"argv":["true"],"process_id":"not-a-command-id"}"#).await;
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    let unknown = format!("process:{}", CommandId::new());
    let err = p
        .signal_command(&ctx, &id, &unknown, Signal::Term)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
}

async fn post_json(url: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut sock = tokio::net::TcpStream::connect(host).await.unwrap();
    sock.write_all(
        format!(
            "POST /{path} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {KEY}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    sock.read_to_string(&mut out).await.unwrap();
    out
}
