//! Together's traps: the snapshot/alias model and `ttl` in seconds on create, the in-VM API
//! reached with the sandbox's own agent URL and token (never the project key), and exec exit
//! codes that read 0 until the process has ended.

use corral_domain::SandboxStatus;
use corral_provider::{ExecSpec, ProviderError, SandboxProvider};
use corral_provider_http::reqwest::Method;
use corral_provider_testkit::fake::Recorded;
use serde_json::{Value, json};

use crate::{ALIAS, KEY, ctx, running, setup, spec};

fn body(r: &Recorded) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn bearer(r: &Recorded) -> &str {
    r.headers["authorization"].to_str().unwrap()
}

#[tokio::test]
async fn create_from_an_alias_sends_snapshot_alias_ttl_seconds_and_the_tag() {
    let (fake, provider) = setup().await;
    let server = fake.server();
    let s = spec(Some(ALIAS), Some(600));
    let created = provider.create(&ctx(), &s).await.unwrap();
    assert_eq!(created.operation_id, Some(s.operation_id));
    assert_eq!(created.status, corral_domain::SandboxStatus::Creating);
    let log = server.log().matching(&Method::POST, "/v1/sandboxes");
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].path, "/v1/sandboxes");
    assert_eq!(bearer(&log[0]), format!("Bearer {KEY}"));
    // No termination_policy: ephemeral, nothing is left behind after delete. ttl in seconds.
    assert_eq!(
        body(&log[0]),
        json!({
            "snapshot_alias": ALIAS,
            "ttl": 600,
            "tags": { "corral-operation-id": s.operation_id.to_string() },
        })
    );
}

#[tokio::test]
async fn create_from_a_uuid_sends_snapshot_id_and_no_ttl_when_none_is_asked() {
    let (fake, provider) = setup().await;
    let server = fake.server();
    let uuid = "3f1c8a9e-5b2d-4e7a-9c10-6d8f2b4a1e33";
    provider
        .create(&ctx(), &spec(Some(uuid), None))
        .await
        .unwrap();
    let b = body(&server.log().matching(&Method::POST, "/v1/sandboxes")[0]);
    assert_eq!(b["snapshot_id"], uuid);
    assert!(
        b.get("snapshot_alias").is_none() && b.get("ttl").is_none(),
        "{b}"
    );
}

