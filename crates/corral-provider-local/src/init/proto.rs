//! What the provider and a sandbox's init say to each other.
//!
//! The channel is one end of a Unix stream socket pair: the provider keeps the other end,
//! and nothing else ever holds it (both ends are close-on-exec; the init gets its end as
//! descriptor 0). Each message is a frame: a little-endian `u32` length, then that many bytes
//! of JSON. Descriptors travel with `SCM_RIGHTS` beside the frame that names them; a frame
//! that carries descriptors says how many, and the receiver takes that many from the queue
//! of descriptors received so far (frames and descriptors arrive in the order they were
//! sent, so the queue keeps them matched).
//!
//! The provider speaks first ([`Request::Setup`], read by the keeper), then one request at
//! a time, each answered before the next is sent. A command's exit is not a reply: the
//! init writes it to the command's own status pipe, or for a durable command to its exit
//! file ([`Exit`]), so commands end in any order and whoever holds the pipe, or reads the
//! file, learns it.
//!
//! Other channels reach a running init through its control socket ([`Setup::control`], a
//! Unix socket in the sandbox's host directory, bound by the keeper before it leaves the
//! host's mount namespace): a server process that did not start the init (a restarted
//! server, or another one sharing the root) connects and speaks first with
//! [`Request::Hello`]; the same requests follow. The init serves every channel, and ends
//! once no channel is left and no durable command runs.

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::Instant;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};

/// Largest frame either side accepts (a command is at most 64 KiB; its environment is bounded
/// by the request body the server accepts).
pub(crate) const MAX_FRAME: usize = 8 << 20;
/// Most descriptors one frame carries.
const MAX_FDS: usize = 8;

/// From the provider to the keeper or the init.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub(crate) enum Request {
    /// First frame: how to build the sandbox's namespaces (read by the keeper).
    Setup(Box<Setup>),
    /// First frame on a channel opened through the control socket: answered with
    /// [`Reply::Hello`].
    Hello,
    /// Start a command. Carries its stdout, stderr and status pipes' write ends, then its
    /// stdin's read end when `stdin` (otherwise the command reads `/dev/null`); a durable
    /// command's descriptors are files instead (see [`Start::durable`]).
    Start(Start),
    /// Send `signal` to command `job`: `SIGKILL` ends its whole process tree at once; any
    /// other signal goes to the command's process group.
    Signal {
        /// The command.
        job: u64,
        /// The signal number.
        signal: i32,
    },
    /// Whether durable command `job` is still running (answered with [`Reply::Job`]).
    Query {
        /// The command.
        job: u64,
    },
    /// Let go of durable command `job`'s stdin (the init's holder of its FIFO), so the
    /// command reads end-of-file once no writer is left.
    CloseStdin {
        /// The command.
        job: u64,
    },
    /// This channel is done (its provider is dropped): answered with [`Reply::Released`],
    /// then closed by the init, which ends too unless it stays for another channel or a
    /// durable command.
    Release,
}

/// From the keeper or the init to the provider.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "camelCase")]
pub(crate) enum Reply {
    /// The keeper forked the init: its pid (host numbering, as the keeper sees it) and the
    /// network helper's, if any.
    Spawned {
        /// The init's pid.
        pid: i32,
        /// The user-mode network's pid (`pasta`), when the sandbox has one.
        network: Option<i32>,
    },
    /// The sandbox is set up; requests may follow. Carries one descriptor: the sandbox's
    /// root as the init sees it (`O_PATH`).
    Ready,
    /// Setting up failed; the process ends.
    Failed {
        /// Why.
        message: String,
    },
    /// Command `job` runs.
    Started {
        /// The command.
        job: u64,
    },
    /// Command `job` could not be started.
    Refused {
        /// The command.
        job: u64,
        /// Why.
        message: String,
    },
    /// The signal was sent (`false`: the command had already ended).
    Signalled {
        /// The command.
        job: u64,
        /// Whether it was still running.
        delivered: bool,
    },
    /// The answer to [`Request::Hello`]. Carries one descriptor: the sandbox's root as the
    /// init sees it (`O_PATH`), as [`Reply::Ready`] does.
    Hello {
        /// Which init this is ([`Setup::instance`]).
        instance: String,
    },
    /// Whether durable command `job` still runs: `false` once its exit is written (or when
    /// this init never started it).
    Job {
        /// The command.
        job: u64,
        /// Whether it still runs.
        running: bool,
    },
    /// Durable command `job`'s stdin holder is gone (or never was).
    StdinClosed {
        /// The command.
        job: u64,
    },
    /// The channel is released; `stays`: the init goes on (another channel, or a durable
    /// command, holds it), else it ends now.
    Released {
        /// Whether the init goes on.
        stays: bool,
    },
}

