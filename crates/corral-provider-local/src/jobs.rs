//! Commands as durable jobs, the provider's side: each command's directory in the
//! sandbox's host directory, its start through the sandbox's init, and reading it back by
//! byte offset — from this server or from the next one after a restart.
//!
//! ```text
//! <root>/<sandbox>/commands/<command id>/     (0700, the server's user)
//!   job.json       the init's job number and instance (written before the start is sent)
//!   stdout, stderr the streams, written by the init at their own offsets (0600)
//!   exit           one JSON line (`{"code":n}` or `{"killed":s}`) once the command is over
//!                  and both streams are complete; empty until then
//!   stdin          with stdin: a FIFO the command reads; the init holds a writer
//!   stdin.count    bytes of stdin accepted so far (20 digits, rewritten in place)
//!   stdin.lock     held (flock) while stdin is written or closed
//!   stdin.closed   stdin was closed: nothing more is written
//! ```
//!
//! The directory sits beside the sandbox's filesystem, never under it: no command of the
//! sandbox can open, truncate or replace these files (its root is `fs/`, or an image's
//! layers), and file calls resolve beneath that root. A command's output reaches its files
//! only through the init, which copies it from pipes ([`crate::init`]), so the command
//! cannot seek or truncate them either, and the init keeps at most 32 MiB of each stream
//! on disk (older bytes read as a gap).
//!
//! The command directory is claimed with `mkdir` before anything is started: a second start
//! of the same command id (a retry after a lost answer) starts nothing and answers the same
//! handle, the command id. Its job number is taken from the command id, and the init
//! refuses a number it already runs.
//!
//! Reading follows the files with inotify: output reaches a reader as soon as the init has
//! written it. The exit file is read before the streams, so once it holds the exit, the
//! streams read after it are complete. A command whose exit file stays empty while the init
//! that ran it is gone (or no longer knows it) ended without a report: the reader gets
//! `NotFound`, which the service records as `lost`.

use std::fs;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_domain::{CommandId, OutputStream, Provider};
use corral_provider::{CommandEvent, CommandEvents, CommandSpec, OutputOffsets, ProviderError};
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use snafu::{ResultExt as _, Snafu};
use tokio::io::unix::AsyncFd;

use crate::init::proto::{Exit, Start};
use crate::lock::FileLock;

const JOB: &str = "job.json";
const STDOUT: &str = "stdout";
const STDERR: &str = "stderr";
const EXIT: &str = "exit";
const STDIN: &str = "stdin";
const STDIN_COUNT: &str = "stdin.count";
const STDIN_LOCK: &str = "stdin.lock";
const STDIN_CLOSED: &str = "stdin.closed";

/// Bytes of one stream an output event carries at most.
const CHUNK: u64 = 64 * 1024;
/// How long a reader waits without any change before it asks the init whether the command
/// still runs.
const QUIET_CHECK: Duration = Duration::from_secs(2);
/// The stdin FIFO's buffer: a write of up to this much is taken at once by a command that
/// keeps up.
const STDIN_BUFFER: usize = 1 << 20;
/// How long a stdin write waits for the command to make room, at most.
pub(crate) const STDIN_PATIENCE: Duration = Duration::from_secs(10);
/// Ended commands' directories are kept this long after their end…
const ENDED_KEPT: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// …and while all ended commands of the sandbox together keep at most this much output on
/// disk (the oldest go first).
const ENDED_BYTES: u64 = 256 << 20;

