//! Running one command through a sandbox's init and collecting what it leaves: its output
//! (each stream capped, and read to its end so the command never blocks on a full pipe) and
//! its exit, within its deadline.
//!
//! The provider makes three pipes, hands their write ends to the init with the request, and
//! reads the other ends on one thread, with `poll`: stdout, stderr, and the status pipe on
//! which the init writes the exit once every process of the command is gone. At the
//! deadline, or when the caller goes away (the cancel pipe hangs up), it asks the init to
//! kill the command's whole process tree and waits for that exit.

use std::collections::BTreeMap;
use std::os::fd::{AsFd as _, OwnedFd};
use std::time::{Duration, Instant};

use corral_provider::{CappedOutput, ExecOutput};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::Signal;

use crate::init::proto::{Exit, Start};
use crate::inits::{Init, RequestError};

/// How long a killed command may take to be gone before the init is given up on.
const KILL_PATIENCE: Duration = Duration::from_secs(10);

/// What to run.
#[derive(Debug)]
pub(crate) struct Run<'a> {
    pub(crate) command: &'a str,
    pub(crate) cwd: &'a str,
    pub(crate) env: &'a BTreeMap<String, String>,
    pub(crate) timeout: Duration,
    pub(crate) max_output_bytes: usize,
    pub(crate) cpu_seconds: u64,
}

/// How a run ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The command finished (exit code, or `128 + n` for death by signal `n`).
    Finished(ExecOutput),
    /// The deadline passed; the whole tree was killed.
    TimedOut,
    /// The caller went away; the whole tree was killed.
    Cancelled,
}

/// Why a run did not happen or did not finish.
#[derive(Debug)]
pub(crate) enum RunError {
    /// The init is gone, or this provider's channel to it: the command was not started
    /// (or died with the init), and may be retried. `stop`: the init stopped answering.
    InitGone {
        /// Why.
        why: String,
        /// Whether the init must be stopped (it no longer answers).
        stop: bool,
    },
    /// Anything else.
    Failed(String),
}

fn pipe() -> Result<(OwnedFd, OwnedFd), RunError> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| RunError::Failed(format!("cannot make a pipe: {e}")))
}

/// One stream being read.
struct Stream {
    fd: Option<OwnedFd>,
    out: CappedOutput,
    /// The status pipe's first bytes (up to its first line).
    line: Vec<u8>,
}

impl Stream {
    fn new(fd: OwnedFd, cap: usize) -> Self {
        let _ = rustix::fs::fcntl_setfl(&fd, rustix::fs::OFlags::NONBLOCK);
        Self {
            fd: Some(fd),
            out: CappedOutput::new(cap),
            line: Vec::new(),
        }
    }

