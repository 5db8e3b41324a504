//! Runloop's known traps, each checked on the request the fake received.

use std::collections::BTreeMap;
use std::time::Duration;

use corral_domain::{
    CommandId, CreateSandboxRequest, OperationId, OutputStream, Provider, SandboxStatus, Signal,
};
use corral_provider::shell::{self, shell_quote};
use corral_provider::{
    Adapter, CommandEvent, CommandEvents, CommandSpec, CreateSpec, ExecSpec, OutputOffsets,
    ProviderError, SandboxProvider,
};
use corral_provider_http::reqwest::Method;
use corral_provider_runloop::fake::API_KEY;
use corral_provider_runloop::{RunloopProvider, TAGS, command_uuid, wrap_command};
use corral_provider_testkit::fake::FakeServer;
use futures::StreamExt as _;
use serde_json::Value;

use crate::{ctx, setup};

fn spec(image: Option<&str>, timeout: Option<u64>) -> CreateSpec {
    corral_provider_testkit::helpers::spec(Provider::Runloop, image, timeout)
}

fn body(r: &corral_provider_testkit::fake::Recorded) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn query(r: &corral_provider_testkit::fake::Recorded) -> BTreeMap<String, String> {
    r.query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

async fn running(server: &FakeServer, runloop: &RunloopProvider) -> String {
    let created = runloop
        .create(&ctx(), &spec(None, Some(600)))
        .await
        .unwrap();
    assert_eq!(created.status, SandboxStatus::Creating);
    let seen = runloop.get(&ctx(), &created.native_id).await.unwrap();
    assert_eq!(seen.status, SandboxStatus::Creating);
    let seen = runloop.get(&ctx(), &created.native_id).await.unwrap();
    assert_eq!(seen.status, SandboxStatus::Running);
    server.log().clear();
    created.native_id
}

#[tokio::test]
async fn create_sends_keep_alive_in_seconds_the_operation_id_and_the_bearer_key() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let spec = spec(Some("bpt_abc123"), Some(7200));
    let created = runloop.create(&ctx(), &spec).await.unwrap();
    assert_eq!(created.operation_id, Some(spec.operation_id));
    let reqs = server.log().matching(&Method::POST, "/v1/devboxes");
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/devboxes");
    assert_eq!(
        r.headers["authorization"].to_str().unwrap(),
        format!("Bearer {API_KEY}")
    );
    assert_eq!(
        r.headers["x-request-id"].to_str().unwrap(),
        spec.operation_id.to_string()
    );
    let b = body(r);
    assert_eq!(b["launch_parameters"]["keep_alive_time_seconds"], 7200);
    assert!(b["launch_parameters"]["keep_alive_time_seconds"].is_u64());
    assert_eq!(b["blueprint_id"], "bpt_abc123");
    assert!(b.get("blueprint_name").is_none());
    assert_eq!(
        b["metadata"][TAGS.operation_id],
        spec.operation_id.to_string()
    );
    let keys: Vec<&String> = b.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["blueprint_id", "launch_parameters", "metadata", "name"],
        "no field beyond the documented ones"
    );
}

