//! Blaxel's traps: the workspace on every call, status reads that must not wake a sandbox in
//! standby, the edge that stops waiting for long commands, writes that would create missing
//! parents, and a binary-safe upload.

use std::time::Duration;

use corral_domain::{ProviderContext, SandboxStatus};
use corral_provider::{CallContext, ExecSpec, ProviderError, SandboxProvider, SecretString};
use corral_provider_blaxel::fake::{API_KEY, WORKSPACE};
use corral_provider_http::reqwest::{Client, Method, StatusCode};
use corral_provider_testkit::fake::{Fault, Recorded};
use serde_json::{Value, json};

use crate::{running, setup, spec};

fn body(r: &Recorded) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

async fn scratch(provider: &impl SandboxProvider, ctx: &CallContext, id: &str) -> String {
    let out = provider
        .exec(ctx, id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn every_call_carries_the_workspace_and_none_goes_out_without_one() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    let dir = scratch(&provider, &ctx, &id).await;
    provider
        .write_file(&ctx, &id, &format!("{dir}/f"), b"x")
        .await
        .unwrap();
    provider
        .read_file(&ctx, &id, &format!("{dir}/f"), 10)
        .await
        .unwrap();
    provider.delete(&ctx, &id).await.unwrap();
    let log = fake.server().log().all();
    assert!(log.len() >= 7);
    for r in &log {
        assert_eq!(r.headers["x-blaxel-workspace"], WORKSPACE, "{}", r.path);
        assert_eq!(
            r.headers["authorization"],
            format!("Bearer {API_KEY}").as_str()
        );
        // The sandbox API is reached below `/{workspace}/sandboxes/{name}`.
        if !r.path.starts_with("/v0/") {
            assert!(
                r.path.starts_with(&format!("/{WORKSPACE}/sandboxes/{id}/")),
                "{}",
                r.path
            );
        }
    }

    fake.server().log().clear();
    let no_workspace = CallContext::new(
        Some(SecretString::from(API_KEY)),
        ProviderContext::default(),
    );
    let err = provider
        .create(&no_workspace, &spec(None))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::MissingContext {
                field: "workspace",
                ..
            }
        ),
        "{err:?}"
    );
    let err = provider.get(&no_workspace, &id).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::MissingContext { .. }),
        "{err:?}"
    );
    assert!(fake.server().log().all().is_empty());
}

#[tokio::test]
async fn create_names_the_sandbox_after_the_operation_and_find_reads_it_by_name() {
    let (fake, provider, ctx) = setup().await;
    let s = spec(Some("blaxel/py-app:latest"));
    let created = provider.create(&ctx, &s).await.unwrap();
    let name = corral_provider_blaxel::sandbox_name(&s.operation_id);
    assert_eq!(created.native_id, name);
    assert_eq!(created.operation_id, Some(s.operation_id));
    assert_eq!(created.status, SandboxStatus::Creating);
    let r = &fake.server().log().matching(&Method::POST, "/v0/sandboxes")[0];
    assert_eq!(
        body(r),
        json!({
            "metadata": {
                "name": name,
                "labels": { "corral-operation-id": s.operation_id.to_string() },
            },
            "spec": { "runtime": { "image": "blaxel/py-app:latest", "memory": 4096 } },
        })
    );
    fake.server().log().clear();
    let found = provider
        .find_by_operation_id(&ctx, &s.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].native_id, name);
    let log = fake.server().log().all();
    assert_eq!(log.len(), 1, "one read by name, no listing");
    assert_eq!(log[0].path, format!("/v0/sandboxes/{name}"));
    // Without an image, Blaxel's own default image is asked for.
    provider.create(&ctx, &spec(None)).await.unwrap();
    let r = fake.server().log().matching(&Method::POST, "/v0/sandboxes");
    assert_eq!(
        body(&r[0])["spec"]["runtime"]["image"],
        corral_provider_blaxel::DEFAULT_IMAGE
    );
}

