//! Vercel's known traps, each checked on the request the fake received.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::time::Duration;

use corral_domain::{OperationId, Provider, SandboxStatus};
use corral_provider::{CreateSpec, ExecSpec, ProviderError, SandboxProvider};
use corral_provider_http::reqwest::Method;
use corral_provider_testkit::fake::{FakeServer, Recorded};
use corral_provider_vercel::fake::{API_KEY, PROJECT_ID, TEAM_ID};
use corral_provider_vercel::{TAGS, VercelProvider};
use serde_json::Value;

use crate::{ctx, setup};

fn spec(image: Option<&str>, timeout: Option<u64>) -> CreateSpec {
    corral_provider_testkit::helpers::spec(Provider::Vercel, image, timeout)
}

fn body(r: &Recorded) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn query(r: &Recorded) -> Vec<(String, String)> {
    r.query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_owned(), v.replace("%3A", ":"))
        })
        .collect()
}

fn param(r: &Recorded, name: &str) -> Option<String> {
    query(r)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

async fn running(vercel: &VercelProvider) -> String {
    let created = vercel.create(&ctx(), &spec(None, Some(600))).await.unwrap();
    assert_eq!(created.status, SandboxStatus::Creating);
    let seen = vercel.get(&ctx(), &created.native_id).await.unwrap();
    assert_eq!(seen.status, SandboxStatus::Creating);
    let seen = vercel.get(&ctx(), &created.native_id).await.unwrap();
    assert_eq!(seen.status, SandboxStatus::Running);
    created.native_id
}

#[tokio::test]
async fn timeouts_go_out_in_milliseconds() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let with = spec(None, Some(2700));
    let created = vercel.create(&ctx(), &with).await.unwrap();
    assert_eq!(created.operation_id, Some(with.operation_id));
    vercel.create(&ctx(), &spec(None, None)).await.unwrap();
    let creates = server.log().matching(&Method::POST, "/v3/sandboxes");
    assert_eq!(creates.len(), 2);
    assert_eq!(body(&creates[0])["timeout"], 2_700_000, "2700 s in ms");
    assert!(body(&creates[0])["timeout"].is_u64());
    assert_eq!(
        body(&creates[1])["timeout"],
        300_000,
        "the 300 s default in ms"
    );
    assert_eq!(
        body(&creates[0])["tags"][TAGS.operation_id],
        with.operation_id.to_string()
    );
    // A command's deadline also travels in ms, and the sandbox kills it then.
    let id = running(&vercel).await;
    let mut slow = ExecSpec::new("sleep 30");
    slow.timeout = Duration::from_secs(1);
    let started = std::time::Instant::now();
    let err = vercel.exec(&ctx(), &id, &slow).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let cmd = server.log().matching(&Method::POST, "/cmd");
    assert_eq!(body(cmd.last().unwrap())["timeout"], 1000);
}

#[tokio::test]
async fn runtimes_go_to_v2_and_images_to_v3_as_the_sdk_does() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    vercel
        .create(&ctx(), &spec(Some("python3.13"), Some(60)))
        .await
        .unwrap();
    vercel
        .create(&ctx(), &spec(Some("node:22"), Some(60)))
        .await
        .unwrap();
    let v2 = &server.log().matching(&Method::POST, "/v2/sandboxes")[0];
    assert_eq!(v2.path, "/v2/sandboxes");
    assert_eq!(body(v2)["runtime"], "python3.13");
    assert!(body(v2).get("image").is_none());
    let v3 = &server.log().matching(&Method::POST, "/v3/sandboxes")[0];
    assert_eq!(body(v3)["image"], "node:22");
    assert!(body(v3).get("runtime").is_none());
    let keys: Vec<String> = body(v3).as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        ["image", "persistent", "projectId", "tags", "timeout"]
    );
    assert_eq!(body(v3)["persistent"], true);
}