#[tokio::test]
async fn a_blueprint_name_and_the_default_lifetime_are_sent_as_runloop_names_them() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    // No timeout in the spec: the advertised default (3600 s) goes on the wire, not nothing.
    runloop
        .create(&ctx(), &spec(Some("my-blueprint"), None))
        .await
        .unwrap();
    let b = body(&server.log().all()[0]);
    assert_eq!(b["blueprint_name"], "my-blueprint");
    assert_eq!(b["launch_parameters"]["keep_alive_time_seconds"], 3600);
    // Runloop's maximum is 48 h: more is refused as the provider would.
    let err = runloop
        .create(&ctx(), &spec(None, Some(172_801)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn cwd_and_env_travel_in_a_quoted_sh_wrapper_that_survives_hostile_values() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    let hostile_dir = "it's a \"dir\" $(touch pwned) `x`; rm -rf nothing";
    let mk = runloop
        .exec(
            &ctx(),
            &id,
            &ExecSpec::new(format!("mkdir -p {}", shell_quote(hostile_dir))),
        )
        .await
        .unwrap();
    assert_eq!(mk.exit_code, 0);
    let mut spec = ExecSpec::new("pwd; printf '%s|%s' \"$A\" \"$B_2\"");
    spec.cwd = Some(hostile_dir.to_owned());
    spec.env = BTreeMap::from([
        ("A".to_owned(), "'; exit 9; echo '".to_owned()),
        ("B_2".to_owned(), "$HOME `id` \"q\"\nnext".to_owned()),
    ]);
    server.log().clear();
    let out = runloop.exec(&ctx(), &id, &spec).await.unwrap();
    assert_eq!(out.exit_code, 0, "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let (pwd, vars) = stdout.split_once('\n').unwrap();
    assert!(pwd.ends_with(hostile_dir), "{pwd}");
    assert_eq!(vars, "'; exit 9; echo '|$HOME `id` \"q\"\nnext");
    // Nothing was executed from the values.
    let probe = runloop
        .exec(
            &ctx(),
            &id,
            &ExecSpec::new("ls pwned 2>/dev/null || echo absent"),
        )
        .await
        .unwrap();
    assert_eq!(probe.stdout, b"absent\n");

    let r = &server.log().matching(&Method::POST, "/execute")[0];
    assert_eq!(r.path, format!("/v1/devboxes/{id}/execute"));
    let b = body(r);
    let mut keys: Vec<&String> = b.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["command", "command_id", "optimistic_timeout"],
        "no cwd/env fields"
    );
    assert_eq!(b["command"], wrap_command(&spec).unwrap());
    // One `sh -c` word holding the shared prelude (quoted cwd, quoted exports), then the command.
    let script = shell::script(Provider::Runloop, &spec).unwrap();
    assert!(
        script.starts_with(&format!(
            "cd -- {} || exit 1\nexport A=",
            shell_quote(hostile_dir)
        )),
        "{script}"
    );
    assert_eq!(b["command"], format!("sh -c {}", shell_quote(&script)));
    assert!(b["optimistic_timeout"].as_u64().unwrap() <= 25);
}

#[test]
fn an_env_name_that_is_not_a_shell_name_is_refused() {
    let mut spec = ExecSpec::new("true");
    spec.env = BTreeMap::from([("A=B; x".to_owned(), "1".to_owned())]);
    assert!(matches!(
        wrap_command(&spec),
        Err(ProviderError::InvalidRequest { .. })
    ));
    let plain = ExecSpec::new("echo 'hi'");
    assert_eq!(wrap_command(&plain).unwrap(), r"sh -c 'echo '\''hi'\'''");
}

#[tokio::test]
async fn last_n_is_raised_so_output_beyond_a_hundred_lines_is_kept() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    let spec = ExecSpec::new("i=1; while [ $i -le 250 ]; do echo line$i; i=$((i+1)); done");
    let out = runloop.exec(&ctx(), &id, &spec).await.unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 250);
    assert!(text.starts_with("line1\n"), "the first lines are kept");
    assert!(!out.truncated);
    let r = &server.log().matching(&Method::POST, "/execute")[0];
    assert_eq!(query(r)["last_n"], spec.max_output_bytes.to_string());

    // The trap itself: without last_n, Runloop (and its fake) keeps only the last 100 lines.
    let raw = corral_provider_http::reqwest::Client::new()
        .post(format!("{}/v1/devboxes/{id}/execute", server.base_url()))
        .bearer_auth(API_KEY)
        .json(&serde_json::json!({
            "command_id": "01890a5d-ac96-774b-bcce-b302099a8057",
            "command": "i=1; while [ $i -le 250 ]; do echo line$i; i=$((i+1)); done",
        }))
        .send()
        .await
        .unwrap();
    let v: Value = raw.json().await.unwrap();
    assert_eq!(v["stdout"].as_str().unwrap().lines().count(), 100);
    assert_eq!(v["stdout_truncated"], true);
}

