//! Commands as durable jobs, beyond the conformance suite: a restart of the server (the
//! provider dropped, or its process killed) in the middle of a command, stdin resends,
//! deleted sandboxes, an init that dies, output past what is kept, the command's files out
//! of the sandbox's reach, and how fast output reaches a reader.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_domain::{CommandId, OutputStream, Signal};
use corral_provider::{CommandEvent, CommandSpec, OutputOffsets, ProviderError, SandboxProvider};
use corral_provider_local::{LocalConfig, LocalProvider};
use futures::StreamExt as _;

use crate::{World, create, ctx, sh, text};

/// What a reader saw of a command, each byte once.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) exit: Option<Option<i32>>,
    /// Where each stream's first event started (past 0: bytes dropped before it).
    pub(crate) first_offset: [Option<u64>; 2],
}

impl Seen {
    pub(crate) fn offsets(&self) -> OutputOffsets {
        OutputOffsets {
            stdout: self.stdout.len() as u64,
            stderr: self.stderr.len() as u64,
        }
    }
}

pub(crate) fn spec(command: &str) -> CommandSpec {
    CommandSpec {
        command_id: CommandId::new(),
        command: command.to_owned(),
        cwd: None,
        env: Default::default(),
        stdin: false,
        timeout: Duration::from_secs(120),
    }
}

/// Attaches from what `seen` holds and reads until `stop`, the exit, or `within`. Every
/// chunk must start exactly where `seen` ends (nothing repeated, nothing skipped), unless
/// `gaps` allows a stream's first chunk to start later (bytes the provider dropped).
pub(crate) async fn follow(
    provider: &LocalProvider,
    id: &str,
    handle: &str,
    seen: &mut Seen,
    within: Duration,
    gaps: bool,
    stop: impl Fn(&Seen) -> bool,
) -> Result<(), ProviderError> {
    let deadline = tokio::time::Instant::now() + within;
    let ctx = ctx();
    let mut events = provider
        .attach_command(&ctx, id, handle, seen.offsets())
        .await?;
    while seen.exit.is_none() && !stop(seen) {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(Ok(CommandEvent::Output {
                stream,
                offset,
                data,
            }))) => {
                let i = usize::from(stream == OutputStream::Stderr);
                let buf = if i == 0 {
                    &mut seen.stdout
                } else {
                    &mut seen.stderr
                };
                let at = offset.expect("local gives every chunk's offset");
                let first = seen.first_offset[i].is_none();
                seen.first_offset[i].get_or_insert(at);
                if gaps && first && at > buf.len() as u64 {
                    buf.resize(usize::try_from(at).unwrap(), 0);
                }
                assert_eq!(
                    at,
                    buf.len() as u64,
                    "{stream:?}: a chunk at {at}, held {}",
                    buf.len()
                );
                buf.extend_from_slice(&data);
            }
            Ok(Some(Ok(CommandEvent::Exit { exit_code }))) => seen.exit = Some(exit_code),
            Ok(Some(Err(e))) => return Err(e),
            Ok(None) => return Ok(()),
            Err(_) => panic!("nothing more within {within:?}; so far {seen:?}"),
        }
    }
    Ok(())
}

/// Reads to the exit, attaching again whenever a stream ends early.
pub(crate) async fn to_end(provider: &LocalProvider, id: &str, handle: &str, seen: &mut Seen) {
    let until = Instant::now() + Duration::from_secs(60);
    while seen.exit.is_none() {
        assert!(Instant::now() < until, "no exit; so far {seen:?}");
        follow(
            provider,
            id,
            handle,
            seen,
            Duration::from_secs(60),
            false,
            |_| false,
        )
        .await
        .unwrap();
    }
}

fn lines(prefix: &str, range: std::ops::Range<u32>) -> String {
    range.map(|i| format!("{prefix}-{i}\n")).collect()
}

/// The command of the restart scenarios: output on both streams, then a line of stdin,
/// then more output, exit 7.
const SURVIVOR: &str = "i=0; while [ $i -lt 30 ]; do echo out-$i; echo err-$i >&2; i=$((i+1)); \
     sleep 0.05; done; read line; echo got-$line; \
     while [ $i -lt 60 ]; do echo out-$i; i=$((i+1)); sleep 0.02; done; exit 7";

