//! The provider's side of the sandbox inits: starting one per sandbox on first use (or
//! finding the one already running, through its control socket: started by an earlier run of
//! the server, or by another server sharing the root), talking to it, noticing when it has
//! died (and starting another), letting go of it when the provider is dropped, stopping it
//! with its sandbox.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rustix::process::{Pid, PidfdFlags, Signal};

use crate::init::proto::{self, ChannelError, Reply, Request, Setup, Start};

/// The program run as a sandbox's init: `path` with `args` (see [`crate::init`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProgram {
    /// The executable.
    pub path: PathBuf,
    /// Its arguments (for a program that dispatches on its first one, [`crate::INIT_ARG`]).
    pub args: Vec<OsString>,
}

impl InitProgram {
    /// The running executable, with [`crate::INIT_ARG`]: for programs that call
    /// [`crate::run_init_if_requested`] first thing in `main`.
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(Self {
            path: std::env::current_exe()?,
            args: vec![crate::INIT_ARG.into()],
        })
    }

    /// The default: `corral-sandbox-init` beside the running executable (or in its parent
    /// directory, where cargo puts the programs of the test binaries in `deps/`), else
    /// [`InitProgram::current_exe`].
    pub fn beside_current_exe() -> std::io::Result<Self> {
        let exe = std::env::current_exe()?;
        let dedicated = exe
            .ancestors()
            .skip(1)
            .take(2)
            .map(|dir| dir.join(DEDICATED))
            .find(|p| p.is_file());
        match dedicated {
            Some(path) => Ok(Self::dedicated(path)),
            None => Self::current_exe(),
        }
    }

    /// A program that is the init and nothing else (such as `corral-sandbox-init`).
    pub fn dedicated(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            args: Vec::new(),
        }
    }
}

/// The name of the crate's own init program.
const DEDICATED: &str = "corral-sandbox-init";

/// How long an init may take to set a sandbox up, and a request to be answered.
const PATIENCE: Duration = Duration::from_secs(30);
/// How long a stopped init's processes may take to be gone.
const STOP_PATIENCE: Duration = Duration::from_secs(10);

/// A request could not be made.
#[derive(Debug)]
pub(crate) enum RequestError {
    /// The init is gone: the request could not be sent, so nothing was started.
    Gone(String),
    /// The request was sent but not answered (the init ended, or stopped answering): what
    /// it did is not known.
    Unanswered(String),
    /// The init refused.
    Refused(String),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gone(why) | Self::Unanswered(why) | Self::Refused(why) => f.write_str(why),
        }
    }
}

/// One running init.
pub(crate) struct Init {
    /// The keeper, when this provider started the init.
    keeper: Mutex<Option<std::process::Child>>,
    channel: Mutex<(OwnedFd, proto::Reader)>,
    /// Readable once the sandbox's init is gone: a pidfd of the init (started here) or of
    /// its keeper (found through its control socket; the two end together).
    pidfd: OwnedFd,
    /// `pasta`, when the sandbox has a guarded network and this provider started it.
    network: Option<OwnedFd>,
    /// The sandbox's root as the init sees it.
    root: OwnedFd,
    /// Which init this is (`Setup::instance`).
    instance: String,
    /// Let go of ([`Init::release`]): dropping it leaves the init alone.
    released: AtomicBool,
}

