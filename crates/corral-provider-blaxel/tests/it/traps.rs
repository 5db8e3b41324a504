//! Blaxel's traps: the workspace on every call, status reads that must not wake a sandbox in
//! standby, the edge that stops waiting for long commands, writes that would create missing
//! parents, a binary-safe upload; and commands over the process API: a named process never
//! started twice, a log stream that replays from the start between Blaxel's own lines, stop
//! and kill, no stdin, a truncated replay.

use std::time::Duration;

use corral_domain::{CommandId, OutputStream, ProviderContext, SandboxStatus, Signal};
use corral_provider::{
    CallContext, CommandEvent, CommandSpec, ExecSpec, OutputOffsets, ProviderError,
    SandboxProvider, SecretString,
};
use corral_provider_blaxel::BlaxelProvider;
use corral_provider_blaxel::fake::{API_KEY, WORKSPACE};
use corral_provider_http::reqwest::{Client, Method, StatusCode};
use corral_provider_testkit::fake::{Fault, FaultKind, Recorded};
use futures::StreamExt as _;
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

// Commands over the process API.

fn command(line: &str) -> CommandSpec {
    CommandSpec {
        command_id: CommandId::new(),
        command: line.into(),
        cwd: None,
        env: Default::default(),
        stdin: false,
        timeout: Duration::from_secs(60),
    }
}

/// Every event of one attach, until its stream ends.
async fn events(
    provider: &BlaxelProvider,
    ctx: &CallContext,
    id: &str,
    handle: &str,
    from: OutputOffsets,
) -> Vec<CommandEvent> {
    let stream = provider
        .attach_command(ctx, id, handle, from)
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        stream.map(Result::unwrap).collect(),
    )
    .await
    .unwrap()
}