#[tokio::test]
async fn every_call_carries_the_token_and_team_and_sandbox_calls_the_project() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    let op = OperationId::new();
    vercel
        .exec(&ctx(), &id, &ExecSpec::new("echo hi"))
        .await
        .unwrap();
    let dir = vercel
        .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout).unwrap().trim().to_owned();
    vercel
        .write_file(&ctx(), &id, &format!("{dir}/f.txt"), b"x")
        .await
        .unwrap();
    assert_eq!(
        vercel
            .read_file(&ctx(), &id, &format!("{dir}/f.txt"), 16)
            .await
            .unwrap(),
        b"x"
    );
    vercel.find_by_operation_id(&ctx(), &op).await.unwrap();
    vercel.delete(&ctx(), &id).await.unwrap();
    let all = server.log().all();
    assert!(all.len() >= 9, "{}", all.len());
    for r in &all {
        assert_eq!(
            r.headers["authorization"].to_str().unwrap(),
            format!("Bearer {API_KEY}"),
            "{} {}",
            r.method,
            r.path
        );
        assert_eq!(
            param(r, "teamId").as_deref(),
            Some(TEAM_ID),
            "{} {}",
            r.method,
            r.path
        );
        let sandbox_call = r.path.starts_with("/v2/sandboxes/") && !r.path.contains("/sessions/");
        if sandbox_call {
            assert_eq!(
                param(r, "projectId").as_deref(),
                Some(PROJECT_ID),
                "{}",
                r.path
            );
        }
        if r.method == Method::POST && r.path.ends_with("/v3/sandboxes") {
            assert_eq!(body(r)["projectId"], PROJECT_ID);
        }
    }
    let list = &server
        .log()
        .matching(&Method::GET, "/v2/sandboxes")
        .into_iter()
        .find(|r| r.path == "/v2/sandboxes")
        .unwrap()
        .clone();
    assert_eq!(param(list, "project").as_deref(), Some(PROJECT_ID));
    assert_eq!(
        param(list, "tags"),
        Some(format!("{}:{op}", TAGS.operation_id))
    );
    let del = &server.log().matching(&Method::DELETE, "/v2/sandboxes/")[0];
    assert_eq!(del.path, format!("/v2/sandboxes/{id}"));
}

async fn stop_session(server: &FakeServer, session: &str) {
    let resp = corral_provider_http::reqwest::Client::new()
        .post(format!(
            "{}/v2/sandboxes/sessions/{session}/stop?teamId={TEAM_ID}",
            server.base_url()
        ))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
}

fn session_of(r: &Recorded) -> String {
    r.path
        .strip_prefix("/v2/sandboxes/sessions/")
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_stopped_session_is_resumed_under_a_new_id_and_the_call_retried() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    let dir = vercel
        .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout).unwrap().trim().to_owned();
    let file = format!("{dir}/kept.txt");
    vercel
        .write_file(&ctx(), &id, &file, b"before")
        .await
        .unwrap();
    let first = session_of(server.log().matching(&Method::POST, "/cmd").last().unwrap());

    stop_session(server, &first).await;
    assert_eq!(
        vercel.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Paused,
        "a stopped persistent sandbox is paused"
    );
    server.log().clear();
    let out = vercel
        .exec(&ctx(), &id, &ExecSpec::new(format!("cat {dir}/kept.txt")))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"before", "the filesystem survived the stop");
    let cmds = server.log().matching(&Method::POST, "/cmd");
    assert_eq!(
        cmds.len(),
        2,
        "one refused on the old session, one on the new"
    );
    assert_eq!(session_of(&cmds[0]), first);
    let second = session_of(&cmds[1]);
    assert_ne!(second, first, "the resumed session has a new id");
    let resumes: Vec<Recorded> = server
        .log()
        .matching(&Method::GET, &format!("/v2/sandboxes/{id}"))
        .into_iter()
        .filter(|r| param(r, "resume").as_deref() == Some("true"))
        .collect();
    assert_eq!(resumes.len(), 1);

    // Files follow the session too.
    stop_session(server, &second).await;
    server.log().clear();
    assert_eq!(
        vercel.read_file(&ctx(), &id, &file, 1024).await.unwrap(),
        b"before"
    );
    let reads = server.log().matching(&Method::POST, "/fs/read");
    assert_eq!(reads.len(), 2);
    assert_eq!(session_of(&reads[0]), second);
    assert_ne!(session_of(&reads[1]), second);
}

