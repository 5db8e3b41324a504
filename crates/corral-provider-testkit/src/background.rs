//! Background processes on the host, for fakes of providers whose process API is asynchronous.
//!
//! **No isolation**: for tests only. Where [`crate::host_shell::run_command`] runs a command to
//! its end, a [`Processes`] table starts `sh -c command` and lets it run on: a fake's "start"
//! endpoint spawns, its "logs"/"connect" endpoints read what was written from any byte offset
//! and wait for more, its "stdin" endpoint writes and closes the pipe, its "kill" endpoint
//! signals the process group, and its "list" endpoint lists. Every byte of stdout and stderr is
//! kept, so a fake can model a provider that replays from the start, resumes at an offset, or
//! streams only what comes next.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::time::Duration;
//! use corral_domain::OutputStream;
//! use corral_provider_testkit::background::{Processes, SpawnSpec};
//!
//! let processes = Processes::default();
//! let p = processes.spawn(SpawnSpec::new("read line; echo got $line", "/tmp").with_stdin())?;
//! p.write_stdin(b"hi\n").await?;
//! p.close_stdin().await;
//! let exit = p.wait_exit(Duration::from_secs(5)).await;
//! assert_eq!(exit.map(|e| e.code()), Some(0));
//! assert_eq!(p.read(OutputStream::Stdout, 0), b"got hi\n");
//! # Ok(()) }
//! ```
//!
//! Exit is reported only once both output pipes are drained (or a second after the shell
//! ended, when a child it left behind holds them open), so a reader that sees the exit has
//! seen all the output.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use corral_domain::OutputStream;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::ChildStdin;
use tokio::sync::watch;

/// How long the exit waits for the output pipes after the shell ended.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// What to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnSpec {
    /// Run as `sh -c command`.
    pub command: String,
    /// Working directory (must exist).
    pub cwd: PathBuf,
    /// Added to the host's environment.
    pub env: BTreeMap<String, String>,
    /// Whether stdin is a pipe the fake writes to (otherwise `/dev/null`).
    pub stdin: bool,
    /// A name the fake may find the process by (a provider's tag, session or command id).
    pub tag: Option<String>,
}

impl SpawnSpec {
    /// `sh -c command` in `cwd`, no extra env, stdin empty, no tag.
    pub fn new(command: impl Into<String>, cwd: impl Into<PathBuf>) -> Self {
        Self {
            command: command.into(),
            cwd: cwd.into(),
            env: BTreeMap::new(),
            stdin: false,
            tag: None,
        }
    }

    /// With a stdin pipe.
    pub fn with_stdin(mut self) -> Self {
        self.stdin = true;
        self
    }

    /// With `env` added.
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Self {
        self.env = env;
        self
    }

    /// Tagged with `tag`.
    pub fn with_tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Its exit status, when it exited.
    pub status: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
}

impl Exit {
    /// The shell's convention: the status, or `128 + n` for death by signal `n`.
    pub fn code(&self) -> i32 {
        self.status
            .or_else(|| self.signal.map(|s| 128 + s))
            .unwrap_or(-1)
    }
}

/// One row of [`Processes::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The host pid (also the process group id).
    pub pid: u32,
    /// What it was started with.
    pub spec: SpawnSpec,
    /// How it ended, if it did.
    pub exit: Option<Exit>,
}

#[derive(Default)]
struct State {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit: Option<Exit>,
}

struct Shared {
    pid: u32,
    spec: SpawnSpec,
    state: Mutex<State>,
    /// Bumped on every change of `state`.
    changed: watch::Sender<u64>,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

/// A handle on one background process (cheap to clone).
#[derive(Clone)]
pub struct Process(Arc<Shared>);

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("pid", &self.0.pid)
            .field("tag", &self.0.spec.tag)
            .field("exit", &self.exit())
            .finish()
    }
}

impl Process {
    /// The host pid, which is also its process group id.
    pub fn pid(&self) -> u32 {
        self.0.pid
    }

    /// What it was started with.
    pub fn spec(&self) -> &SpawnSpec {
        &self.0.spec
    }

