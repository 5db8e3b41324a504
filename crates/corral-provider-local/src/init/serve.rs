//! The init's loop: requests from the provider's channels, one fork per command, and the
//! output of durable commands copied into their files.
//!
//! A command is a child of the init in a pid namespace and a mount namespace of its own
//! (one `clone`): its leader, pid 1 there, mounts that namespace's `/proc`, forks the
//! command's shell (`/bin/sh -c`, pid 2, leading a session of its own) and waits for it.
//! When the shell exits, the leader reports its status and exits, and the kernel kills
//! whatever else the command left running in its namespace: no process of a command
//! outlives it, and one `SIGKILL` to the leader ends the whole tree. The init learns of the
//! leader's end through a pidfd, reaps it (every process of the command is gone by then)
//! and writes the exit to the command's status pipe too (the only report of a killed one).
//!
//! The next command's leader is made ahead of time (a spare, with its namespaces and
//! `/proc` ready, waiting on a socket of its own): a command is handed to it, and the next
//! spare is made after the answer, while the command runs.
//!
//! # Channels
//!
//! The first channel is the socket pair of the provider that started the init; others are
//! accepted on the control socket (a restarted server, or another one sharing the root),
//! each from the same user as the first (checked with `SO_PEERCRED`). Requests are
//! answered on the channel they came on. A command run by `exec` belongs to its channel
//! (the provider reads its pipes): it is killed when that channel goes. The init ends when
//! no channel is left and no durable command runs; until then it waits for a channel.
//!
//! # Durable commands
//!
//! A durable command's stdout and stderr are pipes the init reads, copying each into the
//! file the provider opened for it ([`super::pump`]); its exit goes to its exit file, written
//! once the leader is reaped and both streams have ended (so a reader that sees the exit
//! has all the output). With stdin, the command reads a FIFO of the sandbox's host
//! directory, and the init holds a write end of it until told to let go (the provider's
//! writers come and go; the command sees end-of-file only after that). A backstop deadline,
//! if given, kills the command's tree.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions};

use super::proto::{self, Exit, Reply, Request, Start};
use super::pump::Pump;
use crate::sys::{self, Forked, SingleThreaded};

/// How long the rest of a frame may take once its first bytes came (a stalled writer must
/// not stop the init serving its other channels and commands for long).
const FRAME_PATIENCE: Duration = Duration::from_secs(10);
/// How long a durable command's streams are still copied after its leader was reaped,
/// waiting for their end: a process of another command of the sandbox may have been handed
/// a copy of the pipe, and must not hold the exit back for ever.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// What every command of this init shares.
pub(super) struct Params<'a> {
    /// The base environment.
    pub(super) env: &'a [(String, String)],
    /// `RLIMIT_FSIZE` of every command's processes.
    pub(super) file_size: u64,
    /// Which init this is.
    pub(super) instance: &'a str,
}

/// One channel to a provider.
struct Channel {
    fd: OwnedFd,
    reader: proto::Reader,
    /// Names the channel for the commands it owns.
    token: u64,
}

/// One running command.
struct Job {
    id: u64,
    /// The leader and a pidfd of it, until it is reaped.
    leader: Option<(Pid, OwnedFd)>,
    /// Where the exit is written: the status pipe (exec) or the exit file (durable).
    report: OwnedFd,
    /// An `exec` command's channel (it is killed when that channel goes); `None`: durable.
    owner: Option<u64>,
    durable: Option<Durable>,
}

/// What a durable command has beyond an `exec` one.
struct Durable {
    /// stdout, stderr.
    pumps: [Pump; 2],
    /// A write end of the stdin FIFO, held until `CloseStdin`.
    holder: Option<OwnedFd>,
    /// The backstop deadline.
    kill_at: Option<Instant>,
    /// The leader's exit, once reaped, and when.
    ended: Option<(Exit, Instant)>,
}

/// A leader made ahead of time, waiting for its command on `ctl`.
struct Spare {
    leader: Pid,
    pidfd: OwnedFd,
    ctl: OwnedFd,
}

/// What woke the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woke {
    Channel(u64),
    Listener,
    Leader(u64),
    Pump(u64, usize),
}