#[tokio::test]
async fn writes_are_one_gzipped_tar_entry_extracted_at_the_root() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    let dir = vercel
        .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout).unwrap().trim().to_owned();
    let path = format!("{dir}/data.bin");
    let content: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    server.log().clear();
    vercel
        .write_file(&ctx(), &id, &path, &content)
        .await
        .unwrap();
    let w = &server.log().matching(&Method::POST, "/fs/write")[0];
    assert_eq!(w.headers["content-type"], "application/gzip");
    assert_eq!(w.headers["x-cwd"], "/");
    assert_eq!(&w.body[..2], &[0x1f, 0x8b], "gzip magic");
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&w.body[..]));
    let mut entries = archive.entries().unwrap();
    let mut entry = entries.next().unwrap().unwrap();
    assert_eq!(
        entry.path().unwrap().to_str().unwrap(),
        path.trim_start_matches('/')
    );
    let mut got = Vec::new();
    entry.read_to_end(&mut got).unwrap();
    assert_eq!(got, content);
    assert!(entries.next().is_none());
    assert_eq!(
        vercel.read_file(&ctx(), &id, &path, 4096).await.unwrap(),
        content
    );
    let r = &server.log().matching(&Method::POST, "/fs/read")[0];
    assert_eq!(body(r)["path"], path);

    // A missing parent is reported, and the tarball (which would create it) is never sent.
    server.log().clear();
    let err = vercel
        .write_file(&ctx(), &id, &format!("{dir}/no/such.txt"), b"x")
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ParentMissing { .. }),
        "{err:?}"
    );
    assert!(server.log().matching(&Method::POST, "/fs/write").is_empty());
}

#[tokio::test]
async fn the_fake_refuses_archives_that_are_not_gzipped_tars() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    vercel
        .exec(&ctx(), &id, &ExecSpec::new("true"))
        .await
        .unwrap();
    let session = session_of(&server.log().matching(&Method::POST, "/cmd")[0]);
    let post = |body: Vec<u8>| {
        corral_provider_http::reqwest::Client::new()
            .post(format!(
                "{}/v2/sandboxes/sessions/{session}/fs/write?teamId={TEAM_ID}",
                server.base_url()
            ))
            .bearer_auth(API_KEY)
            .header("content-type", "application/gzip")
            .header("x-cwd", "/")
            .body(body)
            .send()
    };
    let plain = post(b"not gzip at all".to_vec()).await.unwrap();
    assert_eq!(plain.status(), 400);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &[7u8; 700]).unwrap();
    let junk = post(gz.finish().unwrap()).await.unwrap();
    assert_eq!(junk.status(), 400);
    let v: Value = junk.json().await.unwrap();
    assert_eq!(v["error"]["code"], "bad_request");
}

#[tokio::test]
async fn exec_sends_sh_c_with_native_cwd_and_env() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    let mut spec = ExecSpec::new("echo \"$X\"; pwd");
    spec.cwd = Some("/tmp".into());
    spec.env = BTreeMap::from([("X".to_owned(), "a b".to_owned())]);
    server.log().clear();
    let out = vercel.exec(&ctx(), &id, &spec).await.unwrap();
    assert_eq!(out.stdout, b"a b\n/tmp\n");
    let b = body(&server.log().matching(&Method::POST, "/cmd")[0]);
    assert_eq!(b["command"], "sh");
    assert_eq!(b["args"], serde_json::json!(["-c", "echo \"$X\"; pwd"]));
    assert_eq!(b["cwd"], "/tmp");
    assert_eq!(b["env"]["X"], "a b");
    assert_eq!(b["wait"], true);
    assert_eq!(b["logs"], true);
    assert_eq!(b["sudo"], false);
}

#[tokio::test]
async fn reading_a_directory_is_refused_and_a_missing_file_is_not_found() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    let dir = vercel
        .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout).unwrap().trim().to_owned();
    let err = vercel.read_file(&ctx(), &id, &dir, 1024).await.unwrap_err();
    assert!(matches!(err, ProviderError::FileRefused { .. }), "{err:?}");
    server.log().clear();
    let err = vercel
        .read_file(&ctx(), &id, &format!("{dir}/nope"), 1024)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound { .. }), "{err:?}");
    assert!(
        server.log().matching(&Method::POST, "/cmd").is_empty(),
        "a 404 needs no probe"
    );
}

