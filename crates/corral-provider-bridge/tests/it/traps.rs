//! The contract's traps, and those of its process routes (extension).

use std::time::Duration;

use axum::http::Method;
use corral_domain::{CommandId, OperationId, OutputStream, Provider, ProviderContext, Signal};
use corral_provider::{
    Adapter, CallContext, CommandEvent, CommandSpec, CreateSpec, ExecSpec, OutputOffsets,
    ProviderError, SandboxProvider, SecretString,
};
use corral_provider_bridge::fake::API_KEY;
use corral_provider_bridge::{BridgeConfig, api};
use corral_provider_testkit::fake::{Fault, FaultKind};
use futures::StreamExt as _;

use crate::{Fake, TestBridge};

fn spec() -> CreateSpec {
    corral_provider_testkit::helpers::spec(Provider::Cloudflare, None, None)
}

fn adapter(fake: &Fake) -> TestBridge {
    TestBridge::from_config(fake.config()).unwrap()
}

#[tokio::test]
async fn a_bridge_without_the_extensions_works_but_lost_creates_stay_unknown() {
    let fake = Fake::start_plain().await;
    let p = adapter(&fake);
    let ctx = fake.context();
    let spec = spec();
    let created = p.create(&ctx, &spec).await.unwrap();
    assert!(api::is_sandbox_id(&created.native_id));
    // Get falls back to `/running` (the observe route answers 405 there).
    let seen = p.get(&ctx, &created.native_id).await.unwrap();
    assert_eq!(seen.status, corral_domain::SandboxStatus::Running);
    assert_eq!(seen.operation_id, None);
    let paths: Vec<String> = fake
        .server()
        .log()
        .all()
        .iter()
        .map(|r| r.path.clone())
        .collect();
    assert!(paths.iter().any(|p| p.ends_with("/running")), "{paths:?}");
    // Exec with cwd and env works through the script.
    let mut exec = ExecSpec::new("printf '%s' \"$A\"; pwd");
    exec.env.insert("A".into(), "it's".into());
    exec.cwd = Some("/".into());
    let out = p.exec(&ctx, &created.native_id, &exec).await.unwrap();
    assert_eq!(out.stdout, b"it's/\n");
    // The lookup by tag is unsupported, never "none found".
    let err = p
        .find_by_operation_id(&ctx, &spec.operation_id)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Unsupported {
                operation: "find_by_operation_id",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.may_have_been_applied());
}

#[tokio::test]
async fn the_create_sends_the_operation_id_as_its_tag_and_the_lookup_finds_it() {
    let fake = Fake::start().await;
    let p = adapter(&fake);
    let spec = spec();
    let created = p.create(&fake.context(), &spec).await.unwrap();
    let create = fake
        .server()
        .log()
        .all()
        .into_iter()
        .find(|r| r.path == "/v1/sandbox" && r.method == "POST")
        .unwrap();
    let body: api::CreateRequest = serde_json::from_slice(&create.body).unwrap();
    assert_eq!(body.tag, spec.operation_id.to_string());
    assert_eq!(create.headers["authorization"], format!("Bearer {API_KEY}"));
    let found = p
        .find_by_operation_id(&fake.context(), &spec.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].native_id, created.native_id);
    assert_eq!(found[0].operation_id, Some(spec.operation_id));
}