    /// Reads what is there; closes the stream at its end.
    fn read(&mut self, buf: &mut [u8]) {
        let Some(fd) = &self.fd else {
            return;
        };
        loop {
            match rustix::io::read(fd, &mut *buf) {
                Ok(0) => {
                    self.fd = None;
                    return;
                }
                Ok(n) => {
                    self.out.push(&buf[..n]);
                    if self.line.len() < 256 {
                        self.line.extend_from_slice(&buf[..n.min(256)]);
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return,
                Err(_) => {
                    self.fd = None;
                    return;
                }
            }
        }
    }
}

/// Runs `run` in `init` and waits for it, its deadline, or `cancel` becoming readable or
/// hung up (the caller dropped its end).
pub(crate) fn run(
    init: &Init,
    run: &Run<'_>,
    cancel: Option<&OwnedFd>,
) -> Result<Outcome, RunError> {
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    let start = Start {
        job: Init::new_job(),
        command: run.command.to_owned(),
        cwd: run.cwd.to_owned(),
        env: run
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        stdin: false,
        cpu_seconds: run.cpu_seconds,
        file_size: 0,
        durable: false,
        kill_after_ms: None,
    };
    init.start_job(&start, &[out_w.as_fd(), err_w.as_fd(), status_w.as_fd()])
        .map_err(|e| match e {
            // Nothing of an exec outlives its init: one that did not answer ran nothing that
            // still runs, and is retried on a new init like one that never got the request.
            RequestError::Gone(why) => RunError::InitGone { why, stop: false },
            RequestError::Unanswered(why) => RunError::InitGone { why, stop: true },
            RequestError::Refused(why) => RunError::Failed(why),
        })?;
    // Only the init's copies (and the command's) remain: each stream ends with the command.
    drop((out_w, err_w, status_w));
    let cap = run.max_output_bytes;
    let mut streams = [
        Stream::new(out_r, cap),
        Stream::new(err_r, cap),
        Stream::new(status_r, 64),
    ];
    let mut deadline = Instant::now() + run.timeout;
    let mut ending: Option<Outcome> = None;
    let mut cancel = cancel;
    let mut buf = vec![0u8; 64 * 1024];
    while streams.iter().any(|s| s.fd.is_some()) {
        // The first line on the status pipe is the exit: no need to wait for the pipe's end
        // (the init closes it only once it has reaped the command's leader).
        if streams[2].fd.is_some() && streams[2].line.contains(&b'\n') {
            streams[2].fd = None;
            continue;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            if ending.is_some() {
                // Killed, yet not gone: the init no longer works.
                return Err(RunError::Failed(
                    "the command did not end after it was killed".into(),
                ));
            }
            ending = Some(Outcome::TimedOut);
            kill(init, start.job);
            deadline = Instant::now() + KILL_PATIENCE;
            continue;
        }
        let timeout = Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(4);
        let mut which = Vec::with_capacity(4);
        for (i, s) in streams.iter().enumerate() {
            if let Some(fd) = &s.fd {
                fds.push(PollFd::new(fd, PollFlags::IN));
                which.push(Some(i));
            }
        }
        if let Some(c) = cancel {
            fds.push(PollFd::new(c, PollFlags::IN));
            which.push(None);
        }
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(RunError::Failed(format!(
                    "cannot wait for the command: {e}"
                )));
            }
        }
        let ready: Vec<Option<usize>> = fds
            .iter()
            .zip(&which)
            .filter(|(fd, _)| !fd.revents().is_empty())
            .map(|(_, w)| *w)
            .collect();
        drop(fds);
        for w in ready {
            match w {
                Some(i) => streams[i].read(&mut buf),
                None => {
                    cancel = None;
                    if ending.is_none() {
                        ending = Some(Outcome::Cancelled);
                        kill(init, start.job);
                        deadline = Instant::now() + KILL_PATIENCE;
                    }
                }
            }
        }
    }
    if let Some(ending) = ending {
        return Ok(ending);
    }
    let [out, err, status] = streams;
    let (stdout, out_cut) = out.out.finish();
    let (stderr, err_cut) = err.out.finish();
    let line = status
        .line
        .split(|b| *b == b'\n')
        .next()
        .unwrap_or_default();
    let exit_code = match serde_json::from_slice::<Exit>(line) {
        Ok(Exit::Code(code)) => code,
        Ok(Exit::Killed(signal)) => 128 + signal,
        Err(_) if !init.is_alive() => {
            return Err(RunError::Failed(
                "the sandbox's init ended while the command ran".into(),
            ));
        }
        Err(_) => {
            return Err(RunError::Failed(
                "the command's exit was not reported".into(),
            ));
        }
    };
    Ok(Outcome::Finished(ExecOutput {
        stdout,
        stderr,
        exit_code,
        truncated: out_cut || err_cut,
    }))
}

/// Asks the init to kill command `job` (its whole process tree). An init that no longer
/// answers is killed itself, which ends the command too.
fn kill(init: &Init, job: u64) {
    if init.signal(job, Signal::KILL).is_err() {
        init.stop();
    }
}