impl std::fmt::Debug for Init {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Init")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Init {
    /// Runs `program`, moves it into `cgroup` before it does anything, sends it `setup`
    /// and waits until the sandbox is ready.
    pub(crate) fn start(
        program: &InitProgram,
        setup: &Setup,
        cgroup: Option<&crate::cgroup::Group>,
    ) -> Result<Self, String> {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| format!("cannot make the init's channel: {e}"))?;
        let mut keeper = std::process::Command::new(&program.path)
            .args(&program.args)
            .env_clear()
            .current_dir("/")
            .stdin(std::process::Stdio::from(theirs))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run the sandbox init {}: {e}",
                    program.path.display()
                )
            })?;
        let fail = |keeper: &mut std::process::Child, why: String| {
            let _ = keeper.kill();
            let _ = keeper.wait();
            why
        };
        if let Some(group) = cgroup
            && let Err(e) = group.join(keeper.id())
        {
            return Err(fail(
                &mut keeper,
                format!("cannot apply the sandbox's limits: {e}"),
            ));
        }
        let deadline = Some(Instant::now() + PATIENCE);
        let mut reader = proto::Reader::default();
        let answer = proto::send(ours.as_fd(), &Request::Setup(Box::new(setup.clone())), &[])
            .and_then(|()| reader.recv::<Reply>(ours.as_fd(), deadline, |_| 0));
        let (pid, network) = match answer {
            Ok((Reply::Spawned { pid, network }, _)) => (pid, network),
            Ok((Reply::Failed { message }, _)) => return Err(fail(&mut keeper, message)),
            Ok((other, _)) => {
                return Err(fail(&mut keeper, format!("the init answered {other:?}")));
            }
            Err(ChannelError::Closed) => {
                return Err(fail(
                    &mut keeper,
                    format!(
                        "{} ended without answering (is it the sandbox init?)",
                        program.path.display()
                    ),
                ));
            }
            Err(e) => return Err(fail(&mut keeper, format!("the init did not start: {e}"))),
        };
        // The keeper has not reaped either child yet, so these pids are still theirs.
        let open = |raw: i32| {
            Pid::from_raw(raw)
                .ok_or_else(|| format!("pid {raw}"))
                .and_then(|p| {
                    rustix::process::pidfd_open(p, PidfdFlags::empty()).map_err(|e| e.to_string())
                })
        };
        let pidfd =
            open(pid).map_err(|e| fail(&mut keeper, format!("cannot watch the init: {e}")))?;
        let network = match network.map(open).transpose() {
            Ok(fd) => fd,
            Err(e) => return Err(fail(&mut keeper, format!("cannot watch the network: {e}"))),
        };
        let ready = |r: &Reply| usize::from(matches!(r, Reply::Ready));
        let root = match reader.recv::<Reply>(ours.as_fd(), deadline, ready) {
            Ok((Reply::Ready, mut fds)) => match fds.pop() {
                Some(root) => root,
                None => return Err(fail(&mut keeper, "the init sent no root".into())),
            },
            Ok((Reply::Failed { message }, _)) => return Err(fail(&mut keeper, message)),
            Ok((other, _)) => {
                return Err(fail(&mut keeper, format!("the init answered {other:?}")));
            }
            Err(e) => {
                return Err(fail(
                    &mut keeper,
                    format!("the sandbox was not set up: {e}"),
                ));
            }
        };
        Ok(Self {
            keeper: Mutex::new(Some(keeper)),
            channel: Mutex::new((ours, reader)),
            pidfd,
            network,
            root,
            instance: setup.instance.clone(),
            released: AtomicBool::new(false),
        })
    }

    /// The init listening on its control socket `control`, if one is: `None` when nobody
    /// listens there (no socket, or one left by an init that is gone) or the listener does
    /// not answer as an init.
    pub(crate) fn connect(control: &Path) -> Option<Self> {
        let socket = rustix::net::socket_with(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .ok()?;
        let (address, _dir) = proto::socket_address(control).ok()?;
        rustix::net::connect(&socket, &address).ok()?;
        // The process that listens is the init's keeper (it bound the socket before forking
        // the init, which inherited it): its pidfd says when the init is gone.
        let (keeper, _) = crate::sys::peer_credentials(socket.as_fd()).ok()?;
        let keeper = Pid::from_raw(keeper)?;
        let pidfd = rustix::process::pidfd_open(keeper, PidfdFlags::empty()).ok()?;
        let mut reader = proto::Reader::default();
        let hello = |r: &Reply| usize::from(matches!(r, Reply::Hello { .. }));
        proto::send(socket.as_fd(), &Request::Hello, &[]).ok()?;
        let (reply, mut fds) = reader
            .recv::<Reply>(socket.as_fd(), Some(Instant::now() + PATIENCE), hello)
            .ok()?;
        let (Reply::Hello { instance }, Some(root)) = (reply, fds.pop()) else {
            return None;
        };
        Some(Self {
            keeper: Mutex::new(None),
            channel: Mutex::new((socket, reader)),
            pidfd,
            network: None,
            root,
            instance,
            released: AtomicBool::new(false),
        })
    }

    /// Which init this is.
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// Whether the init still runs.
    pub(crate) fn is_alive(&self) -> bool {
        let mut fds = [rustix::event::PollFd::new(
            &self.pidfd,
            rustix::event::PollFlags::IN,
        )];
        matches!(
            rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())),
            Ok(0)
        )
    }

    /// A fresh job number for an `exec` command (random: several providers may share the
    /// init, and the init refuses a number it already runs).
    pub(crate) fn new_job() -> u64 {
        // The low 64 bits of a ULID are random.
        let bits = ulid::Ulid::generate().0.to_le_bytes();
        let mut low = [0u8; 8];
        low.copy_from_slice(&bits[..8]);
        u64::from_le_bytes(low)
    }

    fn request(&self, request: &Request, fds: &[BorrowedFd<'_>]) -> Result<Reply, RequestError> {
        let mut channel = lock(&self.channel);
        let (fd, reader) = &mut *channel;
        proto::send(fd.as_fd(), request, fds).map_err(|e| RequestError::Gone(e.to_string()))?;
        reader
            .recv::<Reply>(fd.as_fd(), Some(Instant::now() + PATIENCE), |_| 0)
            .map(|(reply, _)| reply)
            .map_err(|e| RequestError::Unanswered(e.to_string()))
    }

    /// Starts command `start` with its descriptors (see [`Start`]).
    pub(crate) fn start_job(
        &self,
        start: &Start,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), RequestError> {
        match self.request(&Request::Start(start.clone()), fds)? {
            Reply::Started { job } if job == start.job => Ok(()),
            Reply::Refused { message, .. } => Err(RequestError::Refused(message)),
            other => Err(RequestError::Unanswered(format!(
                "the init answered {other:?}"
            ))),
        }
    }

    /// Whether durable command `job` still runs in this init (`false`: its exit is written,
    /// or this init never ran it).
    pub(crate) fn is_running(&self, job: u64) -> Result<bool, RequestError> {
        match self.request(&Request::Query { job }, &[])? {
            Reply::Job { running, .. } => Ok(running),
            other => Err(RequestError::Unanswered(format!(
                "the init answered {other:?}"
            ))),
        }
    }

    /// Lets go of durable command `job`'s stdin.
    pub(crate) fn close_stdin(&self, job: u64) -> Result<(), RequestError> {
        match self.request(&Request::CloseStdin { job }, &[])? {
            Reply::StdinClosed { .. } => Ok(()),
            other => Err(RequestError::Unanswered(format!(
                "the init answered {other:?}"
            ))),
        }
    }

    /// Lets go of the init: it goes on if a durable command or another server still holds
    /// it (`true`), else it ends, and this returns once it is gone (`false`).
    pub(crate) fn release(&self) -> bool {
        self.released.store(true, Ordering::SeqCst);
        match self.request(&Request::Release, &[]) {
            Ok(Reply::Released { stays: true }) => true,
            Ok(Reply::Released { stays: false }) => {
                if proto::wait_readable(&self.pidfd, Instant::now() + STOP_PATIENCE).is_err() {
                    self.stop();
                }
                if let Some(keeper) = lock(&self.keeper).as_mut() {
                    let _ = keeper.wait();
                }
                false
            }
            _ => {
                self.stop();
                false
            }
        }
    }

    /// Sends `signal` to command `job`; whether it was still running.
    pub(crate) fn signal(&self, job: u64, signal: Signal) -> Result<bool, RequestError> {
        let request = Request::Signal {
            job,
            signal: signal.as_raw(),
        };
        match self.request(&request, &[])? {
            Reply::Signalled { delivered, .. } => Ok(delivered),
            other => Err(RequestError::Gone(format!("the init answered {other:?}"))),
        }
    }

    /// The sandbox's root as its commands see it (the init sent it when it was ready), for
    /// file calls on a sandbox whose root exists only in the init's mount namespace (an
    /// image's layers).
    pub(crate) fn root(&self) -> std::io::Result<OwnedFd> {
        if !self.is_alive() {
            return Err(std::io::Error::other("the sandbox's init has ended"));
        }
        Ok(rustix::io::fcntl_dupfd_cloexec(&self.root, 0)?)
    }

    /// Kills the keeper (and with it the init and every process of the sandbox's pid
    /// namespace) and the network, and waits until the init is gone. (An init found through
    /// its socket: its network, if any, goes with the sandbox's cgroup or ids when the
    /// sandbox is deleted.)
    pub(crate) fn stop(&self) {
        let mut keeper = lock(&self.keeper);
        match keeper.as_mut() {
            Some(keeper) => {
                let _ = keeper.kill();
                let _ = keeper.wait();
            }
            None => {
                let _ = rustix::process::pidfd_send_signal(&self.pidfd, Signal::KILL);
            }
        }
        if let Some(network) = &self.network {
            let _ = rustix::process::pidfd_send_signal(network, Signal::KILL);
        }
        let _ = proto::wait_readable(&self.pidfd, Instant::now() + STOP_PATIENCE);
    }
}