#[tokio::test]
async fn an_error_event_after_http_200_is_a_failure_not_an_exit() {
    let fake = Fake::start().await;
    let p = adapter(&fake);
    let id = p.create(&fake.context(), &spec()).await.unwrap().native_id;
    fake.handle().script_next_exec(
        "event: stdout\ndata: aGk=\n\nevent: error\ndata: {\"error\":\"exec failed: connection reset\",\"code\":\"exec_transport_error\"}\n\n",
    );
    let err = p
        .exec(&fake.context(), &id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::ServerError { message, .. } if message.contains("exec_transport_error")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_bridge_echoing_the_key_in_an_error_event_does_not_leak_it() {
    let fake = Fake::start().await;
    let p = adapter(&fake);
    let id = p.create(&fake.context(), &spec()).await.unwrap().native_id;
    fake.handle().script_next_exec(format!(
        "event: error\ndata: {{\"error\":\"bad key {API_KEY}\",\"code\":\"exec_error\"}}\n\n"
    ));
    let err = p
        .exec(&fake.context(), &id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(API_KEY), "{shown}");
}

#[tokio::test]
async fn a_stream_that_ends_without_an_exit_event_is_an_error_never_exit_zero() {
    let fake = Fake::start().await;
    let p = adapter(&fake);
    let id = p.create(&fake.context(), &spec()).await.unwrap().native_id;
    fake.handle()
        .script_next_exec("event: stdout\ndata: aGk=\n\n");
    let err = p
        .exec(&fake.context(), &id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
    fake.handle().script_next_exec("");
    let err = p
        .exec(&fake.context(), &id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
}

#[tokio::test]
async fn a_write_never_creates_a_missing_parent_although_the_bridge_would() {
    let fake = Fake::start().await;
    let p = adapter(&fake);
    let ctx = fake.context();
    let id = p.create(&ctx, &spec()).await.unwrap().native_id;
    let dir = tempfile_dir();
    let orphan = format!("{dir}/missing/file.txt");
    let err = p.write_file(&ctx, &id, &orphan, b"x").await.unwrap_err();
    assert!(
        matches!(err, ProviderError::ParentMissing { .. }),
        "{err:?}"
    );
    assert!(!std::path::Path::new(&format!("{dir}/missing")).exists());
    assert!(!fake.server().log().all().iter().any(|r| r.method == "PUT"));
}

fn tempfile_dir() -> String {
    let dir = std::env::temp_dir().join(format!("corral-bridge-{}", OperationId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.to_string_lossy().into_owned()
}

#[tokio::test]
async fn no_bridge_url_and_no_credential_are_refused_before_any_request() {
    let fake = Fake::start().await;
    let p = TestBridge::from_config(BridgeConfig::default()).unwrap();
    let err = p.create(&fake.context(), &spec()).await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::MissingContext {
                field: "bridgeUrl",
                ..
            }
        ),
        "{err:?}"
    );
    let p = adapter(&fake);
    let anonymous = CallContext::new(None, ProviderContext::default());
    let err = p.create(&anonymous, &spec()).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::MissingCredential { .. }),
        "{err:?}"
    );
    assert!(fake.server().log().all().is_empty());
}

#[tokio::test]
async fn a_context_url_is_reached_only_at_its_pinned_addresses() {
    let fake = Fake::start().await;
    let p = TestBridge::from_config(BridgeConfig::default()).unwrap();
    let port = fake.server().addr().port();
    let context = |url: String| ProviderContext {
        bridge_url: Some(url),
        ..Default::default()
    };
    let key = || Some(SecretString::from(API_KEY));
    // A name that never resolves (RFC 6761) reaches the fake only through the pin.
    let url = format!("http://bridge.corral.invalid:{port}");
    let pinned = CallContext::new(key(), context(url.clone()))
        .with_pinned_addrs(vec![format!("127.0.0.1:{port}").parse().unwrap()]);
    p.create(&pinned, &spec()).await.unwrap();
    let unpinned = CallContext::new(key(), context(url));
    let err = p.create(&unpinned, &spec()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Unavailable { .. }), "{err:?}");
    // A literal address that is not among the vetted ones is refused before connecting.
    let elsewhere = CallContext::new(key(), context(format!("http://127.0.0.1:{port}")))
        .with_pinned_addrs(vec!["203.0.113.7:443".parse().unwrap()]);
    let before = fake.server().log().all().len();
    let err = p.create(&elsewhere, &spec()).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    assert_eq!(fake.server().log().all().len(), before);
}

#[tokio::test]
async fn redirects_are_not_followed() {
    use axum::response::Redirect;
    let target = Fake::start().await;
    let to = format!("{}/v1/sandbox", target.base_url());
    let router = axum::Router::new().route(
        "/v1/sandbox",
        axum::routing::post(move || {
            let to = to.clone();
            async move { Redirect::temporary(&to) }
        }),
    );
    let server = corral_provider_testkit::fake::FakeServer::start(router).await;
    let p = TestBridge::from_config(BridgeConfig {
        bridge_url: Some(server.base_url()),
        ..Default::default()
    })
    .unwrap();
    let err = p.create(&target.context(), &spec()).await.unwrap_err();
    assert!(
        err.to_string().contains("redirect")
            || matches!(err, ProviderError::Unexpected { status: 307, .. }),
        "{err:?}"
    );
    assert!(target.server().log().all().is_empty());
}

#[tokio::test]
async fn a_command_past_its_deadline_ends_with_exec_timeout_and_is_a_timeout() {
    let fake = Fake::start().await;
    let p = adapter(&fake);
    let id = p.create(&fake.context(), &spec()).await.unwrap().native_id;
    let mut slow = ExecSpec::new("sleep 20");
    slow.timeout = Duration::from_millis(300);
    let err = p.exec(&fake.context(), &id, &slow).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );
    let exec = fake
        .server()
        .log()
        .all()
        .into_iter()
        .find(|r| r.path.ends_with("/exec"))
        .unwrap();
    let body: api::ExecRequest = serde_json::from_slice(&exec.body).unwrap();
    assert_eq!(body.timeout_ms, Some(300));
    assert_eq!(body.argv[..2], ["sh", "-c"]);
}

