//! Commands as durable jobs through the real binary (issue 21): `kill -9` of the server while
//! commands stream, a keyed start whose answer the client lost, and many concurrent streams
//! in bounded memory. The provider is Morph's loopback fake (commands through the exec
//! wrapper, resumed by byte offset), with its credential stored as the project's profile so a
//! restarted server can reach it on its own. On SQLite and on a fresh PostgreSQL schema.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use corral_client::{Client, RetryPolicy};
use corral_domain::{
    CommandState, CreateSandboxRequest, OutputEvent, OutputStream, Provider, SandboxId,
    StartCommandInput,
};
use corral_registry::testing::TestDb;
use futures::StreamExt as _;

use crate::serve::{Server, create_project, set_default_profile, start_on};

const PROVIDER_KEY: &str = "commands-morph-key";

struct World {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    config: PathBuf,
    postgres: Option<TestDb>,
    _morph: corral_provider_morph::fake::Fake,
    key: String,
    runs: usize,
}

impl World {
    async fn new(postgres: Option<TestDb>, extra_config: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let morph = corral_provider_morph::fake::Fake::start_with_key(PROVIDER_KEY).await;
        let config = tmp.path().join("corral.toml");
        let database = postgres
            .as_ref()
            .map(|db| format!("database_url = \"{}\"\n", db.url()))
            .unwrap_or_default();
        std::fs::write(
            &config,
            format!(
                "{database}[providers]\nenabled = [\"morph\"]\n[providers.morph]\n\
                 base_url = \"{}\"\n[commands]\nlease_seconds = 2\n{extra_config}",
                morph.base_url()
            ),
        )
        .unwrap();
        let url = postgres.as_ref().map_or_else(
            || format!("sqlite://{}", data.join("corral.db").display()),
            |db| db.url().to_owned(),
        );
        let key = create_project(&data, &url, "default").1;
        set_default_profile(&data, "morph", PROVIDER_KEY, &["--database-url", &url]);
        Self {
            _tmp: tmp,
            data,
            config,
            postgres,
            _morph: morph,
            key,
            runs: 0,
        }
    }

    fn start(&mut self, listen: &str) -> Server {
        self.runs += 1;
        let _ = &self.postgres;
        start_on(&self.data, &self.config, self.runs, &[], listen)
    }

    fn client(&self, server: &Server) -> Client {
        Client::new(&server.base, &self.key)
            .unwrap()
            .with_retry(RetryPolicy {
                attempts: 40,
                base: Duration::from_millis(100),
                max: Duration::from_millis(500),
            })
    }
}