    /// The bytes of `stream` from byte `from` on (empty when `from` is at or past the end).
    pub fn read(&self, stream: OutputStream, from: u64) -> Vec<u8> {
        let state = self.0.state();
        let buf = match stream {
            OutputStream::Stdout => &state.stdout,
            OutputStream::Stderr => &state.stderr,
        };
        let from = usize::try_from(from).unwrap_or(usize::MAX).min(buf.len());
        buf[from..].to_vec()
    }

    /// Bytes written so far to `stream`.
    pub fn len(&self, stream: OutputStream) -> u64 {
        let state = self.0.state();
        match stream {
            OutputStream::Stdout => state.stdout.len() as u64,
            OutputStream::Stderr => state.stderr.len() as u64,
        }
    }

    /// How it ended, once it did (all output is then in).
    pub fn exit(&self) -> Option<Exit> {
        self.0.state().exit
    }

    /// Waits until stdout holds more than `stdout` bytes, stderr more than `stderr` bytes, or
    /// the process ended, for at most `timeout`. Answers whether one of them happened.
    pub async fn wait_output(&self, stdout: u64, stderr: u64, timeout: Duration) -> bool {
        let ready = |s: &State| {
            s.stdout.len() as u64 > stdout || s.stderr.len() as u64 > stderr || s.exit.is_some()
        };
        self.wait_for(ready, timeout).await
    }

    /// Waits for the end, for at most `timeout`.
    pub async fn wait_exit(&self, timeout: Duration) -> Option<Exit> {
        self.wait_for(|s| s.exit.is_some(), timeout).await;
        self.exit()
    }

    async fn wait_for(&self, ready: impl Fn(&State) -> bool, timeout: Duration) -> bool {
        let mut rx = self.0.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            rx.borrow_and_update();
            if ready(&self.0.state()) {
                return true;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                // The sender lives in `self`: it cannot close while we hold it.
                Ok(Err(_)) | Err(_) => return ready(&self.0.state()),
            }
        }
    }

    /// Writes `data` to stdin. Fails with `BrokenPipe` when stdin is not a pipe, was closed,
    /// or the process stopped reading.
    pub async fn write_stdin(&self, data: &[u8]) -> std::io::Result<()> {
        let mut stdin = self.0.stdin.lock().await;
        let pipe = stdin.as_mut().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdin is not open")
        })?;
        pipe.write_all(data).await?;
        pipe.flush().await
    }

    /// Whether stdin is an open pipe.
    pub async fn stdin_open(&self) -> bool {
        self.0.stdin.lock().await.is_some()
    }

    /// Closes stdin (the process reads end of file); closing twice is harmless.
    pub async fn close_stdin(&self) {
        self.0.stdin.lock().await.take();
    }

    /// Sends signal number `signal` to the whole process group. Signalling an ended process
    /// is `Ok` (nothing to do).
    pub async fn signal(&self, signal: i32) -> std::io::Result<()> {
        if self.exit().is_some() {
            return Ok(());
        }
        // `kill` exits non-zero when the group is already gone: not an error here.
        tokio::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg("--")
            .arg(format!("-{}", self.0.pid))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .map(drop)
    }

    /// Sends signal number `signal` to the started shell alone, not to what it started (as a
    /// provider that signals only its direct child does). An ended process is `Ok`.
    pub async fn signal_leader(&self, signal: i32) -> std::io::Result<()> {
        if self.exit().is_some() {
            return Ok(());
        }
        tokio::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg("--")
            .arg(self.0.pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .map(drop)
    }

    /// What [`Processes::list`] shows of it.
    pub fn info(&self) -> ProcessInfo {
        ProcessInfo {
            pid: self.0.pid,
            spec: self.0.spec.clone(),
            exit: self.exit(),
        }
    }
}

async fn drain(shared: Arc<Shared>, stream: OutputStream, mut from: impl AsyncRead + Unpin) {
    let mut buf = [0u8; 8192];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                {
                    let mut state = shared.state();
                    match stream {
                        OutputStream::Stdout => state.stdout.extend_from_slice(&buf[..n]),
                        OutputStream::Stderr => state.stderr.extend_from_slice(&buf[..n]),
                    }
                }
                shared.bump();
            }
        }
    }
}

/// A table of background processes, by pid. Dropping it kills every process group still
/// running (so a test's processes end with its fake).
#[derive(Default)]
pub struct Processes {
    table: Mutex<HashMap<u32, Process>>,
}

