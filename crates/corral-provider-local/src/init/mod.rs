//! The sandbox init: one long-lived process per sandbox, which holds the sandbox's
//! namespaces, cgroup, uid and seccomp filter, and starts each command with one fork.
//!
//! # Processes
//!
//! ```text
//! server ── keeper (the init program, exec'd; in the sandbox's cgroup, host pid namespace)
//!             ├─ network helper → pasta (guarded networking only; host network namespace)
//!             └─ init (pid 1 of the sandbox's pid namespace; the sandbox's uid; seccomp)
//!                  └─ command leader (pid 1 of the command's pid namespace)
//!                       └─ /bin/sh -c <command> (pid 2; a session of its own)
//! ```
//!
//! The provider runs the init program (its own executable with [`INIT_ARG`], or
//! `LocalConfig::init`) with a clean environment and one end of a socket pair as descriptor
//! 0, moves it into the sandbox's cgroup, and sends it the [`proto::Setup`]. The keeper
//! (that process) closes every other inherited descriptor, leaves the server's session,
//! makes the sandbox's user namespace (server as root: with the sandbox's range of host
//! ids, through a short-lived helper that becomes the sandbox's uid first, so that the
//! sandbox's uid owns it), unshares the mount, pid, ipc, uts and network namespaces, and
//! forks the init, which is pid 1 of the new pid namespace. The keeper then waits for the
//! init and exits with it; it holds no channel and no privilege the init needs.
//!
//! The init builds the root ([`setup`]), sets the rlimits, becomes the sandbox's uid and
//! enters the sandbox's user namespace and a new mount namespace owned by it (which locks
//! every mount the root holds: a command, root inside, can neither unmount a mask nor make
//! a read-only directory writable), turns off its own dumpability, loads the seccomp filter
//! (after which it cannot create a user namespace either), answers `Ready` and serves
//! ([`serve`]). Its parent-death signal is the keeper's end, so killing the keeper ends
//! the sandbox's processes too.
//!
//! Before it leaves the host's mount namespace, the keeper binds the init's control socket
//! ([`proto::Setup::control`], in the sandbox's host directory, mode 0600) and hands it to
//! the init: a server process that did not start the init (a restarted one, or another one
//! sharing the root) connects there. The init serves every channel and ends once no
//! channel is left and no durable command runs: a server that dies (or drops its provider)
//! leaves the sandbox's durable commands running, and the next server finds them through
//! the socket.
//!
//! Nothing here starts a thread: the program is single-threaded from `execve` on, which is
//! what makes `fork`, `clone` and `unshare(CLONE_NEWUSER)` sound ([`sys::SingleThreaded`]).

mod procs;
pub(crate) mod proto;
pub(crate) mod pump;
mod serve;
mod setup;
mod userns;

use procs::{wait_for, write_id_maps};

use std::ffi::OsStr;
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use rustix::thread::UnshareFlags;

use crate::sys::{self, Forked, SingleThreaded};
use proto::{NetworkSetup, Reply, Request, Setup};

/// The argument that turns an executable that calls [`run_if_requested`] into the sandbox
/// init.
pub const INIT_ARG: &str = "__corral-sandbox-init";

/// If this process was started as a sandbox init (first argument [`INIT_ARG`]), runs it and
/// exits; otherwise returns at once. Call it first thing in `main` of every program that
/// builds a [`LocalProvider`](crate::LocalProvider) with the default
/// [`LocalConfig::init`](crate::LocalConfig::init), before any thread is started.
pub fn run_if_requested() {
    if std::env::args_os().nth(1).as_deref() == Some(OsStr::new(INIT_ARG)) {
        main()
    }
}

/// Runs the sandbox init (see the module docs) and exits; never returns. For a program of
/// its own, such as the crate's `corral-sandbox-init`.
pub fn main() -> ! {
    let code = match keeper() {
        Ok(code) => code,
        Err(message) => {
            // Before the channel is known, stderr is all there is (the provider gives null).
            let _ = writeln!(std::io::stderr(), "corral sandbox init: {message}");
            125
        }
    };
    sys::exit_now(code)
}