impl Drop for Init {
    fn drop(&mut self) {
        if !self.released.load(Ordering::SeqCst) {
            self.stop();
        }
    }
}

/// Whether an init listens on the control socket `control` (a connection is made, and
/// closed at once: the init takes it for a channel that ended).
pub(crate) fn is_listening(control: &Path) -> bool {
    let Ok(socket) = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    ) else {
        return false;
    };
    proto::socket_address(control)
        .is_ok_and(|(address, _dir)| rustix::net::connect(&socket, &address).is_ok())
}

/// One sandbox's init, if it has one (locked while one starts).
type Slot = Arc<Mutex<Option<Arc<Init>>>>;

/// The inits of every sandbox this provider has used.
#[derive(Default)]
pub(crate) struct Inits {
    slots: Mutex<HashMap<String, Slot>>,
}

impl Inits {
    /// The running init of sandbox `id`, started with `start` if there is none (or it died).
    /// Two callers at once start one.
    pub(crate) fn get(
        &self,
        id: &str,
        start: impl FnOnce() -> Result<Init, String>,
    ) -> Result<Arc<Init>, String> {
        let slot = lock(&self.slots).entry(id.to_owned()).or_default().clone();
        let mut current = lock(&slot);
        if let Some(init) = current.as_ref()
            && init.is_alive()
        {
            return Ok(init.clone());
        }
        if let Some(dead) = current.take() {
            dead.stop();
        }
        let init = Arc::new(start()?);
        *current = Some(init.clone());
        Ok(init)
    }