/// How a command ended, written by the init to its status pipe once every process of the
/// command is gone.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Exit {
    /// The command's shell exited with this code (`128 + n` when signal `n` killed it).
    Code(i32),
    /// The command's process tree was killed by this signal as a whole (a `Signal` request
    /// with `SIGKILL`, or the OOM killer picking its leader).
    Killed(i32),
}

/// One command.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Start {
    /// Chosen by the provider, unique per init (random, or derived from the command id: the
    /// init refuses a number it already runs, so a durable command never starts twice).
    pub(crate) job: u64,
    /// Run as `/bin/sh -c <command>`.
    pub(crate) command: String,
    /// Absolute, inside the sandbox.
    pub(crate) cwd: String,
    /// Added to the sandbox's base environment (and overriding it).
    pub(crate) env: Vec<(String, String)>,
    /// Whether a stdin pipe comes with the request.
    pub(crate) stdin: bool,
    /// `RLIMIT_CPU` of each process of the command, in seconds.
    pub(crate) cpu_seconds: u64,
    /// `RLIMIT_FSIZE` of each process of the command, in bytes (set by the init from its
    /// setup; what the provider sends is ignored).
    #[serde(default)]
    pub(crate) file_size: u64,
    /// A durable command: the descriptors are the files its stdout and stderr are appended
    /// to and the file its exit is written to (opened by the provider in the sandbox's host
    /// directory), then, with `stdin`, its stdin FIFO's read end and a write end the init
    /// holds until [`Request::CloseStdin`]. The init copies the command's output from pipes
    /// into the files itself, and writes the exit only once both are complete.
    #[serde(default)]
    pub(crate) durable: bool,
    /// A durable command is killed (its whole tree) this long after it started, if it
    /// still runs: a backstop behind the service's own deadline.
    #[serde(default)]
    pub(crate) kill_after_ms: Option<u64>,
}

impl Start {
    /// How many descriptors the request carries.
    pub(crate) fn descriptors(&self) -> usize {
        if self.durable {
            3 + 2 * usize::from(self.stdin)
        } else {
            3 + usize::from(self.stdin)
        }
    }
}

/// The sandbox's range of host ids: inner id `n` is host id `first + n`, for `n < count`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct IdRange {
    /// Host uid (and gid) of the sandbox's root.
    pub(crate) first: u32,
    /// How many ids.
    pub(crate) count: u32,
}

/// An image: its read-only root filesystem under the sandbox's own writable layer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ImageLayers {
    /// The image's root filesystem (shared, read-only).
    pub(crate) lower: PathBuf,
    /// Where the init mounts its (id-mapped) view of `lower`: an empty directory of the
    /// sandbox's host directory, out of the sandbox's reach.
    pub(crate) lower_view: PathBuf,
    /// The sandbox's writable layer and overlayfs' work directory, on its own filesystem.
    pub(crate) upper: PathBuf,
    /// overlayfs' work directory (same filesystem as `upper`).
    pub(crate) work: PathBuf,
    /// Where the merged root is mounted (an empty directory of the sandbox's host directory).
    pub(crate) merged: PathBuf,
}

/// A host directory shown read-only inside (host mode): `/<name>` is `source`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SystemDir {
    /// Top-level name inside the sandbox (`usr`, `bin`, …).
    pub(crate) name: String,
    /// The host directory (symlinks resolved: `/bin` → `/usr/bin`).
    pub(crate) source: PathBuf,
}