#[tokio::test]
async fn a_long_command_is_polled_and_a_deadline_kills_it() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    // Server-side waits of 1 s, so a 3 s command is polled without a 25 s test.
    let runloop = RunloopProvider::from_config(corral_provider_runloop::RunloopConfig {
        max_wait_seconds: 1,
        ..fake.config()
    })
    .unwrap();
    let polled = runloop
        .exec(&ctx(), &id, &ExecSpec::new("sleep 2; echo finished"))
        .await
        .unwrap();
    assert_eq!(polled.stdout, b"finished\n");
    let waits = server.log().matching(&Method::POST, "/wait_for_status");
    assert!(!waits.is_empty());
    assert_eq!(
        body(&waits[0])["statuses"],
        serde_json::json!(["completed"])
    );
    assert_eq!(body(&waits[0])["timeout_seconds"], 1);
    server.log().clear();
    let mut spec = ExecSpec::new("sleep 30");
    spec.timeout = std::time::Duration::from_secs(2);
    let err = runloop.exec(&ctx(), &id, &spec).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );
    let log = server.log();
    assert!(!log.matching(&Method::POST, "/wait_for_status").is_empty());
    let kills = log.matching(&Method::POST, "/kill");
    assert_eq!(kills.len(), 1);
    assert_eq!(body(&kills[0])["kill_process_group"], true);
}

#[tokio::test]
async fn files_use_the_binary_endpoints_and_a_missing_parent_never_reaches_upload() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    let dir = runloop
        .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout).unwrap().trim().to_owned();
    let path = format!("{dir}/bin.dat");
    let content: Vec<u8> = (0..=255u8).rev().collect();
    server.log().clear();
    runloop
        .write_file(&ctx(), &id, &path, &content)
        .await
        .unwrap();
    let up = &server.log().matching(&Method::POST, "/upload_file")[0];
    assert!(
        up.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("multipart/form-data; boundary=")
    );
    assert_eq!(
        runloop.read_file(&ctx(), &id, &path, 1024).await.unwrap(),
        content
    );
    let down = &server.log().matching(&Method::POST, "/download_file")[0];
    assert_eq!(body(down)["path"], path);

    server.log().clear();
    let err = runloop
        .write_file(&ctx(), &id, &format!("{dir}/missing/x"), b"x")
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ParentMissing { .. }),
        "{err:?}"
    );
    assert!(
        server
            .log()
            .matching(&Method::POST, "/upload_file")
            .is_empty()
    );
}

#[tokio::test]
async fn a_devbox_shut_down_through_corral_reads_as_deleted() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    runloop.delete(&ctx(), &id).await.unwrap();
    let r = &server.log().matching(&Method::POST, "/shutdown")[0];
    assert_eq!(r.path, format!("/v1/devboxes/{id}/shutdown"));
    assert_eq!(query(r)["force"], "true");
    assert_eq!(
        runloop.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Deleted
    );
    // A second delete is refused by Runloop (not running) and is still a success.
    runloop.delete(&ctx(), &id).await.unwrap();
}

#[tokio::test]
async fn a_failed_download_is_explained_as_missing_or_not_a_file() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    let dir = runloop
        .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout).unwrap().trim().to_owned();
    let err = runloop
        .read_file(&ctx(), &id, &dir, 1024)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::FileRefused { .. }), "{err:?}");
    let err = runloop
        .read_file(&ctx(), &id, &format!("{dir}/nope"), 1024)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound { .. }), "{err:?}");
    // A devbox that is gone is reported as such, not as a missing file.
    runloop.delete(&ctx(), &id).await.unwrap();
    let err = runloop
        .read_file(&ctx(), &id, &format!("{dir}/nope"), 1024)
        .await
        .unwrap_err();
    assert!(
        !matches!(err, ProviderError::FileNotFound { .. }),
        "{err:?}"
    );
}

// Commands as durable jobs, over Runloop's asynchronous executions.

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

/// Reads `events` to their end: (stdout, stderr, exit event), each chunk checked to start
/// where the previous one ended.
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
                assert_eq!(
                    offset,
                    Some(base + buf.len() as u64),
                    "{stream:?} chunk offset"
                );
                buf.extend_from_slice(&data);
            }
            CommandEvent::Exit { exit_code } => {
                assert!(exit.is_none(), "two exits");
                exit = Some(exit_code);
            }
        }
    }
    (out, err, exit)
}