#[tokio::test]
async fn a_command_past_its_deadline_is_killed_with_the_signal_number_9() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    // The sandbox lets the command outlive its own timeout, so the adapter's kill ends it.
    fake.enforce_command_timeouts(false);
    let mut slow = ExecSpec::new("sleep 30");
    slow.timeout = Duration::from_secs(1);
    server.log().clear();
    let err = vercel.exec(&ctx(), &id, &slow).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );
    let kills = server.log().matching(&Method::POST, "/kill");
    assert_eq!(kills.len(), 1);
    assert_eq!(
        body(&kills[0]),
        serde_json::json!({ "signal": 9 }),
        "Vercel's kill takes a POSIX signal number"
    );
}

#[tokio::test]
async fn the_fake_refuses_a_kill_signal_given_by_name() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    vercel
        .exec(&ctx(), &id, &ExecSpec::new("true"))
        .await
        .unwrap();
    let session = session_of(&server.log().matching(&Method::POST, "/cmd")[0]);
    let client = corral_provider_http::reqwest::Client::new();
    let url = |rest: &str| {
        format!(
            "{}/v2/sandboxes/sessions/{session}/cmd{rest}?teamId={TEAM_ID}",
            server.base_url()
        )
    };
    let started: Value = client
        .post(url(""))
        .bearer_auth(API_KEY)
        .json(&serde_json::json!({ "command": "sleep", "args": ["30"], "wait": false }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cmd = started["command"]["id"].as_str().unwrap().to_owned();
    let kill = |signal: Value| {
        client
            .post(url(&format!("/{cmd}/kill")))
            .bearer_auth(API_KEY)
            .json(&serde_json::json!({ "signal": signal }))
            .send()
    };
    let by_name = kill(Value::from("SIGKILL")).await.unwrap();
    assert_eq!(by_name.status(), 400, "a signal name is not a number");
    let v: Value = by_name.json().await.unwrap();
    assert_eq!(v["error"]["code"], "bad_request");
    let by_number = kill(Value::from(9)).await.unwrap();
    assert_eq!(by_number.status(), 200);
}

// Commands as durable jobs, over Vercel's detached commands.

mod commands {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use corral_domain::{CommandId, OutputStream, Signal};
    use corral_provider::{
        CommandEvent, CommandEvents, CommandSpec, ExecSpec, OutputOffsets, ProviderError,
        SandboxProvider,
    };
    use corral_provider_http::reqwest::Method;
    use corral_provider_vercel::fake::{API_KEY, TEAM_ID};
    use corral_provider_vercel::tag_line;
    use futures::StreamExt as _;
    use serde_json::{Value, json};

    use super::{body, running};
    use crate::{ctx, setup};

    fn command(command: &str, stdin: bool) -> CommandSpec {
        CommandSpec {
            command_id: CommandId::new(),
            command: command.to_owned(),
            cwd: None,
            env: BTreeMap::new(),
            stdin,
            timeout: Duration::from_secs(60),
        }
    }

    /// Reads `events` to their end: stdout, stderr (each chunk checked to start where the
    /// previous one ended, past `from`) and the exit event.
    async fn drain(
        mut events: CommandEvents<'_>,
        from: OutputOffsets,
    ) -> (Vec<u8>, Vec<u8>, Option<Option<i32>>) {
        let (mut out, mut err, mut exit) = (Vec::new(), Vec::new(), None);
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
                    let (buf, base) = match stream {
                        OutputStream::Stdout => (&mut out, from.stdout),
                        OutputStream::Stderr => (&mut err, from.stderr),
                    };
                    assert_eq!(offset, Some(base + buf.len() as u64), "{stream:?} offset");
                    buf.extend_from_slice(&data);
                }
                CommandEvent::Exit { exit_code } => exit = Some(exit_code),
            }
        }
        (out, err, exit)
    }

    #[tokio::test]
    async fn a_start_answers_at_once_and_a_retried_start_finds_its_command_by_the_tag_line() {
        let (fake, vercel) = setup().await;
        let c = ctx();
        let id = running(&vercel).await;
        let spec = command("echo ran >> \"$HOME/runs\"; sleep 1", false);
        let first = vercel.start_command(&c, &id, &spec).await.unwrap();
        let again = vercel.start_command(&c, &id, &spec).await.unwrap();
        assert_eq!(first.handle, again.handle);
        let starts = fake.server().log().matching(&Method::POST, "/cmd");
        let starts: Vec<_> = starts.iter().filter(|r| r.path.ends_with("/cmd")).collect();
        assert_eq!(starts.len(), 1, "the retry started nothing");
        let b = body(starts[0]);
        assert_eq!(b["command"], "sh");
        assert_eq!(
            b["args"],
            json!([
                "-c",
                format!("{}{}", tag_line(&spec.command_id), spec.command)
            ])
        );
        assert!(b.get("wait").is_none(), "detached: answered at once");
        assert!(b.get("attachStdin").is_none());
        // Vercel's own timeout is a backstop behind Corral's kill: never shorter.
        assert_eq!(b["timeout"], 120_000);
        let lists = fake.server().log().matching(&Method::GET, "/cmd");
        assert_eq!(lists.len(), 2, "each start looked its tag up first");
        let (_, _, exit) = drain(
            vercel
                .attach_command(&c, &id, &first.handle, OutputOffsets::default())
                .await
                .unwrap(),
            OutputOffsets::default(),
        )
        .await;
        assert_eq!(exit, Some(Some(0)));
        let runs = vercel
            .exec(&c, &id, &ExecSpec::new("cat \"$HOME/runs\""))
            .await
            .unwrap();
        assert_eq!(runs.stdout, b"ran\n", "ran once");
        assert_eq!(
            vercel
                .find_command(&c, &id, &spec.command_id)
                .await
                .unwrap(),
            Some(first.handle.clone())
        );
    }

    #[tokio::test]
    async fn logs_replay_from_the_first_byte_and_attach_sends_only_what_corral_lacks() {
        let (fake, vercel) = setup().await;
        let c = ctx();
        let id = running(&vercel).await;
        let started = vercel
            .start_command(
                &c,
                &id,
                &command("printf 0123456789; printf abcdef >&2", false),
            )
            .await
            .unwrap();
        let from = OutputOffsets {
            stdout: 4,
            stderr: 2,
        };
        let (out, err, exit) = drain(
            vercel
                .attach_command(&c, &id, &started.handle, from)
                .await
                .unwrap(),
            from,
        )
        .await;
        assert_eq!(out, b"456789");
        assert_eq!(err, b"cdef");
        assert_eq!(exit, Some(Some(0)));
        // Vercel's logs take no offset: each request replays everything.
        let (sid, cid) = started.handle.split_once('/').unwrap();
        let url = format!(
            "{}/v2/sandboxes/sessions/{sid}/cmd/{cid}/logs?teamId={TEAM_ID}",
            fake.base_url()
        );
        for _ in 0..2 {
            let raw = corral_provider_http::reqwest::Client::new()
                .get(&url)
                .bearer_auth(API_KEY)
                .send()
                .await
                .unwrap();
            assert_eq!(raw.headers()["content-type"], "application/x-ndjson");
            let text = raw.text().await.unwrap();
            let lines: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let all: String = lines
                .iter()
                .filter(|l| l["stream"] == "stdout")
                .map(|l| l["data"].as_str().unwrap())
                .collect();
            assert_eq!(all, "0123456789");
        }
        let logs = fake.server().log().matching(&Method::GET, "/logs");
        assert!(
            logs.iter()
                .all(|r| !r.query.as_deref().unwrap_or("").contains("offset"))
        );
    }

    #[tokio::test]
    async fn stdin_carries_its_offset_so_a_resend_is_written_once() {
        let (fake, vercel) = setup().await;
        let c = ctx();
        let id = running(&vercel).await;
        let started = vercel
            .start_command(&c, &id, &command("cat; echo eof", true))
            .await
            .unwrap();
        let start = &fake.server().log().matching(&Method::POST, "/cmd")[0];
        assert_eq!(body(start)["attachStdin"], true);
        let h = &started.handle;
        assert_eq!(
            vercel.write_stdin(&c, &id, h, 0, b"hello\n").await.unwrap(),
            6
        );
        // The answer was lost, say: the resend is skipped by Vercel, not written twice.
        assert_eq!(
            vercel.write_stdin(&c, &id, h, 0, b"hello\n").await.unwrap(),
            6
        );
        assert_eq!(
            vercel
                .write_stdin(&c, &id, h, 3, b"lo\nworld\n")
                .await
                .unwrap(),
            12
        );
        let writes: Vec<Value> = fake
            .server()
            .log()
            .matching(&Method::POST, "/stdin")
            .iter()
            .map(body)
            .collect();
        assert_eq!(
            writes,
            [
                json!({"data": "hello\n", "offset": 0}),
                json!({"data": "hello\n", "offset": 0}),
                json!({"data": "lo\nworld\n", "offset": 3}),
            ]
        );
        // Past what the command received: Vercel's 409.
        let err = vercel.write_stdin(&c, &id, h, 20, b"x").await.unwrap_err();
        assert!(
            matches!(err, ProviderError::InvalidRequest { .. }),
            "{err:?}"
        );
        // Not text: refused before any request.
        let before = fake.server().log().matching(&Method::POST, "/stdin").len();
        let err = vercel
            .write_stdin(&c, &id, h, 12, &[0xff])
            .await
            .unwrap_err();
        assert!(
            matches!(err, ProviderError::InvalidRequest { .. }),
            "{err:?}"
        );
        assert_eq!(
            fake.server().log().matching(&Method::POST, "/stdin").len(),
            before
        );
        vercel.close_stdin(&c, &id, h).await.unwrap();
        let close = fake.server().log().matching(&Method::POST, "/stdin");
        assert_eq!(body(close.last().unwrap()), json!({"close": true}));
        let (out, _, exit) = drain(
            vercel
                .attach_command(&c, &id, h, OutputOffsets::default())
                .await
                .unwrap(),
            OutputOffsets::default(),
        )
        .await;
        assert_eq!(out, b"hello\nworld\neof\n");
        assert_eq!(exit, Some(Some(0)));
    }

    #[tokio::test]
    async fn signals_go_out_as_posix_numbers_and_an_ended_command_takes_them_fine() {
        let (fake, vercel) = setup().await;
        let c = ctx();
        let id = running(&vercel).await;
        assert_eq!(vercel.capabilities().commands.signals, Signal::ALL);
        let started = vercel
            .start_command(&c, &id, &command("sleep 30", false))
            .await
            .unwrap();
        vercel
            .signal_command(&c, &id, &started.handle, Signal::Term)
            .await
            .unwrap();
        let kill = &fake.server().log().matching(&Method::POST, "/kill")[0];
        assert_eq!(body(kill), json!({"signal": 15}));
        let (_, _, exit) = drain(
            vercel
                .attach_command(&c, &id, &started.handle, OutputOffsets::default())
                .await
                .unwrap(),
            OutputOffsets::default(),
        )
        .await;
        assert_eq!(exit, Some(Some(143)));
        // Vercel refuses to signal a command that is not running: that is success here.
        vercel
            .signal_command(&c, &id, &started.handle, Signal::Usr1)
            .await
            .unwrap();
        assert_eq!(
            body(&fake.server().log().matching(&Method::POST, "/kill")[1]),
            json!({"signal": 10})
        );
    }

    #[tokio::test]
    async fn a_stopped_session_takes_its_commands_with_it() {
        let (fake, vercel) = setup().await;
        let c = ctx();
        let id = running(&vercel).await;
        let started = vercel
            .start_command(&c, &id, &command("sleep 30", false))
            .await
            .unwrap();
        let (sid, _) = started.handle.split_once('/').unwrap();
        let stopped = corral_provider_http::reqwest::Client::new()
            .post(format!(
                "{}/v2/sandboxes/sessions/{sid}/stop?teamId={TEAM_ID}",
                fake.base_url()
            ))
            .bearer_auth(API_KEY)
            .send()
            .await
            .unwrap();
        assert!(stopped.status().is_success());
        let err = vercel
            .attach_command(&c, &id, &started.handle, OutputOffsets::default())
            .await
            .err()
            .expect("gone with its session");
        assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn output_travels_as_text_so_bytes_that_are_not_utf8_arrive_replaced() {
        let (_fake, vercel) = setup().await;
        let c = ctx();
        let id = running(&vercel).await;
        let started = vercel
            .start_command(&c, &id, &command("printf 'caf\\303\\251 \\377!'", false))
            .await
            .unwrap();
        let (out, _, _) = drain(
            vercel
                .attach_command(&c, &id, &started.handle, OutputOffsets::default())
                .await
                .unwrap(),
            OutputOffsets::default(),
        )
        .await;
        assert_eq!(String::from_utf8(out).unwrap(), "café \u{fffd}!");
    }
}