/// How long the keeper waits for the user-mode network to come up.
const NETWORK_PATIENCE: Duration = Duration::from_secs(10);

fn keeper() -> Result<i32, String> {
    let one = SingleThreaded::check().ok_or("the sandbox init must start single-threaded")?;
    let channel = sys::inherited(0).ok_or("no channel on descriptor 0")?;
    // Whatever else the server left open (a careless library's descriptors) stays out.
    sys::close_descriptors_from(3).map_err(|e| format!("cannot close descriptors: {e}"))?;
    match keep(&one, &channel) {
        Ok(code) => Ok(code),
        Err(message) => {
            let _ = proto::send(channel.as_fd(), &Reply::Failed { message }, &[]);
            Ok(125)
        }
    }
}

fn keep(one: &SingleThreaded, channel: &OwnedFd) -> Result<i32, String> {
    sys::sigpipe(true).map_err(|e| format!("SIGPIPE: {e}"))?;
    // Out of the server's session: its controlling terminal, if any, stays out of reach.
    rustix::process::setsid().map_err(|e| format!("setsid: {e}"))?;
    let deadline = Some(Instant::now() + Duration::from_secs(30));
    let (request, _) = proto::Reader::default()
        .recv::<Request>(channel.as_fd(), deadline, |_| 0)
        .map_err(|e| format!("no setup: {e}"))?;
    let Request::Setup(setup) = request else {
        return Err("the first request must be the setup".into());
    };
    // Bound while the keeper is still in the host's mount namespace (the init pivots the
    // namespace it shares with the keeper away from it).
    let listener = setup
        .control
        .as_deref()
        .map(listen)
        .transpose()
        .map_err(|e| format!("the control socket: {e}"))?;
    let as_root = rustix::process::geteuid().is_root();
    let guarded = match &setup.network {
        NetworkSetup::Guarded(net) => Some(net.as_ref()),
        _ => None,
    };
    // Made while the keeper is still in the host's network: the DNS relay's upstream side.
    let outside = guarded
        .map(|_| crate::dns::outside_socket())
        .transpose()
        .map_err(|e| format!("the DNS relay: {e}"))?;
    // Forked while the keeper is still in the host's namespaces: pasta runs there.
    let helper = guarded
        .map(|net| crate::network::Helper::fork(one, net))
        .transpose()?;
    let host_network = matches!(setup.network, NetworkSetup::Host);
    // The network first, and its guard routes (`ip` is a child: it must not become pid 1
    // of the sandbox's pid namespace, which is made after).
    let (namespaces, holder, pasta_uid) = match (as_root, setup.ids) {
        (true, Some(ids)) => {
            let ns = userns::make(one, ids, guarded.is_some())?;
            match &ns.net {
                Some(net) => rustix::thread::move_into_link_name_space(
                    net.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(|e| format!("cannot enter the sandbox's network: {e}"))?,
                None if host_network => {}
                None => {
                    sys::unshare(one, UnshareFlags::NEWNET).map_err(|e| format!("unshare: {e}"))?
                }
            }
            let holder = ns.holder;
            (Some(ns), holder, Some(ids.first))
        }
        (true, None) => return Err("a root server gives every sandbox ids of its own".into()),
        (false, _) => {
            let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
            let mut flags = UnshareFlags::NEWUSER;
            if !host_network {
                flags |= UnshareFlags::NEWNET;
            }
            sys::unshare(one, flags).map_err(|e| format!("unshare: {e}"))?;
            write_id_maps(
                "self",
                &format!("0 {} 1", uid.as_raw()),
                &format!("0 {} 1", gid.as_raw()),
                true,
            )?;
            (None, rustix::process::getpid(), None)
        }
    };
    let network_pid = match (helper, guarded) {
        (Some(helper), Some(net)) => {
            Some(helper.start(holder, pasta_uid, net, NETWORK_PATIENCE)?)
        }
        _ => None,
    };
    // From here on a failure must not leave pasta behind (nothing else would end it).
    let stop_network = |why: String| {
        if let Some(pid) = network_pid {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
            let _ = wait_for(pid);
        }
        why
    };
    let relay = match (outside, guarded) {
        (Some(outside), Some(net)) => Some(
            crate::dns::Relay::new(outside, net.dns_upstream)
                .map_err(|e| stop_network(format!("the DNS relay: {e}")))?,
        ),
        _ => None,
    };
    sys::unshare(
        one,
        UnshareFlags::NEWNS | UnshareFlags::NEWPID | UnshareFlags::NEWIPC | UnshareFlags::NEWUTS,
    )
    .map_err(|e| stop_network(format!("unshare: {e}")))?;
    let userns = namespaces
        .as_ref()
        .map(|ns| ns.fds())
        .transpose()
        .map_err(|e| stop_network(format!("dup: {e}")))?;
    // pasta has joined (it stays even once the helpers' /proc entries are gone): the
    // helpers may end, so a sandbox holds no process it does not need.
    drop(namespaces);
    // The keeper holds `go_w` until it exits: the init checks it once its parent-death
    // signal is armed, so a keeper that died before then is noticed too.
    let (go_r, go_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| stop_network(format!("pipe: {e}")))?;
    match sys::fork(one).map_err(|e| stop_network(format!("cannot fork the init: {e}")))? {
        Forked::Child => {
            drop(go_w);
            sandbox_init(one, channel, &go_r, &setup, userns.as_ref(), listener)
        }
        Forked::Parent(init) => {
            drop(go_r);
            drop(userns);
            // The init holds the control socket: it closes (and refuses connections) with it.
            drop(listener);
            let spawned = Reply::Spawned {
                pid: init.as_raw_nonzero().get(),
                network: network_pid.map(|p| p.as_raw_nonzero().get()),
            };
            let told = proto::send(channel.as_fd(), &spawned, &[]);
            // The init speaks for the sandbox from here on.
            let _ = rustix::io::write(&go_w, b"g");
            if told.is_err() {
                let _ = rustix::process::kill_process(init, Signal::KILL);
            }
            let code = match relay {
                Some(relay) => relay_until_exit(init, relay),
                None => wait_for(init),
            };
            if let Some(pid) = network_pid {
                let _ = rustix::process::kill_process(pid, Signal::KILL);
                let _ = wait_for(pid);
            }
            drop(go_w);
            Ok(code)
        }
    }
}

/// Binds and listens on the control socket at `path` (mode 0600: the server's user alone
/// may connect; the directories above are the server's, 0700). A socket left there by an
/// init that is gone is replaced: the provider starts an init only after finding nobody
/// listening.
fn listen(path: &std::path::Path) -> std::io::Result<OwnedFd> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let socket = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
        None,
    )?;
    let (address, _dir) = proto::socket_address(path)?;
    let umask = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = rustix::net::bind(&socket, &address);
    rustix::process::umask(umask);
    bound?;
    rustix::net::listen(&socket, 64)?;
    Ok(socket)
}