fn stdout_of(events: &[CommandEvent]) -> Vec<u8> {
    events
        .iter()
        .filter_map(|e| match e {
            CommandEvent::Output {
                stream: OutputStream::Stdout,
                data,
                ..
            } => Some(data.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn exit_of(events: &[CommandEvent]) -> Option<Option<i32>> {
    events.iter().find_map(|e| match e {
        CommandEvent::Exit { exit_code } => Some(*exit_code),
        _ => None,
    })
}

#[tokio::test]
async fn a_command_is_a_named_process_started_without_waiting_and_never_started_twice() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    let dir = scratch(&provider, &ctx, &id).await;
    let mut spec = command("printf %s \"$WHO\"; pwd; sleep 1");
    spec.cwd = Some(dir.clone());
    spec.env.insert("WHO".into(), "me".into());
    fake.server().log().clear();
    let started = provider.start_command(&ctx, &id, &spec).await.unwrap();
    assert_eq!(started.handle, spec.command_id.to_string());
    assert!(started.events.is_none());
    let posts = fake.server().log().matching(&Method::POST, "/process");
    assert_eq!(posts.len(), 1);
    assert_eq!(
        body(&posts[0]),
        json!({
            "command": spec.command,
            "name": spec.command_id.to_string(),
            "workingDir": dir,
            "env": { "WHO": "me" },
            "waitForCompletion": false,
        }),
        "no `timeout`: without keepAlive it kills nothing"
    );
    // Blaxel itself refuses the name only while its process runs…
    let raw = Client::new()
        .post(format!(
            "{}/{WORKSPACE}/sandboxes/{id}/process",
            fake.server().base_url()
        ))
        .bearer_auth(API_KEY)
        .header("X-Blaxel-Workspace", WORKSPACE)
        .json(&json!({ "command": "true", "name": started.handle }))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::BAD_REQUEST);
    let t = events(
        &provider,
        &ctx,
        &id,
        &started.handle,
        OutputOffsets::default(),
    )
    .await;
    assert_eq!(stdout_of(&t), format!("me{dir}\n").into_bytes());
    assert_eq!(exit_of(&t), Some(Some(0)));
    // …so a retried start after the process ended must look it up, not start it again.
    fake.server().log().clear();
    let again = provider.start_command(&ctx, &id, &spec).await.unwrap();
    assert_eq!(again.handle, started.handle);
    assert!(
        fake.server()
            .log()
            .matching(&Method::POST, "/process")
            .is_empty(),
        "the command ran twice"
    );
}

#[tokio::test]
async fn the_log_stream_replays_from_the_start_without_blaxels_own_lines() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    fake.set_keepalive(Duration::from_millis(150));
    // Chunks that end mid-line, a blank line, both streams, silences with keep-alives.
    let spec = command(
        "printf 10%%; sleep 0.4; printf 20%%; sleep 0.4; echo; echo; echo oops >&2; \
         sleep 0.4; echo '[keepalive] is mine'; exit 3",
    );
    let handle = provider
        .start_command(&ctx, &id, &spec)
        .await
        .unwrap()
        .handle;
    let t = events(&provider, &ctx, &id, &handle, OutputOffsets::default()).await;
    assert_eq!(
        String::from_utf8(stdout_of(&t)).unwrap(),
        "10%20%\n\n[keepalive] is mine\n"
    );
    let stderr: Vec<u8> = t
        .iter()
        .filter_map(|e| match e {
            CommandEvent::Output {
                stream: OutputStream::Stderr,
                data,
                offset,
            } => {
                assert_eq!(*offset, Some(0));
                Some(data.clone())
            }
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(stderr, b"oops\n");
    assert_eq!(exit_of(&t), Some(Some(3)));
    // Attaching again replays from byte 0; what Corral holds is not sent again, and the rest
    // carries its position.
    let again = events(
        &provider,
        &ctx,
        &id,
        &handle,
        OutputOffsets {
            stdout: 4,
            stderr: 5,
        },
    )
    .await;
    let mut expect_at = 4;
    for e in &again {
        if let CommandEvent::Output {
            stream,
            offset,
            data,
        } = e
        {
            assert_eq!(*stream, OutputStream::Stdout, "stderr was sent again");
            assert_eq!(*offset, Some(expect_at), "{again:?}");
            expect_at += data.len() as u64;
        }
    }
    assert_eq!(stdout_of(&again), b"0%\n\n[keepalive] is mine\n");
    assert_eq!(exit_of(&again), Some(Some(3)));
}

#[tokio::test]
async fn stop_is_term_and_kill_is_kill_and_the_exit_code_says_which() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    let caps = &provider.capabilities().commands;
    assert_eq!(caps.signals, [Signal::Kill, Signal::Term]);
    // A process that traps SIGTERM ends with its own code, after Blaxel's notice (not output).
    let trapping = command("trap 'echo bye; exit 7' TERM; echo ready; while :; do sleep 0.1; done");
    let handle = provider
        .start_command(&ctx, &id, &trapping)
        .await
        .unwrap()
        .handle;
    let mut stream = provider
        .attach_command(&ctx, &id, &handle, OutputOffsets::default())
        .await
        .unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert!(
        matches!(&first, CommandEvent::Output { data, .. } if data == b"ready\n"),
        "{first:?}"
    );
    provider
        .signal_command(&ctx, &id, &handle, Signal::Term)
        .await
        .unwrap();
    assert_eq!(
        fake.server()
            .log()
            .matching(&Method::DELETE, &format!("/process/{handle}"))
            .len(),
        1
    );
    let rest: Vec<CommandEvent> = stream.map(Result::unwrap).collect().await;
    assert_eq!(stdout_of(&rest), b"bye\n");
    assert_eq!(exit_of(&rest), Some(Some(7)));
    // Blaxel reports a death by its SIGKILL as `killed` with exit code -1: 137 here.
    let sleeper = command("echo ready; sleep 30");
    let handle = provider
        .start_command(&ctx, &id, &sleeper)
        .await
        .unwrap()
        .handle;
    tokio::time::sleep(Duration::from_millis(300)).await;
    provider
        .signal_command(&ctx, &id, &handle, Signal::Kill)
        .await
        .unwrap();
    assert_eq!(
        fake.server()
            .log()
            .matching(&Method::DELETE, &format!("/process/{handle}/kill"))
            .len(),
        1
    );
    let t = events(&provider, &ctx, &id, &handle, OutputOffsets::default()).await;
    assert_eq!(stdout_of(&t), b"ready\n");
    assert_eq!(exit_of(&t), Some(Some(137)));
    // Blaxel answers 404 for a process that is not running; an ended command is still Ok.
    for sig in [Signal::Term, Signal::Kill] {
        provider
            .signal_command(&ctx, &id, &handle, sig)
            .await
            .unwrap();
    }
    let err = provider
        .signal_command(&ctx, &id, &handle, Signal::Int)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unsupported { .. }), "{err:?}");
    let nobody = CommandId::new().to_string();
    let err = provider
        .signal_command(&ctx, &id, &nobody, Signal::Term)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    let err = provider
        .attach_command(&ctx, &id, &nobody, OutputOffsets::default())
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn stdin_is_refused_before_any_request_since_blaxel_processes_have_none() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    assert!(!provider.capabilities().commands.stdin);
    let mut spec = command("cat");
    spec.stdin = true;
    fake.server().log().clear();
    let err = provider
        .start_command(&ctx, &id, &spec)
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ProviderError::Unsupported { .. }), "{err:?}");
    let err = provider
        .write_stdin(&ctx, &id, "cmd", 0, b"x")
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unsupported { .. }), "{err:?}");
    assert!(fake.server().log().all().is_empty());
}