fn survivor_stdout() -> String {
    format!("{}got-hello\n{}", lines("out", 0..30), lines("out", 30..60))
}

fn is_mount_point(dir: &Path) -> bool {
    let (Ok(me), Ok(parent)) = (std::fs::metadata(dir), std::fs::metadata(dir.join(".."))) else {
        return false;
    };
    me.dev() != parent.dev()
}

/// Whether an init listens on sandbox `id`'s control socket.
fn init_listens(root: &Path, id: &str) -> bool {
    std::os::unix::net::UnixStream::connect(root.join(id).join("init.sock")).is_ok()
}

/// The restart scenario, over a provider made by `config`. One provider starts three
/// commands in a sandbox and is dropped while they run: the first mid-output with a partial
/// stdin write, the second waiting, the third with some stdin written. A new provider over
/// the same root resends the first one's stdin (nothing is written twice), follows it
/// through a quiet spell (its init, found through its socket, says it still runs), and reads
/// every byte exactly once from where the first reader stopped, then its exit; it ends the
/// second with a signal and the third by closing its stdin, both through the same init.
/// Once all have ended and the second provider is dropped, nothing of the sandbox runs and
/// its filesystem is unmounted.
pub(crate) async fn a_command_survives_a_restart(config: impl Fn(&Path) -> LocalConfig) {
    let data = tempfile::tempdir().unwrap();
    let root = data.path().join("sandboxes");
    let first = LocalProvider::new(config(&root)).unwrap();
    assert_eq!(first.unavailable_reason(), None);
    let id = create(&first, None).await;
    let mut survivor = spec(SURVIVOR);
    survivor.stdin = true;
    let waiting = spec("echo waiting; sleep 1000; echo not-reached");
    let mut reading = spec("cat; echo eof");
    reading.stdin = true;
    let mut handles = Vec::new();
    for spec in [&survivor, &waiting, &reading] {
        handles.push(first.start_command(&ctx(), &id, spec).await.unwrap().handle);
    }
    let (survivor_h, waiting_h, reading_h) = (&handles[0], &handles[1], &handles[2]);
    let mut seen = Seen::default();
    follow(
        &first,
        &id,
        survivor_h,
        &mut seen,
        Duration::from_secs(30),
        false,
        |s| s.stdout.ends_with(b"out-10\n"),
    )
    .await
    .unwrap();
    let c = ctx();
    assert_eq!(
        first
            .write_stdin(&c, &id, survivor_h, 0, b"hel")
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        first
            .write_stdin(&c, &id, reading_h, 0, b"c1\n")
            .await
            .unwrap(),
        3
    );
    let mounted = is_mount_point(&root.join(&id).join("fs"));
    drop(first);

    // The commands run on, alone: their init stays, and so does the sandbox's filesystem.
    assert!(init_listens(&root, &id), "the init ended with its provider");
    assert_eq!(is_mount_point(&root.join(&id).join("fs")), mounted);
    let second = LocalProvider::new(config(&root)).unwrap();
    for (spec, handle) in [&survivor, &waiting, &reading].into_iter().zip(&handles) {
        assert_eq!(
            second
                .find_command(&c, &id, &spec.command_id)
                .await
                .unwrap()
                .as_ref(),
            Some(handle)
        );
    }
    // The survivor: read up to where it waits for its line, then a quiet spell longer than
    // the reader's (it asks the init whether the command still runs), then the line — a
    // resend of what the first provider accepted, and the rest.
    follow(
        &second,
        &id,
        survivor_h,
        &mut seen,
        Duration::from_secs(30),
        false,
        |s| s.stdout.ends_with(b"out-29\n") && s.stderr.ends_with(b"err-29\n"),
    )
    .await
    .unwrap();
    let mut events = second
        .attach_command(&c, &id, survivor_h, seen.offsets())
        .await
        .unwrap();
    let quiet = tokio::time::timeout(Duration::from_millis(3500), events.next()).await;
    assert!(quiet.is_err(), "a waiting command was reported: {quiet:?}");
    drop(events);
    assert_eq!(
        second
            .write_stdin(&c, &id, survivor_h, 0, b"hello\n")
            .await
            .unwrap(),
        6
    );
    to_end(&second, &id, survivor_h, &mut seen).await;
    assert_eq!(text(&seen.stdout), survivor_stdout());
    assert_eq!(text(&seen.stderr), lines("err", 0..30));
    assert_eq!(seen.exit, Some(Some(7)));
    // The waiting one, ended by a signal sent through the init.
    second
        .signal_command(&c, &id, waiting_h, Signal::Term)
        .await
        .unwrap();
    let mut seen = Seen::default();
    to_end(&second, &id, waiting_h, &mut seen).await;
    assert_eq!(
        (text(&seen.stdout), seen.exit),
        ("waiting\n".into(), Some(Some(128 + 15)))
    );
    // The reading one: more stdin, then its end, through the init.
    assert_eq!(
        second
            .write_stdin(&c, &id, reading_h, 3, b"c2\n")
            .await
            .unwrap(),
        6
    );
    second.close_stdin(&c, &id, reading_h).await.unwrap();
    let mut seen = Seen::default();
    to_end(&second, &id, reading_h, &mut seen).await;
    assert_eq!(
        (text(&seen.stdout), seen.exit),
        ("c1\nc2\neof\n".into(), Some(Some(0)))
    );
    // Ended commands: signalling one is not an error; the sandbox runs on.
    second
        .signal_command(&c, &id, survivor_h, Signal::Term)
        .await
        .unwrap();
    assert_eq!(
        text(&sh(&second, &id, "echo alive").await.stdout),
        "alive\n"
    );
    drop(second);
    assert!(
        !init_listens(&root, &id),
        "an init outlived every provider and command"
    );
    assert!(
        !is_mount_point(&root.join(&id).join("fs")),
        "the filesystem stayed mounted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_command_survives_a_restart_of_its_provider_and_is_read_exactly_once() {
    a_command_survives_a_restart(|root| crate::config(root)).await;
}

const KILLED_SERVER: &str = "commands::inner_a_server_that_starts_a_command_and_is_killed";
/// The sandboxes root, for the inner test.
const ROOT_ENV: &str = "CORRAL_TEST_SANDBOXES_ROOT";

/// A server killed with `SIGKILL` (no drop, no clean-up) while its command runs: the next
/// server finds the command running, reads all of its output and its exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_command_survives_the_death_of_its_server() {
    let data = tempfile::tempdir().unwrap();
    let root = data.path().join("sandboxes");
    let mut server = std::process::Command::new(std::env::current_exe().unwrap())
        .args([KILLED_SERVER, "--exact", "--ignored", "--nocapture"])
        .env(ROOT_ENV, &root)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let started = tokio::task::spawn_blocking(move || {
        use std::io::BufRead as _;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| {
                l.strip_prefix("started ")
                    .map(|rest| rest.split(' ').map(str::to_owned).collect::<Vec<_>>())
            })
    });
    let started = tokio::time::timeout(Duration::from_secs(60), started)
        .await
        .expect("the server did not start the command")
        .unwrap()
        .expect("the server ended without starting the command");
    let (id, handle) = (&started[0], &started[1]);
    server.kill().unwrap();
    server.wait().unwrap();

    let again = LocalProvider::new(crate::config(&root)).unwrap();
    let mut seen = Seen::default();
    to_end(&again, id, handle, &mut seen).await;
    assert_eq!(
        text(&seen.stdout),
        format!("{}{}", lines("before", 0..5), lines("after", 0..5))
    );
    assert_eq!(seen.exit, Some(Some(5)));
    drop(again);
    assert!(!init_listens(&root, id));
}