#[tokio::test]
async fn an_unknown_snapshot_alias_is_an_invalid_request() {
    let (_fake, provider) = setup().await;
    let err = provider
        .create(&ctx(), &spec(Some("nope@v0"), None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn exec_and_files_use_the_agent_url_and_token_never_the_project_key() {
    let (fake, provider) = setup().await;
    let server = fake.server();
    let id = running(&provider).await;
    server.log().clear();
    let mut e = ExecSpec::new("printf '%s' \"$X\"; pwd");
    e.cwd = Some("/".into());
    e.env.insert("X".into(), "y z".into());
    let out = provider.exec(&ctx(), &id, &e).await.unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "y z/\n");
    let dir = tempfile_dir(&provider, &id).await;
    let path = format!("{dir}/a b.bin");
    provider
        .write_file(&ctx(), &id, &path, &[0, 159, 255, 10])
        .await
        .unwrap();
    assert_eq!(
        provider.read_file(&ctx(), &id, &path, 1024).await.unwrap(),
        [0, 159, 255, 10]
    );

    let log = server.log().all();
    let agent_prefix = format!("/agent/{id}/api/v1/");
    let mut agent_calls = 0;
    for r in &log {
        if r.path.starts_with(&agent_prefix) {
            agent_calls += 1;
            assert!(bearer(r).starts_with("Bearer agent-token-"), "{}", r.path);
            assert!(!bearer(r).contains(KEY), "the project key reached the VM");
        } else {
            assert!(r.path.starts_with("/v1/sandboxes/"), "{}", r.path);
            assert_eq!(bearer(r), format!("Bearer {KEY}"));
        }
    }
    assert!(agent_calls >= 6, "{agent_calls}");
    let create = log
        .iter()
        .find(|r| r.method == Method::POST && r.path == format!("{agent_prefix}execs"))
        .unwrap();
    assert_eq!(
        body(create),
        json!({
            "command": "sh",
            "args": ["-c", "printf '%s' \"$X\"; pwd"],
            "cwd": "/",
            "env": { "X": "y z" },
            "autostart": true,
        })
    );
    // The path travels as one encoded segment; the bytes as a raw octet-stream body.
    let write = log
        .iter()
        .find(|r| r.method == Method::POST && r.path.contains("/files/"))
        .unwrap();
    assert_eq!(
        write.path,
        format!(
            "{agent_prefix}files/{}",
            path.replace('/', "%2F").replace(' ', "%20")
        )
    );
    assert_eq!(write.headers["content-type"], "application/octet-stream");
    assert_eq!(&write.body[..], [0, 159, 255, 10]);
}

async fn tempfile_dir(provider: &impl SandboxProvider, id: &str) -> String {
    let out = provider
        .exec(&ctx(), id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn exec_waits_for_the_process_instead_of_trusting_an_early_zero_exit_code() {
    let (_fake, provider) = setup().await;
    let id = running(&provider).await;
    let out = provider
        .exec(&ctx(), &id, &ExecSpec::new("sleep 0.3; echo late; exit 7"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, 7);
    assert_eq!(out.stdout, b"late\n");
}

#[tokio::test]
async fn exec_before_the_sandbox_runs_does_not_reach_any_agent() {
    let (fake, provider) = setup().await;
    let server = fake.server();
    let created = provider.create(&ctx(), &spec(None, None)).await.unwrap();
    // The fake has not been observed yet: the sandbox is `starting` and its agent is null.
    let err = provider
        .exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    assert!(
        server
            .log()
            .all()
            .iter()
            .all(|r| !r.path.starts_with("/agent/"))
    );
}

#[tokio::test]
async fn delete_terminates_without_a_snapshot_and_then_the_agent_is_gone() {
    let (fake, provider) = setup().await;
    let server = fake.server();
    let id = running(&provider).await;
    provider.delete(&ctx(), &id).await.unwrap();
    let r = &server.log().matching(&Method::POST, "/terminate")[0];
    assert_eq!(r.path, format!("/v1/sandboxes/{id}/terminate"));
    assert_eq!(body(r), json!({ "snapshot": null }));
    let seen = provider.get(&ctx(), &id).await.unwrap();
    assert!(seen.status.is_terminal());
    let err = provider
        .exec(&ctx(), &id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn find_filters_the_listing_by_the_tag() {
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
    let r = &server.log().all()[0];
    assert_eq!(
        (r.method.clone(), r.path.as_str()),
        (Method::GET, "/v1/sandboxes")
    );
    assert_eq!(
        r.query.as_deref(),
        Some(format!("tags%5Bcorral-operation-id%5D={}&limit=100", s.operation_id).as_str())
    );
}

#[tokio::test]
async fn a_ttl_that_ran_out_reads_as_expired() {
    let (_fake, provider) = setup().await;
    let id = {
        let created = provider.create(&ctx(), &spec(None, Some(1))).await.unwrap();
        provider.get(&ctx(), &created.native_id).await.unwrap();
        created.native_id
    };
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let seen = provider.get(&ctx(), &id).await.unwrap();
    assert_eq!(seen.status, corral_domain::SandboxStatus::Expired);
}

#[tokio::test]
async fn find_follows_next_cursor_across_pages() {
    let (fake, provider) = setup().await;
    fake.set_page_size(2);
    let server = fake.server();
    // Three creates of one operation (retries whose answers were lost), between strangers.
    let s = spec(None, Some(60));
    let mut mine = Vec::new();
    for _ in 0..3 {
        provider
            .create(&ctx(), &spec(None, Some(60)))
            .await
            .unwrap();
        mine.push(provider.create(&ctx(), &s).await.unwrap().native_id);
    }
    server.log().clear();
    let mut found: Vec<String> = provider
        .find_by_operation_id(&ctx(), &s.operation_id)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.native_id)
        .collect();
    found.sort();
    mine.sort();
    assert_eq!(found, mine);
    let pages = server.log().matching(&Method::GET, "/v1/sandboxes");
    assert_eq!(pages.len(), 2, "3 matches in pages of 2");
    assert!(pages[1].query.as_deref().unwrap().contains("cursor="));
}

#[tokio::test]
async fn termination_is_deleted_when_requested_and_expired_when_the_ttl_ran_out_or_the_vm_was_lost()
{
    let (fake, provider) = setup().await;
    // Terminated on request (Corral's delete): `termination_requested` → deleted.
    let deleted = running(&provider).await;
    provider.delete(&ctx(), &deleted).await.unwrap();
    assert_eq!(
        provider.get(&ctx(), &deleted).await.unwrap().status,
        SandboxStatus::Deleted
    );
    // Lost by Together (`evicted`): gone, and nobody asked for it → expired.
    let lost = running(&provider).await;
    fake.lose(&lost, "evicted");
    assert_eq!(
        provider.get(&ctx(), &lost).await.unwrap().status,
        SandboxStatus::Expired
    );
    // The ttl ran out (`autoterminated`) → expired.
    let created = provider.create(&ctx(), &spec(None, Some(1))).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(
        provider
            .get(&ctx(), &created.native_id)
            .await
            .unwrap()
            .status,
        SandboxStatus::Expired
    );
    // A lookup by operation id reads the same reasons.
    let s = spec(None, Some(60));
    let id = provider.create(&ctx(), &s).await.unwrap().native_id;
    provider.delete(&ctx(), &id).await.unwrap();
    let found = provider
        .find_by_operation_id(&ctx(), &s.operation_id)
        .await
        .unwrap();
    assert_eq!(found[0].status, SandboxStatus::Deleted);
}

#[tokio::test]
async fn a_recovering_sandbox_is_failed_not_creating_and_runs_again_once_recovered() {
    let (fake, provider) = setup().await;
    let id = running(&provider).await;
    fake.crash(&id, "oom_killed");
    let seen = provider.get(&ctx(), &id).await.unwrap();
    assert_eq!(
        seen.status,
        SandboxStatus::Failed,
        "recovering is not creating"
    );
    assert!(!seen.status.is_terminal(), "the service keeps observing it");
    // Its agent is gone while it recovers: refused without reaching any agent.
    fake.server().log().clear();
    let err = provider
        .exec(&ctx(), &id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    assert!(
        fake.server()
            .log()
            .all()
            .iter()
            .all(|r| !r.path.starts_with("/agent/"))
    );
    fake.recover(&id);
    assert_eq!(
        provider.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Running
    );
    let out = provider
        .exec(&ctx(), &id, &ExecSpec::new("echo back"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"back\n");
}

/// The agent URL comes from the provider's sandbox record, and the sandbox's agent token is
/// sent there: an `agent.url` off the trusted hosts is refused, and the host it names (another
/// fake, on loopback) receives nothing.
#[tokio::test]
async fn an_agent_url_naming_another_host_is_refused_and_that_host_receives_nothing() {
    let (fake, provider) = setup().await;
    let rogue = corral_provider_together::fake::Fake::start().await;
    let rogue_port = rogue.server().addr().port();
    for base in [
        rogue.server().base_url(),
        format!("http://localhost:{rogue_port}"),
        format!("http://{KEY}@{}", fake.server().addr()),
        format!("https://{}", fake.server().addr()),
        "http://169.254.169.254".to_owned(),
    ] {
        fake.set_agent_base(Some(&base));
        let id = running(&provider).await;
        let err = provider
            .exec(&ctx(), &id, &ExecSpec::new("true"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ProviderError::Protocol { .. }),
            "{base}: {err:?}"
        );
        let err = provider
            .read_file(&ctx(), &id, "/etc/hostname", 1024)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ProviderError::Protocol { .. }),
            "{base}: {err:?}"
        );
        assert!(!err.to_string().contains("agent-token-"), "{err}");
    }
    assert!(rogue.server().log().all().is_empty());
    assert!(
        fake.server()
            .log()
            .all()
            .iter()
            .all(|r| !r.path.starts_with("/agent/"))
    );
}

#[tokio::test]
async fn with_the_default_trusted_hosts_a_loopback_agent_is_refused() {
    let (fake, _) = setup().await;
    let provider =
        <corral_provider_together::TogetherProvider as corral_provider::Adapter>::from_config(
            corral_provider_together::TogetherConfig {
                trusted_hosts: corral_provider_together::TogetherConfig::default().trusted_hosts,
                ..fake.config()
            },
        )
        .unwrap();
    let id = running(&provider).await;
    let err = provider
        .exec(&ctx(), &id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
    assert!(err.to_string().contains("127.0.0.1"), "{err}");
    assert!(
        fake.server()
            .log()
            .all()
            .iter()
            .all(|r| !r.path.starts_with("/agent/"))
    );
}