#[tokio::test]
async fn a_start_without_stdin_is_an_execute_with_corrals_command_id_so_a_retry_runs_nothing_twice()
{
    let (fake, runloop) = setup().await;
    let c = ctx();
    let server = fake.server();
    let id = running(server, &runloop).await;
    let spec = command("echo ran >> \"$HOME/runs\"; sleep 1", false);
    let first = runloop.start_command(&c, &id, &spec).await.unwrap();
    let again = runloop.start_command(&c, &id, &spec).await.unwrap();
    assert_eq!(
        first.handle, again.handle,
        "the retry names the same execution"
    );
    let starts = server.log().matching(&Method::POST, "/execute");
    assert_eq!(starts.len(), 2);
    for r in &starts {
        assert_eq!(r.path, format!("/v1/devboxes/{id}/execute"));
        let b = body(r);
        assert_eq!(b["command_id"], command_uuid(&spec.command_id));
        // Answer at once: the start does not wait for the command.
        assert_eq!(b["optimistic_timeout"], 0);
        assert_eq!(
            b["command"],
            format!("sh -c {}", shell_quote(&spec.command))
        );
    }
    let (_, _, exit) = drain(
        runloop
            .attach_command(&c, &id, &first.handle, OutputOffsets::default())
            .await
            .unwrap(),
        OutputOffsets::default(),
    )
    .await;
    assert_eq!(exit, Some(Some(0)));
    let runs = runloop
        .exec(&c, &id, &ExecSpec::new("cat \"$HOME/runs\""))
        .await
        .unwrap();
    assert_eq!(runs.stdout, b"ran\n", "the command ran once");
    // Runloop cannot look executions up: a lost start cannot be found, only retried.
    let err = runloop
        .find_command(&c, &id, &spec.command_id)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unsupported { .. }), "{err:?}");
}

#[tokio::test]
async fn stdin_needs_execute_async_and_travels_as_text_a_resend_written_once() {
    let (fake, runloop) = setup().await;
    let c = ctx();
    let server = fake.server();
    let id = running(server, &runloop).await;
    let spec = command("cat; echo eof", true);
    let started = runloop.start_command(&c, &id, &spec).await.unwrap();
    let r = &server.log().matching(&Method::POST, "/execute_async")[0];
    assert_eq!(
        body(r),
        serde_json::json!({ "command": format!("sh -c {}", shell_quote(&spec.command)), "attach_stdin": true })
    );
    let h = &started.handle;
    assert_eq!(
        runloop
            .write_stdin(&c, &id, h, 0, b"hello\n")
            .await
            .unwrap(),
        6
    );
    // A resend (the answer was lost): Runloop has no offset, the adapter skips it.
    assert_eq!(
        runloop
            .write_stdin(&c, &id, h, 0, b"hello\n")
            .await
            .unwrap(),
        6
    );
    // Overlapping: only the new part goes out.
    assert_eq!(
        runloop
            .write_stdin(&c, &id, h, 3, b"lo\nworld\n")
            .await
            .unwrap(),
        12
    );
    let sent: Vec<Value> = server
        .log()
        .matching(&Method::POST, "/send_std_in")
        .iter()
        .map(body)
        .collect();
    assert_eq!(
        sent,
        [
            serde_json::json!({"text": "hello\n"}),
            serde_json::json!({"text": "world\n"})
        ]
    );
    // Bytes that are not text are refused before any request.
    server.log().clear();
    let err = runloop
        .write_stdin(&c, &id, h, 12, &[0xff, 0xfe])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    assert!(
        server
            .log()
            .matching(&Method::POST, "/send_std_in")
            .is_empty()
    );
    runloop.close_stdin(&c, &id, h).await.unwrap();
    assert_eq!(
        body(&server.log().matching(&Method::POST, "/send_std_in")[0]),
        serde_json::json!({"signal": "EOF"})
    );
    let (out, _, exit) = drain(
        runloop
            .attach_command(&c, &id, h, OutputOffsets::default())
            .await
            .unwrap(),
        OutputOffsets::default(),
    )
    .await;
    assert_eq!(out, b"hello\nworld\neof\n");
    assert_eq!(exit, Some(Some(0)));
    // Runloop refuses stdin for an execution started without `attach_stdin`.
    let plain = runloop
        .start_command(&c, &id, &command("sleep 5", false))
        .await
        .unwrap();
    let err = runloop
        .write_stdin(&c, &id, &plain.handle, 0, b"x")
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn attach_resumes_both_streams_at_their_byte_offsets() {
    let (fake, runloop) = setup().await;
    let c = ctx();
    let server = fake.server();
    let id = running(server, &runloop).await;
    let started = runloop
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
        runloop
            .attach_command(&c, &id, &started.handle, from)
            .await
            .unwrap(),
        from,
    )
    .await;
    assert_eq!(out, b"456789", "stdout from byte 4");
    assert_eq!(err, b"cdef", "stderr from byte 2");
    assert_eq!(exit, Some(Some(0)));
    let out_req = &server
        .log()
        .matching(&Method::GET, "/stream_stdout_updates")[0];
    assert_eq!(query(out_req)["offset"], "4");
    assert_eq!(out_req.headers["accept"], "text/event-stream");
    let err_req = &server
        .log()
        .matching(&Method::GET, "/stream_stderr_updates")[0];
    assert_eq!(query(err_req)["offset"], "2");
}