#[test]
#[ignore = "run as a server to kill by a_running_command_survives_the_death_of_its_server"]
#[allow(clippy::print_stdout)] // The outer test reads what was started here.
fn inner_a_server_that_starts_a_command_and_is_killed() {
    let root = PathBuf::from(std::env::var(ROOT_ENV).unwrap());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let provider = LocalProvider::new(crate::config(&root)).unwrap();
            let id = create(&provider, None).await;
            let spec = spec(
                "i=0; while [ $i -lt 5 ]; do echo before-$i; i=$((i+1)); done; sleep 2; \
                 i=0; while [ $i -lt 5 ]; do echo after-$i; i=$((i+1)); done; exit 5",
            );
            let handle = provider
                .start_command(&ctx(), &id, &spec)
                .await
                .unwrap()
                .handle;
            println!("started {id} {handle}");
            // Killed here, by the outer test.
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_resends_are_never_written_twice() {
    let world = World::new();
    let id = world.create().await;
    let mut spec = spec("cat; echo eof");
    spec.stdin = true;
    let p = &world.provider;
    let handle = p.start_command(&ctx(), &id, &spec).await.unwrap().handle;
    let c = ctx();
    let write = |offset: u64, data: &'static [u8]| p.write_stdin(&c, &id, &handle, offset, data);
    assert_eq!(write(0, b"abc").await.unwrap(), 3);
    // A resend that overlaps what was accepted: only the new part is written.
    assert_eq!(write(0, b"abcdef").await.unwrap(), 6);
    // A resend of what was accepted: nothing is written.
    assert_eq!(write(3, b"def").await.unwrap(), 6);
    assert_eq!(write(6, b"gh").await.unwrap(), 8);
    // A write past what was accepted is refused, and writes nothing.
    assert!(matches!(
        write(10, b"x").await,
        Err(ProviderError::InvalidRequest { .. })
    ));
    p.close_stdin(&ctx(), &id, &handle).await.unwrap();
    assert!(matches!(
        write(8, b"late").await,
        Err(ProviderError::InvalidRequest { .. })
    ));
    let mut seen = Seen::default();
    to_end(p, &id, &handle, &mut seen).await;
    assert_eq!(text(&seen.stdout), "abcdefgheof\n");
    assert_eq!(seen.exit, Some(Some(0)));
    // A command without stdin has none to write to.
    let handle = p
        .start_command(&ctx(), &id, &crate::commands::spec("true"))
        .await
        .unwrap()
        .handle;
    assert!(matches!(
        p.write_stdin(&ctx(), &id, &handle, 0, b"x").await,
        Err(ProviderError::InvalidRequest { .. })
    ));
    // Not followed to its end: its sandbox goes with it (a dropped provider leaves running
    // commands, their init and its mount, to the next one).
    p.delete(&ctx(), &id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_sandboxs_commands_are_gone() {
    let world = World::new();
    let id = world.create().await;
    let tag = 4000 + std::process::id() % 900;
    let spec = spec(&format!("echo up; sleep {tag}7"));
    let p = &world.provider;
    let handle = p.start_command(&ctx(), &id, &spec).await.unwrap().handle;
    let mut seen = Seen::default();
    let c = ctx();
    let mut events = p
        .attach_command(&c, &id, &handle, seen.offsets())
        .await
        .unwrap();
    while seen.stdout != b"up\n" {
        match events.next().await {
            Some(Ok(CommandEvent::Output { data, .. })) => seen.stdout.extend(data),
            other => panic!("{other:?}"),
        }
    }
    p.delete(&ctx(), &id).await.unwrap();
    // A reader still attached learns it is over.
    let end = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("the reader of a deleted sandbox's command was never told");
    assert!(
        matches!(end, Some(Err(ProviderError::NotFound { .. })) | None),
        "{end:?}"
    );
    for got in [
        p.find_command(&ctx(), &id, &spec.command_id)
            .await
            .map(drop),
        p.attach_command(&ctx(), &id, &handle, OutputOffsets::default())
            .await
            .map(drop),
        p.signal_command(&ctx(), &id, &handle, Signal::Kill).await,
        p.write_stdin(&ctx(), &id, &handle, 0, b"x").await.map(drop),
    ] {
        assert!(
            matches!(got, Err(ProviderError::NotFound { .. })),
            "{got:?}"
        );
    }
    assert!(!world.root().join(&id).exists());
    let host = std::process::Command::new("pgrep")
        .args(["-f", &format!("sleep {tag}7")])
        .output()
        .unwrap();
    assert!(
        host.stdout.is_empty(),
        "left on the host: {}",
        text(&host.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stdout)] // A skipped test says so in its output.
async fn a_command_whose_init_died_reads_as_not_found_once_its_output_is_read() {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: the init is found by the sandbox's own uid, which needs a root server");
        return;
    }
    let world = World::new();
    let id = world.create().await;
    let p = &world.provider;
    let handle = p
        .start_command(&ctx(), &id, &spec("echo before; sleep 1000"))
        .await
        .unwrap()
        .handle;
    let mut seen = Seen::default();
    follow(
        p,
        &id,
        &handle,
        &mut seen,
        Duration::from_secs(30),
        false,
        |s| !s.stdout.is_empty(),
    )
    .await
    .unwrap();
    let inits = crate::inits_of(&world.root(), &id);
    assert_eq!(inits.len(), 1, "{inits:?}");
    let init = rustix::process::Pid::from_raw(inits[0]).unwrap();
    rustix::process::kill_process(init, rustix::process::Signal::KILL).unwrap();
    // Nobody will report its exit: the reader gets what was written, then `NotFound`.
    let ended = follow(
        p,
        &id,
        &handle,
        &mut seen,
        Duration::from_secs(20),
        false,
        |_| false,
    )
    .await;
    assert!(
        matches!(ended, Err(ProviderError::NotFound { .. })),
        "{ended:?}"
    );
    assert_eq!(seen.stdout, b"before\n");
    assert_eq!(seen.exit, None);
    // It is over: a signal is not an error, and the sandbox runs the next command.
    p.signal_command(&ctx(), &id, &handle, Signal::Kill)
        .await
        .unwrap();
    let next = p
        .start_command(&ctx(), &id, &spec("echo next"))
        .await
        .unwrap()
        .handle;
    let mut seen = Seen::default();
    to_end(p, &id, &next, &mut seen).await;
    assert_eq!(seen.stdout, b"next\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_past_what_is_kept_reads_as_a_gap_and_its_disk_use_is_bounded() {
    const MIB: u64 = 1 << 20;
    let world = World::new();
    let id = world.create().await;
    let p = &world.provider;
    let total = 48 * MIB;
    let handle = p
        .start_command(
            &ctx(),
            &id,
            &spec(&format!("head -c {total} /dev/zero; echo end >&2")),
        )
        .await
        .unwrap()
        .handle;
    // Nobody reads stdout while it is written: the exit is waited for on stderr alone.
    let mut seen = Seen {
        stdout: vec![0; usize::try_from(total).unwrap()],
        ..Seen::default()
    };
    to_end(p, &id, &handle, &mut seen).await;
    assert_eq!(seen.stderr, b"end\n");
    let file = world
        .root()
        .join(&id)
        .join("commands")
        .join(&handle)
        .join("stdout");
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(meta.len(), total, "the stream's length");
    let on_disk = meta.blocks() * 512;
    assert!(on_disk <= 34 * MIB, "{} MiB of it on disk", on_disk / MIB);
    // Read from the start: the dropped bytes are a gap, then the newest 32 MiB or so.
    let mut seen = Seen::default();
    follow(
        p,
        &id,
        &handle,
        &mut seen,
        Duration::from_secs(60),
        true,
        |_| false,
    )
    .await
    .unwrap();
    let first = seen.first_offset[0].unwrap();
    assert!(
        first > 0 && first <= total - 32 * MIB,
        "first byte read at {first}"
    );
    assert_eq!(seen.stdout.len() as u64, total);
    assert!(seen.stdout.iter().all(|b| *b == 0));
    assert_eq!(seen.exit, Some(Some(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_start_of_one_command_id_runs_it_once() {
    let world = World::new();
    let id = world.create().await;
    let p = &world.provider;
    let spec = spec("echo ran >> /workspace/runs");
    let a = p.start_command(&ctx(), &id, &spec).await.unwrap().handle;
    let b = p.start_command(&ctx(), &id, &spec).await.unwrap().handle;
    assert_eq!(a, b);
    let mut seen = Seen::default();
    to_end(p, &id, &a, &mut seen).await;
    assert_eq!(
        text(&world.sh(&id, "cat /workspace/runs").await.stdout),
        "ran\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_never_outlives_its_sandboxs_lifetime() {
    let world = World::new();
    let id = create(&world.provider, Some(3)).await;
    let started = Instant::now();
    let handle = world
        .provider
        .start_command(&ctx(), &id, &spec("sleep 30; echo outlived"))
        .await
        .unwrap()
        .handle;
    let mut seen = Seen::default();
    to_end(&world.provider, &id, &handle, &mut seen).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(seen.exit, Some(Some(128 + 9)));
    assert!(seen.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commands_files_are_out_of_the_sandboxs_reach() {
    let world = World::new();
    let id = world.create().await;
    let p = &world.provider;
    let handle = p
        .start_command(&ctx(), &id, &spec("echo kept-apart"))
        .await
        .unwrap()
        .handle;
    let mut seen = Seen::default();
    to_end(p, &id, &handle, &mut seen).await;
    // Everything on the sandbox's own filesystem (the host's system directories, mounted
    // read-only, are other filesystems).
    let look = world
        .sh(
            &id,
            "echo kept-apart > /workspace/control; \
             find / -xdev -type f -exec grep -l kept-apart {} + 2>/dev/null; \
             find / -xdev \\( -name 'cmd_*' -o -name init.sock -o -name commands \\) -print; \
             echo end",
        )
        .await;
    let out = text(&look.stdout);
    // Only the file written inside to show the search works.
    assert_eq!(out, "/workspace/control\nend\n");
    for path in [
        format!("../commands/{handle}/stdout"),
        "/../init.sock".to_owned(),
    ] {
        let got = p.read_file(&ctx(), &id, &path, 1024).await;
        assert!(got.is_err(), "{path}: {got:?}");
    }
    // The server's own, and no one else's.
    let me = rustix::process::geteuid().as_raw();
    let dir = world.root().join(&id).join("commands");
    for (path, mode) in [
        (dir.clone(), 0o700),
        (dir.join(&handle), 0o700),
        (dir.join(&handle).join("stdout"), 0o600),
        (dir.join(&handle).join("exit"), 0o600),
        (world.root().join(&id).join("init.sock"), 0o600),
    ] {
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.uid(), me, "{}", path.display());
        assert_eq!(
            meta.permissions().mode() & 0o777,
            mode,
            "{}",
            path.display()
        );
    }
}

fn percentile(mut samples: Vec<Duration>, p: usize) -> Duration {
    samples.sort();
    samples[(samples.len() - 1) * p / 100]
}

/// Output is copied by the init and read back through inotify: a line reaches the reader
/// within milliseconds of being written (a poll of the files would take its period). And a
/// start costs about what an exec of `true` does (one request to the init).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stdout)] // The measurements are the test's report.
async fn output_reaches_a_reader_within_milliseconds_and_a_start_costs_about_an_exec() {
    let world = World::new();
    let id = world.create().await;
    let p = &world.provider;
    let handle = p
        .start_command(
            &ctx(),
            &id,
            &spec("i=0; while [ $i -lt 30 ]; do date +%s%N; sleep 0.05; i=$((i+1)); done"),
        )
        .await
        .unwrap()
        .handle;
    let c = ctx();
    let mut events = p
        .attach_command(&c, &id, &handle, OutputOffsets::default())
        .await
        .unwrap();
    let mut delays = Vec::new();
    let mut line = Vec::new();
    while let Some(event) = events.next().await {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        match event.unwrap() {
            CommandEvent::Output { data, .. } => {
                for b in data {
                    if b != b'\n' {
                        line.push(b);
                        continue;
                    }
                    let written: u128 = text(&line).trim().parse().unwrap();
                    line.clear();
                    let written = Duration::from_nanos(u64::try_from(written).unwrap());
                    delays.push(now.saturating_sub(written));
                }
            }
            CommandEvent::Exit { .. } => break,
        }
    }
    assert_eq!(delays.len(), 30);
    let (p50, max) = (percentile(delays.clone(), 50), percentile(delays, 100));
    // Starts and execs of `true`, alternating.
    let (mut starts, mut execs) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let t = Instant::now();
        p.start_command(&ctx(), &id, &spec("true")).await.unwrap();
        starts.push(t.elapsed());
        let t = Instant::now();
        world.sh(&id, "true").await;
        execs.push(t.elapsed());
    }
    let (start50, exec50) = (percentile(starts, 50), percentile(execs, 50));
    println!(
        "output to reader: p50 {p50:?}, max {max:?}; start p50 {start50:?}, exec of `true` p50 {exec50:?}"
    );
    assert!(p50 < Duration::from_millis(20), "p50 {p50:?}");
    assert!(max < Duration::from_millis(500), "max {max:?}");
    assert!(start50 < Duration::from_millis(50), "start p50 {start50:?}");
    // The starts were not followed to their end: the sandbox goes with them.
    p.delete(&ctx(), &id).await.unwrap();
}