/// Relays the sandbox's DNS queries until child `init` exits; its exit code.
fn relay_until_exit(init: Pid, mut relay: crate::dns::Relay) -> i32 {
    let Ok(pidfd) = rustix::process::pidfd_open(init, rustix::process::PidfdFlags::empty()) else {
        return wait_for(init);
    };
    loop {
        let [inside, outside] = relay.sockets();
        let mut fds = [
            rustix::event::PollFd::new(&pidfd, rustix::event::PollFlags::IN),
            rustix::event::PollFd::new(inside, rustix::event::PollFlags::IN),
            rustix::event::PollFd::new(outside, rustix::event::PollFlags::IN),
        ];
        let timeout = rustix::event::Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        if rustix::event::poll(&mut fds, Some(&timeout)).is_err() {
            continue;
        }
        if !fds[0].revents().is_empty() {
            return wait_for(init);
        }
        relay.pump();
    }
}

/// The init: pid 1 of the sandbox. Never returns.
fn sandbox_init(
    one: &SingleThreaded,
    channel: &OwnedFd,
    go: &OwnedFd,
    setup: &Setup,
    userns: Option<&(OwnedFd, OwnedFd)>,
    listener: Option<OwnedFd>,
) -> ! {
    let ready = (|| {
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
            .map_err(|e| format!("prctl: {e}"))?;
        let mut byte = [0u8];
        if rustix::io::read(go, &mut byte).unwrap_or(0) != 1 {
            return Err("the keeper ended".to_owned());
        }
        setup::build_root(setup, userns.map(|(outer, _)| outer))?;
        limits(setup)?;
        become_sandbox(one, setup, userns.map(|(_, inner)| inner))?;
        // A change of credentials clears the parent-death signal: armed again, then the
        // keeper checked once more (it holds the other end of `go` until it exits).
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
            .map_err(|e| format!("prctl: {e}"))?;
        let mut hung_up = [rustix::event::PollFd::new(go, rustix::event::PollFlags::IN)];
        if rustix::event::poll(&mut hung_up, Some(&rustix::event::Timespec::default())).unwrap_or(0)
            > 0
        {
            return Err("the keeper ended".to_owned());
        }
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
            .map_err(|e| format!("prctl: {e}"))?;
        if let Some(program) = &setup.seccomp {
            crate::seccomp::load(program)?;
        }
        // The sandbox's root as the init sees it, for the provider's file calls (an image's
        // layers are mounted in this mount namespace only).
        rustix::fs::open(
            "/",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| format!("cannot open the root: {e}"))
    })();
    let sent = match &ready {
        Ok(root) => proto::send(channel.as_fd(), &Reply::Ready, &[root.as_fd()]),
        Err(message) => proto::send(
            channel.as_fd(),
            &Reply::Failed {
                message: message.clone(),
            },
            &[],
        ),
    };
    let served = ready.is_ok();
    drop(ready);
    if let (Ok(()), true) = (&sent, served) {
        // The channel is the keeper's descriptor 0, borrowed here; the init's loop owns a
        // copy of its own, which it closes when the provider is done with it.
        match rustix::io::fcntl_dupfd_cloexec(channel, 3) {
            Ok(first) => {
                let params = serve::Params {
                    env: &setup.env,
                    file_size: setup.limits.file_size,
                    instance: &setup.instance,
                };
                serve::serve(one, first, listener, &params);
            }
            Err(_) => sys::exit_now(125),
        }
    }
    sys::exit_now(if served { 0 } else { 125 })
}