/// The sandbox's network.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "camelCase")]
pub(crate) enum NetworkSetup {
    /// A network namespace of its own with only a down loopback.
    None,
    /// The host's network namespace (`LocalConfig::allow_network`).
    Host,
    /// A network namespace of its own, connected to the outside by a user-mode stack.
    Guarded(Box<GuardedNetwork>),
}

/// The user-mode network of one sandbox (see `network`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GuardedNetwork {
    /// `pasta`'s path and its arguments up to the namespace options, which the keeper adds.
    pub(crate) pasta: Vec<String>,
    /// The interface pasta makes in the namespace.
    pub(crate) interface: String,
    /// iproute2's `ip`.
    pub(crate) ip: PathBuf,
    /// `ip -batch` lines run in the namespace once the interface is up (the guard routes).
    pub(crate) routes: Vec<String>,
    /// The resolver the keeper relays the sandbox's DNS queries to (from the host).
    pub(crate) dns_upstream: std::net::SocketAddr,
}

/// Per-process limits set in the init (inherited by every command).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProcessLimits {
    /// `RLIMIT_NPROC`.
    pub(crate) processes: u64,
    /// `RLIMIT_AS`.
    pub(crate) address_space: u64,
    /// `RLIMIT_FSIZE`.
    pub(crate) file_size: u64,
}

/// How to build one sandbox's namespaces.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Setup {
    /// The sandbox's own files (host mode: its root; image mode: holds `upper` and `work`).
    pub(crate) fs_root: PathBuf,
    /// Image mode; `None`: host mode (the sandbox's root with the host's system directories).
    pub(crate) image: Option<ImageLayers>,
    /// Host mode: the host directories shown read-only.
    pub(crate) system_dirs: Vec<SystemDir>,
    /// Host mode: paths under `/etc` to mask (empty directory or empty file).
    pub(crate) masks: Vec<PathBuf>,
    /// The sandbox's host ids (server as root); `None`: the server's own uid, mapped to root
    /// in a user namespace.
    pub(crate) ids: Option<IdRange>,
    /// The network.
    pub(crate) network: NetworkSetup,
    /// A file shown as `/etc/resolv.conf` (the guarded network's resolver).
    pub(crate) resolv_conf: Option<PathBuf>,
    /// Per-process limits.
    pub(crate) limits: ProcessLimits,
    /// The seccomp filter (classic BPF, 8 bytes per instruction), loaded last.
    pub(crate) seccomp: Option<Vec<u8>>,
    /// The hostname inside.
    pub(crate) hostname: String,
    /// Every command's base environment.
    pub(crate) env: Vec<(String, String)>,
    /// Names this init among all the sandbox's inits, ever (a fresh ULID): a durable command
    /// records the instance that runs it, so a later reader can tell its init is gone.
    pub(crate) instance: String,
    /// Where the keeper binds the init's control socket (mode 0600, in the sandbox's host
    /// directory); `None`: no socket (no other channel can reach the init).
    pub(crate) control: Option<PathBuf>,
}

/// The address of the Unix socket at `path`, with the directory descriptor it goes
/// through when `path` is too long for a socket address (`/proc/self/fd/<dir>/<name>`;
/// keep the descriptor open while the address is used).
pub(crate) fn socket_address(
    path: &std::path::Path,
) -> std::io::Result<(rustix::net::SocketAddrUnix, Option<OwnedFd>)> {
    // sun_path holds 108 bytes with the terminating NUL.
    if path.as_os_str().len() < 100 {
        return Ok((rustix::net::SocketAddrUnix::new(path)?, None));
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other("a socket path without a file name"));
    };
    let dir = rustix::fs::open(
        dir,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let short = std::path::Path::new("/proc/self/fd")
        .join(std::os::fd::AsRawFd::as_raw_fd(&dir).to_string())
        .join(name);
    Ok((rustix::net::SocketAddrUnix::new(&short)?, Some(dir)))
}

/// Why a frame could not be read or written.
#[derive(Debug)]
pub(crate) enum ChannelError {
    /// The other side has gone (end of stream, or a broken pipe).
    Closed,
    /// Nothing came before the deadline.
    TimedOut,
    /// Anything else.
    Other(String),
}

