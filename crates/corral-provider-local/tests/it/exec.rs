//! Commands: exit codes, signals, output caps, deadlines, concurrency.

use std::time::{Duration, Instant};

use corral_provider::{CallContext, ExecSpec, ProviderError, SandboxProvider};

use crate::{World, ctx, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_death_by_signal_are_reported() {
    let world = World::new();
    let id = world.create().await;
    assert_eq!(world.sh(&id, "exit 0").await.exit_code, 0);
    assert_eq!(world.sh(&id, "exit 125").await.exit_code, 125);
    assert_eq!(world.sh(&id, "exit 255").await.exit_code, 255);
    assert_eq!(world.sh(&id, "kill -TERM $$").await.exit_code, 128 + 15);
    assert_eq!(world.sh(&id, "kill -KILL $$").await.exit_code, 128 + 9);
    let missing = world.sh(&id, "no-such-command-xyz").await;
    assert_eq!(missing.exit_code, 127);
    assert!(text(&missing.stderr).contains("not found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_capped_per_stream_and_the_command_is_not_blocked() {
    let world = World::new();
    let id = world.create().await;
    // 4 MiB on each stream: far past a pipe buffer, so a reader that stopped would hang it.
    let mut spec = ExecSpec::new(
        "head -c 4194304 /dev/zero; head -c 4194304 /dev/zero >&2; echo finished > /tmp/f",
    );
    spec.max_output_bytes = 1000;
    let out = world.provider.exec(&ctx(), &id, &spec).await.unwrap();
    assert_eq!(out.exit_code, 0);
    assert!(out.truncated);
    assert_eq!(out.stdout.len(), 1000);
    assert_eq!(out.stderr.len(), 1000);
    assert_eq!(
        text(&world.sh(&id, "cat /tmp/f").await.stdout),
        "finished\n"
    );
    let small = world.sh(&id, "printf 'a%.0s' $(seq 1 10)").await;
    assert!(!small.truncated);
    assert_eq!(small.stdout, b"aaaaaaaaaa");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_kills_the_whole_process_tree() {
    let world = World::new();
    let id = world.create().await;
    let mut spec =
        ExecSpec::new("(sleep 2; echo survived > /workspace/marker) & sleep 1001 & sleep 1001");
    spec.timeout = Duration::from_millis(500);
    let started = Instant::now();
    match world.provider.exec(&ctx(), &id, &spec).await {
        Err(ProviderError::CommandTimedOut { after }) => assert_eq!(after, spec.timeout),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Nothing of the command runs on: not on the host, and no marker appears later.
    let host = std::process::Command::new("pgrep")
        .args(["-x", "-f", "sleep 1001"])
        .output()
        .unwrap();
    assert!(
        host.stdout.is_empty(),
        "left on the host: {}",
        text(&host.stdout)
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let look = world.sh(&id, "ls -A /workspace").await;
    assert_eq!(
        text(&look.stdout),
        "",
        "a background child survived the deadline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_deadline_bounds_the_command() {
    let world = World::new();
    let id = world.create().await;
    let short = CallContext::anonymous().with_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let got = world
        .provider
        .exec(&short, &id, &ExecSpec::new("sleep 30"))
        .await;
    assert!(
        matches!(got, Err(ProviderError::CommandTimedOut { .. })),
        "{got:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cwd_env_and_home_are_honoured() {
    let world = World::new();
    let id = world.create().await;
    let plain = world.sh(&id, "pwd; echo $HOME; echo $PATH").await;
    let lines: Vec<String> = text(&plain.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines[0], "/workspace");
    assert_eq!(lines[1], "/workspace");
    assert!(lines[2].contains("/usr/bin"));
    world.sh(&id, "mkdir -p /workspace/sub").await;
    let mut spec = ExecSpec::new("pwd; echo \"$A\"");
    spec.cwd = Some("/workspace/sub".into());
    spec.env.insert("A".into(), "x y".into());
    let out = world.provider.exec(&ctx(), &id, &spec).await.unwrap();
    assert_eq!(text(&out.stdout), "/workspace/sub\nx y\n");
    spec.cwd = Some("/workspace/missing".into());
    let missing = world.provider.exec(&ctx(), &id, &spec).await;
    assert!(
        matches!(missing, Err(ProviderError::InvalidRequest { .. })),
        "{missing:?}"
    );
    let mut bad_env = ExecSpec::new("true");
    bad_env.env.insert("A=B".into(), "x".into());
    let bad = world.provider.exec(&ctx(), &id, &bad_env).await;
    assert!(
        matches!(bad, Err(ProviderError::InvalidRequest { .. })),
        "{bad:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_limits_apply_to_commands() {
    let world = World::with(|c| {
        c.limits.file_size_bytes = 1024 * 1024;
        c.limits.cpu_seconds = 7;
    });
    let id = world.create().await;
    let out = world
        .sh(
            &id,
            "ulimit -f; ulimit -t; head -c 2000000 /dev/zero > /tmp/big; echo $?; wc -c < /tmp/big",
        )
        .await;
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    // `ulimit -f` counts 512-byte blocks in dash, 1024-byte blocks in bash.
    assert!(["1024", "2048"].contains(&lines[0].as_str()), "{lines:?}");
    assert_eq!(lines[1], "7", "{lines:?}");
    assert_eq!(
        lines[2], "153",
        "a write past the limit is not killed by SIGXFSZ: {lines:?}"
    );
    assert_eq!(lines[3], "1048576", "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commands_in_one_and_many_sandboxes_do_not_interfere() {
    let world = std::sync::Arc::new(World::new());
    let shared = world.create().await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let world = world.clone();
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let own = world.create().await;
            for id in [&shared, &own] {
                let out = world
                    .sh(
                        id,
                        &format!(
                            "echo value-{i} > /workspace/v{i}; echo value-{i} > /tmp/own; \
                             sleep 0.2; cat /workspace/v{i}"
                        ),
                    )
                    .await;
                assert_eq!(text(&out.stdout), format!("value-{i}\n"));
            }
            let own_tmp = world.sh(&own, "cat /tmp/own; ls /workspace").await;
            assert_eq!(text(&own_tmp.stdout), format!("value-{i}\nv{i}\n"));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let all = world.sh(&shared, "ls /workspace | wc -l").await;
    assert_eq!(text(&all.stdout).trim(), "8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_runtimes_work_inside_with_the_default_limits() {
    let world = World::new();
    let id = world.create().await;
    let mut ran = 0;
    for (tool, command, expected) in [
        ("/usr/bin/python3", "python3 -c 'print(6*7)'", "42"),
        ("/usr/bin/node", "node -e 'console.log(6*7)'", "42"),
        ("/usr/bin/perl", "perl -e 'print 6*7'", "42"),
    ] {
        if !std::path::Path::new(tool).exists() {
            println!("skipped {tool}: not installed on this machine");
            continue;
        }
        let out = world.sh(&id, command).await;
        assert_eq!(
            text(&out.stdout).trim(),
            expected,
            "{tool}: {}",
            text(&out.stderr)
        );
        ran += 1;
    }
    assert!(ran > 0, "no runtime was available to try");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_gets_sigpipe_with_its_default_action() {
    let world = World::new();
    let id = world.create().await;
    // `yes` dies of SIGPIPE once `head` has its line; with SIGPIPE ignored it would get
    // EPIPE instead and complain.
    let out = world
        .sh(
            &id,
            "yes | head -n 1; kill -l $(sh -c 'yes | head -c0; kill -PIPE $$'; echo $?)",
        )
        .await;
    assert!(
        text(&out.stdout).starts_with("y\n"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        !text(&out.stderr).contains("Broken pipe"),
        "{}",
        text(&out.stderr)
    );
}