/// Serves until no channel is left and no durable command runs (the init then exits,
/// which kills what is left of its `exec` commands).
pub(super) fn serve(
    one: &SingleThreaded,
    first: OwnedFd,
    listener: Option<OwnedFd>,
    params: &Params<'_>,
) {
    // The user the first channel's peer (the server that started the init) is, as this
    // init's user namespace sees it; only that user's connections are served.
    let server = sys::peer_credentials(first.as_fd())
        .ok()
        .map(|(_, uid)| uid);
    let mut channels = vec![Channel {
        fd: first,
        reader: proto::Reader::default(),
        token: 0,
    }];
    let mut next_token = 1u64;
    let mut jobs: Vec<Job> = Vec::new();
    let mut spare = make_spare(one, params.env).ok();
    let mut buf = vec![0u8; 64 * 1024];
    // Set while accepting fails (no descriptor left, say): the listener is left alone for a
    // while instead of waking the loop at once, again and again.
    let mut listener_rests_until: Option<Instant> = None;
    loop {
        if channels.is_empty() && !jobs.iter().any(|j| j.durable.is_some()) {
            return;
        }
        let now = Instant::now();
        if listener_rests_until.is_some_and(|until| now >= until) {
            listener_rests_until = None;
        }
        let wake = jobs
            .iter()
            .filter_map(|j| j.durable.as_ref())
            .filter_map(|d| match d.ended {
                Some((_, at)) => Some(at + DRAIN_GRACE),
                None => d.kill_at,
            })
            .chain(listener_rests_until)
            .min();
        let mut woke = Vec::new();
        {
            let mut fds = Vec::new();
            let mut what = Vec::new();
            for c in &channels {
                fds.push(PollFd::new(&c.fd, PollFlags::IN));
                what.push(Woke::Channel(c.token));
            }
            if let Some(l) = listener.as_ref().filter(|_| listener_rests_until.is_none()) {
                fds.push(PollFd::new(l, PollFlags::IN));
                what.push(Woke::Listener);
            }
            for j in &jobs {
                if let Some((_, pidfd)) = &j.leader {
                    fds.push(PollFd::new(pidfd, PollFlags::IN));
                    what.push(Woke::Leader(j.id));
                }
                for (i, pump) in j.durable.iter().flat_map(|d| d.pumps.iter().enumerate()) {
                    if let Some(pipe) = pump.pipe() {
                        fds.push(PollFd::new(pipe, PollFlags::IN));
                        what.push(Woke::Pump(j.id, i));
                    }
                }
            }
            let timeout = wake.map(|at| {
                let left = at.saturating_duration_since(now);
                rustix::event::Timespec {
                    tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                    tv_nsec: i64::from(left.subsec_nanos()),
                }
            });
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
            for (fd, w) in fds.iter().zip(what) {
                if !fd.revents().is_empty() {
                    woke.push(w);
                }
            }
        }
        // Output first (what a command wrote before it ended is copied before its end is
        // noted), then leaders: reaped before requests are read, so a signal never reaches
        // a reused pid.
        for w in &woke {
            if let Woke::Pump(id, i) = *w
                && let Some(d) = jobs
                    .iter_mut()
                    .find(|j| j.id == id)
                    .and_then(|j| j.durable.as_mut())
            {
                d.pumps[i].drain(&mut buf);
            }
        }
        for w in &woke {
            if let Woke::Leader(id) = *w {
                reap(&mut jobs, id);
            }
        }
        settle(&mut jobs, Instant::now());
        if woke.contains(&Woke::Listener)
            && let Some(l) = &listener
            && !accept(l, server, &mut channels, &mut next_token)
        {
            listener_rests_until = Some(Instant::now() + Duration::from_secs(1));
        }
        for w in &woke {
            if let Woke::Channel(token) = *w {
                let others = channels.len().saturating_sub(1);
                let Some(at) = channels.iter().position(|c| c.token == token) else {
                    continue;
                };
                let keep = answer(
                    one,
                    &mut channels[at],
                    others,
                    &mut jobs,
                    &mut spare,
                    params,
                );
                if !keep {
                    let gone = channels.swap_remove(at);
                    // Its `exec` commands have nobody to read them any more.
                    for j in jobs.iter().filter(|j| j.owner == Some(gone.token)) {
                        if let Some((_, pidfd)) = &j.leader {
                            let _ = rustix::process::pidfd_send_signal(pidfd, Signal::KILL);
                        }
                    }
                }
                // The next command's leader, made while this one runs.
                if spare.is_none() {
                    spare = make_spare(one, params.env).ok();
                }
            }
        }
    }
}

