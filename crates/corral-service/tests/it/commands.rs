//! Commands as durable jobs through the use cases: start, follow, resume, stdin, signals,
//! deadlines, retention, idempotent starts, a lost start, a crashed capture, and the end of
//! a deleted sandbox's commands.

use std::time::Duration;

use corral_domain::{
    Command, CommandState, CreateSandboxRequest, OutputEvent, Provider, Sandbox, SignalInput,
    StartCommandInput, StdinInput,
};
use corral_errors::ErrorCode;
use corral_service::commands::CommandsConfig;
use corral_service::{InlineAccess, ServiceConfig};
use futures::StreamExt as _;

use crate::support::{Setup, World};

async fn sandbox(w: &World) -> Sandbox {
    let caller = w.caller().await;
    let c = w
        .service
        .create(
            &caller,
            InlineAccess::default(),
            None,
            CreateSandboxRequest::standard(Provider::Local, None, None),
        )
        .await
        .unwrap();
    serde_json::from_str(&c.body).unwrap()
}

fn input(v: serde_json::Value) -> StartCommandInput {
    serde_json::from_value(v).unwrap()
}

async fn start(w: &World, sbx: &Sandbox, v: serde_json::Value) -> Command {
    let caller = w.caller().await;
    let c = w
        .service
        .start_command(
            &caller,
            InlineAccess::default(),
            &sbx.id.to_string(),
            None,
            input(v),
        )
        .await
        .unwrap();
    assert_eq!(c.status, 201);
    serde_json::from_str(&c.body).unwrap()
}

async fn wait_end(w: &World, sbx: &Sandbox, cmd: &Command) -> Command {
    let caller = w.caller().await;
    for _ in 0..60 {
        let c = w
            .service
            .command(
                &caller,
                &sbx.id.to_string(),
                &cmd.id.to_string(),
                Some(Duration::from_secs(1)),
            )
            .await
            .unwrap();
        if c.state.is_final() {
            return c;
        }
    }
    panic!("the command did not end");
}

/// Follows the output from `after` to the exit (or `take` events), returning the events.
async fn follow(
    w: &World,
    sbx: &Sandbox,
    cmd: &Command,
    after: u64,
    take: usize,
) -> Vec<OutputEvent> {
    let caller = w.caller().await;
    let stream = w
        .service
        .follow_output(&caller, &sbx.id.to_string(), &cmd.id.to_string(), after)
        .await
        .unwrap();
    let events: Vec<OutputEvent> = tokio::time::timeout(
        Duration::from_secs(60),
        stream.take(take).map(Result::unwrap).collect(),
    )
    .await
    .expect("the output stream stalled");
    events
}

