//! A root server's sandbox user namespaces, made by the keeper before the init exists.
//!
//! ```text
//! host (init user namespace)
//!  └─ outer: owned by the sandbox's first host uid, maps inner ids 0.. to its host ids
//!      │      (the image's files are id-mapped through it); owns the sandbox's network
//!      │      namespace (guarded networking)
//!      └─ inner: maps 0.. to the outer's 0..; the init and every command live here
//! ```
//!
//! The init, on the sandbox's first host uid, may enter the inner namespace (it owns the
//! outer one, the inner's parent), and is root there, with capabilities over the inner
//! namespace alone: over its own mount namespace (made after it enters, which locks every
//! mount it inherits), but not over the network namespace, which belongs to the outer one.
//! So the sandbox's root cannot change its routes (the guard of guarded networking), while
//! `pasta`, which runs on the same host uid outside, may join the network namespace to
//! carry its traffic.
//!
//! Two short-lived helpers make them: the first becomes the sandbox's uid and makes the
//! outer namespace (and the network namespace); the keeper, root, writes its map; the
//! first helper, root of the outer namespace, then forks the second, which makes the inner
//! one, and writes its map. Both stay until the keeper lets them go, once the network (if
//! any) is up: `pasta` joins through the first's `/proc` entries, which is why it turns
//! dumpable again.

use std::os::fd::OwnedFd;

use rustix::process::Pid;
use rustix::thread::UnshareFlags;

use crate::init::proto::IdRange;
use crate::sys::{self, Forked, SingleThreaded};

/// The sandbox's user (and, with guarded networking, network) namespaces.
pub(super) struct Namespaces {
    /// Maps the sandbox's inner ids to its host ids.
    pub(super) outer: OwnedFd,
    /// Where the init and the commands live.
    pub(super) inner: OwnedFd,
    /// The sandbox's network namespace (owned by `outer`), when asked for.
    pub(super) net: Option<OwnedFd>,
    /// The first helper, whose `/proc/<pid>/ns` entries name them until it is released.
    pub(super) holder: Pid,
    /// Closing it releases the helpers.
    hold: Option<OwnedFd>,
}

impl Namespaces {
    /// Copies of the outer and inner user namespaces' descriptors, for the init.
    pub(super) fn fds(&self) -> std::io::Result<(OwnedFd, OwnedFd)> {
        Ok((
            rustix::io::fcntl_dupfd_cloexec(&self.outer, 0)?,
            rustix::io::fcntl_dupfd_cloexec(&self.inner, 0)?,
        ))
    }
}

impl Drop for Namespaces {
    /// Lets the helpers end, and reaps the first (which reaps the second).
    fn drop(&mut self) {
        drop(self.hold.take());
        super::procs::wait_for(self.holder);
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| format!("pipe: {e}"))
}

fn byte(fd: &OwnedFd) -> bool {
    rustix::io::read(fd, &mut [0u8]).unwrap_or(0) == 1
}

