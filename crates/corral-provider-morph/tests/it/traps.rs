//! Morph's traps: files go through exec (there is no file API), `ttl_seconds` is whole seconds
//! with `ttl_action` deciding what expiry does, and the operation id lives in metadata.

use corral_provider::{ExecSpec, SandboxProvider};
use corral_provider_http::reqwest::Method;
use serde_json::{Value, json};

use crate::{KEY, SNAPSHOT, ctx, running, setup, spec};

fn body(r: &corral_provider_testkit::fake::Recorded) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

/// The exec request's single command line, split into words by a real shell.
fn words(r: &corral_provider_testkit::fake::Recorded) -> (String, Vec<String>) {
    let command = body(r)["command"].as_array().unwrap().clone();
    assert_eq!(
        command.len(),
        1,
        "one shell line, not an argv of unknown meaning"
    );
    let line = command[0].as_str().unwrap().to_owned();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("set -- {line}; printf '%s\\0' \"$@\""))
        .output()
        .unwrap();
    let words = String::from_utf8(out.stdout)
        .unwrap()
        .split_terminator('\0')
        .map(str::to_owned)
        .collect();
    (line, words)
}

#[tokio::test]
async fn create_sends_snapshot_query_ttl_seconds_stop_action_and_metadata_tag() {
    let (fake, provider) = setup().await;
    let server = fake.server();
    let s = spec(Some("snapshot_chosen"), Some(600));
    let created = provider.create(&ctx(), &s).await.unwrap();
    assert_eq!(created.operation_id, Some(s.operation_id));
    let log = server.log().matching(&Method::POST, "/api/instance");
    assert_eq!(log.len(), 1);
    let r = &log[0];
    assert_eq!(r.path, "/api/instance");
    assert_eq!(r.query.as_deref(), Some("snapshot_id=snapshot_chosen"));
    assert_eq!(r.headers["authorization"], format!("Bearer {KEY}").as_str());
    assert_eq!(
        body(r),
        json!({
            "metadata": { "corral_operation_id": s.operation_id.to_string() },
            // Seconds, not milliseconds or minutes; `stop` deletes the instance at expiry.
            "ttl_seconds": 600,
            "ttl_action": "stop",
        })
    );
}

#[tokio::test]
async fn create_without_timeout_sends_no_ttl_and_uses_the_default_snapshot() {
    let (fake, provider) = setup().await;
    let server = fake.server();
    provider.create(&ctx(), &spec(None, None)).await.unwrap();
    let r = &server.log().matching(&Method::POST, "/api/instance")[0];
    assert_eq!(
        r.query.as_deref(),
        Some(format!("snapshot_id={SNAPSHOT}").as_str())
    );
    let b = body(r);
    assert!(
        b.get("ttl_seconds").is_none() && b.get("ttl_action").is_none(),
        "{b}"
    );
}

#[tokio::test]
async fn find_filters_the_listing_by_the_metadata_tag() {
    let (fake, provider) = setup().await;
    let server = fake.server();
    let s = spec(None, Some(60));
    let created = provider.create(&ctx(), &s).await.unwrap();
    provider
        .create(&ctx(), &spec(None, Some(60)))
        .await
        .unwrap();
    server.log().clear();
    let found = provider
        .find_by_operation_id(&ctx(), &s.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].native_id, created.native_id);
    let r = &server.log().matching(&Method::GET, "/api/instance")[0];
    assert_eq!(
        r.query.as_deref(),
        Some(format!("metadata%5Bcorral_operation_id%5D={}", s.operation_id).as_str())
    );
}

#[tokio::test]
async fn files_travel_through_exec_calls_only() {
    let (fake, provider) = setup().await;
    let server = fake.server();
    let id = running(&provider).await;
    server.log().clear();
    let dir = String::from_utf8(
        provider
            .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
            .await
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_owned();
    let path = format!("{dir}/bin");
    // Larger than one command: the write is chunked under MAX_COMMAND_BYTES.
    let content: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    provider
        .write_file(&ctx(), &id, &path, &content)
        .await
        .unwrap();
    assert_eq!(
        provider
            .read_file(&ctx(), &id, &path, 1 << 20)
            .await
            .unwrap(),
        content
    );
    let log = server.log().all();
    assert!(log.len() > 3, "a chunked write takes several commands");
    for r in &log {
        assert_eq!(r.method, Method::POST);
        assert_eq!(r.path, format!("/api/instance/{id}/exec"));
        let (line, argv) = words(r);
        assert_eq!(argv[0], "timeout");
        assert_eq!(argv[4..6], ["sh", "-c"]);
        assert!(
            line.len() <= corral_provider_morph::MAX_COMMAND_BYTES,
            "a command exceeds the advertised limit"
        );
    }
}

#[tokio::test]
async fn exec_sends_one_shell_line_with_deadline_cwd_env_and_output_cap() {
    let (fake, provider) = setup().await;
    let server = fake.server();
    let id = running(&provider).await;
    server.log().clear();
    let mut spec = ExecSpec::new("pwd; printf %s \"$GREETING\"");
    spec.cwd = Some("/".into());
    spec.env.insert("GREETING".into(), "hi there".into());
    spec.timeout = std::time::Duration::from_secs(20);
    let out = provider.exec(&ctx(), &id, &spec).await.unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "/\nhi there");
    let r = &server.log().all()[0];
    let (_, argv) = words(r);
    assert_eq!(argv[..6], ["timeout", "-k", "5", "20", "sh", "-c"]);
    let script = &argv[6];
    // cwd and env applied by the shell; the command in a subshell whose output is capped.
    assert!(
        script.contains(
            "\n(\ncd -- '/' || exit 1\nexport GREETING='hi there'\npwd; printf %s \"$GREETING\"\n) >"
        ),
        "{script}"
    );
    let cap = format!("head -c {}", spec.max_output_bytes + 1);
    assert!(script.contains(&cap), "{script}");
}

