//! Daytona's known traps, each checked on the requests the fake received.

use std::time::Duration;

use corral_domain::{
    CreateSandboxRequest, OperationId, OutputStreams, Provider, SandboxStatus, SnapshotId,
    SnapshotStatus, StandardCreate,
};
use corral_provider::{CreateSpec, ExecSpec, ProviderError, SandboxProvider, SnapshotSpec};
use corral_provider_daytona::fake::API_KEY;
use corral_provider_http::reqwest::Method;
use serde_json::Value;

use crate::{ctx, spec};

fn decode_b64(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

fn body_json(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}

#[tokio::test]
async fn create_sends_auto_stop_in_minutes_labels_and_snapshot() {
    let (fake, p) = crate::world().await;
    let s = spec(None);
    let created = p.create(&ctx(), &s).await.unwrap();
    let posts = fake.server().log().matching(&Method::POST, "/sandbox");
    assert_eq!(posts.len(), 1);
    let req = &posts[0];
    assert_eq!(req.path, "/sandbox");
    assert_eq!(
        req.headers["authorization"],
        format!("Bearer {API_KEY}").as_str()
    );
    let body = body_json(&req.body);
    // Daytona's default idle auto-stop, 15 minutes, in minutes.
    assert_eq!(body["autoStopInterval"], 15, "{body}");
    assert_eq!(
        body["labels"]["corral-operation-id"],
        s.operation_id.to_string()
    );
    assert!(body.get("snapshot").is_none());
    assert_eq!(fake.auto_stop_minutes_of(&created.native_id), Some(15));

    let s = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(
            Provider::Daytona,
            Some("my-snapshot".into()),
            Some(3600),
        ),
        timeout_seconds: Some(3600),
    };
    let created = p.create(&ctx(), &s).await.unwrap();
    let body = body_json(&fake.server().log().matching(&Method::POST, "/sandbox")[1].body);
    assert_eq!(body["autoStopInterval"], 60, "3600 s is 60 minutes: {body}");
    assert_eq!(body["snapshot"], "my-snapshot");
    assert_eq!(fake.auto_stop_minutes_of(&created.native_id), Some(60));
    // The advertised granularity is the minute.
    assert_eq!(p.capabilities().timeout_granularity_seconds, Some(60));
}

#[tokio::test]
async fn create_answers_before_the_sandbox_is_started_and_get_sees_it_start() {
    let (fake, p) = crate::world().await;
    fake.set_warmup(2);
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    assert_eq!(created.status, SandboxStatus::Creating);
    let id = &created.native_id;
    assert_eq!(
        p.get(&ctx(), id).await.unwrap().status,
        SandboxStatus::Creating
    );
    assert_eq!(
        p.get(&ctx(), id).await.unwrap().status,
        SandboxStatus::Creating
    );
    assert_eq!(
        p.get(&ctx(), id).await.unwrap().status,
        SandboxStatus::Running
    );
}

#[tokio::test]
async fn exec_output_is_combined_as_advertised_and_sent_to_the_toolbox() {
    let (fake, p) = crate::world().await;
    assert_eq!(p.capabilities().output_streams, OutputStreams::Combined);
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    crate::started(&p, &created.native_id).await;
    let mut exec = ExecSpec::new("echo out; echo err >&2; exit 3");
    exec.cwd = Some("/".into());
    exec.env.insert("A".into(), "b".into());
    exec.timeout = Duration::from_secs(42);
    let out = p.exec(&ctx(), &created.native_id, &exec).await.unwrap();
    assert_eq!(out.stdout, b"out\nerr\n");
    assert!(out.stderr.is_empty());
    assert_eq!(out.exit_code, 3);

    let calls = fake
        .toolbox()
        .log()
        .matching(&Method::POST, "/process/execute");
    assert_eq!(calls.len(), 1);
    let req = &calls[0];
    assert_eq!(
        req.path,
        format!("/toolbox/{}/process/execute", created.native_id)
    );
    assert_eq!(
        req.headers["authorization"],
        format!("Bearer {API_KEY}").as_str()
    );
    let body = body_json(&req.body);
    let wire = body["command"].as_str().unwrap();
    let encoded = wire
        .strip_prefix("sh -c 's=$(echo ")
        .and_then(|rest| rest.strip_suffix(" | base64 -d) && eval \"$s\"'"))
        .unwrap_or_else(|| panic!("unexpected wire command {wire}"));
    assert!(
        encoded
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
    );
    assert_eq!(decode_b64(encoded), b"echo out; echo err >&2; exit 3");
    assert_eq!(body["cwd"], "/");
    assert_eq!(body["envs"]["A"], "b");
    assert_eq!(body["timeout"], 42, "seconds");
    // The toolbox lives on its own host, named by the sandbox record.
    assert!(
        fake.server()
            .log()
            .all()
            .iter()
            .all(|r| !r.path.contains("toolbox"))
    );
}