#[tokio::test]
async fn status_reads_use_the_control_plane_and_leave_a_standby_sandbox_asleep() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    fake.standby(&id);
    fake.server().log().clear();
    let seen = provider.get(&ctx, &id).await.unwrap();
    assert_eq!(seen.status, SandboxStatus::Paused);
    assert_eq!(
        fake.state(&id).as_deref(),
        Some("STANDBY"),
        "the read woke it"
    );
    for r in fake.server().log().all() {
        assert!(r.path.starts_with("/v0/sandboxes/"), "{}", r.path);
    }
    // A command resumes it, as Blaxel's sandbox API does.
    let out = provider
        .exec(&ctx, &id, &ExecSpec::new("echo hi"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"hi\n");
    assert_eq!(
        provider.get(&ctx, &id).await.unwrap().status,
        SandboxStatus::Running
    );
}

#[tokio::test]
async fn exec_waits_for_completion_with_whole_second_timeout_cwd_and_env() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    let dir = scratch(&provider, &ctx, &id).await;
    fake.server().log().clear();
    let mut spec = ExecSpec::new("pwd; printf %s \"$GREETING\" >&2; exit 4");
    spec.cwd = Some(dir.clone());
    spec.env.insert("GREETING".into(), "hi there".into());
    spec.timeout = Duration::from_millis(2500);
    let out = provider.exec(&ctx, &id, &spec).await.unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), dir);
    assert_eq!(out.stderr, b"hi there");
    assert_eq!(out.exit_code, 4);
    let r = &fake.server().log().matching(&Method::POST, "/process")[0];
    let b = body(r);
    assert_eq!(b["waitForCompletion"], true);
    assert_eq!(b["timeout"], 3, "whole seconds, rounded up");
    assert_eq!(b["workingDir"], dir.as_str());
    assert_eq!(b["env"], json!({ "GREETING": "hi there" }));
    assert!(b["name"].as_str().unwrap().starts_with("corral-exec-"));
}

#[tokio::test]
async fn a_command_that_outlasts_the_edge_is_followed_until_it_ends() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    fake.set_edge_wait(Duration::from_millis(200));
    let mut spec = ExecSpec::new("sleep 1; echo done; exit 2");
    spec.timeout = Duration::from_secs(20);
    let out = provider.exec(&ctx, &id, &spec).await.unwrap();
    assert_eq!(
        (out.stdout.as_slice(), out.exit_code),
        (b"done\n".as_slice(), 2)
    );
    let name = body(&fake.server().log().matching(&Method::POST, "/process")[0])["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let polls = fake
        .server()
        .log()
        .matching(&Method::GET, &format!("/process/{name}"));
    assert!(!polls.is_empty(), "the process was not followed by name");

    // Past its deadline, a followed process is killed and reported as timed out.
    let mut slow = ExecSpec::new("sleep 30");
    slow.timeout = Duration::from_secs(1);
    let err = provider.exec(&ctx, &id, &slow).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_command_the_edge_refused_is_unavailable_not_a_missing_sandbox() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    let edge = |status: u16| {
        fake.server().faults().arm(
            Fault::status(status)
                .on_method(Method::POST)
                .on_path("/process"),
        );
    };
    // 503 while the sandbox wakes: refused before the command started; retry later.
    edge(503);
    let err = provider
        .exec(&ctx, &id, &ExecSpec::new("echo never"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unavailable { .. }), "{err:?}");
    assert!(
        fake.server()
            .log()
            .matching(&Method::GET, "/process/")
            .is_empty()
    );
    // 504 before the process existed: followed, not found, and the sandbox is still there.
    edge(504);
    let err = provider
        .exec(&ctx, &id, &ExecSpec::new("echo never"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unavailable { .. }), "{err:?}");
    assert_eq!(
        provider.get(&ctx, &id).await.unwrap().status,
        SandboxStatus::Running
    );
    // Once the sandbox is gone, following a command says so.
    provider.delete(&ctx, &id).await.unwrap();
    edge(504);
    let err = provider
        .exec(&ctx, &id, &ExecSpec::new("echo never"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn writes_check_the_parent_because_blaxel_would_create_it() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    let dir = scratch(&provider, &ctx, &id).await;
    fake.server().log().clear();
    let err = provider
        .write_file(&ctx, &id, &format!("{dir}/missing/f"), b"x")
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ParentMissing { .. }),
        "{err:?}"
    );
    assert!(
        fake.server()
            .log()
            .matching(&Method::POST, "/filesystem-multipart")
            .is_empty(),
        "an upload started although the parent is missing"
    );
    // What the check guards against: Blaxel's own PUT creates the parents.
    let url = format!(
        "{}/{WORKSPACE}/sandboxes/{id}/filesystem{dir}/made/f",
        fake.server().base_url()
    );
    let put = Client::new()
        .put(url)
        .bearer_auth(API_KEY)
        .header("X-Blaxel-Workspace", WORKSPACE)
        .json(&json!({ "content": "x" }))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::OK);
    assert!(std::path::Path::new(&format!("{dir}/made/f")).exists());
    // A directory is not read as a file.
    let err = provider.read_file(&ctx, &id, &dir, 1024).await.unwrap_err();
    assert!(matches!(err, ProviderError::FileRefused { .. }), "{err:?}");
}