#[tokio::test]
async fn a_replay_of_a_log_whose_head_blaxel_released_carries_no_positions() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    fake.set_max_log_bytes(40);
    let spec = command("i=0; while [ $i -lt 10 ]; do echo line-$i; i=$((i+1)); done");
    let handle = provider
        .start_command(&ctx, &id, &spec)
        .await
        .unwrap()
        .handle;
    // Let it end, so the attach is all replay.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = events(&provider, &ctx, &id, &handle, OutputOffsets::default()).await;
    let out = String::from_utf8(stdout_of(&t)).unwrap();
    assert!(
        out.ends_with("line-9\n") && !out.contains("line-0"),
        "{out:?}"
    );
    assert!(!out.contains("truncated"), "Blaxel's marker is not output");
    for e in &t {
        if let CommandEvent::Output { offset, .. } = e {
            assert_eq!(*offset, None, "a tail's position is unknown");
        }
    }
    assert_eq!(exit_of(&t), Some(Some(0)));
}

#[tokio::test]
async fn exec_past_its_timeout_is_killed_because_blaxel_only_stops_waiting() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    let mut spec = ExecSpec::new("sleep 30");
    spec.timeout = Duration::from_secs(1);
    let err = provider.exec(&ctx, &id, &spec).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );
    let post = &fake.server().log().matching(&Method::POST, "/process")[0];
    let name = body(post)["name"].as_str().unwrap().to_owned();
    assert_eq!(
        fake.server()
            .log()
            .matching(&Method::DELETE, &format!("/process/{name}/kill"))
            .len(),
        1,
        "the process Blaxel stopped waiting for was left running"
    );
}

#[tokio::test]
async fn a_log_stream_cut_before_its_end_never_reports_an_exit() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    let handle = provider
        .start_command(&ctx, &id, &command("echo one; exit 5"))
        .await
        .unwrap()
        .handle;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The process has ended, but this body breaks: no exit may be inferred from it.
    fake.server().faults().arm(
        Fault::new(FaultKind::ResetAfterHeaders)
            .on_method(Method::GET)
            .on_path("/logs/stream"),
    );
    let cut = events(&provider, &ctx, &id, &handle, OutputOffsets::default()).await;
    assert_eq!(exit_of(&cut), None, "{cut:?}");
    let whole = events(&provider, &ctx, &id, &handle, OutputOffsets::default()).await;
    assert_eq!(stdout_of(&whole), b"one\n");
    assert_eq!(exit_of(&whole), Some(Some(5)));
}

/// Snapshots live under their sandbox, and a restore is a fork named after the operation.
mod lifecycle {
    use super::*;
    use corral_domain::{OperationId, Provider, SnapshotId, SnapshotStatus};
    use corral_provider::contract::NoObserver;
    use corral_provider::{Contracted, SnapshotSpec};
    use std::sync::Arc;

    fn snap() -> SnapshotSpec {
        SnapshotSpec {
            snapshot_id: SnapshotId::new(Provider::Blaxel),
            name: Some("before".into()),
        }
    }