/// Stop, resume, snapshots and restores: how Vercel's sessions shape them.
mod lifecycle {
    use super::*;
    use corral_domain::{SnapshotId, SnapshotStatus};
    use corral_provider::SnapshotSpec;

    fn snap() -> SnapshotSpec {
        SnapshotSpec {
            snapshot_id: SnapshotId::new(Provider::Vercel),
            name: None,
        }
    }

    fn resumes(server: &FakeServer) -> usize {
        server
            .log()
            .all()
            .iter()
            .filter(|r| param(r, "resume").as_deref() == Some("true"))
            .count()
    }

    #[tokio::test]
    async fn an_explicit_stop_is_held_until_resume_while_a_timed_out_session_resumes_on_use() {
        let (fake, vercel) = setup().await;
        let server = fake.server();
        let id = running(&vercel).await;
        server.log().clear();
        let stopped = vercel.stop(&ctx(), &id).await.unwrap();
        assert_eq!(stopped.status, SandboxStatus::Stopped);
        // The mark is a tag, set before the session's own stop.
        let patch = &server.log().matching(&Method::PATCH, "/v2/sandboxes/")[0];
        assert_eq!(body(patch)["tags"][TAGS.stopped], "true");
        assert_eq!(
            body(patch)["tags"][TAGS.operation_id]
                .as_str()
                .map(str::len),
            Some(OperationId::new().to_string().len()),
            "the other tags are sent again: PATCH replaces the whole map"
        );
        let order: Vec<Method> = server
            .log()
            .all()
            .into_iter()
            .filter(|r| r.path.ends_with("/stop") || r.method == Method::PATCH)
            .map(|r| r.method)
            .collect();
        assert_eq!(
            order,
            [Method::PATCH, Method::POST],
            "tagged before the stop"
        );

        // Held: exec does not resume it behind the client's back.
        server.log().clear();
        match vercel.exec(&ctx(), &id, &ExecSpec::new("true")).await {
            Err(ProviderError::InvalidRequest { message, .. }) => {
                assert!(message.contains("resume it first"), "{message}");
            }
            other => panic!("exec on a stopped sandbox answered {other:?}"),
        }
        assert_eq!(resumes(server), 0, "no resume was asked of Vercel");

        let resumed = vercel.resume(&ctx(), &id).await.unwrap();
        assert_eq!(resumed.status, SandboxStatus::Running);
        assert_eq!(resumes(server), 1);
        assert_eq!(
            vercel
                .exec(&ctx(), &id, &ExecSpec::new("true"))
                .await
                .unwrap()
                .exit_code,
            0
        );

        // A session that ends by itself (its timeout) is paused and resumes on use.
        let sid = session_of(server.log().matching(&Method::POST, "/cmd").last().unwrap());
        stop_session(server, &sid).await;
        assert_eq!(
            vercel.get(&ctx(), &id).await.unwrap().status,
            SandboxStatus::Paused
        );
        assert_eq!(
            vercel
                .exec(&ctx(), &id, &ExecSpec::new("true"))
                .await
                .unwrap()
                .exit_code,
            0
        );
        vercel.delete(&ctx(), &id).await.unwrap();
    }