/// Accepts every connection waiting on the control socket from the server's user; `false`
/// when accepting failed otherwise than for want of a connection.
fn accept(
    listener: &OwnedFd,
    server: Option<u32>,
    channels: &mut Vec<Channel>,
    next_token: &mut u64,
) -> bool {
    loop {
        let fd = match rustix::net::accept_with(listener, rustix::net::SocketFlags::CLOEXEC) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => return true,
            Err(_) => return false,
        };
        let peer = sys::peer_credentials(fd.as_fd()).ok().map(|(_, uid)| uid);
        if server.is_none() || peer != server {
            continue;
        }
        channels.push(Channel {
            fd,
            reader: proto::Reader::default(),
            token: *next_token,
        });
        *next_token += 1;
    }
}

/// Reads and answers the requests waiting on `channel`; `false` when the channel is done
/// (closed, broken, or released).
fn answer(
    one: &SingleThreaded,
    channel: &mut Channel,
    others: usize,
    jobs: &mut Vec<Job>,
    spare: &mut Option<Spare>,
    params: &Params<'_>,
) -> bool {
    loop {
        let count = |r: &Request| match r {
            Request::Start(s) => s.descriptors(),
            _ => 0,
        };
        let deadline = Some(Instant::now() + FRAME_PATIENCE);
        // A malformed frame, too: the channel cannot be trusted to be in step any more.
        let Ok((request, fds)) = channel.reader.recv(channel.fd.as_fd(), deadline, count) else {
            return false;
        };
        let mut keep = true;
        let mut root = None;
        let reply = match request {
            Request::Hello => {
                root = rustix::fs::open(
                    "/",
                    rustix::fs::OFlags::PATH
                        | rustix::fs::OFlags::DIRECTORY
                        | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .ok();
                Reply::Hello {
                    instance: params.instance.to_owned(),
                }
            }
            Request::Start(mut start) => {
                start.file_size = params.file_size;
                let owner = (!start.durable).then_some(channel.token);
                if jobs.iter().any(|j| j.id == start.job) {
                    Reply::Refused {
                        job: start.job,
                        message: format!("command {} already runs", start.job),
                    }
                } else {
                    match start_job(one, &start, fds, params.env, spare.take(), owner) {
                        Ok(job) => {
                            jobs.push(job);
                            Reply::Started { job: start.job }
                        }
                        Err(message) => Reply::Refused {
                            job: start.job,
                            message,
                        },
                    }
                }
            }
            Request::Signal { job, signal } => {
                let delivered = jobs
                    .iter()
                    .find(|j| j.id == job)
                    .is_some_and(|j| signal_job(j, signal));
                Reply::Signalled { job, delivered }
            }
            Request::Query { job } => Reply::Job {
                job,
                running: jobs.iter().any(|j| j.id == job),
            },
            Request::CloseStdin { job } => {
                if let Some(d) = jobs
                    .iter_mut()
                    .find(|j| j.id == job)
                    .and_then(|j| j.durable.as_mut())
                {
                    d.holder = None;
                }
                Reply::StdinClosed { job }
            }
            Request::Release => {
                keep = false;
                Reply::Released {
                    stays: others > 0 || jobs.iter().any(|j| j.durable.is_some()),
                }
            }
            Request::Setup(_) => Reply::Failed {
                message: "already set up".into(),
            },
        };
        let fds: Vec<BorrowedFd<'_>> = root.iter().map(AsFd::as_fd).collect();
        if proto::send(channel.fd.as_fd(), &reply, &fds).is_err() || !keep {
            return false;
        }
        if !channel.reader.has_frame() {
            return true;
        }
    }
}

/// Reaps command `id`'s leader: an `exec` command's exit is reported at once; a durable
/// one's once its output is complete ([`settle`]).
fn reap(jobs: &mut Vec<Job>, id: u64) {
    let Some(at) = jobs.iter().position(|j| j.id == id) else {
        return;
    };
    let Some((leader, _)) = jobs[at].leader.take() else {
        return;
    };
    let status = loop {
        match rustix::process::waitpid(Some(leader), WaitOptions::empty()) {
            Ok(Some((_, status))) => break Some(status),
            Ok(None) => break None,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break None,
        }
    };
    let exit = match status {
        Some(s) if s.exited() => Exit::Code(s.exit_status().unwrap_or(255)),
        Some(s) => Exit::Killed(s.terminating_signal().unwrap_or(9)),
        None => Exit::Killed(9),
    };
    match &mut jobs[at].durable {
        Some(d) => d.ended = Some((exit, Instant::now())),
        None => {
            let job = jobs.swap_remove(at);
            report(job.report.as_fd(), exit);
        }
    }
}

/// Durable commands: the backstop deadline, and the exit of those that are over (reaped,
/// and their streams ended or given up on).
fn settle(jobs: &mut Vec<Job>, now: Instant) {
    for j in jobs.iter_mut() {
        if let (Some(d), Some((_, pidfd))) = (&mut j.durable, &j.leader)
            && d.kill_at.is_some_and(|at| now >= at)
        {
            d.kill_at = None;
            let _ = rustix::process::pidfd_send_signal(pidfd, Signal::KILL);
        }
    }
    jobs.retain_mut(|j| {
        let Some(d) = &mut j.durable else {
            return true;
        };
        let Some((exit, at)) = d.ended else {
            return true;
        };
        if d.pumps.iter().all(Pump::done) || now >= at + DRAIN_GRACE {
            for p in &mut d.pumps {
                p.close();
            }
            report(j.report.as_fd(), exit);
            return false;
        }
        true
    });
}

/// Writes `exit` as one line on a status pipe, or into an exit file. A small write to a
/// pipe is atomic; a reader that went away is no concern here. The leader reports a
/// command that exited; the init reports again when it has reaped the leader (the only
/// report of a killed one): the provider takes the first line. A durable command's leader
/// has no status pipe: the init's report is its only one.
fn report(status: BorrowedFd<'_>, exit: Exit) {
    if let Ok(mut line) = serde_json::to_vec(&exit) {
        line.push(b'\n');
        let _ = rustix::io::write(status, &line);
    }
}

/// `SIGKILL`: the leader (and with it the command's whole pid namespace). Anything else:
/// the command's process group (its shell and what it started in the foreground).
fn signal_job(job: &Job, signal: i32) -> bool {
    let Some((leader, pidfd)) = &job.leader else {
        return false;
    };
    let Some(sig) = Signal::from_named_raw(signal) else {
        return false;
    };
    if sig == Signal::KILL {
        return rustix::process::pidfd_send_signal(pidfd, sig).is_ok();
    }
    // The shell is the leader's only child at first; its pid in our namespace is listed
    // by the kernel in the leader's `children`.
    let children = std::fs::read_to_string(format!(
        "/proc/{pid}/task/{pid}/children",
        pid = leader.as_raw_nonzero()
    ))
    .unwrap_or_default();
    let Some(shell) = children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<i32>().ok())
        .and_then(Pid::from_raw)
    else {
        return false;
    };
    rustix::process::kill_process_group(shell, sig).is_ok()
}