/// The rlimits every process of the sandbox inherits (CPU time and file size are set per
/// command, by its leader: the init itself writes durable commands' output files).
fn limits(setup: &Setup) -> Result<(), String> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let l = &setup.limits;
    for (resource, value) in [
        (Resource::Nproc, l.processes),
        (Resource::As, l.address_space),
    ] {
        setrlimit(
            resource,
            Rlimit {
                current: Some(value),
                maximum: Some(value),
            },
        )
        .map_err(|e| format!("setrlimit {resource:?}: {e}"))?;
    }
    Ok(())
}

/// Becomes root of the sandbox's user namespace, on the sandbox's host uid, in a new mount
/// namespace owned by it (which locks the mounts the root holds).
fn become_sandbox(
    one: &SingleThreaded,
    setup: &Setup,
    userns: Option<&OwnedFd>,
) -> Result<(), String> {
    match (userns, setup.ids) {
        (Some(inner), Some(ids)) => {
            let u = rustix::process::Uid::from_raw(ids.first);
            let g = rustix::process::Gid::from_raw(ids.first);
            rustix::thread::set_thread_groups(&[]).map_err(|e| format!("setgroups: {e}"))?;
            rustix::thread::set_thread_res_gid(g, g, g).map_err(|e| format!("setresgid: {e}"))?;
            rustix::thread::set_thread_res_uid(u, u, u).map_err(|e| format!("setresuid: {e}"))?;
            rustix::thread::move_into_link_name_space(
                inner.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::User),
            )
            .map_err(|e| format!("cannot enter the sandbox's user namespace: {e}"))?;
            sys::unshare(one, UnshareFlags::NEWNS).map_err(|e| format!("unshare: {e}"))?;
        }
        _ => {
            sys::unshare(one, UnshareFlags::NEWUSER | UnshareFlags::NEWNS)
                .map_err(|e| format!("unshare: {e}"))?;
            write_id_maps("self", "0 0 1", "0 0 1", true)?;
        }
    }
    Ok(())
}