#[tokio::test]
async fn binary_writes_go_through_the_multipart_upload_in_parts() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    let dir = scratch(&provider, &ctx, &id).await;
    let path = format!("{dir}/big.bin");
    let content: Vec<u8> = (0..=255u8)
        .cycle()
        .take(corral_provider_blaxel::PART_BYTES + 1000)
        .collect();
    fake.server().log().clear();
    provider
        .write_file(&ctx, &id, &path, &content)
        .await
        .unwrap();
    let parts = fake.server().log().matching(&Method::PUT, "/part");
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0].query.as_deref(), Some("partNumber=1"));
    assert_eq!(parts[1].query.as_deref(), Some("partNumber=2"));
    let complete = &fake.server().log().matching(&Method::POST, "/complete")[0];
    assert_eq!(body(complete)["parts"].as_array().unwrap().len(), 2);
    assert_eq!(std::fs::read(&path).unwrap(), content);
    assert_eq!(
        provider
            .read_file(&ctx, &id, &path, content.len())
            .await
            .unwrap(),
        content
    );
    let err = provider
        .read_file(&ctx, &id, &path, content.len() - 1)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::FileTooLarge { .. }), "{err:?}");
}

#[tokio::test]
async fn the_fake_rejects_what_blaxel_rejects() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    let client = Client::new();
    let base = fake.server().base_url();
    let post = |url: String, b: Value, ws: Option<&'static str>| {
        let mut req = client.post(url).bearer_auth(API_KEY).json(&b);
        if let Some(ws) = ws {
            req = req.header("X-Blaxel-Workspace", ws);
        }
        req.send()
    };
    let create = format!("{base}/v0/sandboxes");
    for bad in [
        json!({ "metadata": { "name": "Upper_Case" } }),
        json!({ "metadata": { "name": "ok" }, "spec": { "runtime": { "memory": "4096" } } }),
        json!({ "metadata": { "name": "ok", "labels": { "a": 1 } } }),
        json!({ "metadata": { "name": "ok" }, "timeout": 5 }),
    ] {
        let r = post(create.clone(), bad.clone(), Some(WORKSPACE))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let dup = post(
        create.clone(),
        json!({ "metadata": { "name": id } }),
        Some(WORKSPACE),
    );
    assert_eq!(dup.await.unwrap().status(), StatusCode::CONFLICT);
    let no_ws = post(create.clone(), json!({ "metadata": { "name": "x" } }), None);
    assert_eq!(no_ws.await.unwrap().status(), StatusCode::BAD_REQUEST);
    let process = format!("{base}/{WORKSPACE}/sandboxes/{id}/process");
    for bad in [
        json!({}),
        json!({ "command": ["ls"] }),
        json!({ "command": "ls", "cwd": "/" }),
        json!({ "command": "ls", "timeout": "5" }),
        json!({ "command": "ls", "env": { "A": 1 } }),
    ] {
        let r = post(process.clone(), bad.clone(), Some(WORKSPACE))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let anonymous = client.get(format!("{create}/{id}")).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    drop(provider);
    drop(ctx);
}