/// Why a command call failed.
#[derive(Debug, Snafu)]
pub(crate) enum Error {
    /// The command is not known in this sandbox.
    #[snafu(display("command {handle} is not known in sandbox {sandbox}"))]
    Unknown {
        /// The handle (command id).
        handle: String,
        /// The sandbox.
        sandbox: String,
    },
    /// Not a handle this provider gave out.
    #[snafu(display("`{handle}` is not a command handle of the local provider"))]
    BadHandle {
        /// What came.
        handle: String,
    },
    /// Stdin cannot be written.
    #[snafu(display("the command's stdin is not open: {why}"))]
    StdinNotOpen {
        /// Why.
        why: &'static str,
    },
    /// A write past what was accepted.
    #[snafu(display("stdin offset {offset} is past the {accepted} bytes accepted so far"))]
    StdinGap {
        /// The write's offset.
        offset: u64,
        /// Bytes accepted.
        accepted: u64,
    },
    /// A file of the command.
    #[snafu(display("cannot {what} {}: {source}", path.display()))]
    Io {
        /// What was done.
        what: &'static str,
        /// To which file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The sandbox's init.
    #[snafu(display("the sandbox could not run the command: {message}"))]
    Init {
        /// What it said, or why it could not.
        message: String,
    },
}

impl From<Error> for ProviderError {
    fn from(e: Error) -> Self {
        let message = e.to_string();
        match e {
            Error::Unknown { handle, .. } => ProviderError::NotFound {
                provider: Provider::Local,
                resource: format!("command {handle}"),
            },
            Error::BadHandle { .. } | Error::StdinNotOpen { .. } | Error::StdinGap { .. } => {
                ProviderError::InvalidRequest {
                    provider: Provider::Local,
                    message,
                }
            }
            Error::Io { .. } | Error::Init { .. } => ProviderError::Unavailable {
                provider: Provider::Local,
                message,
                retry_after: None,
            },
        }
    }
}

/// What is recorded of a started command.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JobRecord {
    /// Its job number in the init.
    pub(crate) job: u64,
    /// The init that runs it (`Setup::instance`).
    pub(crate) instance: String,
    /// Whether it has a stdin FIFO.
    pub(crate) stdin: bool,
}

/// The job number of command `id`: the low 64 bits of its ULID (random).
pub(crate) fn job_number(id: &CommandId) -> u64 {
    let bits = id.ulid().0.to_le_bytes();
    let mut low = [0u8; 8];
    low.copy_from_slice(&bits[..8]);
    u64::from_le_bytes(low)
}

/// The directory of command `handle` under `commands`, once `handle` is checked to be a
/// command id as this provider spells it (before it becomes a path).
pub(crate) fn dir(commands: &Path, handle: &str) -> Result<PathBuf, Error> {
    match handle.parse::<CommandId>() {
        Ok(id) if id.to_string() == handle => Ok(commands.join(handle)),
        _ => BadHandleSnafu { handle }.fail(),
    }
}