    #[tokio::test]
    async fn a_snapshot_is_named_under_its_sandbox_and_pending_until_blaxel_lists_it_ready() {
        let (fake, provider, ctx) = setup().await;
        let id = running(&provider, &ctx).await;
        let spec = snap();
        let made = provider.snapshot(&ctx, &id, &spec).await.unwrap();
        assert_eq!(
            made.status,
            SnapshotStatus::Creating,
            "Blaxel answers pending"
        );
        let (sandbox, snapshot) = made.native_id.split_once(':').unwrap();
        assert_eq!(sandbox, id);
        let post = &fake.server().log().matching(&Method::POST, "/snapshots")[0];
        assert_eq!(post.path, format!("/v0/sandboxes/{id}/snapshots"));
        assert_eq!(
            body(post),
            json!({ "name": spec.snapshot_id.to_string().replace('_', "-") })
        );

        // No read of one snapshot: the sandbox's list is read.
        let first = provider.get_snapshot(&ctx, &made.native_id).await.unwrap();
        assert_eq!(first.status, SnapshotStatus::Creating);
        let then = provider.get_snapshot(&ctx, &made.native_id).await.unwrap();
        assert_eq!(then.status, SnapshotStatus::Ready);
        assert!(
            fake.server()
                .log()
                .matching(&Method::GET, "/snapshots")
                .iter()
                .all(|r| r.path == format!("/v0/sandboxes/{id}/snapshots"))
        );

        provider
            .delete_snapshot(&ctx, &made.native_id)
            .await
            .unwrap();
        let del = &fake.server().log().matching(&Method::DELETE, "/snapshots/")[0];
        assert_eq!(del.path, format!("/v0/sandboxes/{id}/snapshots/{snapshot}"));
        assert!(matches!(
            provider.get_snapshot(&ctx, &made.native_id).await,
            Err(ProviderError::NotFound { .. })
        ));
        // An id not of Corral's making is not found, without a request.
        fake.server().log().clear();
        assert!(matches!(
            provider.get_snapshot(&ctx, "no-colon").await,
            Err(ProviderError::NotFound { .. })
        ));
        assert!(fake.server().log().all().is_empty());
        provider.delete(&ctx, &id).await.unwrap();
    }

    #[tokio::test]
    async fn a_restore_forks_under_the_operations_name_and_is_found_by_it_despite_copied_labels() {
        let (fake, provider, ctx) = setup().await;
        let id = running(&provider, &ctx).await;
        let made = provider.snapshot(&ctx, &id, &snap()).await.unwrap();
        provider.get_snapshot(&ctx, &made.native_id).await.unwrap();
        let (_, snapshot) = made.native_id.split_once(':').unwrap();

        let spec = spec(Some("ignored/image:tag"));
        let copy = provider
            .restore(&ctx, &spec, &made.native_id)
            .await
            .unwrap();
        assert_eq!(
            copy.native_id,
            corral_provider_blaxel::sandbox_name(&spec.operation_id)
        );
        assert_eq!(copy.operation_id, Some(spec.operation_id));
        let fork = &fake.server().log().matching(&Method::POST, "/fork")[0];
        assert_eq!(fork.path, format!("/v0/sandboxes/{id}/fork"));
        assert_eq!(
            body(fork),
            json!({ "targetName": copy.native_id, "targetType": "sandbox", "snapshotId": snapshot })
        );

        // The fork carries the source's label; its name says whose it is, and the contract
        // wrapper's operation check lets it through.
        let contracted = Contracted::new(Arc::new(provider), Arc::new(NoObserver));
        let found = contracted
            .find_by_operation_id(&ctx, &spec.operation_id)
            .await
            .unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].native_id, copy.native_id);
        let source = contracted.get(&ctx, &id).await.unwrap();
        assert_ne!(source.operation_id, Some(spec.operation_id));

        // A retry after a lost answer meets 409 and answers the sandbox the first attempt made.
        let again = contracted
            .restore(&ctx, &spec, &made.native_id)
            .await
            .unwrap();
        assert_eq!(again.native_id, copy.native_id);
        assert!(
            contracted
                .find_by_operation_id(&ctx, &OperationId::new())
                .await
                .unwrap()
                .is_empty()
        );
        for s in [copy.native_id, id] {
            contracted.delete(&ctx, &s).await.unwrap();
        }
    }
}