/// What a command's shell is started with, allocated before any fork.
struct Prepared {
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
}

fn prepare(start: &Start, base_env: &[(String, String)]) -> Result<Prepared, String> {
    let cstr = |s: &str| {
        CString::new(s).map_err(|_| "a NUL byte in the command, cwd or environment".to_owned())
    };
    let argv = vec![cstr("sh")?, cstr("-c")?, cstr(&start.command)?];
    let mut merged: Vec<(&str, &str)> = Vec::new();
    for (k, v) in base_env.iter().chain(start.env.iter()) {
        merged.retain(|(name, _)| *name != k.as_str());
        merged.push((k, v));
    }
    let envp = merged
        .iter()
        .map(|(k, v)| cstr(&format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Prepared {
        argv,
        envp,
        cwd: cstr(&start.cwd)?,
    })
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("cannot make a pipe: {e}"))
}

/// Starts a command with the descriptors that came with it: an `exec` command's pipes go
/// to its leader as they are; a durable command's leader gets pipes of the init's, which
/// are copied into its files.
fn start_job(
    one: &SingleThreaded,
    start: &Start,
    fds: Vec<OwnedFd>,
    base_env: &[(String, String)],
    spare: Option<Spare>,
    owner: Option<u64>,
) -> Result<Job, String> {
    let mut fds = fds.into_iter();
    let (Some(stdout), Some(stderr), Some(status)) = (fds.next(), fds.next(), fds.next()) else {
        return Err("a command needs its stdout, stderr and status descriptors".into());
    };
    let stdin = fds.next();
    if !start.durable {
        let io = [
            Some(stdout.as_fd()),
            Some(stderr.as_fd()),
            Some(status.as_fd()),
        ];
        let leader = launch(
            one,
            start,
            io,
            stdin.as_ref().map(AsFd::as_fd),
            base_env,
            spare,
        )?;
        return Ok(Job {
            id: start.job,
            leader: Some(leader),
            report: status,
            owner,
            durable: None,
        });
    }
    let holder = fds.next();
    if start.stdin && holder.is_none() {
        return Err("a durable command with stdin needs its FIFO and a holder".into());
    }
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    // The leader's own report goes nowhere: the init reports once the output is complete.
    let null = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| format!("cannot open /dev/null: {e}"))?;
    let io = [Some(out_w.as_fd()), Some(err_w.as_fd()), Some(null.as_fd())];
    let leader = launch(
        one,
        start,
        io,
        stdin.as_ref().map(AsFd::as_fd),
        base_env,
        spare,
    )?;
    // Only the command holds the write ends now: each stream ends with it.
    drop((out_w, err_w));
    let started = Instant::now();
    Ok(Job {
        id: start.job,
        leader: Some(leader),
        report: status,
        owner: None,
        durable: Some(Durable {
            pumps: [Pump::new(out_r, stdout), Pump::new(err_r, stderr)],
            holder,
            kill_at: start
                .kill_after_ms
                .map(|ms| started + Duration::from_millis(ms)),
            ended: None,
        }),
    })
}

