//! Sprites' traps for commands as durable jobs on exec sessions.

use std::time::Duration;

use corral_domain::{CommandId, OutputStream, Signal};
use corral_provider::{CommandEvent, CommandSpec, OutputOffsets, ProviderError, SandboxProvider};
use corral_provider_http::reqwest::Method;
use futures::StreamExt as _;

use crate::{created, setup};

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

async fn collect(mut events: corral_provider::CommandEvents<'_>) -> Vec<CommandEvent> {
    let mut all = Vec::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(30), events.next())
        .await
        .expect("an event within 30 s")
    {
        all.push(e.unwrap());
    }
    all
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

/// The start is a non-TTY session that outlives its socket (`max_run_after_disconnect` past
/// Corral's deadline: Sprites' non-TTY default is 10 s), with the command id in its argv; its
/// socket's output carries offsets from 0.
#[tokio::test]
async fn start_is_a_session_that_outlives_its_socket_with_offsets_from_zero() {
    let (fake, p, cx) = setup().await;
    let sb = created(&p, &cx).await;
    let c = command("printf ab; printf cd; printf e >&2");
    let started = p.start_command(&cx, &sb, &c).await.unwrap();
    assert_eq!(started.handle, c.command_id.to_string());
    let events = collect(started.events.unwrap()).await;
    let mut next = [0u64, 0];
    for e in &events {
        if let CommandEvent::Output {
            stream,
            offset,
            data,
        } = e
        {
            let i = usize::from(*stream == OutputStream::Stderr);
            assert_eq!(*offset, Some(next[i]), "{events:?}");
            next[i] += data.len() as u64;
        }
    }
    assert_eq!(stdout_of(&events), b"abcd");
    assert_eq!(
        events.last(),
        Some(&CommandEvent::Exit { exit_code: Some(0) })
    );
    let log = fake.server().log().matching(&Method::GET, "/exec");
    let start = log
        .iter()
        .find(|r| {
            r.query
                .as_deref()
                .unwrap_or_default()
                .contains("max_run_after_disconnect")
        })
        .expect("a session start");
    let pairs: Vec<(String, String)> =
        corral_provider_http::Url::parse(&format!("http://x/?{}", start.query.as_deref().unwrap()))
            .unwrap()
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("max_run_after_disconnect"), Some("120s"));
    assert_eq!(get("tty"), Some("false"));
    assert_eq!(get("stdin"), Some("false"));
    assert!(
        pairs.iter().all(|(k, _)| k != "env"),
        "env would replace the environment"
    );
    let argv: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "cmd")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(argv.last(), Some(&c.command_id.to_string().as_str()));
    assert!(
        argv.contains(&c.command.as_str()),
        "the script is an argument: {argv:?}"
    );
}

/// Re-attaching by session id streams only what comes next: no replay, no offsets.
#[tokio::test]
async fn reattach_by_session_id_gives_no_replay() {
    let (fake, p, cx) = setup().await;
    let sb = created(&p, &cx).await;
    let c = command("echo early; sleep 1; echo late");
    let started = p.start_command(&cx, &sb, &c).await.unwrap();
    let mut first = started.events.unwrap();
    while !matches!(first.next().await, Some(Ok(CommandEvent::Output { .. }))) {}
    drop(first);
    let (session, line) = fake.sessions_of(&sb)[0].clone();
    assert!(line.contains(&c.command_id.to_string()));
    let events = collect(
        p.attach_command(&cx, &sb, &started.handle, OutputOffsets::default())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(stdout_of(&events), b"late\n", "{events:?}");
    assert!(events.iter().all(|e| match e {
        CommandEvent::Output { offset, .. } => offset.is_none(),
        CommandEvent::Exit { exit_code } => *exit_code == Some(0),
    }));
    let attach = fake.server().log().matching(&Method::GET, "/exec");
    assert!(
        attach
            .iter()
            .any(|r| r.query.as_deref() == Some(format!("id={session}").as_str())),
        "attached by session id"
    );
}

/// Nothing says how an ended session ended: the exit comes from the wrapper's record; a
/// command id nobody started is `NotFound`, and one that ran is not started again.
#[tokio::test]
async fn an_ended_session_reports_the_recorded_exit() {
    let (fake, p, cx) = setup().await;
    let sb = created(&p, &cx).await;
    let c = command("exit 7");
    let started = p.start_command(&cx, &sb, &c).await.unwrap();
    drop(started.events);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !fake.sessions_of(&sb).is_empty() {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events = collect(
        p.attach_command(&cx, &sb, &started.handle, OutputOffsets::default())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(events, [CommandEvent::Exit { exit_code: Some(7) }]);
    assert!(matches!(
        p.attach_command(
            &cx,
            &sb,
            &CommandId::new().to_string(),
            OutputOffsets::default()
        )
        .await,
        Err(ProviderError::NotFound { .. })
    ));
    let again = p.start_command(&cx, &sb, &c).await.unwrap();
    assert!(again.events.is_none());
    assert_eq!(
        p.find_command(&cx, &sb, &c.command_id).await.unwrap(),
        Some(started.handle)
    );
}

/// Signals go through the kill endpoint, TERM reaching the command and reported as 143;
/// Sprites follows any signal with SIGKILL after its timeout, so only TERM and KILL are
/// offered; an ended command is `Ok`.
#[tokio::test]
async fn term_goes_through_the_kill_endpoint_and_other_signals_are_refused() {
    let (fake, p, cx) = setup().await;
    let sb = created(&p, &cx).await;
    assert_eq!(
        p.capabilities().commands.signals,
        [Signal::Kill, Signal::Term]
    );
    let c = command("echo ready; sleep 30; echo not-reached");
    let started = p.start_command(&cx, &sb, &c).await.unwrap();
    let mut events = started.events.unwrap();
    while !matches!(events.next().await, Some(Ok(CommandEvent::Output { .. }))) {}
    assert!(matches!(
        p.signal_command(&cx, &sb, &started.handle, Signal::Usr1)
            .await,
        Err(ProviderError::Unsupported { .. })
    ));
    p.signal_command(&cx, &sb, &started.handle, Signal::Term)
        .await
        .unwrap();
    assert_eq!(fake.kills(), 1);
    let kill = &fake.server().log().matching(&Method::POST, "/kill")[0];
    assert_eq!(kill.query.as_deref(), Some("signal=SIGTERM"));
    let rest = collect(events).await;
    assert_eq!(
        rest.last(),
        Some(&CommandEvent::Exit {
            exit_code: Some(143)
        })
    );
    p.signal_command(&cx, &sb, &started.handle, Signal::Kill)
        .await
        .unwrap();
    assert_eq!(fake.kills(), 1, "an ended command is not signalled");
}

/// A command's stdin travels only on its session's socket: not offered.
#[tokio::test]
async fn stdin_is_not_offered() {
    let (_fake, p, cx) = setup().await;
    let sb = created(&p, &cx).await;
    assert!(!p.capabilities().commands.stdin);
    assert!(!p.capabilities().commands.emulated);
    let c = command("sleep 30");
    let started = p.start_command(&cx, &sb, &c).await.unwrap();
    assert!(matches!(
        p.write_stdin(&cx, &sb, &started.handle, 0, b"x").await,
        Err(ProviderError::Unsupported { .. })
    ));
    p.signal_command(&cx, &sb, &started.handle, Signal::Kill)
        .await
        .unwrap();
}