impl std::fmt::Display for ChannelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Closed => f.write_str("the channel is closed"),
            Self::TimedOut => f.write_str("no answer in time"),
            Self::Other(e) => f.write_str(e),
        }
    }
}

fn other(e: impl std::fmt::Display) -> ChannelError {
    ChannelError::Other(e.to_string())
}

/// Writes one frame (and `fds` with it). Blocks until it is all written.
pub(crate) fn send<T: Serialize>(
    channel: BorrowedFd<'_>,
    message: &T,
    fds: &[BorrowedFd<'_>],
) -> Result<(), ChannelError> {
    let body = serde_json::to_vec(message).map_err(other)?;
    let len = u32::try_from(body.len()).map_err(other)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty()
        && (fds.len() > MAX_FDS || !control.push(SendAncillaryMessage::ScmRights(fds)))
    {
        return Err(other("too many descriptors for one frame"));
    }
    let mut sent = 0;
    while sent < frame.len() {
        let result = if sent == 0 {
            rustix::net::sendmsg(
                channel,
                &[IoSlice::new(&frame)],
                &mut control,
                SendFlags::NOSIGNAL,
            )
        } else {
            rustix::net::send(channel, &frame[sent..], SendFlags::NOSIGNAL)
        };
        match result {
            Ok(n) => sent += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::PIPE | rustix::io::Errno::CONNRESET) => {
                return Err(ChannelError::Closed);
            }
            Err(e) => return Err(other(e)),
        }
    }
    Ok(())
}

/// Reads frames from one end of a channel, keeping what arrives ahead of the frame asked
/// for (bytes and descriptors).
#[derive(Debug, Default)]
pub(crate) struct Reader {
    buf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
}

impl Reader {
    /// Whether a whole frame is already buffered (a `poll` on the channel would not say so).
    pub(crate) fn has_frame(&self) -> bool {
        self.buf.len() >= 4
            && usize::try_from(u32::from_le_bytes([
                self.buf[0],
                self.buf[1],
                self.buf[2],
                self.buf[3],
            ]))
            .is_ok_and(|len| self.buf.len() >= 4 + len)
    }

    /// The next frame, with the `fds` descriptors it carries (`fds` is read from the frame
    /// by `count`). Waits until `deadline` (`None`: for ever).
    pub(crate) fn recv<T: for<'de> Deserialize<'de>>(
        &mut self,
        channel: BorrowedFd<'_>,
        deadline: Option<Instant>,
        count: impl Fn(&T) -> usize,
    ) -> Result<(T, Vec<OwnedFd>), ChannelError> {
        loop {
            if self.buf.len() >= 4 {
                let len = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
                let len = usize::try_from(len).map_err(other)?;
                if len > MAX_FRAME {
                    return Err(other(format!("a frame of {len} bytes")));
                }
                if self.buf.len() >= 4 + len {
                    let message: T =
                        serde_json::from_slice(&self.buf[4..4 + len]).map_err(other)?;
                    self.buf.drain(..4 + len);
                    let wanted = count(&message);
                    if self.fds.len() < wanted {
                        return Err(other(format!(
                            "a frame names {wanted} descriptors but {} came",
                            self.fds.len()
                        )));
                    }
                    let fds = self.fds.drain(..wanted).collect();
                    return Ok((message, fds));
                }
            }
            self.fill(channel, deadline)?;
        }
    }

    /// Reads what is there (waiting for something until `deadline`).
    fn fill(
        &mut self,
        channel: BorrowedFd<'_>,
        deadline: Option<Instant>,
    ) -> Result<(), ChannelError> {
        if let Some(deadline) = deadline {
            wait_readable(channel, deadline)?;
        }
        let mut chunk = vec![0u8; 64 * 1024];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = loop {
            match rustix::net::recvmsg(
                channel,
                &mut [IoSliceMut::new(&mut chunk)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Ok(got) => break got,
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::CONNRESET) => return Err(ChannelError::Closed),
                Err(e) => return Err(other(e)),
            }
        };
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                self.fds.extend(fds);
            }
        }
        if got.bytes == 0 {
            return Err(ChannelError::Closed);
        }
        self.buf.extend_from_slice(&chunk[..got.bytes]);
        Ok(())
    }
}