/// Starts a command's leader with stdout, stderr, status (`io`) and stdin: handed to
/// `spare` if there is one, else forked now. Its pid and a pidfd of it.
fn launch(
    one: &SingleThreaded,
    start: &Start,
    io: [Option<BorrowedFd<'_>>; 3],
    stdin: Option<BorrowedFd<'_>>,
    base_env: &[(String, String)],
    spare: Option<Spare>,
) -> Result<(Pid, OwnedFd), String> {
    let [Some(stdout), Some(stderr), Some(status)] = io else {
        return Err("a command needs its stdout, stderr and status".into());
    };
    if let Some(spare) = spare {
        // The leader's view: three descriptors, and stdin when there is one.
        let handed_start = Start {
            durable: false,
            stdin: stdin.is_some(),
            ..start.clone()
        };
        let handed: Vec<BorrowedFd<'_>> =
            [stdout, stderr, status].into_iter().chain(stdin).collect();
        if proto::send(spare.ctl.as_fd(), &handed_start, &handed).is_ok() {
            return Ok((spare.leader, spare.pidfd));
        }
        // A spare that cannot take it is gone: reaped, and the command started directly.
        let _ = rustix::process::pidfd_send_signal(&spare.pidfd, Signal::KILL);
        let _ = rustix::process::waitpid(Some(spare.leader), WaitOptions::empty());
    }
    let prepared = prepare(start, base_env)?;
    match sys::fork_into_new_pid_and_mount_namespaces(one)
        .map_err(|e| format!("cannot start the command: {e}"))?
    {
        Forked::Child => {
            let io = Stdio {
                stdin,
                stdout,
                stderr,
                status,
            };
            mount_proc(&io);
            lead(one, &io, &Limits::of(start), &prepared)
        }
        Forked::Parent(leader) => {
            let pidfd = rustix::process::pidfd_open(leader, PidfdFlags::empty())
                .map_err(|e| format!("cannot watch the command: {e}"))?;
            Ok((leader, pidfd))
        }
    }
}

/// The per-command rlimits a leader sets before it forks the command's shell.
struct Limits {
    cpu_seconds: u64,
    /// `0`: none set here.
    file_size: u64,
}

impl Limits {
    fn of(start: &Start) -> Self {
        Self {
            cpu_seconds: start.cpu_seconds,
            file_size: start.file_size,
        }
    }
}

/// Forks the next command's leader ahead of time.
fn make_spare(one: &SingleThreaded, base_env: &[(String, String)]) -> Result<Spare, String> {
    let (ours, theirs) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| e.to_string())?;
    match sys::fork_into_new_pid_and_mount_namespaces(one).map_err(|e| e.to_string())? {
        Forked::Child => {
            drop(ours);
            spare_main(one, &theirs, base_env)
        }
        Forked::Parent(leader) => {
            drop(theirs);
            let pidfd = rustix::process::pidfd_open(leader, PidfdFlags::empty())
                .map_err(|e| e.to_string())?;
            Ok(Spare {
                leader,
                pidfd,
                ctl: ours,
            })
        }
    }
}

