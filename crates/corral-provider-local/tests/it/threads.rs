//! Commands run on threads of their own (`LocalConfig::exec_threads`), never on tokio's
//! blocking pool, which the database layer (SQLite) shares: slow commands cannot stall it.
//! An exec that finds every command thread busy waits at most `exec_queue_wait` (and never
//! past its call's deadline), then is refused with a retryable `Unavailable`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_provider::{CallContext, ExecSpec, ProviderError, SandboxProvider};

use crate::{World, ctx, text};

fn marker(world: &World, id: &str, name: &str) -> PathBuf {
    world.root().join(id).join("fs/workspace").join(name)
}

/// Waits (real time, up to 20 s) until the command has written `path`.
async fn until_exists(path: &Path) {
    for _ in 0..2000 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never appeared", path.display());
}

#[track_caller]
fn assert_busy(result: Result<corral_provider::ExecOutput, ProviderError>) {
    match result {
        Err(ProviderError::Unavailable {
            message,
            retry_after,
            ..
        }) => {
            assert!(message.contains("threads"), "{message}");
            assert_eq!(retry_after, Some(Duration::from_secs(1)));
        }
        other => panic!("expected a busy refusal, got {other:?}"),
    }
}

/// On a runtime whose blocking pool has two threads, two slow commands fill the two command
/// threads; a `spawn_blocking` task (the stand-in for a SQLite call) still runs at once, and
/// a third exec is refused after its short queue wait instead of waiting for a command.
#[test]
fn slow_commands_never_stall_the_blocking_pool_and_a_full_pool_refuses_after_its_wait() {
    let world = World::with(|c| {
        c.exec_threads = 2;
        c.exec_queue_wait = Duration::from_millis(300);
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let id = world.create().await;
        let slow = |n: u32| {
            let id = id.clone();
            let world = &world;
            async move {
                let cmd = format!("touch /workspace/started-{n}; sleep 4; echo done-{n}");
                world.provider.exec(&ctx(), &id, &ExecSpec::new(cmd)).await
            }
        };
        let probe = async {
            until_exists(&marker(&world, &id, "started-1")).await;
            until_exists(&marker(&world, &id, "started-2")).await;
            // Both command threads are taken and both commands have 4 s to go.
            let sqlite = tokio::time::timeout(
                Duration::from_secs(2),
                tokio::task::spawn_blocking(|| 6 * 7),
            )
            .await
            .expect("a spawn_blocking task waited behind running commands");
            assert_eq!(sqlite.unwrap(), 42);
            let refused = tokio::time::timeout(
                Duration::from_secs(3),
                world
                    .provider
                    .exec(&ctx(), &id, &ExecSpec::new("echo third")),
            )
            .await
            .expect("an exec over a full pool must be refused after its queue wait");
            assert_busy(refused);
        };
        let (one, two, ()) = tokio::join!(slow(1), slow(2), probe);
        assert_eq!(text(&one.unwrap().stdout), "done-1\n");
        assert_eq!(text(&two.unwrap().stdout), "done-2\n");
        // The threads are free again.
        assert_eq!(world.sh(&id, "echo again").await.stdout, b"again\n");
    });
}

/// With one command thread, a second exec waits for the first to finish, then runs; the
/// wait never outlasts the call's own deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_waits_for_a_free_thread_within_its_queue_wait_and_its_deadline() {
    let world = World::with(|c| {
        c.exec_threads = 1;
        c.exec_queue_wait = Duration::from_secs(20);
    });
    let id = world.create().await;
    let (call, spec) = (
        ctx(),
        ExecSpec::new("touch /workspace/a-started; sleep 1; touch /workspace/a-done"),
    );
    let first = world.provider.exec(&call, &id, &spec);
    let second = async {
        until_exists(&marker(&world, &id, "a-started")).await;
        // A call with 200 ms left waits no longer than that for the thread.
        let short = CallContext::anonymous().with_timeout(Duration::from_millis(200));
        let started = Instant::now();
        assert_busy(
            world
                .provider
                .exec(&short, &id, &ExecSpec::new("echo too-late"))
                .await,
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        // This one waits for the thread, so it runs after the first command ended.
        world
            .provider
            .exec(
                &ctx(),
                &id,
                &ExecSpec::new("test -e /workspace/a-done && echo after"),
            )
            .await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(first.unwrap().exit_code, 0);
    assert_eq!(text(&second.unwrap().stdout), "after\n");
}

/// A caller that goes away kills its command, and the command's thread is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_goes_away_frees_the_command_thread() {
    let world = World::with(|c| {
        c.exec_threads = 1;
        c.exec_queue_wait = Duration::from_secs(20);
    });
    let id = world.create().await;
    let abandoned = tokio::time::timeout(
        Duration::from_millis(500),
        world
            .provider
            .exec(&ctx(), &id, &ExecSpec::new("sleep 600")),
    )
    .await;
    assert!(
        abandoned.is_err(),
        "the command should still have been running"
    );
    let next = tokio::time::timeout(Duration::from_secs(15), world.sh(&id, "echo free")).await;
    assert_eq!(
        next.expect("the abandoned command kept its thread").stdout,
        b"free\n"
    );
}