#[tokio::test]
async fn a_stream_runloop_closes_while_the_command_runs_ends_the_attach_without_an_exit() {
    let (fake, runloop) = setup().await;
    let c = ctx();
    let server = fake.server();
    let id = running(server, &runloop).await;
    fake.set_stream_idle(Duration::from_millis(300));
    let started = runloop
        .start_command(&c, &id, &command("echo one; sleep 3; echo two", false))
        .await
        .unwrap();
    let (out, _, exit) = drain(
        runloop
            .attach_command(&c, &id, &started.handle, OutputOffsets::default())
            .await
            .unwrap(),
        OutputOffsets::default(),
    )
    .await;
    assert_eq!(out, b"one\n");
    assert_eq!(exit, None, "no exit while the execution runs");
    // The service attaches again from the bytes it holds.
    fake.set_stream_idle(Duration::from_secs(20));
    let from = OutputOffsets {
        stdout: 4,
        stderr: 0,
    };
    let (rest, _, exit) = drain(
        runloop
            .attach_command(&c, &id, &started.handle, from)
            .await
            .unwrap(),
        from,
    )
    .await;
    assert_eq!(rest, b"two\n");
    assert_eq!(exit, Some(Some(0)));
}

#[tokio::test]
async fn kill_is_the_only_signal_and_reads_as_death_by_sigkill() {
    let (fake, runloop) = setup().await;
    let c = ctx();
    let server = fake.server();
    let id = running(server, &runloop).await;
    assert_eq!(runloop.capabilities().commands.signals, [Signal::Kill]);
    let started = runloop
        .start_command(&c, &id, &command("sleep 30", false))
        .await
        .unwrap();
    let err = runloop
        .signal_command(&c, &id, &started.handle, Signal::Term)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unsupported { .. }), "{err:?}");
    assert!(server.log().matching(&Method::POST, "/kill").is_empty());
    runloop
        .signal_command(&c, &id, &started.handle, Signal::Kill)
        .await
        .unwrap();
    let kill = &server.log().matching(&Method::POST, "/kill")[0];
    assert_eq!(body(kill)["kill_process_group"], true);
    let (_, _, exit) = drain(
        runloop
            .attach_command(&c, &id, &started.handle, OutputOffsets::default())
            .await
            .unwrap(),
        OutputOffsets::default(),
    )
    .await;
    assert_eq!(exit, Some(Some(137)));
    // Killing it again, ended, is fine.
    runloop
        .signal_command(&c, &id, &started.handle, Signal::Kill)
        .await
        .unwrap();
}

#[tokio::test]
async fn output_travels_as_text_so_bytes_that_are_not_utf8_arrive_replaced() {
    let (fake, runloop) = setup().await;
    let c = ctx();
    let server = fake.server();
    let id = running(server, &runloop).await;
    let started = runloop
        .start_command(&c, &id, &command("printf 'caf\\303\\251 \\377!'", false))
        .await
        .unwrap();
    let (out, _, _) = drain(
        runloop
            .attach_command(&c, &id, &started.handle, OutputOffsets::default())
            .await
            .unwrap(),
        OutputOffsets::default(),
    )
    .await;
    // Valid UTF-8 is kept whole; the stray byte is replaced by U+FFFD.
    assert_eq!(String::from_utf8(out).unwrap(), "café \u{fffd}!");
}