/// A spare leader: keeps nothing of the init's but its socket, mounts its namespace's
/// `/proc`, waits for its command, then leads it. Never returns.
fn spare_main(one: &SingleThreaded, ctl: &OwnedFd, base_env: &[(String, String)]) -> ! {
    // 0, 1 and 2 become /dev/null (0 was the init's channel), so the command's own
    // descriptors, when they come, are numbered above them; above 2 only `ctl` stays.
    let keep = u32::try_from(std::os::fd::AsRawFd::as_raw_fd(ctl)).unwrap_or(0);
    let closed = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDWR,
        rustix::fs::Mode::empty(),
    )
    .and_then(|null| {
        rustix::stdio::dup2_stdin(&null)?;
        rustix::stdio::dup2_stdout(&null)?;
        rustix::stdio::dup2_stderr(&null)
    })
    .map_err(std::io::Error::from)
    .and_then(|()| {
        if keep > 3 {
            sys::close_descriptors(3, keep - 1)?;
        }
        sys::close_descriptors(keep.max(2) + 1, u32::MAX)
    });
    let mounted = rustix::mount::mount(
        "proc",
        "/proc",
        "proc",
        rustix::mount::MountFlags::NOSUID
            | rustix::mount::MountFlags::NODEV
            | rustix::mount::MountFlags::NOEXEC,
        None,
    );
    // Ends quietly when the init is gone (end of its socket).
    let Ok((start, fds)) =
        proto::Reader::default().recv::<Start>(ctl.as_fd(), None, Start::descriptors)
    else {
        sys::exit_now(0)
    };
    let mut fds = fds.into_iter();
    let (Some(stdout), Some(stderr), Some(status)) = (fds.next(), fds.next(), fds.next()) else {
        sys::exit_now(125)
    };
    let stdin = fds.next();
    let io = Stdio {
        stdin: stdin.as_ref().map(AsFd::as_fd),
        stdout: stdout.as_fd(),
        stderr: stderr.as_fd(),
        status: status.as_fd(),
    };
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        let _ = rustix::io::write(io.stderr, format!("corral: {what}: {e}\n").as_bytes());
        report(io.status, Exit::Code(125));
        sys::exit_now(125)
    };
    if let Err(e) = closed {
        fail("cannot close descriptors", &e)
    }
    if let Err(e) = mounted {
        fail("cannot mount /proc", &e)
    }
    let prepared =
        prepare(&start, base_env).unwrap_or_else(|e| fail("cannot start the command", &e));
    lead(one, &io, &Limits::of(&start), &prepared)
}

/// Mounts the command namespace's own `/proc`, so the command's pids and `/proc` agree.
fn mount_proc(io: &Stdio<'_>) {
    if let Err(e) = rustix::mount::mount(
        "proc",
        "/proc",
        "proc",
        rustix::mount::MountFlags::NOSUID
            | rustix::mount::MountFlags::NODEV
            | rustix::mount::MountFlags::NOEXEC,
        None,
    ) {
        let _ = rustix::io::write(
            io.stderr,
            format!("corral: cannot mount /proc: {e}\n").as_bytes(),
        );
        report(io.status, Exit::Code(125));
        sys::exit_now(125)
    }
}

struct Stdio<'a> {
    stdin: Option<BorrowedFd<'a>>,
    stdout: BorrowedFd<'a>,
    stderr: BorrowedFd<'a>,
    /// The command's status pipe (close-on-exec: the shell never holds it).
    status: BorrowedFd<'a>,
}