fn stdout_of(events: &[OutputEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            OutputEvent::Output {
                stream: corral_domain::OutputStream::Stdout,
                data,
                ..
            } => Some(data.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_answers_at_once_streams_its_output_and_reports_its_exit() {
    let w = World::new().await;
    let sbx = sandbox(&w).await;
    let cmd = start(
        &w,
        &sbx,
        serde_json::json!({"command": "echo one; echo err >&2; sleep 1; echo two; exit 7", "tag": "t1"}),
    )
    .await;
    assert_eq!(cmd.state, CommandState::Running);
    assert_eq!(cmd.tag.as_deref(), Some("t1"));
    let events = follow(&w, &sbx, &cmd, 0, usize::MAX).await;
    assert_eq!(stdout_of(&events), "one\ntwo\n");
    let seqs: Vec<u64> = events.iter().map(OutputEvent::seq).collect();
    assert!(seqs.windows(2).all(|p| p[1] == p[0] + 1), "seqs {seqs:?}");
    let Some(OutputEvent::Exit {
        state, exit_code, ..
    }) = events.last()
    else {
        panic!("no exit event: {events:?}");
    };
    assert_eq!((*state, *exit_code), (CommandState::Exited, Some(7)));
    let done = wait_end(&w, &sbx, &cmd).await;
    assert_eq!((done.stdout_bytes, done.stderr_bytes), (8, 4));
    assert!(done.ended_at.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_command_runs_past_the_synchronous_exec_deadline() {
    let w = World::with(Setup {
        config: ServiceConfig {
            exec_deadline: Duration::from_secs(1),
            ..ServiceConfig::default()
        },
        ..Setup::default()
    })
    .await;
    let sbx = sandbox(&w).await;
    let cmd = start(
        &w,
        &sbx,
        serde_json::json!({"command": "sleep 3; echo done"}),
    )
    .await;
    let done = wait_end(&w, &sbx, &cmd).await;
    assert_eq!(
        (done.state, done.exit_code),
        (CommandState::Exited, Some(0))
    );
    assert_eq!(
        stdout_of(&follow(&w, &sbx, &cmd, 0, usize::MAX).await),
        "done\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_reconnects_after_any_event_sees_every_byte_once() {
    let w = World::new().await;
    let sbx = sandbox(&w).await;
    let cmd = start(
        &w,
        &sbx,
        serde_json::json!({"command": "i=0; while [ $i -lt 20 ]; do echo line-$i; i=$((i+1)); sleep 0.05; done"}),
    )
    .await;
    let expected: String = (0..20).map(|i| format!("line-{i}\n")).collect();
    // Reconnect after every single event.
    let mut after = 0;
    let mut seen = Vec::new();
    loop {
        let mut one = follow(&w, &sbx, &cmd, after, 1).await;
        let e = one.pop().expect("an event");
        after = e.seq();
        let end = matches!(e, OutputEvent::Exit { .. });
        seen.push(e);
        if end {
            break;
        }
    }
    assert_eq!(stdout_of(&seen), expected);
    // The JSON pages say the same.
    let caller = w.caller().await;
    let page = w
        .service
        .command_output(&caller, &sbx.id.to_string(), &cmd.id.to_string(), 0)
        .await
        .unwrap();
    assert!(page.done);
    assert_eq!(page.events, seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_written_once_per_offset_and_closing_it_ends_the_input() {
    let w = World::new().await;
    let sbx = sandbox(&w).await;
    let caller = w.caller().await;
    let cmd = start(
        &w,
        &sbx,
        serde_json::json!({"command": "cat", "stdin": true}),
    )
    .await;
    assert!(cmd.stdin_open);
    let (s, c) = (sbx.id.to_string(), cmd.id.to_string());
    let write = |data: &str, offset: Option<u64>, close: bool| StdinInput {
        data: data.into(),
        encoding: None,
        offset,
        close,
    };
    let r = w
        .service
        .write_stdin(
            &caller,
            InlineAccess::default(),
            &s,
            &c,
            write("ab", Some(0), false),
        )
        .await
        .unwrap();
    assert_eq!(r.stdin_bytes, 2);
    // A resend of the same bytes after a lost answer writes nothing again.
    let r = w
        .service
        .write_stdin(
            &caller,
            InlineAccess::default(),
            &s,
            &c,
            write("ab", Some(0), false),
        )
        .await
        .unwrap();
    assert_eq!(r.stdin_bytes, 2);
    // An overlapping write only adds what is new.
    let r = w
        .service
        .write_stdin(
            &caller,
            InlineAccess::default(),
            &s,
            &c,
            write("bcd", Some(1), true),
        )
        .await
        .unwrap();
    assert_eq!((r.stdin_bytes, r.stdin_open), (4, false));
    let past = w
        .service
        .write_stdin(
            &caller,
            InlineAccess::default(),
            &s,
            &c,
            write("z", Some(9), false),
        )
        .await
        .unwrap_err();
    assert_eq!(past.code(), ErrorCode::ProviderInvalidRequest);
    // New bytes after the close: well-formed, refused by the command's state (422).
    let closed = w
        .service
        .write_stdin(
            &caller,
            InlineAccess::default(),
            &s,
            &c,
            write("e", Some(4), false),
        )
        .await
        .unwrap_err();
    assert_eq!(closed.code(), ErrorCode::ProviderInvalidRequest);
    assert_eq!(
        stdout_of(&follow(&w, &sbx, &cmd, 0, usize::MAX).await),
        "abcd"
    );
    let done = wait_end(&w, &sbx, &cmd).await;
    assert_eq!((done.state, done.stdin_bytes), (CommandState::Exited, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_kills_the_command_and_a_deadline_times_it_out() {
    let w = World::new().await;
    let sbx = sandbox(&w).await;
    let caller = w.caller().await;
    let cmd = start(&w, &sbx, serde_json::json!({"command": "sleep 30"})).await;
    w.service
        .signal_command(
            &caller,
            InlineAccess::default(),
            &sbx.id.to_string(),
            &cmd.id.to_string(),
            SignalInput {
                signal: corral_domain::Signal::Term,
            },
        )
        .await
        .unwrap();
    let done = wait_end(&w, &sbx, &cmd).await;
    assert_eq!(
        (done.state, done.exit_code),
        (CommandState::Killed, Some(143))
    );

    // A command that catches the signal and exits on its own terms has exited.
    let cmd = start(
        &w,
        &sbx,
        serde_json::json!({"command": "trap 'exit 0' USR1; echo ready; while :; do sleep 0.1; done"}),
    )
    .await;
    follow(&w, &sbx, &cmd, 0, 1).await;
    w.service
        .signal_command(
            &caller,
            InlineAccess::default(),
            &sbx.id.to_string(),
            &cmd.id.to_string(),
            SignalInput {
                signal: corral_domain::Signal::Usr1,
            },
        )
        .await
        .unwrap();
    let done = wait_end(&w, &sbx, &cmd).await;
    assert_eq!(
        (done.state, done.exit_code),
        (CommandState::Exited, Some(0))
    );

    let cmd = start(
        &w,
        &sbx,
        serde_json::json!({"command": "sleep 30", "timeoutSeconds": 1}),
    )
    .await;
    let done = wait_end(&w, &sbx, &cmd).await;
    assert_eq!(done.state, CommandState::TimedOut);
    assert_eq!(done.exit_code, Some(137));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_caps_an_output_bomb_and_readers_get_a_gap_then_the_newest_bytes() {
    let w = World::with(Setup {
        config: ServiceConfig {
            commands: CommandsConfig {
                max_output_bytes_per_command: 64 * 1024,
                ..CommandsConfig::default()
            },
            ..ServiceConfig::default()
        },
        ..Setup::default()
    })
    .await;
    let sbx = sandbox(&w).await;
    // 4 MiB of output, then a marker.
    let cmd = start(
        &w,
        &sbx,
        serde_json::json!({"command": "head -c 4194304 /dev/zero | tr '\\0' x; echo; echo END"}),
    )
    .await;
    let done = wait_end(&w, &sbx, &cmd).await;
    assert_eq!(done.stdout_bytes, 4 * 1024 * 1024 + 5);
    let events = follow(&w, &sbx, &cmd, 0, usize::MAX).await;
    let Some(OutputEvent::Gap {
        offset: 0,
        length: Some(lost),
        ..
    }) = events.first()
    else {
        panic!("no leading gap: {:?}", events.first());
    };
    let kept = stdout_of(&events);
    assert!(kept.ends_with("\nEND\n"));
    assert_eq!(*lost + kept.len() as u64, done.stdout_bytes);
    assert!(
        kept.len() <= 64 * 1024 + 64 * 1024,
        "kept {} bytes",
        kept.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_start_replays_and_concurrent_identical_starts_run_once() {
    let w = World::new().await;
    let sbx = sandbox(&w).await;
    let caller = w.caller().await;
    let s = sbx.id.to_string();
    let body = serde_json::json!({"command": "echo ran >> /tmp/corral-keyed-$$-never; echo x"});
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (svc, s, b) = (w.service.clone(), s.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            svc.start_command(&caller, InlineAccess::default(), &s, Some("k1"), input(b))
                .await
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(c) => {
                let cmd: Command = serde_json::from_str(&c.body).unwrap();
                ids.insert(cmd.id);
            }
            Err(e) => assert_eq!(e.code(), ErrorCode::IdempotencyInProgress),
        }
    }
    assert_eq!(ids.len(), 1, "one command for one key");
    let again = w
        .service
        .start_command(
            &caller,
            InlineAccess::default(),
            &s,
            Some("k1"),
            input(body),
        )
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.status, 200);
    let other = w
        .service
        .start_command(
            &caller,
            InlineAccess::default(),
            &s,
            Some("k1"),
            input(serde_json::json!({"command": "echo different"})),
        )
        .await
        .unwrap_err();
    assert_eq!(other.code(), ErrorCode::IdempotencyConflict);
    let page = w
        .service
        .list_commands(&caller, &s, None, None, None)
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(w.double.count("start_command"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_whose_answer_was_lost_is_found_again_and_never_run_twice() {
    let w = World::new().await;
    let sbx = sandbox(&w).await;
    let caller = w.caller().await;
    let s = sbx.id.to_string();
    *w.double.lose_next_start_answer.lock().unwrap() = true;
    let body = serde_json::json!({"command": "echo once"});
    let first = w
        .service
        .start_command(
            &caller,
            InlineAccess::default(),
            &s,
            Some("lost"),
            input(body.clone()),
        )
        .await
        .unwrap();
    let cmd: Command = serde_json::from_str(&first.body).unwrap();
    assert_eq!(
        cmd.state,
        CommandState::Starting,
        "the start is unconfirmed"
    );
    let retry = w
        .service
        .start_command(
            &caller,
            InlineAccess::default(),
            &s,
            Some("lost"),
            input(body),
        )
        .await
        .unwrap();
    assert!(retry.replayed);
    let done = wait_end(&w, &sbx, &cmd).await;
    assert_eq!(done.state, CommandState::Exited);
    assert_eq!(
        stdout_of(&follow(&w, &sbx, &cmd, 0, usize::MAX).await),
        "once\n"
    );
    assert_eq!(w.double.count("start_command"), 1);
    assert!(w.double.count("find_command") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_sandbox_ends_its_commands_and_keeps_their_records() {
    let w = World::new().await;
    let sbx = sandbox(&w).await;
    let caller = w.caller().await;
    let cmd = start(&w, &sbx, serde_json::json!({"command": "sleep 30"})).await;
    w.service
        .delete(&caller, InlineAccess::default(), &sbx.id.to_string())
        .await
        .unwrap();
    let after = w
        .service
        .command(&caller, &sbx.id.to_string(), &cmd.id.to_string(), None)
        .await
        .unwrap();
    assert_eq!(after.state, CommandState::Killed);
    assert!(w.double.count("signal_command") >= 1);
    let events = follow(&w, &sbx, &cmd, 0, usize::MAX).await;
    assert!(matches!(
        events.last(),
        Some(OutputEvent::Exit {
            state: CommandState::Killed,
            ..
        })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_malformed_command_ids_and_bad_bodies_are_refused_before_the_provider() {
    let w = World::new().await;
    let sbx = sandbox(&w).await;
    let caller = w.caller().await;
    let s = sbx.id.to_string();
    let missing = w
        .service
        .command(
            &caller,
            &s,
            &corral_domain::CommandId::new().to_string(),
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(missing.code(), ErrorCode::SandboxNotFound);
    let bad = w
        .service
        .command(&caller, &s, "cmd_nope", None)
        .await
        .unwrap_err();
    assert_eq!(bad.code(), ErrorCode::InvalidRequest);
    let before = w.double.total();
    for body in [
        serde_json::json!({"command": ""}),
        serde_json::json!({"command": "true", "timeoutSeconds": 0}),
        serde_json::json!({"command": "true", "timeoutSeconds": 100_000_000}),
        serde_json::json!({"command": "true", "tag": ""}),
    ] {
        let e = w
            .service
            .start_command(&caller, InlineAccess::default(), &s, None, input(body))
            .await
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidRequest);
    }
    let bad_state = w
        .service
        .list_commands(&caller, &s, Some("sleeping"), None, None)
        .await
        .unwrap_err();
    assert_eq!(bad_state.code(), ErrorCode::InvalidRequest);
    assert_eq!(w.double.total(), before, "no provider call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_whose_capture_died_is_taken_over_with_no_byte_lost_or_repeated() {
    let config = ServiceConfig {
        commands: CommandsConfig {
            lease: Duration::from_millis(600),
            ..CommandsConfig::default()
        },
        ..ServiceConfig::default()
    };
    let w = World::with(Setup {
        config: config.clone(),
        ..Setup::default()
    })
    .await;
    let sbx = sandbox(&w).await;
    // The first capture runs on a runtime of its own, which then dies as a crashed process
    // would: its tasks stop mid-command without a word to the database.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let svc = w.service.clone();
    let caller = w.caller().await;
    let s = sbx.id.to_string();
    let cmd: Command = rt
        .spawn(async move {
            let c = svc
                .start_command(
                    &caller,
                    InlineAccess::default(),
                    &s,
                    None,
                    input(serde_json::json!({"command": "i=0; while [ $i -lt 30 ]; do echo line-$i; i=$((i+1)); sleep 0.1; done"})),
                )
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(800)).await;
            serde_json::from_str(&c.body).unwrap()
        })
        .await
        .unwrap();
    rt.shutdown_background();
    // Another replica over the same database (a restarted process).
    let other = w.second_replica(config).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        other.supervise_commands_once().await,
        1,
        "the command is taken over"
    );
    let caller = w.caller().await;
    let stream = other
        .follow_output(&caller, &sbx.id.to_string(), &cmd.id.to_string(), 0)
        .await
        .unwrap();
    let events: Vec<OutputEvent> = tokio::time::timeout(
        Duration::from_secs(30),
        stream.map(Result::unwrap).collect(),
    )
    .await
    .unwrap();
    let expected: String = (0..30).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(stdout_of(&events), expected);
    assert!(matches!(
        events.last(),
        Some(OutputEvent::Exit {
            state: CommandState::Exited,
            exit_code: Some(0),
            ..
        })
    ));
}