#[tokio::test]
async fn a_command_past_its_timeout_is_killed_by_the_daemon_and_reported() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    crate::started(&p, &created.native_id).await;
    let mut exec = ExecSpec::new("sleep 30");
    exec.timeout = Duration::from_millis(900);
    let err = p.exec(&ctx(), &created.native_id, &exec).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );
    let req = &fake
        .toolbox()
        .log()
        .matching(&Method::POST, "/process/execute")[0];
    // 0.9 s is sent as 1 whole second (rounded up, never 0, which means no timeout).
    assert_eq!(body_json(&req.body)["timeout"], 1);
}

#[tokio::test]
async fn find_by_operation_id_filters_the_list_by_label_json() {
    let (fake, p) = crate::world().await;
    let s = spec(None);
    let created = p.create(&ctx(), &s).await.unwrap();
    p.create(&ctx(), &spec(None)).await.unwrap();
    let found = p
        .find_by_operation_id(&ctx(), &s.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].native_id, created.native_id);
    assert_eq!(found[0].operation_id, Some(s.operation_id));
    let list = fake
        .server()
        .log()
        .all()
        .into_iter()
        .find(|r| r.method == Method::GET && r.path == "/sandbox")
        .unwrap();
    let query = list.query.unwrap();
    let labels = corral_provider_http::Url::parse(&format!("http://x/?{query}"))
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "labels")
        .map(|(_, v)| v.into_owned())
        .unwrap();
    assert_eq!(
        body_json(labels.as_bytes()),
        serde_json::json!({"corral-operation-id": s.operation_id.to_string()})
    );
}

#[tokio::test]
async fn write_checks_the_parent_because_the_upload_would_create_it() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    crate::started(&p, &created.native_id).await;
    let err = p
        .write_file(
            &ctx(),
            &created.native_id,
            "/nonexistent-corral-dir/x/y.txt",
            b"x",
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ParentMissing { .. }),
        "{err:?}"
    );
    assert!(
        fake.toolbox()
            .log()
            .all()
            .iter()
            .all(|r| !r.path.ends_with("/files/upload"))
    );
    let dir = tempfile::tempdir().unwrap();
    let path = format!("{}/f.bin", dir.path().display());
    p.write_file(&ctx(), &created.native_id, &path, b"\x00\xff")
        .await
        .unwrap();
    let up = fake
        .toolbox()
        .log()
        .all()
        .into_iter()
        .find(|r| r.path.ends_with("/files/upload"))
        .unwrap();
    assert!(
        up.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("multipart/form-data; boundary=")
    );
    assert_eq!(
        p.read_file(&ctx(), &created.native_id, &path, 16)
            .await
            .unwrap(),
        b"\x00\xff"
    );
}

#[tokio::test]
async fn a_restarted_adapter_finds_the_toolbox_from_the_sandbox_record() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    crate::started(&p, &created.native_id).await;
    let fresh = crate::provider(fake.config());
    let out = fresh
        .exec(&ctx(), &created.native_id, &ExecSpec::new("echo hi"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"hi\n");
}

#[tokio::test]
async fn commands_with_quotes_newlines_and_spaces_survive_the_wire_form() {
    let (_fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    crate::started(&p, &created.native_id).await;
    let script = "printf '%s|' \"it's\" 'a  b' \"$((1+2))\"\nprintf '%s' \"*\"";
    let out = p
        .exec(&ctx(), &created.native_id, &ExecSpec::new(script))
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "it's|a  b|3|*");
    assert_eq!(out.exit_code, 0);
}