#[tokio::test]
async fn stop_is_suspend_which_refuses_exec_until_resume_and_is_idempotent() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    let stopped = runloop.stop(&ctx(), &id).await.unwrap();
    assert_eq!(stopped.status, SandboxStatus::Stopping, "suspending");
    let r = &server.log().matching(&Method::POST, "/suspend")[0];
    assert_eq!(r.path, format!("/v1/devboxes/{id}/suspend"));
    assert_eq!(
        runloop.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Stopping
    );
    assert_eq!(
        runloop.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Stopped
    );
    // Runloop refuses a call on a suspended devbox; so does exec here.
    let refused = runloop.exec(&ctx(), &id, &ExecSpec::new("true")).await;
    assert!(
        matches!(refused, Err(ProviderError::InvalidRequest { .. })),
        "{refused:?}"
    );
    // A second suspend is refused by Runloop (400): the adapter answers the devbox as it is.
    server.log().clear();
    let again = runloop.stop(&ctx(), &id).await.unwrap();
    assert_eq!(again.status, SandboxStatus::Stopped);
    let calls: Vec<String> = server
        .log()
        .all()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        calls,
        [
            format!("POST /v1/devboxes/{id}/suspend"),
            format!("GET /v1/devboxes/{id}"),
        ]
    );
    let resumed = runloop.resume(&ctx(), &id).await.unwrap();
    assert_eq!(resumed.status, SandboxStatus::Starting, "resuming");
    assert_eq!(
        runloop.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Starting
    );
    assert_eq!(
        runloop.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Running
    );
    // Resuming a running devbox is refused by Runloop (400 "not suspended"): answered as is.
    assert_eq!(
        runloop.resume(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Running
    );
    runloop.delete(&ctx(), &id).await.unwrap();
}