#[tokio::test]
async fn the_workers_403_for_a_path_outside_the_workspace_is_a_refused_path_not_a_bad_key() {
    use corral_provider_testkit::fake::{Fault, FaultKind};
    let fake = Fake::start().await;
    let p = adapter(&fake);
    let ctx = fake.context();
    let id = p.create(&ctx, &spec()).await.unwrap().native_id;
    fake.server().faults().arm(
        Fault::new(FaultKind::Status {
            status: 403,
            retry_after: None,
            body: r#"{"error":"path must resolve to a location within /workspace","code":"invalid_request"}"#.into(),
        })
        .on_path("/file/"),
    );
    let err = p
        .read_file(&ctx, &id, "/etc/hostname", 1024)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::FileRefused { reason, .. } if reason.contains("/workspace")),
        "{err:?}"
    );
    fake.server().faults().arm(
        Fault::new(FaultKind::Status {
            status: 403,
            retry_after: None,
            body: r#"{"error":"cwd must resolve to a location within /workspace","code":"invalid_request"}"#.into(),
        })
        .on_path("/exec"),
    );
    let err = p.exec(&ctx, &id, &ExecSpec::new("true")).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_worker_without_exec_timeout_ending_a_killed_command_with_an_error_is_a_timeout() {
    let fake = Fake::start_plain().await;
    let p = adapter(&fake);
    let ctx = fake.context();
    let id = p.create(&ctx, &spec()).await.unwrap().native_id;
    let mut slow = ExecSpec::new("sleep 20");
    slow.timeout = Duration::from_millis(300);
    let err = p.exec(&ctx, &id, &slow).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );
    // Before the deadline, the same error event is the bridge failing.
    fake.handle()
        .script_next_exec("event: error\ndata: {\"error\":\"boom\",\"code\":\"exec_error\"}\n\n");
    let err = p.exec(&ctx, &id, &ExecSpec::new("true")).await.unwrap_err();
    assert!(matches!(err, ProviderError::ServerError { .. }), "{err:?}");
}