/// pid 1 of the command's namespace: never returns.
fn lead(one: &SingleThreaded, io: &Stdio<'_>, limits: &Limits, prepared: &Prepared) -> ! {
    let Prepared { argv, envp, cwd } = prepared;
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        let _ = rustix::io::write(io.stderr, format!("corral: {what}: {e}\n").as_bytes());
        sys::exit_now(125)
    };
    // stdin, stdout and stderr become the command's; nothing else of the init's is kept
    // (its channel, other commands' pipes).
    let null;
    let stdin = match io.stdin {
        Some(fd) => fd,
        None => {
            null = rustix::fs::open(
                "/dev/null",
                rustix::fs::OFlags::RDONLY,
                rustix::fs::Mode::empty(),
            )
            .unwrap_or_else(|e| fail("cannot open /dev/null", &e));
            null.as_fd()
        }
    };
    if let Err(e) = rustix::stdio::dup2_stdin(stdin)
        .and_then(|()| rustix::stdio::dup2_stdout(io.stdout))
        .and_then(|()| rustix::stdio::dup2_stderr(io.stderr))
    {
        fail("cannot set up the command's output", &e)
    }
    // Everything above 2 but the status pipe goes.
    let status = std::os::fd::AsRawFd::as_raw_fd(&io.status);
    let keep = u32::try_from(status).unwrap_or(0);
    let closed = if keep > 3 {
        sys::close_descriptors(3, keep - 1)
            .and_then(|()| sys::close_descriptors(keep + 1, u32::MAX))
    } else {
        sys::close_descriptors(keep.max(2) + 1, u32::MAX)
    };
    if let Err(e) = closed {
        fail("cannot close descriptors", &e)
    }
    let limit = |value: u64| rustix::process::Rlimit {
        current: Some(value),
        maximum: Some(value),
    };
    if let Err(e) =
        rustix::process::setrlimit(rustix::process::Resource::Cpu, limit(limits.cpu_seconds))
    {
        fail("cannot limit CPU time", &e)
    }
    // Set here, not in the init: the init copies durable commands' output into files of
    // any length (it keeps their size on disk bounded itself).
    if limits.file_size > 0
        && let Err(e) =
            rustix::process::setrlimit(rustix::process::Resource::Fsize, limit(limits.file_size))
    {
        fail("cannot limit file sizes", &e)
    }
    let shell = match sys::fork(one) {
        Ok(Forked::Child) => {
            let stderr = rustix::stdio::stderr();
            if let Err(e) = rustix::process::setsid() {
                let _ = rustix::io::write(stderr, format!("corral: setsid: {e}\n").as_bytes());
                sys::exit_now(125)
            }
            if let Err(e) = rustix::process::chdir(cwd.as_c_str()) {
                let _ = rustix::io::write(
                    stderr,
                    format!("corral: cannot enter {}: {e}\n", cwd.to_string_lossy()).as_bytes(),
                );
                sys::exit_now(125)
            }
            let _ = sys::sigpipe(false);
            let e = sys::exec(c"/bin/sh", argv, envp);
            let _ = rustix::io::write(
                stderr,
                format!("corral: cannot run /bin/sh: {e}\n").as_bytes(),
            );
            sys::exit_now(127)
        }
        Ok(Forked::Parent(pid)) => pid,
        Err(e) => fail("cannot start the command's shell", &e),
    };
    // The command's stdio are its own from here: closed here, its output pipes end as soon
    // as the command and what it started are done.
    let _ = sys::close_descriptors(0, 2);
    // Reap everything reparented here until the shell itself is done; its status is the
    // command's (death by signal n as 128 + n, as a shell reports it).
    loop {
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((pid, waited))) if pid == shell => {
                let code = if let Some(code) = waited.exit_status() {
                    code
                } else {
                    128 + waited.terminating_signal().unwrap_or(0)
                };
                // Said at once: the provider need not wait for this namespace's teardown
                // (what the command left running dies as this process exits, and its
                // output pipes close then).
                report(io.status, Exit::Code(code));
                sys::exit_now(code)
            }
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => sys::exit_now(125),
        }
    }
}