#[tokio::test]
async fn an_expired_ttl_with_stop_leaves_no_instance_behind() {
    let (_fake, provider) = setup().await;
    let s = spec(None, Some(1));
    let created = provider.create(&ctx(), &s).await.unwrap();
    provider.get(&ctx(), &created.native_id).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let err = provider.get(&ctx(), &created.native_id).await.unwrap_err();
    assert!(
        matches!(err, corral_provider::ProviderError::NotFound { .. }),
        "{err:?}"
    );
    assert!(
        provider
            .find_by_operation_id(&ctx(), &s.operation_id)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn exec_output_over_the_cap_is_cut_and_flagged_per_stream() {
    let (_fake, provider) = setup().await;
    let id = running(&provider).await;
    let mut spec = ExecSpec::new("yes 0123456789 | head -c 100000; yes e | head -c 5000 >&2");
    spec.max_output_bytes = 100;
    let out = provider.exec(&ctx(), &id, &spec).await.unwrap();
    assert!(out.truncated);
    assert_eq!((out.stdout.len(), out.stderr.len()), (100, 100));
    assert_eq!(out.exit_code, 0);
}

#[tokio::test]
async fn stop_is_pause_read_back_and_a_paused_instance_refuses_exec() {
    let (fake, provider) = setup().await;
    let server = fake.server();
    let id = running(&provider).await;
    server.log().clear();
    let stopped = provider.stop(&ctx(), &id).await.unwrap();
    // Pause is synchronous: the instance reads `paused` (Corral's `stopped`) at once.
    assert_eq!(stopped.status, corral_domain::SandboxStatus::Stopped);
    let calls: Vec<String> = server
        .log()
        .all()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        calls,
        [
            format!("POST /api/instance/{id}/pause"),
            format!("GET /api/instance/{id}"),
        ],
        "pause, then the instance read back (the SDK does the same); never DELETE, Morph's \"stop\""
    );
    let refused = provider.exec(&ctx(), &id, &ExecSpec::new("true")).await;
    assert!(
        matches!(
            refused,
            Err(corral_provider::ProviderError::InvalidRequest { .. })
        ),
        "{refused:?}"
    );
    // Pausing a paused instance answers it unchanged.
    assert_eq!(
        provider.stop(&ctx(), &id).await.unwrap().status,
        corral_domain::SandboxStatus::Stopped
    );
    assert_eq!(
        provider.resume(&ctx(), &id).await.unwrap().status,
        corral_domain::SandboxStatus::Running
    );
    // Resuming an instance that runs is not documented; the fake refuses it (409) and the
    // adapter reads the instance: running is the answer.
    server.log().clear();
    assert_eq!(
        provider.resume(&ctx(), &id).await.unwrap().status,
        corral_domain::SandboxStatus::Running
    );
    assert_eq!(server.log().all().len(), 2);
    provider.delete(&ctx(), &id).await.unwrap();
}

#[tokio::test]
async fn a_snapshot_is_tagged_followed_and_restored_by_starting_an_instance_from_it() {
    let (fake, provider) = setup().await;
    let server = fake.server();
    let id = running(&provider).await;
    server.log().clear();
    let snapshot_id = corral_domain::SnapshotId::new(corral_domain::Provider::Morph);
    let snap = provider
        .snapshot(
            &ctx(),
            &id,
            &corral_provider::SnapshotSpec {
                snapshot_id,
                name: Some("before".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        snap.status,
        corral_domain::SnapshotStatus::Creating,
        "pending"
    );
    let r = &server.log().all()[0];
    assert_eq!(r.path, format!("/api/instance/{id}/snapshot"));
    assert_eq!(
        body(r),
        json!({"metadata": {
            "corral_snapshot_id": snapshot_id.to_string(),
            "corral_snapshot_name": "before",
        }})
    );
    let first = provider
        .get_snapshot(&ctx(), &snap.native_id)
        .await
        .unwrap();
    assert_eq!(first.status, corral_domain::SnapshotStatus::Creating);
    let ready = provider
        .get_snapshot(&ctx(), &snap.native_id)
        .await
        .unwrap();
    assert_eq!(ready.status, corral_domain::SnapshotStatus::Ready);
    server.log().clear();
    let s = spec(None, Some(300));
    let copy = provider.restore(&ctx(), &s, &snap.native_id).await.unwrap();
    assert_eq!(copy.operation_id, Some(s.operation_id));
    let r = &server.log().matching(&Method::POST, "/api/instance")[0];
    assert_eq!(r.path, "/api/instance");
    assert_eq!(
        r.query.as_deref(),
        Some(format!("snapshot_id={}", snap.native_id).as_str()),
        "the snapshot, not the configured default image"
    );
    assert_eq!(
        body(r),
        json!({
            "metadata": { "corral_operation_id": s.operation_id.to_string() },
            "ttl_seconds": 300,
            "ttl_action": "stop",
        })
    );
    provider
        .delete_snapshot(&ctx(), &snap.native_id)
        .await
        .unwrap();
    let gone = provider.get_snapshot(&ctx(), &snap.native_id).await;
    assert!(
        matches!(gone, Err(corral_provider::ProviderError::NotFound { .. })),
        "{gone:?}"
    );
    provider.delete(&ctx(), &copy.native_id).await.unwrap();
    provider.delete(&ctx(), &id).await.unwrap();
}