#[tokio::test]
async fn a_key_echoed_in_a_403_invalid_request_straddling_the_excerpt_cut_is_redacted_whole() {
    use corral_provider_testkit::fake::{Fault, FaultKind};
    let fake = Fake::start().await;
    let p = adapter(&fake);
    let ctx = fake.context();
    let id = p.create(&ctx, &spec()).await.unwrap().native_id;
    // The excerpt is cut at 300 characters; put the key across that cut at every offset a
    // cut-then-redact order would leak a part of it.
    for before in (300 - API_KEY.len() + 1)..300 {
        let message = format!("{}{API_KEY} and more", "x".repeat(before - 10));
        fake.server().faults().arm(
            Fault::new(FaultKind::Status {
                status: 403,
                retry_after: None,
                body: format!(r#"{{"error":"{message}","code":"invalid_request"}}"#),
            })
            .on_path("/exec"),
        );
        let err = p.exec(&ctx, &id, &ExecSpec::new("true")).await.unwrap_err();
        let shown = format!("{err:?} {err}");
        assert!(
            matches!(err, ProviderError::InvalidRequest { .. }),
            "{err:?}"
        );
        for window in API_KEY.as_bytes().windows(8) {
            let window = std::str::from_utf8(window).unwrap();
            assert!(
                !shown.contains(window),
                "`{window}` of the key leaked: {shown}"
            );
        }
    }
}

// Commands over the process routes (extension).

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

async fn sandbox(fake: &Fake) -> (TestBridge, CallContext, String) {
    let p = adapter(fake);
    let ctx = fake.context();
    let id = p.create(&ctx, &spec()).await.unwrap().native_id;
    (p, ctx, id)
}

/// Every event of one attach, until its stream ends.
async fn events(
    p: &TestBridge,
    ctx: &CallContext,
    id: &str,
    handle: &str,
    from: OutputOffsets,
) -> Vec<CommandEvent> {
    let stream = p.attach_command(ctx, id, handle, from).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        stream.map(Result::unwrap).collect(),
    )
    .await
    .unwrap()
}

fn json(r: &corral_provider_testkit::fake::Recorded) -> serde_json::Value {
    serde_json::from_slice(&r.body).unwrap()
}

#[tokio::test]
async fn a_command_is_a_bridge_process_named_by_its_command_id_and_never_started_twice() {
    let fake = Fake::start().await;
    let (p, ctx, id) = sandbox(&fake).await;
    let mut spec = command("echo \"$A\"; sleep 1");
    spec.env.insert("A".into(), "it's".into());
    let started = p.start_command(&ctx, &id, &spec).await.unwrap();
    assert_eq!(started.handle, format!("process:{}", spec.command_id));
    let posts = fake.server().log().matching(&Method::POST, "/process");
    let body = json(&posts[0]);
    assert_eq!(body["argv"][0], "sh");
    assert_eq!(body["argv"][1], "-c");
    assert!(
        body["argv"][2]
            .as_str()
            .unwrap()
            .contains("export A='it'\\''s'")
    );
    assert_eq!(body["process_id"], spec.command_id.to_string());
    assert_eq!(body["timeout_ms"], 60_000);
    assert!(body.get("stdin").is_none(), "{body}");
    // A retried start meets `409 process_exists` and names the same process.
    let again = p.start_command(&ctx, &id, &spec).await.unwrap();
    assert_eq!(again.handle, started.handle);
    assert_eq!(fake.handle().process_count(), 1);
    let found = p.find_command(&ctx, &id, &spec.command_id).await.unwrap();
    assert_eq!(found.as_deref(), Some(started.handle.as_str()));
    let t = events(&p, &ctx, &id, &started.handle, OutputOffsets::default()).await;
    assert_eq!(
        t,
        [
            CommandEvent::Output {
                stream: OutputStream::Stdout,
                offset: Some(0),
                data: b"it's\n".to_vec(),
            },
            CommandEvent::Exit { exit_code: Some(0) },
        ]
    );
}

