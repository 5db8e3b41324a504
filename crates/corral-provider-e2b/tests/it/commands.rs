//! E2B's traps for commands as durable jobs on envd's process service.

use std::time::Duration;

use corral_domain::{CommandId, OutputStream, Signal};
use corral_provider::{CommandEvent, CommandSpec, OutputOffsets, ProviderError, SandboxProvider};
use corral_provider_e2b::connect::Decoder;
use corral_provider_http::reqwest::Method;
use futures::StreamExt as _;
use serde_json::Value;

use crate::{ctx, spec};

fn command(cmd: &str) -> CommandSpec {
    CommandSpec {
        command_id: CommandId::new(),
        command: cmd.into(),
        cwd: None,
        env: Default::default(),
        stdin: false,
        timeout: Duration::from_secs(60),
    }
}

async fn collect(events: corral_provider::CommandEvents<'_>) -> Vec<CommandEvent> {
    corral_provider_testkit::helpers::drain(events).await
}

fn stdout_of(events: &[CommandEvent]) -> Vec<u8> {
    corral_provider_testkit::helpers::output_of(events, OutputStream::Stdout)
}

/// The start is one `Start` stream tagged with the command id, with a keepalive interval and
/// a deadline beyond Corral's own; its output carries offsets counted from 0.
#[tokio::test]
async fn start_is_a_tagged_envd_start_whose_stream_counts_offsets_from_zero() {
    let (fake, p) = crate::world().await;
    let cx = ctx();
    let sb = p.create(&cx, &spec(None)).await.unwrap().native_id;
    let c = command("printf ab; printf cd; printf err >&2");
    let started = p.start_command(&cx, &sb, &c).await.unwrap();
    assert_eq!(started.handle, c.command_id.to_string());
    let events = collect(started.events.expect("Start is a stream")).await;
    let mut next = [0u64, 0];
    for e in &events {
        if let CommandEvent::Output {
            stream,
            offset,
            data,
        } = e
        {
            let i = usize::from(*stream == OutputStream::Stderr);
            assert_eq!(
                *offset,
                Some(next[i]),
                "offsets count every byte: {events:?}"
            );
            next[i] += data.len() as u64;
        }
    }
    assert_eq!(stdout_of(&events), b"abcd");
    assert_eq!(next, [4, 3]);
    assert_eq!(
        events.last(),
        Some(&CommandEvent::Exit { exit_code: Some(0) })
    );

    let starts = fake
        .envd()
        .log()
        .matching(&Method::POST, "/process.Process/Start");
    let req = starts.last().unwrap();
    let mut d = Decoder::new(1 << 20);
    d.push(&req.body);
    let msg: Value = serde_json::from_slice(&d.next_envelope().unwrap().unwrap().data).unwrap();
    assert_eq!(msg["tag"], c.command_id.to_string());
    assert_eq!(msg["stdin"], false);
    assert_eq!(msg["process"]["cmd"], "/bin/bash");
    // The command is an argument of the wrapper, never spliced into its script.
    assert_eq!(msg["process"]["args"][3], c.command.as_str());
    assert_eq!(req.headers["connect-timeout-ms"], "120000");
    assert_eq!(req.headers["keepalive-ping-interval"], "15");
}