#[tokio::test]
async fn idle_stop_is_runloops_own_idle_suspend_in_the_launch_parameters() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    // The domain bounds idleStopSeconds (60 s at least) before the adapter; the adapter hands
    // on what it is given, so a 1 s policy shows the fake's idle suspend within the test.
    let spec = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::Runloop(corral_domain::StandardCreate {
            idle_stop_seconds: Some(1),
            ..Default::default()
        }),
        timeout_seconds: Some(600),
    };
    let created = runloop.create(&ctx(), &spec).await.unwrap();
    let b = body(&server.log().matching(&Method::POST, "/v1/devboxes")[0]);
    assert_eq!(
        b["launch_parameters"]["lifecycle"],
        serde_json::json!({"after_idle": {"idle_time_seconds": 1, "on_idle": "suspend"}}),
        "lifecycle.after_idle, which the description prefers to the top-level after_idle"
    );
    assert!(b["launch_parameters"].get("after_idle").is_none());
    // Runloop ignores keep_alive_time_seconds once after_idle is set; it is sent all the same.
    assert_eq!(b["launch_parameters"]["keep_alive_time_seconds"], 600);
    let id = created.native_id;
    runloop.get(&ctx(), &id).await.unwrap();
    // An exec is activity: the devbox stays up while it is used.
    let out = runloop
        .exec(&ctx(), &id, &ExecSpec::new("printf kept > idle-file"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0);
    assert_eq!(
        runloop.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Running
    );
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(
        runloop.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Stopped,
        "idle past idle_time_seconds: suspended by Runloop itself"
    );
    runloop.resume(&ctx(), &id).await.unwrap();
    runloop.get(&ctx(), &id).await.unwrap();
    let out = runloop
        .exec(&ctx(), &id, &ExecSpec::new("cat idle-file"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"kept", "the disk survives an idle suspend");
    // Without idleStopSeconds there is no lifecycle block at all.
    server.log().clear();
    runloop
        .create(&ctx(), &self::spec(None, Some(600)))
        .await
        .unwrap();
    let b = body(&server.log().all()[0]);
    assert!(b["launch_parameters"].get("lifecycle").is_none(), "{b}");
    runloop.delete(&ctx(), &id).await.unwrap();
}

#[tokio::test]
async fn a_disk_snapshot_is_asynchronous_tagged_and_followed_on_its_status_endpoint() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    let snapshot_id = corral_domain::SnapshotId::new(Provider::Runloop);
    let snap = runloop
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
    assert_eq!(snap.status, corral_domain::SnapshotStatus::Creating);
    let r = &server.log().all()[0];
    assert_eq!(r.path, format!("/v1/devboxes/{id}/snapshot_disk_async"));
    let b = body(r);
    assert_eq!(b["name"], "before");
    assert_eq!(
        b["metadata"][corral_provider_runloop::TAGS.snapshot_id],
        snapshot_id.to_string()
    );
    // A snapshot not complete yet cannot be deleted (409): that stays a refusal.
    let early = runloop.delete_snapshot(&ctx(), &snap.native_id).await;
    assert!(
        matches!(early, Err(ProviderError::InvalidRequest { .. })),
        "{early:?}"
    );
    let first = runloop.get_snapshot(&ctx(), &snap.native_id).await.unwrap();
    assert_eq!(first.status, corral_domain::SnapshotStatus::Creating);
    let ready = runloop.get_snapshot(&ctx(), &snap.native_id).await.unwrap();
    assert_eq!(ready.status, corral_domain::SnapshotStatus::Ready);
    assert!(ready.size_bytes.is_some());
    assert!(
        server
            .log()
            .all()
            .iter()
            .any(|r| r.path == format!("/v1/devboxes/disk_snapshots/{}/status", snap.native_id))
    );
    // Deleted: Runloop's status says `deleted`, which the port reads as NotFound; a second
    // delete is Runloop's 404.
    runloop
        .delete_snapshot(&ctx(), &snap.native_id)
        .await
        .unwrap();
    let gone = runloop.get_snapshot(&ctx(), &snap.native_id).await;
    assert!(
        matches!(gone, Err(ProviderError::NotFound { .. })),
        "{gone:?}"
    );
    let twice = runloop.delete_snapshot(&ctx(), &snap.native_id).await;
    assert!(
        matches!(twice, Err(ProviderError::NotFound { .. })),
        "{twice:?}"
    );
    runloop.delete(&ctx(), &id).await.unwrap();
}

#[tokio::test]
async fn a_restore_is_a_create_with_snapshot_id_tagged_like_any_create() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    let snap = runloop
        .snapshot(
            &ctx(),
            &id,
            &corral_provider::SnapshotSpec {
                snapshot_id: corral_domain::SnapshotId::new(Provider::Runloop),
                name: None,
            },
        )
        .await
        .unwrap();
    while runloop
        .get_snapshot(&ctx(), &snap.native_id)
        .await
        .unwrap()
        .status
        != corral_domain::SnapshotStatus::Ready
    {}
    server.log().clear();
    let spec = spec(Some("bpt_ignored"), Some(900));
    let made = runloop
        .restore(&ctx(), &spec, &snap.native_id)
        .await
        .unwrap();
    assert_eq!(made.operation_id, Some(spec.operation_id));
    let b = body(&server.log().matching(&Method::POST, "/v1/devboxes")[0]);
    assert_eq!(b["snapshot_id"], snap.native_id.as_str());
    assert!(
        b.get("blueprint_id").is_none() && b.get("blueprint_name").is_none(),
        "Runloop takes one source: {b}"
    );
    assert_eq!(
        b["metadata"][TAGS.operation_id],
        spec.operation_id.to_string()
    );
    assert_eq!(b["launch_parameters"]["keep_alive_time_seconds"], 900);
    // A snapshot Runloop does not know is its 404.
    let unknown = runloop.restore(&ctx(), &spec, "snp_nope").await;
    assert!(
        matches!(unknown, Err(ProviderError::NotFound { .. })),
        "{unknown:?}"
    );
    runloop.delete(&ctx(), &made.native_id).await.unwrap();
    runloop.delete(&ctx(), &id).await.unwrap();
}