    /// The running init of sandbox `id` if it has one: this provider's, or the one `find`
    /// finds (through its control socket), which becomes this provider's. Never starts one.
    pub(crate) fn existing(
        &self,
        id: &str,
        find: impl FnOnce() -> Option<Init>,
    ) -> Option<Arc<Init>> {
        let slot = lock(&self.slots).entry(id.to_owned()).or_default().clone();
        let mut current = lock(&slot);
        if let Some(init) = current.as_ref()
            && init.is_alive()
        {
            return Some(init.clone());
        }
        if let Some(dead) = current.take() {
            dead.stop();
        }
        let init = Arc::new(find()?);
        *current = Some(init.clone());
        Some(init)
    }

    /// Forgets `init` as sandbox `id`'s: the next use finds it again through its socket,
    /// or starts another. `stop`: it stopped answering, and is stopped; otherwise only this
    /// provider's channel to it is gone (it may serve others, and run durable commands),
    /// and it is stopped only if it has died.
    pub(crate) fn discard(&self, id: &str, init: &Arc<Init>, stop: bool) {
        if let Some(slot) = lock(&self.slots).get(id).cloned() {
            let mut current = lock(&slot);
            if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, init)) {
                current.take();
            }
        }
        if stop || !init.is_alive() {
            init.stop();
        } else {
            init.released.store(true, Ordering::SeqCst);
        }
    }

    /// Stops sandbox `id`'s init, if it runs, and waits until it is gone.
    pub(crate) fn stop(&self, id: &str) {
        let slot = lock(&self.slots).remove(id);
        if let Some(slot) = slot
            && let Some(init) = lock(&slot).take()
        {
            init.stop();
        }
    }

    /// Lets go of every init ([`Init::release`]): those that stay (a durable command, or
    /// another server, holds them) go on; the others end.
    pub(crate) fn release_all(&self) {
        let slots: Vec<_> = lock(&self.slots).drain().map(|(_, s)| s).collect();
        for slot in slots {
            if let Some(init) = lock(&slot).take() {
                init.release();
            }
        }
    }
}