    #[tokio::test]
    async fn a_stop_that_would_discard_the_filesystem_is_refused() {
        let (fake, vercel) = setup().await;
        let id = running(&vercel).await;
        // Made non-persistent outside Corral.
        let resp = corral_provider_http::reqwest::Client::new()
            .patch(format!(
                "{}/v2/sandboxes/{id}?teamId={TEAM_ID}&projectId={PROJECT_ID}",
                fake.base_url()
            ))
            .bearer_auth(API_KEY)
            .json(&serde_json::json!({ "persistent": false }))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success());
        fake.server().log().clear();
        match vercel.stop(&ctx(), &id).await {
            Err(ProviderError::InvalidRequest { message, .. }) => {
                assert!(message.contains("not persistent"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            fake.server()
                .log()
                .matching(&Method::POST, "/stop")
                .is_empty()
        );
        vercel.delete(&ctx(), &id).await.unwrap();
    }

    #[tokio::test]
    async fn a_snapshot_ends_the_session_and_the_next_use_boots_a_new_one() {
        let (fake, vercel) = setup().await;
        let server = fake.server();
        let id = running(&vercel).await;
        vercel
            .exec(&ctx(), &id, &ExecSpec::new("printf one > f"))
            .await
            .unwrap();
        let first = session_of(server.log().matching(&Method::POST, "/cmd").last().unwrap());
        let made = vercel.snapshot(&ctx(), &id, &snap()).await.unwrap();
        assert_eq!(made.status, SnapshotStatus::Ready, "Vercel answers it made");
        assert!(made.size_bytes.is_some_and(|n| n >= 3));
        let call = &server.log().matching(&Method::POST, "/snapshot")[0];
        assert_eq!(
            call.path,
            format!("/v2/sandboxes/sessions/{first}/snapshot")
        );
        assert_eq!(body(call), serde_json::json!({}));
        // Vercel terminated the session: paused, not held.
        assert_eq!(
            vercel.get(&ctx(), &id).await.unwrap().status,
            SandboxStatus::Paused
        );
        let out = vercel
            .exec(&ctx(), &id, &ExecSpec::new("cat f"))
            .await
            .unwrap();
        assert_eq!(out.stdout, b"one");
        let last = session_of(server.log().matching(&Method::POST, "/cmd").last().unwrap());
        assert_ne!(last, first, "a new session");

        let got = vercel.get_snapshot(&ctx(), &made.native_id).await.unwrap();
        assert_eq!(got, made);
        vercel
            .delete_snapshot(&ctx(), &made.native_id)
            .await
            .unwrap();
        assert!(matches!(
            vercel.get_snapshot(&ctx(), &made.native_id).await,
            Err(ProviderError::NotFound { .. })
        ));
        vercel.delete(&ctx(), &id).await.unwrap();
    }

    #[tokio::test]
    async fn a_restore_is_a_tagged_create_from_a_snapshot_source_without_image() {
        let (fake, vercel) = setup().await;
        let server = fake.server();
        let id = running(&vercel).await;
        let made = vercel.snapshot(&ctx(), &id, &snap()).await.unwrap();
        server.log().clear();
        let spec = spec(Some("node24"), Some(600));
        let copy = vercel
            .restore(&ctx(), &spec, &made.native_id)
            .await
            .unwrap();
        assert_ne!(copy.native_id, id);
        assert_eq!(copy.operation_id, Some(spec.operation_id));
        let creates = server.log().matching(&Method::POST, "/v3/sandboxes");
        assert_eq!(
            creates.len(),
            1,
            "the snapshot is the filesystem: no runtime, so v3"
        );
        let sent = body(&creates[0]);
        assert_eq!(
            sent["source"],
            serde_json::json!({ "type": "snapshot", "snapshotId": made.native_id })
        );
        assert!(sent.get("runtime").is_none() && sent.get("image").is_none());
        assert_eq!(sent["timeout"], 600_000);
        assert_eq!(
            sent["tags"][TAGS.operation_id],
            spec.operation_id.to_string()
        );

        // An unknown snapshot is not found.
        match vercel.restore(&ctx(), &spec, "snap_nope").await {
            Err(ProviderError::NotFound { .. }) => {}
            other => panic!("{other:?}"),
        }
        for s in [copy.native_id, id] {
            vercel.delete(&ctx(), &s).await.unwrap();
        }
    }
}