async fn sandbox(client: &Client) -> SandboxId {
    let created = client
        .create_sandbox(&CreateSandboxRequest::standard(
            Provider::Morph,
            Some("snapshot_commands".into()),
            None,
        ))
        .await
        .unwrap();
    // Morph's instances start as `pending`: commands wait until it runs.
    for _ in 0..200 {
        let seen = client.get_sandbox(&created.id).await.unwrap();
        if seen.status == corral_domain::SandboxStatus::Running {
            return created.id;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the sandbox never ran");
}

fn counting(n: usize, lines: usize, pause: &str) -> StartCommandInput {
    StartCommandInput {
        command: format!(
            "i=0; while [ $i -lt {lines} ]; do echo c{n}-line-$i; i=$((i+1)); sleep {pause}; done"
        ),
        ..Default::default()
    }
}

fn expected(n: usize, lines: usize) -> String {
    (0..lines).map(|i| format!("c{n}-line-{i}\n")).collect()
}

/// Reads a command's output with the client (which reconnects with `Last-Event-ID` by
/// itself), checking that sequence numbers only grow; answers stdout and the exit event.
async fn read_all(
    client: Client,
    sbx: SandboxId,
    cmd: corral_domain::CommandId,
) -> (String, OutputEvent) {
    let mut stream = client.follow_output(&sbx, &cmd, 0);
    let mut stdout = String::new();
    let mut last_seq = 0;
    let mut seen = HashSet::new();
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        assert!(event.seq() > last_seq, "sequence went back: {event:?}");
        assert!(seen.insert(event.seq()));
        last_seq = event.seq();
        match &event {
            OutputEvent::Output {
                stream: OutputStream::Stdout,
                data,
                ..
            } => stdout.push_str(data),
            OutputEvent::Gap { .. } => {
                panic!("a provider that resumes by offset lost bytes: {event:?}")
            }
            OutputEvent::Exit { .. } => return (stdout, event),
            OutputEvent::Output { .. } => {}
        }
    }
    panic!("the stream ended without an exit event; stdout so far: {stdout}");
}

async fn killed_while_three_commands_stream(postgres: Option<TestDb>) {
    let mut w = World::new(postgres, "").await;
    let server = w.start("127.0.0.1:0");
    let listen = server.base.trim_start_matches("http://").to_owned();
    let client = w.client(&server);
    let sbx = sandbox(&client).await;
    const LINES: usize = 40;
    let mut readers = Vec::new();
    for n in 0..3 {
        let cmd = client
            .start_command(&sbx, &counting(n, LINES, "0.1"))
            .await
            .unwrap();
        assert_eq!(cmd.state, CommandState::Running);
        readers.push((n, tokio::spawn(read_all(client.clone(), sbx, cmd.id))));
    }
    // Let the readers get part of the output, then kill the server with no warning.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    server.crash();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let restarted = w.start(&listen);
    for (n, reader) in readers {
        let (stdout, exit) = tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .expect("a reader stalled after the restart")
            .unwrap();
        assert_eq!(
            stdout,
            expected(n, LINES),
            "command {n}: every byte exactly once"
        );
        assert!(
            matches!(
                exit,
                OutputEvent::Exit {
                    state: CommandState::Exited,
                    exit_code: Some(0),
                    ..
                }
            ),
            "command {n}: {exit:?}"
        );
    }
    let logs = restarted.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_killed_while_three_commands_stream_is_resumed_by_every_client_with_no_byte_lost_or_repeated()
 {
    killed_while_three_commands_stream(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgres_a_server_killed_while_three_commands_stream_is_resumed_by_every_client() {
    let Some(db) = TestDb::postgres("commands_e2e::killed_while_three_commands_stream").await
    else {
        return;
    };
    killed_while_three_commands_stream(Some(db)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_keyed_start_whose_answer_the_client_lost_runs_once() {
    let mut w = World::new(None, "").await;
    let server = w.start("127.0.0.1:0");
    let client = w.client(&server);
    let sbx = sandbox(&client).await;
    let marker = format!("/tmp/corral-keyed-start-{}", std::process::id());
    let _ = std::fs::remove_file(&marker);
    let input = StartCommandInput {
        command: format!("echo ran >> {marker}; echo started"),
        ..Default::default()
    };
    // The first attempt gives up before the answer (a start through the exec wrapper takes
    // a few hundred milliseconds); the start goes on without it.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let lost = impatient
        .post(format!("{}/v1/sandboxes/{sbx}/commands", server.base))
        .bearer_auth(&w.key)
        .header("Idempotency-Key", "lost-start-1")
        .json(&input)
        .send()
        .await;
    assert!(lost.is_err(), "the first answer was meant to be lost");
    // It reached the server: the command is recorded (before any retry).
    let mut recorded = false;
    for _ in 0..100 {
        if !client
            .list_commands(&sbx, None, None, None)
            .await
            .unwrap()
            .items
            .is_empty()
        {
            recorded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(recorded, "the lost request never reached the server");
    // The retry with the same key (the client retries `idempotency_in_progress` by itself).
    let cmd = client
        .start_command_with_key(&sbx, &input, "lost-start-1")
        .await
        .unwrap();
    let again = client
        .start_command_with_key(&sbx, &input, "lost-start-1")
        .await
        .unwrap();
    assert_eq!(cmd.id, again.id);
    let done = client.wait_command(&sbx, &cmd.id).await.unwrap();
    assert_eq!(done.state, CommandState::Exited);
    let page = client.list_commands(&sbx, None, None, None).await.unwrap();
    assert_eq!(page.items.len(), 1, "one command for one key");
    // The fake's commands run on this host: the marker holds one line per run.
    let runs = std::fs::read_to_string(&marker).unwrap_or_default();
    let _ = std::fs::remove_file(&marker);
    assert_eq!(runs, "ran\n", "the command ran exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_streams_hold_bounded_memory() {
    let mut w = World::new(None, "[rate_limits]\nenabled = false\n").await;
    let server = w.start("127.0.0.1:0");
    let client = w.client(&server);
    let sbx = sandbox(&client).await;
    let cmd = client
        .start_command(&sbx, &counting(0, 60, "0.1"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = crate::serve::status_kib(server.pid(), "VmRSS");
    let readers: Vec<_> = (0..200)
        .map(|_| tokio::spawn(read_all(client.clone(), sbx, cmd.id)))
        .collect();
    let mut peak = before;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        peak = peak.max(crate::serve::status_kib(server.pid(), "VmRSS"));
    }
    for reader in readers {
        let (stdout, _) = tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stdout, expected(0, 60));
    }
    let grew = peak.saturating_sub(before);
    eprintln!("200 streams: resident {before} KiB before, peak {peak} KiB (+{grew} KiB)");
    assert!(grew < 64 * 1024, "200 streams took {grew} KiB");
}

/// A world on `local` (no fake, no profile): a fresh data directory and the first start's key.
struct LocalWorld {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    config: PathBuf,
    runs: usize,
}

impl LocalWorld {
    fn new(config: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let path = tmp.path().join("corral.toml");
        std::fs::write(
            &path,
            format!("[providers]\nenabled = [\"local\"]\n[commands]\nlease_seconds = 2\n{config}"),
        )
        .unwrap();
        Self {
            _tmp: tmp,
            data,
            config: path,
            runs: 0,
        }
    }

    fn start(&mut self, listen: &str) -> Server {
        self.runs += 1;
        start_on(&self.data, &self.config, self.runs, &[], listen)
    }
}

fn local_client(server: &Server, key: &str) -> Client {
    Client::new(&server.base, key)
        .unwrap()
        .with_retry(RetryPolicy {
            attempts: 40,
            base: Duration::from_millis(100),
            max: Duration::from_millis(500),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_local_a_command_outlives_a_killed_server_and_its_client_resumes_every_byte() {
    let mut w = LocalWorld::new("");
    let server = w.start("127.0.0.1:0");
    let key = server.first_key();
    let listen = server.base.trim_start_matches("http://").to_owned();
    let client = local_client(&server, &key);
    let sbx = client
        .create_sandbox(&CreateSandboxRequest::standard(Provider::Local, None, None))
        .await
        .unwrap()
        .id;
    const LINES: usize = 40;
    let cmd = client
        .start_command(&sbx, &counting(7, LINES, "0.1"))
        .await
        .unwrap();
    let reader = tokio::spawn(read_all(client.clone(), sbx, cmd.id));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.crash();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let restarted = w.start(&listen);
    let (stdout, exit) = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("the reader stalled after the restart")
        .unwrap();
    // local's sandbox init outlives the server while a command runs: nothing is lost.
    assert_eq!(stdout, expected(7, LINES));
    assert!(
        matches!(
            exit,
            OutputEvent::Exit {
                state: CommandState::Exited,
                exit_code: Some(0),
                ..
            }
        ),
        "{exit:?}"
    );
    client.delete_sandbox(&sbx).await.unwrap();
    restarted.stop();
}

/// The server's peak resident memory (`VmHWM`), in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_local_a_gigabyte_of_output_is_capped_by_retention_and_the_server_stays_bounded() {
    let mut w = LocalWorld::new("max_output_mib_per_command = 8\n");
    let server = w.start("127.0.0.1:0");
    let key = server.first_key();
    let client = local_client(&server, &key);
    let sbx = client
        .create_sandbox(&CreateSandboxRequest::standard(Provider::Local, None, None))
        .await
        .unwrap()
        .id;
    const GIB: u64 = 1 << 30;
    let started = std::time::Instant::now();
    let cmd = client
        .start_command(
            &sbx,
            &StartCommandInput {
                command: format!("head -c {GIB} /dev/zero; echo; echo END"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let done = tokio::time::timeout(Duration::from_secs(600), client.wait_command(&sbx, &cmd.id))
        .await
        .expect("a gigabyte took more than 10 minutes")
        .unwrap();
    let took = started.elapsed();
    assert_eq!(done.state, CommandState::Exited);
    assert_eq!(
        done.stdout_bytes,
        GIB + 5,
        "every byte counted, journaled or dropped"
    );
    // Readers get the loss as gaps, then the newest bytes, ending with the marker.
    let mut stream = client.follow_output(&sbx, &cmd.id, 0);
    let (mut lost, mut kept, mut tail) = (0u64, 0u64, Vec::new());
    while let Some(event) = stream.next().await {
        match event.unwrap() {
            OutputEvent::Gap { length, .. } => {
                lost += length.expect("a dropped chunk's length is known")
            }
            OutputEvent::Output { data, encoding, .. } => {
                let bytes = match encoding {
                    corral_domain::FileEncoding::Utf8 => data.into_bytes(),
                    corral_domain::FileEncoding::Base64 => {
                        use base64::Engine as _;
                        base64::engine::general_purpose::STANDARD
                            .decode(data)
                            .unwrap()
                    }
                };
                kept += bytes.len() as u64;
                tail = bytes;
            }
            OutputEvent::Exit { .. } => break,
        }
    }
    assert_eq!(lost + kept, GIB + 5);
    assert!(
        kept <= 8 * 1024 * 1024 + 2 * 64 * 1024,
        "kept {kept} bytes past an 8 MiB cap"
    );
    assert!(tail.ends_with(b"END\n"));
    let peak = peak_kib(server.pid());
    let db = std::fs::metadata(w.data.join("corral.db")).unwrap().len()
        + std::fs::metadata(w.data.join("corral.db-wal")).map_or(0, |m| m.len());
    eprintln!(
        "1 GiB of output in {:.1} s: kept {kept} bytes, lost {lost}; server peak {peak} KiB; database {db} bytes",
        took.as_secs_f64()
    );
    assert!(peak < 256 * 1024, "the server peaked at {peak} KiB");
    assert!(db < 128 * 1024 * 1024, "the database holds {db} bytes");
    client.delete_sandbox(&sbx).await.unwrap();
    server.stop();
}