#[tokio::test]
async fn the_fake_rejects_what_daytona_rejects() {
    let (fake, p) = crate::world().await;
    let client = corral_provider_http::reqwest::Client::new();
    let create = |body: &'static str, auth: Option<&str>| {
        let mut req = client
            .post(format!("{}/sandbox", fake.server().base_url()))
            .header("content-type", "application/json")
            .body(body);
        if let Some(a) = auth {
            req = req.header("authorization", a.to_owned());
        }
        req.send()
    };
    let bearer = format!("Bearer {API_KEY}");
    let status = |r: corral_provider_http::reqwest::Response| r.status().as_u16();
    assert_eq!(status(create("{}", None).await.unwrap()), 401);
    assert_eq!(
        status(create("{}", Some("Bearer nope")).await.unwrap()),
        401
    );
    assert_eq!(status(create("{}", Some(&bearer)).await.unwrap()), 200);
    // Minutes are integers: seconds-as-fractions are refused.
    assert_eq!(
        status(
            create(r#"{"autoStopInterval":1.5}"#, Some(&bearer))
                .await
                .unwrap()
        ),
        400
    );
    assert_eq!(
        status(
            create(r#"{"autoStopInterval":"15"}"#, Some(&bearer))
                .await
                .unwrap()
        ),
        400
    );
    assert_eq!(
        status(create(r#"{"labels":["x"]}"#, Some(&bearer)).await.unwrap()),
        400
    );
    // The listing's query parameters are typed: a boolean, a bounded limit, a known cursor.
    for query in [
        "includeErroredDeleted=yes",
        "limit=0",
        "limit=201",
        "cursor=not-a-cursor",
    ] {
        let r = client
            .get(format!("{}/sandbox?{query}", fake.base_url()))
            .header("authorization", bearer.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(status(r), 400, "{query}");
    }
    // The toolbox wants a command, and only for a started sandbox.
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    let execute = format!(
        "{}/toolbox/{}/process/execute",
        fake.toolbox().base_url(),
        created.native_id
    );
    let r = client
        .post(&execute)
        .header("authorization", bearer.clone())
        .body(r#"{"command":"true"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(status(r), 400, "not started yet");
    crate::started(&p, &created.native_id).await;
    let r = client
        .post(&execute)
        .header("authorization", bearer.clone())
        .body(r#"{"cwd":"/"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(status(r), 400, "command is required");
    let r = client
        .post(&execute)
        .header("authorization", bearer)
        .body(r#"{"command":"true","timeout":"5"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(status(r), 400, "timeout is an integer of seconds");
}

#[tokio::test]
async fn a_repeated_create_of_one_operation_returns_the_same_sandbox() {
    let (fake, p) = crate::world().await;
    let s = spec(None);
    let first = p.create(&ctx(), &s).await.unwrap();
    let again = p.create(&ctx(), &s).await.unwrap();
    assert_eq!(first.native_id, again.native_id);
    assert_eq!(again.operation_id, Some(s.operation_id));
    let posts = fake.server().log().matching(&Method::POST, "/sandbox");
    assert_eq!(posts.len(), 2);
    assert_eq!(
        body_json(&posts[0].body)["name"],
        s.operation_id.to_string()
    );
    let found = p
        .find_by_operation_id(&ctx(), &s.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "no second sandbox was made");
}

#[tokio::test]
async fn a_name_taken_by_a_sandbox_of_another_operation_is_refused() {
    let (fake, p) = crate::world().await;
    let s = spec(None);
    let resp = corral_provider_http::reqwest::Client::new()
        .post(format!("{}/sandbox", fake.server().base_url()))
        .header("authorization", format!("Bearer {API_KEY}"))
        .header("content-type", "application/json")
        .body(format!(r#"{{"name":"{}"}}"#, s.operation_id))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let err = p.create(&ctx(), &s).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
}

/// Labels `{corral-operation-id: op}` listed without `includeErroredDeleted`, as a caller that
/// forgot it sees them.
async fn listed_by_default(fake: &corral_provider_daytona::fake::Fake, op: &OperationId) -> usize {
    let labels = serde_json::json!({ "corral-operation-id": op.to_string() }).to_string();
    let mut url =
        corral_provider_http::Url::parse(&format!("{}/sandbox", fake.base_url())).unwrap();
    url.query_pairs_mut().append_pair("labels", &labels);
    let list: Value = corral_provider_http::reqwest::Client::new()
        .get(url)
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["items"].as_array().unwrap().len()
}

#[tokio::test]
async fn find_by_operation_id_finds_errored_sandboxes_the_default_listing_hides() {
    let (fake, p) = crate::world().await;
    // A runner failure: `error`, still meant to run; listed either way.
    let broken = spec(None);
    let created = p.create(&ctx(), &broken).await.unwrap();
    fake.fail(&created.native_id, "runner unreachable");
    let found = p
        .find_by_operation_id(&ctx(), &broken.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].status, SandboxStatus::Failed);
    assert_eq!(
        p.get(&ctx(), &created.native_id).await.unwrap().status,
        SandboxStatus::Failed
    );

    // A deletion the runner could not finish: `error` with desired state `destroyed`. Daytona
    // leaves it out of a plain listing, yet it exists; the lookup must still see it.
    let stuck = spec(None);
    let created = p.create(&ctx(), &stuck).await.unwrap();
    fake.fail_deletion(&created.native_id, "failed to remove the container");
    assert_eq!(listed_by_default(&fake, &stuck.operation_id).await, 0);
    let found = p
        .find_by_operation_id(&ctx(), &stuck.operation_id)
        .await
        .unwrap();
    assert_eq!(
        found.len(),
        1,
        "errored sandboxes are looked up too: {found:?}"
    );
    assert_eq!(found[0].native_id, created.native_id);
    assert_eq!(found[0].status, SandboxStatus::Failed);
    assert_eq!(found[0].operation_id, Some(stuck.operation_id));
    let list = fake
        .server()
        .log()
        .matching(&Method::GET, "/sandbox")
        .into_iter()
        .rfind(|r| r.path == "/sandbox")
        .unwrap();
    assert!(
        list.query
            .as_deref()
            .unwrap()
            .contains("includeErroredDeleted=true"),
        "{:?}",
        list.query
    );
}

#[tokio::test]
async fn find_follows_next_cursor_across_pages() {
    let (fake, p) = crate::world().await;
    fake.set_page_size(2);
    // Three sandboxes carrying one operation's label (made outside Corral, so not by name).
    let op = OperationId::new();
    let client = corral_provider_http::reqwest::Client::new();
    for _ in 0..3 {
        let r = client
            .post(format!("{}/sandbox", fake.base_url()))
            .bearer_auth(API_KEY)
            .json(&serde_json::json!({ "labels": { "corral-operation-id": op.to_string() } }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
    p.create(&ctx(), &spec(None)).await.unwrap();
    fake.server().log().clear();
    let found = p.find_by_operation_id(&ctx(), &op).await.unwrap();
    assert_eq!(found.len(), 3, "{found:?}");
    let pages = fake.server().log().matching(&Method::GET, "/sandbox");
    assert_eq!(pages.len(), 2, "3 matches in pages of 2");
    assert!(pages[1].query.as_deref().unwrap().contains("cursor="));
}

#[tokio::test]
async fn a_toolbox_403_on_a_file_is_a_file_operation_failure_not_a_rejected_key() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    let id = &created.native_id;
    crate::started(&p, id).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = format!("{}/secret.txt", dir.path().display());
    p.write_file(&ctx(), id, &secret, b"x").await.unwrap();
    fake.deny(&secret);
    let err = p.read_file(&ctx(), id, &secret, 1024).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::FileOperation { path, .. } if *path == secret),
        "{err:?}"
    );
    let err = p.write_file(&ctx(), id, &secret, b"y").await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::FileOperation { path, .. } if *path == secret),
        "{err:?}"
    );
    // A parent the sandbox user may not look into: the write's parent check says so.
    let locked = tempfile::tempdir().unwrap();
    fake.deny(&locked.path().display().to_string());
    let inside = format!("{}/f.txt", locked.path().display());
    let err = p.write_file(&ctx(), id, &inside, b"z").await.unwrap_err();
    assert!(
        matches!(err, ProviderError::FileOperation { .. }),
        "{err:?}"
    );
    // The key itself is still good.
    p.exec(&ctx(), id, &ExecSpec::new("true")).await.unwrap();
}

/// The toolbox URL comes from the provider's sandbox record, and the API key is sent there: a
/// `toolboxProxyUrl` off the trusted hosts is refused, and the host it names (another fake's
/// toolbox, on loopback) receives nothing: not the key, not a request.
#[tokio::test]
async fn a_toolbox_proxy_url_naming_another_host_is_refused_and_that_host_receives_nothing() {
    let (fake, p) = crate::world().await;
    let rogue = corral_provider_daytona::fake::Fake::start().await;
    let rogue_port = rogue.toolbox().addr().port();
    for url in [
        format!("{}/toolbox", rogue.toolbox().base_url()),
        format!("http://localhost:{rogue_port}/toolbox"),
        format!("http://{}@{}/toolbox", API_KEY, fake.toolbox().addr()),
        format!("https://{}/toolbox", fake.toolbox().addr()),
        "http://169.254.169.254/latest".to_owned(),
        "file:///etc/passwd".to_owned(),
    ] {
        fake.set_toolbox_proxy_url(&url);
        let created = p.create(&ctx(), &spec(None)).await.unwrap();
        crate::started(&p, &created.native_id).await;
        let err = p
            .exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ProviderError::Protocol { .. }),
            "{url}: {err:?}"
        );
        let err = p
            .write_file(&ctx(), &created.native_id, "/tmp/x", b"x")
            .await
            .unwrap_err();
        assert!(
            matches!(err, ProviderError::Protocol { .. }),
            "{url}: {err:?}"
        );
        assert!(!err.to_string().contains(API_KEY), "{err}");
    }
    assert!(rogue.toolbox().log().all().is_empty());
    assert!(rogue.server().log().all().is_empty());
    assert!(fake.toolbox().log().all().is_empty());
}

#[tokio::test]
async fn with_the_default_trusted_hosts_only_daytona_hosts_over_https_are_used() {
    let fake = corral_provider_daytona::fake::Fake::start().await;
    let p = crate::provider(corral_provider_daytona::DaytonaConfig {
        base_url: fake.base_url(),
        ..Default::default()
    });
    // The fake's own (loopback, http) toolbox is not Daytona's.
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    crate::started(&p, &created.native_id).await;
    let err = p
        .exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
    assert!(err.to_string().contains("127.0.0.1"), "{err}");
    assert!(fake.toolbox().log().all().is_empty());
    // A toolbox_url off the trusted hosts fails at start-up.
    let bad = <corral_provider_daytona::DaytonaProvider as corral_provider::Adapter>::from_config(
        corral_provider_daytona::DaytonaConfig {
            default_toolbox_proxy_url: "https://toolbox.attacker.example/toolbox".into(),
            ..Default::default()
        },
    );
    assert!(matches!(bad, Err(ProviderError::InvalidRequest { .. })));
}

// Commands as durable jobs, over the toolbox's sessions.

mod commands {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use corral_domain::{CommandId, OutputStream, Signal};
    use corral_provider::{
        CommandEvent, CommandEvents, CommandSpec, ExecSpec, OutputOffsets, ProviderError,
        SandboxProvider,
    };
    use corral_provider_daytona::DaytonaProvider;
    use corral_provider_daytona::fake::{API_KEY, Fake};
    use corral_provider_daytona::session_id;
    use corral_provider_http::reqwest::Method;
    use futures::StreamExt as _;
    use serde_json::{Value, json};

    use crate::{ctx, spec, started};

    fn command(command: &str) -> CommandSpec {
        CommandSpec {
            command_id: CommandId::new(),
            command: command.to_owned(),
            cwd: None,
            env: BTreeMap::new(),
            stdin: false,
            timeout: Duration::from_secs(60),
        }
    }

    async fn sandbox() -> (Fake, DaytonaProvider, String) {
        let (fake, p) = crate::world().await;
        let id = p.create(&ctx(), &spec(None)).await.unwrap().native_id;
        started(&p, &id).await;
        fake.toolbox().log().clear();
        (fake, p, id)
    }

    /// Reads `events` to their end: the chunks (each checked to start where the previous
    /// one ended) and the exit event.
    async fn drain(
        mut events: CommandEvents<'_>,
        from: u64,
    ) -> (Vec<(OutputStream, u64)>, Vec<u8>, Option<Option<i32>>) {
        let (mut chunks, mut out, mut exit) = (Vec::new(), Vec::new(), None);
        while let Some(ev) = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .expect("an event or the end within 30 s")
        {
            match ev.unwrap() {
                CommandEvent::Output {
                    stream,
                    offset,
                    data,
                } => {
                    let offset = offset.expect("offsets counted from the log's start");
                    assert_eq!(offset, from + out.len() as u64);
                    chunks.push((stream, offset));
                    out.extend_from_slice(&data);
                }
                CommandEvent::Exit { exit_code } => exit = Some(exit_code),
            }
        }
        (chunks, out, exit)
    }

    fn body(r: &corral_provider_testkit::fake::Recorded) -> Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    #[tokio::test]
    async fn a_command_gets_a_session_named_after_its_id_and_a_retried_start_runs_nothing_twice() {
        let (fake, p, id) = sandbox().await;
        let c = ctx();
        let spec = command("echo ran >> runs; sleep 1");
        let first = p.start_command(&c, &id, &spec).await.unwrap();
        let again = p.start_command(&c, &id, &spec).await.unwrap();
        assert_eq!(first.handle, again.handle);
        let sid = session_id(&spec.command_id);
        assert!(first.handle.starts_with(&format!("{sid}/")));
        let log = fake.toolbox().log();
        let creates = log.matching(&Method::POST, "/process/session");
        let creates: Vec<_> = creates
            .iter()
            .filter(|r| r.path.ends_with("/process/session"))
            .collect();
        assert_eq!(
            creates.len(),
            2,
            "the retry tried to create the session too"
        );
        assert_eq!(body(creates[0]), json!({ "sessionId": sid }));
        let execs = log.matching(&Method::POST, "/exec");
        assert_eq!(execs.len(), 1, "one command run");
        let exec = body(&execs[0]);
        assert_eq!(exec["runAsync"], true);
        let wire = exec["command"].as_str().unwrap();
        assert!(
            wire.ends_with(" </dev/null"),
            "an async command's stdin never ends on Daytona: {wire}"
        );
        let (_, _, exit) = drain(
            p.attach_command(&c, &id, &first.handle, OutputOffsets::default())
                .await
                .unwrap(),
            0,
        )
        .await;
        assert_eq!(exit, Some(Some(0)));
        let runs = p.exec(&c, &id, &ExecSpec::new("cat runs")).await.unwrap();
        assert_eq!(runs.stdout, b"ran\n");
        // Found again by its command id; another id finds nothing.
        assert_eq!(
            p.find_command(&c, &id, &spec.command_id).await.unwrap(),
            Some(first.handle.clone())
        );
        assert_eq!(
            p.find_command(&c, &id, &CommandId::new()).await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn the_log_is_a_snapshot_from_byte_zero_and_attach_sends_only_what_corral_lacks() {
        let (fake, p, id) = sandbox().await;
        let c = ctx();
        let started = p
            .start_command(&c, &id, &command("echo 0123456789; echo oops >&2"))
            .await
            .unwrap();
        let (chunks, out, exit) = drain(
            p.attach_command(
                &c,
                &id,
                &started.handle,
                OutputOffsets {
                    stdout: 4,
                    stderr: 0,
                },
            )
            .await
            .unwrap(),
            4,
        )
        .await;
        assert_eq!(exit, Some(Some(0)));
        // One combined log: stderr's line follows stdout's, all reported as stdout.
        assert_eq!(out, b"456789\noops\n");
        assert!(chunks.iter().all(|(s, _)| *s == OutputStream::Stdout));
        // The daemon answers the whole log on every request: the adapter cut it.
        let (sid, cid) = started.handle.split_once('/').unwrap();
        let url = format!(
            "{}/toolbox/{id}/process/session/{sid}/command/{cid}/logs",
            fake.toolbox().base_url()
        );
        let http = corral_provider_http::reqwest::Client::new();
        for _ in 0..2 {
            let raw = http.get(&url).bearer_auth(API_KEY).send().await.unwrap();
            assert_eq!(raw.bytes().await.unwrap().as_ref(), b"0123456789\noops\n");
        }
        // Asked for split output, the daemon answers JSON text instead (what the adapter
        // avoids: it cannot carry bytes that are not UTF-8).
        let split: Value = http
            .get(&url)
            .bearer_auth(API_KEY)
            .header("X-Daytona-Split-Output", "true")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(split["stdout"], "0123456789\n");
        assert_eq!(split["stderr"], "oops\n");
        for r in fake.toolbox().log().matching(&Method::GET, "/logs") {
            if r.headers.get("x-daytona-split-output").is_none() {
                assert_eq!(r.query, None, "a plain snapshot, no follow");
            }
        }
    }

    #[tokio::test]
    async fn a_last_line_without_a_newline_gets_one_from_the_daemons_labelers() {
        let (_fake, p, id) = sandbox().await;
        let c = ctx();
        let started = p
            .start_command(&c, &id, &command("printf 'no newline'"))
            .await
            .unwrap();
        let (_, out, exit) = drain(
            p.attach_command(&c, &id, &started.handle, OutputOffsets::default())
                .await
                .unwrap(),
            0,
        )
        .await;
        assert_eq!(exit, Some(Some(0)));
        assert_eq!(out, b"no newline\n");
    }

    #[tokio::test]
    async fn terminate_is_the_only_signal_a_sigkill_and_terminating_an_ended_command_is_fine() {
        let (fake, p, id) = sandbox().await;
        let c = ctx();
        assert_eq!(p.capabilities().commands.signals, [Signal::Kill]);
        let started = p
            .start_command(&c, &id, &command("echo up; sleep 30"))
            .await
            .unwrap();
        let err = p
            .signal_command(&c, &id, &started.handle, Signal::Int)
            .await
            .unwrap_err();
        assert!(matches!(err, ProviderError::Unsupported { .. }), "{err:?}");
        assert!(
            fake.toolbox()
                .log()
                .matching(&Method::POST, "/terminate")
                .is_empty()
        );
        p.signal_command(&c, &id, &started.handle, Signal::Kill)
            .await
            .unwrap();
        let (sid, cid) = started.handle.split_once('/').unwrap();
        let kill = &fake.toolbox().log().matching(&Method::POST, "/terminate")[0];
        assert_eq!(
            kill.path,
            format!("/toolbox/{id}/process/session/{sid}/command/{cid}/terminate")
        );
        let (_, _, exit) = drain(
            p.attach_command(&c, &id, &started.handle, OutputOffsets::default())
                .await
                .unwrap(),
            0,
        )
        .await;
        assert_eq!(exit, Some(Some(137)));
        // Daytona answers 410 for an ended command: that is success.
        p.signal_command(&c, &id, &started.handle, Signal::Kill)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn stdin_is_not_offered_since_daytona_input_gains_newlines_and_never_closes() {
        let (fake, p, id) = sandbox().await;
        let c = ctx();
        assert!(!p.capabilities().commands.stdin);
        let mut with_stdin = command("cat");
        with_stdin.stdin = true;
        let err = p.start_command(&c, &id, &with_stdin).await.unwrap_err();
        assert!(matches!(err, ProviderError::Unsupported { .. }), "{err:?}");
        assert!(
            fake.toolbox().log().all().is_empty(),
            "refused before any request"
        );

        // Why: the daemon's input appends a newline, echoes into the log, and has no end.
        let base = format!("{}/toolbox/{id}/process/session", fake.toolbox().base_url());
        let http = corral_provider_http::reqwest::Client::new();
        let post =
            |url: String, body: Value| http.post(url).bearer_auth(API_KEY).json(&body).send();
        post(base.clone(), json!({"sessionId": "raw"}))
            .await
            .unwrap();
        let exec: Value = post(
            format!("{base}/raw/exec"),
            json!({"command": "cat", "runAsync": true}),
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        let cid = exec["cmdId"].as_str().unwrap();
        let input = post(
            format!("{base}/raw/command/{cid}/input"),
            json!({"data": "hi"}),
        )
        .await
        .unwrap();
        assert_eq!(input.status(), 204);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let get = |url: String| http.get(url).bearer_auth(API_KEY).send();
        let logs = get(format!("{base}/raw/command/{cid}/logs"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(
            logs.as_ref(),
            b"hi\nhi\n",
            "the echo, then cat's copy: a newline added"
        );
        let state: Value = get(format!("{base}/raw/command/{cid}"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(
            state.get("exitCode").is_none(),
            "cat never sees the end of its input"
        );
    }

    #[tokio::test]
    async fn a_command_whose_session_is_gone_is_not_found() {
        let (fake, p, id) = sandbox().await;
        let c = ctx();
        let spec = command("sleep 30");
        let started = p.start_command(&c, &id, &spec).await.unwrap();
        let sid = session_id(&spec.command_id);
        let deleted = corral_provider_http::reqwest::Client::new()
            .delete(format!(
                "{}/toolbox/{id}/process/session/{sid}",
                fake.toolbox().base_url()
            ))
            .bearer_auth(API_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), 204);
        let err = p
            .attach_command(&c, &id, &started.handle, OutputOffsets::default())
            .await
            .err()
            .expect("the command is gone");
        assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
        assert_eq!(
            p.find_command(&c, &id, &spec.command_id).await.unwrap(),
            None
        );
    }
}

#[tokio::test]
async fn stop_is_followed_through_stopping_and_a_second_stop_is_not_an_error() {
    let (fake, p) = crate::world().await;
    let s = p.create(&ctx(), &spec(None)).await.unwrap();
    crate::started(&p, &s.native_id).await;
    // Daytona answers the stop at once, `stopping`, and stops in the background.
    let stopping = p.stop(&ctx(), &s.native_id).await.unwrap();
    assert_eq!(stopping.status, SandboxStatus::Stopping);
    let stops = fake.server().log().matching(&Method::POST, "/stop");
    assert_eq!(stops[0].path, format!("/sandbox/{}/stop", s.native_id));
    assert_eq!(
        p.get(&ctx(), &s.native_id).await.unwrap().status,
        SandboxStatus::Stopping
    );
    assert_eq!(
        p.get(&ctx(), &s.native_id).await.unwrap().status,
        SandboxStatus::Stopped
    );
    // Daytona refuses to stop a sandbox that is not started (400): read back, it is stopped.
    let again = p.stop(&ctx(), &s.native_id).await.unwrap();
    assert_eq!(again.status, SandboxStatus::Stopped);
    assert_eq!(
        fake.server().log().matching(&Method::POST, "/stop").len(),
        2
    );
    // The toolbox refuses a stopped sandbox.
    let err = p
        .exec(&ctx(), &s.native_id, &ExecSpec::new("echo hi"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_resumed_sandbox_is_starting_not_creating_and_a_running_one_is_left_alone() {
    let (fake, p) = crate::world().await;
    let s = p.create(&ctx(), &spec(None)).await.unwrap();
    // A new sandbox's `starting` is a create's.
    assert_eq!(
        p.get(&ctx(), &s.native_id).await.unwrap().status,
        SandboxStatus::Creating
    );
    crate::started(&p, &s.native_id).await;
    let running = p.resume(&ctx(), &s.native_id).await.unwrap();
    assert_eq!(running.status, SandboxStatus::Running);
    assert!(
        fake.server()
            .log()
            .matching(&Method::POST, "/start")
            .is_empty()
    );

    p.stop(&ctx(), &s.native_id).await.unwrap();
    while p.get(&ctx(), &s.native_id).await.unwrap().status != SandboxStatus::Stopped {}
    let resumed = p.resume(&ctx(), &s.native_id).await.unwrap();
    assert_eq!(resumed.status, SandboxStatus::Starting);
    let starts = fake.server().log().matching(&Method::POST, "/start");
    assert_eq!(starts[0].path, format!("/sandbox/{}/start", s.native_id));
    // The same `starting` after a start this adapter asked for is a resume's.
    assert_eq!(
        p.get(&ctx(), &s.native_id).await.unwrap().status,
        SandboxStatus::Starting
    );
    assert_eq!(
        p.get(&ctx(), &s.native_id).await.unwrap().status,
        SandboxStatus::Running
    );
}

#[tokio::test]
async fn a_snapshot_is_named_after_its_corral_id_followed_until_active_and_deleted_by_its_id() {
    let (fake, p) = crate::world().await;
    let s = p.create(&ctx(), &spec(None)).await.unwrap();
    crate::started(&p, &s.native_id).await;
    let snap_spec = SnapshotSpec {
        snapshot_id: SnapshotId::new(Provider::Daytona),
        name: Some("client name".into()),
    };
    let snap = p.snapshot(&ctx(), &s.native_id, &snap_spec).await.unwrap();
    // Asynchronous: the answer is the sandbox `snapshotting`; the snapshot is pending.
    assert_eq!(snap.status, SnapshotStatus::Creating);
    assert_eq!(snap.native_id, snap_spec.snapshot_id.to_string());
    let posts = fake.server().log().matching(&Method::POST, "/snapshot");
    assert_eq!(posts[0].path, format!("/sandbox/{}/snapshot", s.native_id));
    assert_eq!(
        body_json(&posts[0].body),
        serde_json::json!({"name": snap.native_id, "includeMemory": false})
    );
    // A retried snapshot (the name taken, 409) is the same snapshot, observed.
    let again = p.snapshot(&ctx(), &s.native_id, &snap_spec).await.unwrap();
    assert_eq!(again.native_id, snap.native_id);
    let mut seen = p.get_snapshot(&ctx(), &snap.native_id).await.unwrap();
    for _ in 0..5 {
        if seen.status == SnapshotStatus::Ready {
            break;
        }
        seen = p.get_snapshot(&ctx(), &snap.native_id).await.unwrap();
    }
    assert_eq!(seen.status, SnapshotStatus::Ready);
    // Daytona's size is in GB.
    assert_eq!(seen.size_bytes, Some(250_000_000));

    let restore = spec(None);
    let copy = p.restore(&ctx(), &restore, &snap.native_id).await.unwrap();
    let creates = fake.server().log().matching(&Method::POST, "/sandbox");
    let create = creates.iter().rfind(|r| r.path == "/sandbox").unwrap();
    let body = body_json(&create.body);
    assert_eq!(body["snapshot"], snap.native_id.as_str());
    assert_eq!(body["name"], restore.operation_id.to_string());
    assert_eq!(copy.operation_id, Some(restore.operation_id));

    // `DELETE /snapshots/{id}` takes the id: the name is resolved first.
    p.delete_snapshot(&ctx(), &snap.native_id).await.unwrap();
    let deletes = fake.server().log().matching(&Method::DELETE, "/snapshots/");
    assert_eq!(deletes.len(), 1);
    assert_ne!(deletes[0].path, format!("/snapshots/{}", snap.native_id));
    let err = p.get_snapshot(&ctx(), &snap.native_id).await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    let err = p
        .delete_snapshot(&ctx(), &snap.native_id)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn idle_stop_is_daytonas_own_auto_stop_in_whole_minutes() {
    let (fake, p) = crate::world().await;
    let with = |timeout: Option<u64>, idle: Option<u64>| {
        let request = CreateSandboxRequest::Daytona(StandardCreate {
            timeout,
            idle_stop_seconds: idle,
            ..StandardCreate::default()
        });
        CreateSpec {
            operation_id: OperationId::new(),
            // The service fills in the advertised default lifetime.
            timeout_seconds: timeout.or(Some(900)),
            request,
        }
    };
    // Alone, idleStopSeconds wins over the default lifetime, rounded up to minutes.
    let a = p.create(&ctx(), &with(None, Some(3601))).await.unwrap();
    assert_eq!(fake.auto_stop_minutes_of(&a.native_id), Some(61));
    // With a lifetime asked for too, the shorter idle interval is the one Daytona applies.
    let b = p
        .create(&ctx(), &with(Some(600), Some(3600)))
        .await
        .unwrap();
    assert_eq!(fake.auto_stop_minutes_of(&b.native_id), Some(10));
    let c = p
        .create(&ctx(), &with(Some(3600), Some(120)))
        .await
        .unwrap();
    assert_eq!(fake.auto_stop_minutes_of(&c.native_id), Some(2));
}