fn io(what: &'static str, path: &Path) -> IoSnafu<&'static str, PathBuf> {
    IoSnafu {
        what,
        path: path.to_owned(),
    }
}

/// Reads a command's record; `Unknown` when there is none.
pub(crate) fn record(dir: &Path, sandbox: &str) -> Result<JobRecord, Error> {
    let path = dir.join(JOB);
    match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(std::io::Error::from)
            .context(io("read", &path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => UnknownSnafu {
            handle: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            sandbox,
        }
        .fail(),
        Err(e) => Err(e).context(io("read", &path)),
    }
}

/// Whether a command with this id was started in `commands`.
pub(crate) fn exists(commands: &Path, id: &CommandId) -> bool {
    commands.join(id.to_string()).join(JOB).is_file()
}

/// The exit written to a command's exit file, once it is there: its code (`128 + n` for a
/// tree killed by signal `n`), `None` for a line that does not parse.
fn read_exit(file: &fs::File) -> Option<Option<i32>> {
    let mut buf = [0u8; 128];
    let n = rustix::io::pread(file, &mut buf, 0).ok()?;
    let line = buf[..n].split(|b| *b == b'\n').next()?;
    if !buf[..n].contains(&b'\n') {
        return None;
    }
    Some(match serde_json::from_slice::<Exit>(line) {
        Ok(Exit::Code(code)) => Some(code),
        Ok(Exit::Killed(signal)) => Some(128 + signal),
        Err(_) => None,
    })
}

/// A command's directory, made for a start that has not been sent yet.
#[derive(Debug)]
pub(crate) struct Claimed {
    dir: PathBuf,
    stdout: OwnedFd,
    stderr: OwnedFd,
    exit: OwnedFd,
    /// The FIFO's read end (the command's stdin) and a write end (the init's holder).
    stdin: Option<(OwnedFd, OwnedFd)>,
}

/// Makes command `id`'s directory under `commands` with its files; `None` when it exists
/// already (the command was started before: nothing is made or started again).
pub(crate) fn claim(
    commands: &Path,
    id: &CommandId,
    stdin: bool,
) -> Result<Option<Claimed>, Error> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(commands)
        .context(io("create", commands))?;
    let dir = commands.join(id.to_string());
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(None),
        Err(e) => return Err(e).context(io("create", &dir)),
    }
    let made = (|| {
        let create = |name: &str| -> Result<OwnedFd, Error> {
            let path = dir.join(name);
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map(OwnedFd::from)
                .context(io("create", &path))
        };
        let (stdout, stderr, exit) = (create(STDOUT)?, create(STDERR)?, create(EXIT)?);
        let stdin = if stdin {
            let fifo = dir.join(STDIN);
            rustix::fs::mknodat(
                rustix::fs::CWD,
                &fifo,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .map_err(std::io::Error::from)
            .context(io("create", &fifo))?;
            let open = |flags| {
                rustix::fs::open(
                    &fifo,
                    flags | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .map_err(std::io::Error::from)
                .context(io("open", &fifo))
            };
            // The reader first (a non-blocking writer needs one), then made blocking: the
            // command reads it as any stdin.
            let read = open(rustix::fs::OFlags::RDONLY)?;
            let holder = open(rustix::fs::OFlags::WRONLY)?;
            rustix::fs::fcntl_setfl(&read, rustix::fs::OFlags::empty())
                .map_err(std::io::Error::from)
                .context(io("set up", &fifo))?;
            let _ = rustix::pipe::fcntl_setpipe_size(&holder, STDIN_BUFFER);
            let mut count = create(STDIN_COUNT)?;
            write_count(&mut count, 0).context(io("write", &dir.join(STDIN_COUNT)))?;
            Some((read, holder))
        } else {
            None
        };
        Ok(Claimed {
            dir: dir.clone(),
            stdout,
            stderr,
            exit,
            stdin,
        })
    })();
    if made.is_err() {
        let _ = fs::remove_dir_all(&dir);
    }
    made.map(Some)
}

impl Claimed {
    /// Records which init runs it (before the start is sent: a start whose answer is lost
    /// is still found, and the init says whether it runs it).
    pub(crate) fn record(&self, record: &JobRecord) -> Result<(), Error> {
        let path = self.dir.join(JOB);
        let tmp = self.dir.join(".job.json.tmp");
        let bytes = serde_json::to_vec(record)
            .map_err(std::io::Error::from)
            .context(io("write", &path))?;
        // No fsync: a machine that goes down takes the command with it.
        fs::write(&tmp, bytes).context(io("write", &tmp))?;
        fs::rename(&tmp, &path).context(io("write", &path))
    }

    /// The descriptors a durable `Start` carries.
    pub(crate) fn descriptors(&self) -> Vec<BorrowedFd<'_>> {
        let mut fds = vec![self.stdout.as_fd(), self.stderr.as_fd(), self.exit.as_fd()];
        if let Some((read, holder)) = &self.stdin {
            fds.push(read.as_fd());
            fds.push(holder.as_fd());
        }
        fds
    }

    /// Empties the files again, for a start retried on a new init (the first one is gone,
    /// and whatever it ran with it).
    pub(crate) fn reset(&self) {
        for fd in [&self.stdout, &self.stderr, &self.exit] {
            let _ = rustix::fs::ftruncate(fd, 0);
        }
    }

    /// Removes the directory: the command was never started.
    pub(crate) fn abandon(self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn write_count(file: &mut OwnedFd, count: u64) -> std::io::Result<()> {
    let text = format!("{count:020}\n");
    let n = rustix::io::pwrite(&*file, text.as_bytes(), 0)?;
    if n == text.len() {
        Ok(())
    } else {
        Err(std::io::Error::other("a short write"))
    }
}

fn read_count(path: &Path) -> Result<u64, Error> {
    let text = fs::read_to_string(path).context(io("read", path))?;
    text.trim()
        .parse()
        .map_err(|_| std::io::Error::other(format!("`{}` is not a count", text.trim())))
        .context(io("read", path))
}

/// Writes `data` at `offset` of command `dir`'s stdin; what was accepted before is skipped, so
/// a resend writes nothing twice. The total accepted (less than `offset + data.len()` when
/// the command did not take it all within `patience`).
pub(crate) fn write_stdin(
    dir: &Path,
    sandbox: &str,
    offset: u64,
    data: &[u8],
    patience: Duration,
) -> Result<u64, Error> {
    let record = record(dir, sandbox)?;
    if !record.stdin {
        return StdinNotOpenSnafu {
            why: "the command was started without stdin",
        }
        .fail();
    }
    let lock_path = dir.join(STDIN_LOCK);
    let _one_at_a_time = FileLock::exclusive(&lock_path).context(io("lock", &lock_path))?;
    if dir.join(STDIN_CLOSED).exists() {
        return StdinNotOpenSnafu {
            why: "it was closed",
        }
        .fail();
    }
    let count_path = dir.join(STDIN_COUNT);
    let mut accepted = read_count(&count_path)?;
    if offset > accepted {
        return StdinGapSnafu { offset, accepted }.fail();
    }
    let skip = usize::try_from(accepted - offset).unwrap_or(usize::MAX);
    let Some(fresh) = data.get(skip..).filter(|f| !f.is_empty()) else {
        return Ok(accepted);
    };
    let fifo = dir.join(STDIN);
    let pipe = match rustix::fs::open(
        &fifo,
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) {
        Ok(fd) => fd,
        // No reader: the command has ended, or closed its stdin.
        Err(rustix::io::Errno::NXIO | rustix::io::Errno::NOENT) => {
            return StdinNotOpenSnafu {
                why: "the command no longer reads it",
            }
            .fail();
        }
        Err(e) => return Err(std::io::Error::from(e)).context(io("open", &fifo)),
    };
    let mut count = fs::OpenOptions::new()
        .write(true)
        .open(&count_path)
        .map(OwnedFd::from)
        .context(io("open", &count_path))?;
    let deadline = Instant::now() + patience;
    let mut written = 0;
    while written < fresh.len() {
        match rustix::io::write(&pipe, &fresh[written..]) {
            Ok(n) => {
                written += n;
                accepted += n as u64;
                // Counted as soon as the FIFO has it: a resend after this skips it.
                write_count(&mut count, accepted).context(io("write", &count_path))?;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => {
                if crate::init::proto::wait_writable(&pipe, deadline).is_err() {
                    break;
                }
            }
            Err(rustix::io::Errno::PIPE) if written == 0 => {
                return StdinNotOpenSnafu {
                    why: "the command no longer reads it",
                }
                .fail();
            }
            Err(rustix::io::Errno::PIPE) => break,
            Err(e) => return Err(std::io::Error::from(e)).context(io("write", &fifo)),
        }
    }
    Ok(accepted)
}

/// Marks command `dir`'s stdin closed (later writes are refused); the caller then has the
/// init let go of its holder. Whether the command has a stdin at all.
pub(crate) fn mark_stdin_closed(dir: &Path, sandbox: &str) -> Result<Option<JobRecord>, Error> {
    let record = record(dir, sandbox)?;
    if !record.stdin {
        return Ok(None);
    }
    let lock_path = dir.join(STDIN_LOCK);
    let _one_at_a_time = FileLock::exclusive(&lock_path).context(io("lock", &lock_path))?;
    let closed = dir.join(STDIN_CLOSED);
    fs::write(&closed, b"").context(io("write", &closed))?;
    Ok(Some(record))
}

/// Whether command `dir` has ended (its exit is written).
pub(crate) fn has_ended(dir: &Path) -> bool {
    fs::File::open(dir.join(EXIT)).is_ok_and(|f| read_exit(&f).is_some())
}

/// Removes the directories of ended commands under `commands` that are past what is kept
/// ([`ENDED_KEPT`], [`ENDED_BYTES`]). Best effort.
pub(crate) fn prune(commands: &Path) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = fs::read_dir(commands) else {
        return;
    };
    let now = std::time::SystemTime::now();
    let mut ended: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("cmd_"))
        })
        .map(|e| e.path())
        .filter(|d| has_ended(d))
        .filter_map(|d| {
            let at = fs::metadata(d.join(EXIT)).and_then(|m| m.modified()).ok()?;
            let bytes = [STDOUT, STDERR]
                .iter()
                .filter_map(|f| fs::metadata(d.join(f)).ok())
                .map(|m| m.blocks() * 512)
                .sum();
            Some((at, bytes, d))
        })
        .collect();
    ended.sort();
    let mut total: u64 = ended.iter().map(|(_, b, _)| b).sum();
    for (at, bytes, d) in ended {
        let old = now.duration_since(at).is_ok_and(|age| age > ENDED_KEPT);
        if (old || total > ENDED_BYTES) && fs::remove_dir_all(&d).is_ok() {
            total = total.saturating_sub(bytes);
        }
    }
}