impl std::fmt::Debug for Processes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processes")
            .field("count", &self.table().len())
            .finish()
    }
}

impl Processes {
    fn table(&self) -> MutexGuard<'_, HashMap<u32, Process>> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts `sh -c spec.command` in its own process group, `TMPDIR` set to its cwd. Must be
    /// called within a Tokio runtime (tasks drain the pipes and reap the process).
    pub fn spawn(&self, spec: SpawnSpec) -> std::io::Result<Process> {
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&spec.command)
            .current_dir(&spec.cwd)
            .env("TMPDIR", &spec.cwd)
            .envs(&spec.env)
            .stdin(if spec.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()?;
        let missing = || std::io::Error::other("the spawned process has no pid or pipe");
        let pid = child.id().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = child.stderr.take().ok_or_else(missing)?;
        let shared = Arc::new(Shared {
            pid,
            spec,
            state: Mutex::default(),
            changed: watch::Sender::new(0),
            stdin: tokio::sync::Mutex::new(child.stdin.take()),
        });
        let out = tokio::spawn(drain(shared.clone(), OutputStream::Stdout, stdout));
        let err = tokio::spawn(drain(shared.clone(), OutputStream::Stderr, stderr));
        let reaper = shared.clone();
        tokio::spawn(async move {
            use std::os::unix::process::ExitStatusExt as _;
            let exit = match child.wait().await {
                Ok(status) => Exit {
                    status: status.code(),
                    signal: status.signal(),
                },
                Err(_) => Exit {
                    status: None,
                    signal: None,
                },
            };
            let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, async {
                let _ = out.await;
                let _ = err.await;
            })
            .await;
            reaper.stdin.lock().await.take();
            reaper.state().exit = Some(exit);
            reaper.bump();
        });
        let process = Process(shared);
        self.table().insert(pid, process.clone());
        Ok(process)
    }

    /// The process with host pid `pid`.
    pub fn get(&self, pid: u32) -> Option<Process> {
        self.table().get(&pid).cloned()
    }

    /// The most recently started process tagged `tag`.
    pub fn by_tag(&self, tag: &str) -> Option<Process> {
        self.table()
            .values()
            .filter(|p| p.0.spec.tag.as_deref() == Some(tag))
            .max_by_key(|p| p.0.pid)
            .cloned()
    }

    /// Every process started and not [removed](Processes::remove), by pid.
    pub fn list(&self) -> Vec<ProcessInfo> {
        let mut all: Vec<ProcessInfo> = self.table().values().map(Process::info).collect();
        all.sort_by_key(|p| p.pid);
        all
    }

    /// Forgets `pid` (its group is killed if still running). Answers whether it was known.
    pub fn remove(&self, pid: u32) -> bool {
        let removed = self.table().remove(&pid);
        if let Some(p) = &removed {
            kill_group_now(p);
        }
        removed.is_some()
    }
}