#[tokio::test]
async fn logs_are_asked_from_the_offsets_corral_holds_and_carry_positions() {
    let fake = Fake::start().await;
    let (p, ctx, id) = sandbox(&fake).await;
    let handle = p
        .start_command(
            &ctx,
            &id,
            &command("echo one; echo two; echo err >&2; exit 4"),
        )
        .await
        .unwrap()
        .handle;
    let from = OutputOffsets {
        stdout: 4,
        stderr: 0,
    };
    let t = events(&p, &ctx, &id, &handle, from).await;
    let logs = fake.server().log().matching(&Method::GET, "/logs");
    assert_eq!(logs[0].query.as_deref(), Some("stdout=4&stderr=0"));
    assert!(t.contains(&CommandEvent::Output {
        stream: OutputStream::Stdout,
        offset: Some(4),
        data: b"two\n".to_vec(),
    }));
    assert!(t.contains(&CommandEvent::Output {
        stream: OutputStream::Stderr,
        offset: Some(0),
        data: b"err\n".to_vec(),
    }));
    assert_eq!(t.last(), Some(&CommandEvent::Exit { exit_code: Some(4) }));
    // A stream cut before its exit event ends the attach without one, never with a false end.
    fake.server().faults().arm(
        Fault::new(FaultKind::ResetAfterHeaders)
            .on_method(Method::GET)
            .on_path("/logs"),
    );
    let cut = events(&p, &ctx, &id, &handle, OutputOffsets::default()).await;
    assert!(cut.is_empty(), "{cut:?}");
}

#[tokio::test]
async fn stdin_travels_with_offsets_so_a_resend_is_not_written_twice() {
    let fake = Fake::start().await;
    let (p, ctx, id) = sandbox(&fake).await;
    let mut spec = command("cat; echo eof");
    spec.stdin = true;
    let handle = p.start_command(&ctx, &id, &spec).await.unwrap().handle;
    assert_eq!(
        json(&fake.server().log().matching(&Method::POST, "/process")[0])["stdin"],
        true
    );
    assert_eq!(
        p.write_stdin(&ctx, &id, &handle, 0, b"ab").await.unwrap(),
        2
    );
    assert_eq!(
        p.write_stdin(&ctx, &id, &handle, 0, b"ab").await.unwrap(),
        2
    );
    assert_eq!(
        p.write_stdin(&ctx, &id, &handle, 1, b"bcd").await.unwrap(),
        4
    );
    let writes = fake.server().log().matching(&Method::POST, "/stdin");
    assert_eq!(
        json(&writes[2]),
        serde_json::json!({ "offset": 1, "data": "YmNk" })
    );
    // Past what was accepted is a gap the bridge refuses.
    let err = p
        .write_stdin(&ctx, &id, &handle, 9, b"x")
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    p.close_stdin(&ctx, &id, &handle).await.unwrap();
    let t = events(&p, &ctx, &id, &handle, OutputOffsets::default()).await;
    let out: Vec<u8> = t
        .iter()
        .filter_map(|e| match e {
            CommandEvent::Output { data, .. } => Some(data.clone()),
            CommandEvent::Exit { .. } => None,
        })
        .flatten()
        .collect();
    assert_eq!(out, b"abcdeof\n");
    let err = p
        .write_stdin(&ctx, &id, &handle, 4, b"late")
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn signals_travel_by_name_and_an_unknown_process_is_not_found() {
    let fake = Fake::start().await;
    let (p, ctx, id) = sandbox(&fake).await;
    let handle = p
        .start_command(
            &ctx,
            &id,
            &command("trap 'echo usr1; exit 9' USR1; while :; do sleep 0.1; done"),
        )
        .await
        .unwrap()
        .handle;
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.signal_command(&ctx, &id, &handle, Signal::Usr1)
        .await
        .unwrap();
    let kill = &fake.server().log().matching(&Method::POST, "/kill")[0];
    assert_eq!(json(kill), serde_json::json!({ "signal": "SIGUSR1" }));
    let t = events(&p, &ctx, &id, &handle, OutputOffsets::default()).await;
    assert_eq!(t.last(), Some(&CommandEvent::Exit { exit_code: Some(9) }));
    // An ended process takes a signal without error.
    p.signal_command(&ctx, &id, &handle, Signal::Kill)
        .await
        .unwrap();
    let nobody = format!("process:{}", CommandId::new());
    let err = p
        .attach_command(&ctx, &id, &nobody, OutputOffsets::default())
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    let err = p
        .signal_command(&ctx, &id, &nobody, Signal::Term)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    // Nothing found natively: the exec wrapper is asked too, and has nothing either.
    assert_eq!(
        p.find_command(&ctx, &id, &CommandId::new()).await.unwrap(),
        None
    );
}