/// Reads from byte `at` of a stream file: where the bytes read start (past `at` when the
/// init dropped older ones: a gap) and at most [`CHUNK`] of them; `None` when there is
/// nothing new.
fn read_from(file: &fs::File, at: u64) -> std::io::Result<Option<(u64, Vec<u8>)>> {
    let len = rustix::fs::fstat(file)?.st_size;
    let len = u64::try_from(len).unwrap_or(0);
    if at >= len {
        return Ok(None);
    }
    // Holes exist only once a stream passed what the init keeps; below that the bytes are
    // all there, and `SEEK_DATA` is not asked.
    let may_have_holes = len > crate::init::pump::KEPT;
    let data_from = |from: u64| -> std::io::Result<Option<u64>> {
        if !may_have_holes {
            return Ok(Some(from));
        }
        match rustix::fs::seek(file, rustix::fs::SeekFrom::Data(from)) {
            Ok(d) => Ok(Some(d)),
            Err(rustix::io::Errno::NXIO) => Ok(None),
            // No SEEK_DATA here: no holes either.
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => Ok(Some(from)),
            Err(e) => Err(e.into()),
        }
    };
    let Some(mut start) = data_from(at)? else {
        return Ok(None);
    };
    if start >= len {
        return Ok(None);
    }
    let want = usize::try_from((len - start).min(CHUNK)).unwrap_or(0);
    let mut buf = vec![0u8; want];
    let mut got = 0;
    while got < want {
        match rustix::io::pread(file, &mut buf[got..], start + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    buf.truncate(got);
    // Bytes dropped while they were being read read as zeros: they are dropped here too.
    if let Some(again) = data_from(start)?
        && again > start
    {
        let cut = usize::try_from(again - start)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        buf.drain(..cut);
        start += cut as u64;
    }
    Ok((!buf.is_empty()).then_some((start, buf)))
}

/// Whether the command in `record` still runs, as far as anyone can tell: its init is alive
/// and runs it. Blocking.
pub(crate) type StillRunning = Arc<dyn Fn(&JobRecord) -> bool + Send + Sync>;

/// A command being followed.
struct Follow {
    sandbox: String,
    handle: String,
    record: JobRecord,
    streams: [fs::File; 2],
    exit: fs::File,
    at: [u64; 2],
    changes: AsyncFd<OwnedFd>,
    still_running: StillRunning,
    done: bool,
}

/// Opens command `dir` for reading from `from`: blocking (call it off the runtime's
/// threads); the events come from [`events`], on the runtime.
pub(crate) fn open(dir: &Path, sandbox: &str, handle: &str) -> Result<Opened, Error> {
    let record = record(dir, sandbox)?;
    let unknown = || UnknownSnafu { handle, sandbox }.build();
    let open = |name: &str| fs::File::open(dir.join(name)).map_err(|_| unknown());
    // Watched before the files are read, so no change after the first read is missed.
    let changes = rustix::fs::inotify::init(
        rustix::fs::inotify::CreateFlags::CLOEXEC | rustix::fs::inotify::CreateFlags::NONBLOCK,
    )
    .map_err(std::io::Error::from)
    .context(io("watch", dir))?;
    rustix::fs::inotify::add_watch(
        &changes,
        dir,
        rustix::fs::inotify::WatchFlags::MODIFY
            | rustix::fs::inotify::WatchFlags::CLOSE_WRITE
            | rustix::fs::inotify::WatchFlags::DELETE_SELF
            | rustix::fs::inotify::WatchFlags::MOVE_SELF,
    )
    .map_err(|_| unknown())?;
    Ok(Opened {
        record,
        streams: [open(STDOUT)?, open(STDERR)?],
        exit: open(EXIT)?,
        changes,
    })
}

/// A command's files, opened.
pub(crate) struct Opened {
    record: JobRecord,
    streams: [fs::File; 2],
    exit: fs::File,
    changes: OwnedFd,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

/// The events of an opened command from `from`: output as it is written, then the exit.
/// Must be called on the runtime (the watch is registered with its reactor).
pub(crate) fn events(
    opened: Opened,
    sandbox: &str,
    handle: &str,
    from: OutputOffsets,
    still_running: StillRunning,
) -> Result<CommandEvents<'static>, Error> {
    let changes =
        crate::sys::watch_readable(opened.changes).context(io("watch", Path::new(handle)))?;
    let follow = Follow {
        sandbox: sandbox.to_owned(),
        handle: handle.to_owned(),
        record: opened.record,
        streams: opened.streams,
        exit: opened.exit,
        at: [from.stdout, from.stderr],
        changes,
        still_running,
        done: false,
    };
    Ok(futures::stream::unfold(follow, |mut f| async move {
        let batch = f.next_batch().await?;
        Some((batch, f))
    })
    .flat_map(futures::stream::iter)
    .boxed())
}

impl Follow {
    /// The next events: output, or the exit, or the end of a command nobody will report.
    async fn next_batch(&mut self) -> Option<Vec<corral_provider::Result<CommandEvent>>> {
        if self.done {
            return None;
        }
        loop {
            // The exit first: once it is there, the streams read after it are complete.
            let exit = read_exit(&self.exit);
            let mut events = Vec::new();
            for (i, stream) in [OutputStream::Stdout, OutputStream::Stderr]
                .into_iter()
                .enumerate()
            {
                match read_from(&self.streams[i], self.at[i]) {
                    Ok(Some((offset, data))) => {
                        self.at[i] = offset + data.len() as u64;
                        events.push(Ok(CommandEvent::Output {
                            stream,
                            offset: Some(offset),
                            data,
                        }));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        self.done = true;
                        events.push(Err(ProviderError::Unavailable {
                            provider: Provider::Local,
                            message: format!("cannot read command {}: {e}", self.handle),
                            retry_after: None,
                        }));
                        return Some(events);
                    }
                }
            }
            if !events.is_empty() {
                return Some(events);
            }
            if let Some(exit_code) = exit {
                self.done = true;
                return Some(vec![Ok(CommandEvent::Exit { exit_code })]);
            }
            match tokio::time::timeout(QUIET_CHECK, self.changes.readable()).await {
                Ok(Ok(mut ready)) => {
                    // Whatever changed is read above; the events themselves say nothing more.
                    let mut buf = [0u8; 4096];
                    while rustix::io::read(self.changes.get_ref(), &mut buf).is_ok_and(|n| n > 0) {}
                    ready.clear_ready();
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Some(vec![Err(ProviderError::Unavailable {
                        provider: Provider::Local,
                        message: format!("cannot watch command {}: {e}", self.handle),
                        retry_after: None,
                    })]);
                }
                Err(_) => {
                    let check = self.still_running.clone();
                    let record = self.record.clone();
                    let running = tokio::task::spawn_blocking(move || check(&record))
                        .await
                        .unwrap_or(true);
                    // Ended meanwhile (its exit is read at the top), or never to report.
                    if !running && read_exit(&self.exit).is_none() {
                        self.done = true;
                        return Some(vec![Err(ProviderError::NotFound {
                            provider: Provider::Local,
                            resource: format!(
                                "command {} of sandbox {} (its init ended before it reported an exit)",
                                self.handle, self.sandbox
                            ),
                        })]);
                    }
                }
            }
        }
    }
}

/// What a durable start sends the init.
pub(crate) fn start_request(
    spec: &CommandSpec,
    cwd: &str,
    cpu_seconds: u64,
    kill_after: Duration,
) -> Start {
    Start {
        job: job_number(&spec.command_id),
        command: spec.command.clone(),
        cwd: cwd.to_owned(),
        env: spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        stdin: spec.stdin,
        cpu_seconds,
        file_size: 0,
        durable: true,
        kill_after_ms: Some(u64::try_from(kill_after.as_millis()).unwrap_or(u64::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes the file of a command made by hand, for tests of the reader.
    fn write_file(dir: &Path, name: &str, data: &[u8]) {
        use std::io::Write as _;
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(name))
            .unwrap();
        f.write_all(data).unwrap();
    }

    #[test]
    fn handles_are_checked_before_they_become_paths() {
        let commands = Path::new("/x/commands");
        let id = CommandId::new();
        assert_eq!(
            dir(commands, &id.to_string()).unwrap(),
            commands.join(id.to_string())
        );
        for bad in [
            "..",
            "cmd_..",
            "../cmd_01arz3ndektsv4rrffq69g5fav",
            "cmd_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "",
        ] {
            assert!(dir(commands, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_second_claim_of_one_command_makes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let commands = tmp.path().join("commands");
        let id = CommandId::new();
        let first = claim(&commands, &id, true).unwrap().unwrap();
        write_file(&first.dir, STDOUT, b"kept");
        assert!(claim(&commands, &id, true).unwrap().is_none());
        assert_eq!(
            fs::read(commands.join(id.to_string()).join(STDOUT)).unwrap(),
            b"kept"
        );
    }

    #[test]
    fn the_exit_counts_only_once_its_line_is_whole() {
        let tmp = tempfile::tempdir().unwrap();
        write_file(tmp.path(), EXIT, b"");
        let file = || fs::File::open(tmp.path().join(EXIT)).unwrap();
        assert_eq!(read_exit(&file()), None);
        write_file(tmp.path(), EXIT, b"{\"code\":3}");
        assert_eq!(read_exit(&file()), None);
        write_file(tmp.path(), EXIT, b"\n");
        assert_eq!(read_exit(&file()), Some(Some(3)));
        fs::write(tmp.path().join(EXIT), b"{\"killed\":9}\n").unwrap();
        assert_eq!(read_exit(&file()), Some(Some(137)));
    }

    #[test]
    fn reads_resume_at_the_offset_asked() {
        let tmp = tempfile::tempdir().unwrap();
        write_file(tmp.path(), STDOUT, b"hello world");
        let f = fs::File::open(tmp.path().join(STDOUT)).unwrap();
        assert_eq!(read_from(&f, 6).unwrap(), Some((6, b"world".to_vec())));
        assert_eq!(read_from(&f, 11).unwrap(), None);
        assert_eq!(read_from(&f, 40).unwrap(), None);
    }
}