/// Waits until `fd` is readable (or hung up), at most until `deadline`.
pub(crate) fn wait_readable(fd: impl AsFd, deadline: Instant) -> Result<(), ChannelError> {
    wait_ready(fd, rustix::event::PollFlags::IN, deadline)
}

/// Waits until `fd` is writable (or its reader is gone), at most until `deadline`.
pub(crate) fn wait_writable(fd: impl AsFd, deadline: Instant) -> Result<(), ChannelError> {
    wait_ready(fd, rustix::event::PollFlags::OUT, deadline)
}

fn wait_ready(
    fd: impl AsFd,
    flags: rustix::event::PollFlags,
    deadline: Instant,
) -> Result<(), ChannelError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ChannelError::TimedOut);
        }
        let timeout = rustix::event::Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [rustix::event::PollFd::new(&fd, flags)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => {}
            Ok(_) => return Ok(()),
            Err(e) => return Err(other(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (OwnedFd, OwnedFd) {
        rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap()
    }

    #[test]
    fn frames_and_their_descriptors_arrive_in_order_however_they_are_read() {
        let (a, b) = pair();
        let (r1, w1) = rustix::pipe::pipe().unwrap();
        let (r2, w2) = rustix::pipe::pipe().unwrap();
        send(a.as_fd(), &Reply::Ready, &[]).unwrap();
        send(a.as_fd(), &Reply::Started { job: 1 }, &[w1.as_fd()]).unwrap();
        send(a.as_fd(), &Reply::Started { job: 2 }, &[w2.as_fd()]).unwrap();
        drop((w1, w2));
        let mut reader = Reader::default();
        let count = |r: &Reply| usize::from(matches!(r, Reply::Started { .. }));
        let (first, fds) = reader.recv(b.as_fd(), None, count).unwrap();
        assert_eq!((first, fds.len()), (Reply::Ready, 0));
        for (job, read_end) in [(1, &r1), (2, &r2)] {
            let (reply, mut fds) = reader.recv(b.as_fd(), None, count).unwrap();
            assert_eq!(reply, Reply::Started { job });
            let w = fds.pop().unwrap();
            rustix::io::write(&w, &[job as u8]).unwrap();
            let mut byte = [0u8];
            rustix::io::read(read_end, &mut byte).unwrap();
            assert_eq!(byte[0], job as u8);
        }
        drop(a);
        assert!(matches!(
            reader.recv::<Reply>(b.as_fd(), None, count),
            Err(ChannelError::Closed)
        ));
    }

    #[test]
    fn a_socket_path_too_long_for_an_address_is_reached_through_its_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d".repeat(60)).join("e".repeat(60));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("init.sock");
        assert!(path.as_os_str().len() > 108);
        let listener = rustix::net::socket(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            None,
        )
        .unwrap();
        let (address, _dir) = socket_address(&path).unwrap();
        rustix::net::bind(&listener, &address).unwrap();
        rustix::net::listen(&listener, 1).unwrap();
        assert!(path.exists(), "bound where the path says");
        let client = rustix::net::socket(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            None,
        )
        .unwrap();
        let (address, _dir) = socket_address(&path).unwrap();
        rustix::net::connect(&client, &address).unwrap();
    }

    #[test]
    fn a_frame_larger_than_the_socket_buffer_arrives_whole() {
        let (a, b) = pair();
        let command = "x".repeat(3 << 20);
        let start = Start {
            job: 7,
            command: command.clone(),
            cwd: "/".into(),
            env: vec![],
            stdin: false,
            cpu_seconds: 1,
            file_size: 0,
            durable: false,
            kill_after_ms: None,
        };
        let writer = std::thread::spawn(move || send(a.as_fd(), &Request::Start(start), &[]));
        let mut reader = Reader::default();
        let (got, _) = reader.recv::<Request>(b.as_fd(), None, |_| 0).unwrap();
        writer.join().unwrap().unwrap();
        match got {
            Request::Start(s) => assert_eq!(s.command, command),
            other => panic!("{other:?}"),
        }
    }
}