fn kill_group_now(p: &Process) {
    if p.exit().is_none() {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--"])
            .arg(format!("-{}", p.0.pid))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for p in self.table().values() {
            kill_group_now(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[tokio::test]
    async fn output_is_kept_by_stream_and_exit_comes_after_it() {
        let dir = tmp();
        let ps = Processes::default();
        let p = ps
            .spawn(SpawnSpec::new(
                "printf abc; printf err >&2; exit 7",
                dir.path(),
            ))
            .unwrap();
        let exit = p.wait_exit(Duration::from_secs(10)).await.unwrap();
        assert_eq!(exit.code(), 7);
        assert_eq!(p.read(OutputStream::Stdout, 0), b"abc");
        assert_eq!(p.read(OutputStream::Stdout, 1), b"bc");
        assert_eq!(p.read(OutputStream::Stdout, 9), b"");
        assert_eq!(p.read(OutputStream::Stderr, 0), b"err");
        assert_eq!(ps.list().len(), 1);
        assert_eq!(ps.list()[0].exit, Some(exit));
    }

    #[tokio::test]
    async fn wait_output_wakes_on_new_bytes_and_times_out_without() {
        let dir = tmp();
        let ps = Processes::default();
        let p = ps
            .spawn(
                SpawnSpec::new("echo one; sleep 1; echo two; sleep 30", dir.path()).with_tag("t"),
            )
            .unwrap();
        assert!(p.wait_output(0, 0, Duration::from_secs(10)).await);
        let seen = p.len(OutputStream::Stdout);
        assert_eq!(p.read(OutputStream::Stdout, 0), b"one\n");
        assert!(!p.wait_output(seen, 0, Duration::from_millis(100)).await);
        assert!(p.wait_output(seen, 0, Duration::from_secs(10)).await);
        assert_eq!(p.read(OutputStream::Stdout, seen), b"two\n");
        assert_eq!(ps.by_tag("t").map(|p| p.pid()), Some(p.pid()));
        assert!(ps.by_tag("other").is_none());
        // The whole group dies, the `sleep` child included.
        p.signal(15).await.unwrap();
        let exit = p.wait_exit(Duration::from_secs(10)).await.unwrap();
        assert_eq!(exit.code(), 128 + 15);
        p.signal(9).await.unwrap(); // ended: nothing to do
    }

    #[tokio::test]
    async fn signalling_the_leader_leaves_its_children() {
        let dir = tmp();
        let ps = Processes::default();
        let p = ps
            .spawn(SpawnSpec::new("sleep 30; echo after", dir.path()))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        p.signal_leader(9).await.unwrap();
        // The shell is dead, but its `sleep` child keeps stdout open: no exit until the
        // pipes are given up on.
        let exit = p.wait_exit(Duration::from_secs(10)).await.unwrap();
        assert_eq!(exit.code(), 128 + 9);
        assert_eq!(p.read(OutputStream::Stdout, 0), b"");
        // The orphaned `sleep` is still in the group: the group signal ends it.
        let alive = std::process::Command::new("kill")
            .args(["-0", "--", &format!("-{}", p.pid())])
            .status()
            .unwrap();
        assert!(alive.success(), "the child survived the leader's death");
        std::process::Command::new("kill")
            .args(["-9", "--", &format!("-{}", p.pid())])
            .status()
            .unwrap();
    }

    #[tokio::test]
    async fn stdin_round_trip_and_close() {
        let dir = tmp();
        let ps = Processes::default();
        let p = ps
            .spawn(SpawnSpec::new("cat; echo done", dir.path()).with_stdin())
            .unwrap();
        assert!(p.stdin_open().await);
        p.write_stdin(b"hello ").await.unwrap();
        p.write_stdin(b"world\n").await.unwrap();
        p.close_stdin().await;
        assert!(p.write_stdin(b"late").await.is_err());
        p.wait_exit(Duration::from_secs(10)).await.unwrap();
        assert_eq!(p.read(OutputStream::Stdout, 0), b"hello world\ndone\n");

        let q = ps.spawn(SpawnSpec::new("cat", dir.path())).unwrap();
        assert!(q.write_stdin(b"x").await.is_err(), "no pipe asked for");
        assert_eq!(
            q.wait_exit(Duration::from_secs(10)).await.unwrap().code(),
            0
        );
    }

    #[tokio::test]
    async fn cwd_and_env_are_passed() {
        let dir = tmp();
        let ps = Processes::default();
        let env = BTreeMap::from([("CORRAL_X".to_owned(), "a b".to_owned())]);
        let p = ps
            .spawn(SpawnSpec::new("pwd; printf %s \"$CORRAL_X\"", dir.path()).with_env(env))
            .unwrap();
        p.wait_exit(Duration::from_secs(10)).await.unwrap();
        let out = String::from_utf8(p.read(OutputStream::Stdout, 0)).unwrap();
        let real = dir.path().canonicalize().unwrap();
        assert_eq!(out, format!("{}\na b", real.display()));
    }

    #[tokio::test]
    async fn removing_kills_a_running_group() {
        let dir = tmp();
        let ps = Processes::default();
        let p = ps.spawn(SpawnSpec::new("sleep 30", dir.path())).unwrap();
        assert!(ps.remove(p.pid()));
        assert!(!ps.remove(p.pid()));
        let exit = p.wait_exit(Duration::from_secs(10)).await.unwrap();
        assert_eq!(exit.code(), 128 + 9);
        assert!(ps.get(p.pid()).is_none());
    }
}