/// Makes the namespaces of a sandbox with host ids `ids` (a network namespace too when
/// `network`).
pub(super) fn make(
    one: &SingleThreaded,
    ids: IdRange,
    network: bool,
) -> Result<Namespaces, String> {
    let (up_r, up_w) = pipe()?; // helper → keeper: outer made; then: inner mapped
    let (mapped_r, mapped_w) = pipe()?; // keeper → helper: outer mapped
    let (hold_r, hold_w) = pipe()?; // closed by the keeper: the helpers may end
    match sys::fork(one).map_err(|e| format!("cannot fork: {e}"))? {
        Forked::Child => {
            drop((up_r, mapped_w, hold_w));
            let code = match outer_helper(one, ids, network, &up_w, &mapped_r, &hold_r) {
                Ok(()) => 0,
                Err(_) => 1,
            };
            sys::exit_now(code)
        }
        Forked::Parent(holder) => {
            drop((up_w, mapped_r, hold_r));
            let fail = |why: String| {
                let _ = rustix::process::kill_process(holder, rustix::process::Signal::KILL);
                super::procs::wait_for(holder);
                why
            };
            if !byte(&up_r) {
                return Err(fail(
                    "the helper could not make the sandbox's user namespace".into(),
                ));
            }
            let map = format!("0 {} {}", ids.first, ids.count);
            let pid = holder.as_raw_nonzero().get();
            super::procs::write_id_maps(&pid.to_string(), &map, &map, false).map_err(&fail)?;
            rustix::io::write(&mapped_w, b"m").map_err(|e| fail(e.to_string()))?;
            // Then the second helper's pid, as text, once it is mapped.
            let mut buf = [0u8; 16];
            let n = rustix::io::read(&up_r, &mut buf).unwrap_or(0);
            let inner_pid = std::str::from_utf8(&buf[..n])
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
                .ok_or_else(|| {
                    fail("the helper could not make the sandbox's inner namespace".into())
                })?;
            let open = |path: String| {
                rustix::fs::open(
                    &path,
                    rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .map_err(|e| format!("{path}: {e}"))
            };
            let outer = open(format!("/proc/{pid}/ns/user")).map_err(&fail)?;
            let inner = open(format!("/proc/{inner_pid}/ns/user")).map_err(&fail)?;
            let net = if network {
                Some(open(format!("/proc/{pid}/ns/net")).map_err(&fail)?)
            } else {
                None
            };
            Ok(Namespaces {
                outer,
                inner,
                net,
                holder,
                hold: Some(hold_w),
            })
        }
    }
}

/// The first helper: becomes the sandbox's uid, makes the outer namespace (and the network
/// namespace), waits for its map, then has the second helper make the inner one and maps
/// it; then waits to be released.
fn outer_helper(
    one: &SingleThreaded,
    ids: IdRange,
    network: bool,
    up: &OwnedFd,
    mapped: &OwnedFd,
    hold: &OwnedFd,
) -> Result<(), String> {
    let g = rustix::process::Gid::from_raw(ids.first);
    let u = rustix::process::Uid::from_raw(ids.first);
    rustix::thread::set_thread_groups(&[]).map_err(|e| e.to_string())?;
    rustix::thread::set_thread_res_gid(g, g, g).map_err(|e| e.to_string())?;
    rustix::thread::set_thread_res_uid(u, u, u).map_err(|e| e.to_string())?;
    // Its /proc entries must stay open to the same uid (pasta joins through them).
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::Dumpable)
        .map_err(|e| e.to_string())?;
    let mut flags = UnshareFlags::NEWUSER;
    if network {
        flags |= UnshareFlags::NEWNET;
    }
    sys::unshare(one, flags).map_err(|e| e.to_string())?;
    rustix::io::write(up, b"u").map_err(|e| e.to_string())?;
    if !byte(mapped) {
        return Err("not mapped".into());
    }
    let (ready_r, ready_w) = pipe()?;
    let inner = match sys::fork(one).map_err(|e| e.to_string())? {
        Forked::Child => {
            drop(ready_r);
            let made = sys::unshare(one, UnshareFlags::NEWUSER).is_ok()
                && rustix::io::write(&ready_w, b"i").is_ok();
            if made {
                let _ = byte(hold);
            }
            sys::exit_now(i32::from(!made))
        }
        Forked::Parent(pid) => pid,
    };
    drop(ready_w);
    let result = (|| {
        if !byte(&ready_r) {
            return Err("the inner namespace was not made".to_owned());
        }
        let map = format!("0 0 {}", ids.count);
        let pid = inner.as_raw_nonzero().get();
        super::procs::write_id_maps(&pid.to_string(), &map, &map, false)?;
        rustix::io::write(up, pid.to_string().as_bytes()).map_err(|e| e.to_string())?;
        let _ = byte(hold);
        Ok(())
    })();
    if result.is_err() {
        let _ = rustix::process::kill_process(inner, rustix::process::Signal::KILL);
    }
    super::procs::wait_for(inner);
    result
}