/// `Connect` streams only what comes next: no replay, no offsets (resume is live only).
#[tokio::test]
async fn connect_gives_no_replay_and_no_offsets() {
    let (fake, p) = crate::world().await;
    let cx = ctx();
    let sb = p.create(&cx, &spec(None)).await.unwrap().native_id;
    let c = command("echo early; sleep 1; echo late");
    let started = p.start_command(&cx, &sb, &c).await.unwrap();
    let mut first = started.events.unwrap();
    // Read until `early`, then drop the start's stream.
    loop {
        if let Some(Ok(CommandEvent::Output { .. })) = first.next().await {
            break;
        }
    }
    drop(first);
    let events = collect(
        p.attach_command(&cx, &sb, &started.handle, OutputOffsets::default())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(fake.connects(), 1);
    assert_eq!(
        stdout_of(&events),
        b"late\n",
        "Connect replayed: {events:?}"
    );
    assert!(events.iter().all(|e| match e {
        CommandEvent::Output { offset, .. } => offset.is_none(),
        CommandEvent::Exit { exit_code } => *exit_code == Some(0),
    }));
    let connects = fake
        .envd()
        .log()
        .matching(&Method::POST, "/process.Process/Connect");
    let mut d = Decoder::new(1 << 20);
    d.push(&connects[0].body);
    let msg: Value = serde_json::from_slice(&d.next_envelope().unwrap().unwrap().data).unwrap();
    // By pid, found through List: the tag is only what List shows.
    assert!(msg["process"]["pid"].as_u64().unwrap() > 0);
    assert!(msg["process"].get("tag").is_none());
}

/// envd forgets a process once it ended: its exit comes from the wrapper's record, with no
/// `Connect`; a command nobody started is `NotFound`.
#[tokio::test]
async fn an_ended_process_is_forgotten_and_its_exit_comes_from_the_record() {
    let (fake, p) = crate::world().await;
    let cx = ctx();
    let sb = p.create(&cx, &spec(None)).await.unwrap().native_id;
    let c = command("exit 7");
    let started = p.start_command(&cx, &sb, &c).await.unwrap();
    drop(started.events);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !fake.processes_of(&sb).is_empty() {
        assert!(std::time::Instant::now() < deadline, "still running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events = collect(
        p.attach_command(&cx, &sb, &started.handle, OutputOffsets::default())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(events, [CommandEvent::Exit { exit_code: Some(7) }]);
    assert_eq!(fake.connects(), 0);
    assert_eq!(
        p.find_command(&cx, &sb, &c.command_id).await.unwrap(),
        Some(started.handle.clone())
    );
    let stranger = CommandId::new().to_string();
    assert!(matches!(
        p.attach_command(&cx, &sb, &stranger, OutputOffsets::default())
            .await,
        Err(ProviderError::NotFound { .. })
    ));
    // Starting the same command id again does not run it again.
    let again = p.start_command(&cx, &sb, &c).await.unwrap();
    assert_eq!(again.handle, started.handle);
    assert!(again.events.is_none());
}

/// envd does not refuse a second process with the same tag: the adapter looks first.
#[tokio::test]
async fn starting_a_running_command_id_again_does_not_run_it_twice() {
    let (fake, p) = crate::world().await;
    let cx = ctx();
    let sb = p.create(&cx, &spec(None)).await.unwrap().native_id;
    let c = command("sleep 30");
    let first = p.start_command(&cx, &sb, &c).await.unwrap();
    let second = p.start_command(&cx, &sb, &c).await.unwrap();
    assert_eq!(first.handle, second.handle);
    assert!(second.events.is_none());
    let tag = c.command_id.to_string();
    let running = fake.processes_of(&sb);
    assert_eq!(
        running
            .iter()
            .filter(|(_, t)| t.as_deref() == Some(tag.as_str()))
            .count(),
        1,
        "{running:?}"
    );
    p.signal_command(&cx, &sb, &first.handle, Signal::Kill)
        .await
        .unwrap();
}

/// envd's `SendSignal` would reach only the wrapper (and knows only TERM and KILL): a signal
/// goes to the command's whole process group, so nothing it started survives (a background
/// job of a non-interactive shell ignores INT, so TERM is the test).
#[tokio::test]
async fn a_signal_reaches_everything_the_command_started() {
    let (fake, p) = crate::world().await;
    let cx = ctx();
    let sb = p.create(&cx, &spec(None)).await.unwrap().native_id;
    let c = command("sleep 30 & echo $! > child; echo ready; wait");
    let started = p.start_command(&cx, &sb, &c).await.unwrap();
    let mut events = started.events.unwrap();
    while !matches!(events.next().await, Some(Ok(CommandEvent::Output { .. }))) {}
    p.signal_command(&cx, &sb, &started.handle, Signal::Term)
        .await
        .unwrap();
    let rest = collect(events).await;
    assert_eq!(
        rest.last(),
        Some(&CommandEvent::Exit {
            exit_code: Some(143)
        })
    );
    // The background `sleep` died with it: within 10 s on a loaded machine, a zombie not yet
    // reaped counting as dead (`kill -0` still finds one).
    let check = p
        .exec(
            &cx,
            &sb,
            &corral_provider::ExecSpec::new(
                "c=$(cat child); i=0; while [ $i -lt 50 ]; do s=$(cut -d' ' -f3 /proc/$c/stat 2>/dev/null); [ -z \"$s\" ] || [ \"$s\" = Z ] && { echo gone; exit 0; }; sleep 0.2; i=$((i+1)); done; echo alive",
            ),
        )
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&check.stdout), "gone\n");
    assert!(
        fake.envd()
            .log()
            .matching(&Method::POST, "/process.Process/SendSignal")
            .is_empty()
    );
    // An ended command is not an error.
    p.signal_command(&cx, &sb, &started.handle, Signal::Term)
        .await
        .unwrap();
}

/// A signal envd's `SendSignal` lacks (INT) ends a foreground command, reported as 130.
#[tokio::test]
async fn a_signal_envd_lacks_is_delivered_too() {
    let (_fake, p) = crate::world().await;
    let cx = ctx();
    let sb = p.create(&cx, &spec(None)).await.unwrap().native_id;
    let c = command("echo ready; sleep 30");
    let started = p.start_command(&cx, &sb, &c).await.unwrap();
    let mut events = started.events.unwrap();
    while !matches!(events.next().await, Some(Ok(CommandEvent::Output { .. }))) {}
    p.signal_command(&cx, &sb, &started.handle, Signal::Int)
        .await
        .unwrap();
    let rest = collect(events).await;
    assert_eq!(
        rest.last(),
        Some(&CommandEvent::Exit {
            exit_code: Some(130)
        })
    );
}

/// stdin goes through `SendInput` to the pid `List` names; envd cannot drop a resend, and a
/// process started without stdin refuses input.
#[tokio::test]
async fn stdin_is_send_input_and_a_process_without_stdin_refuses_it() {
    let (fake, p) = crate::world().await;
    let cx = ctx();
    let sb = p.create(&cx, &spec(None)).await.unwrap().native_id;
    let mut c = command("cat");
    c.stdin = true;
    let started = p.start_command(&cx, &sb, &c).await.unwrap();
    assert_eq!(
        p.write_stdin(&cx, &sb, &started.handle, 0, b"abc")
            .await
            .unwrap(),
        3
    );
    p.close_stdin(&cx, &sb, &started.handle).await.unwrap();
    let events = collect(started.events.unwrap()).await;
    assert_eq!(stdout_of(&events), b"abc");
    assert_eq!(fake.stdin_writes(), 1);
    let inputs = fake
        .envd()
        .log()
        .matching(&Method::POST, "/process.Process/SendInput");
    let msg: Value = serde_json::from_slice(&inputs[0].body).unwrap();
    assert_eq!(msg["input"]["stdin"], "YWJj");
    assert!(msg["process"]["pid"].as_u64().is_some());

    let quiet = command("sleep 30");
    let started = p.start_command(&cx, &sb, &quiet).await.unwrap();
    let refused = p.write_stdin(&cx, &sb, &started.handle, 0, b"x").await;
    assert!(refused.is_err(), "{refused:?}");
    p.signal_command(&cx, &sb, &started.handle, Signal::Kill)
        .await
        .unwrap();
}

/// The fake refuses what envd refuses: a signal other than TERM and KILL, a pid it does not
/// run (`not_found`, in the end-of-stream message of a stream).
#[tokio::test]
async fn the_fakes_envd_refuses_what_envd_refuses() {
    let (fake, p) = crate::world().await;
    let cx = ctx();
    let sb = p.create(&cx, &spec(None)).await.unwrap().native_id;
    let token = fake.token_of(&sb).unwrap();
    let http = corral_provider_http::reqwest::Client::new();
    let url = |m: &str| format!("{}/process.Process/{m}", fake.envd().base_url());
    let resp = http
        .post(url("SendSignal"))
        .header("x-access-token", &token)
        .header("content-type", "application/json")
        .body(r#"{"process":{"pid":1},"signal":"SIGNAL_SIGINT"}"#)
        .send()
        .await
        .unwrap();
    // Unknown pid first: envd looks the process up before the signal.
    assert_eq!(resp.status().as_u16(), 404);
    let c = command("sleep 30");
    let started = p.start_command(&cx, &sb, &c).await.unwrap();
    let (pid, _) = fake.processes_of(&sb)[0].clone();
    let resp = http
        .post(url("SendSignal"))
        .header("x-access-token", &token)
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"process":{{"pid":{pid}}},"signal":"SIGNAL_SIGINT"}}"#
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 501);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "unimplemented");
    let resp = http
        .post(url("Connect"))
        .header("x-access-token", &token)
        .header("content-type", "application/connect+json")
        .body(corral_provider_e2b::connect::encode(
            0,
            br#"{"process":{"pid":1}}"#,
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut d = Decoder::new(1 << 20);
    d.push(&resp.bytes().await.unwrap());
    let end = d.next_envelope().unwrap().unwrap();
    assert!(end.is_end_stream());
    let trailer: Value = serde_json::from_slice(&end.data).unwrap();
    assert_eq!(trailer["error"]["code"], "not_found");
    drop(started);
}
