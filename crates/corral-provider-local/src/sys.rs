//! The crate's only `unsafe` code: creating processes (fork, clone, execve) in the sandbox
//! init, the few system calls no safe wrapper covers (`mount_setattr`, `close_range`,
//! `unshare`, the loop-device ioctls, `FIFREEZE` and `FITHAW`, a signal disposition), and
//! registering a descriptor with tokio's reactor.
//!
//! Every function here is safe to call: the preconditions the kernel or libc put on them
//! are either checked at run time or carried by a value that proves them. The one that
//! matters most is [`SingleThreaded`]: `fork` and `clone` in a process with other threads
//! would leave the child with locks (malloc's, std's) that no thread will ever release, and
//! `unshare(CLONE_NEWUSER)` refuses multi-threaded callers. The sandbox init is a process of
//! its own, started by `execve`, that never starts a thread: it checks that once, at its
//! start, and passes the proof down to each function that forks.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd};

use rustix::process::Pid;

/// Proof that this process has exactly one thread (so a fork copies every thread there is).
#[derive(Debug)]
pub(crate) struct SingleThreaded(());

impl SingleThreaded {
    /// The proof, if `/proc/self/task` lists exactly one thread; `None` otherwise (or when
    /// it cannot be read). A single-threaded process stays so as long as it starts no thread,
    /// which the init never does; its forks are single-threaded too.
    pub(crate) fn check() -> Option<Self> {
        let tasks = std::fs::read_dir("/proc/self/task").ok()?.count();
        (tasks == 1).then_some(Self(()))
    }
}

/// Which side of a fork this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forked {
    /// The new process.
    Child,
    /// The caller, with the child's pid (as this process's pid namespace numbers it).
    Parent(Pid),
}

fn forked(ret: libc::pid_t) -> io::Result<Forked> {
    match ret {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Pid::from_raw(pid)
            .map(Forked::Parent)
            .ok_or_else(|| io::Error::other("fork returned a negative pid")),
    }
}

/// `fork()`.
pub(crate) fn fork(_one: &SingleThreaded) -> io::Result<Forked> {
    // SAFETY: the process has a single thread (the proof), so the child is a complete copy of
    // it: no lock is held by a thread that does not exist in the child.
    forked(unsafe { libc::fork() })
}

/// A child in a new pid namespace (where it is pid 1) and a new mount namespace: `clone`
/// with `CLONE_NEWPID | CLONE_NEWNS`, otherwise like `fork` (same stack, `SIGCHLD` on exit).
pub(crate) fn fork_into_new_pid_and_mount_namespaces(_one: &SingleThreaded) -> io::Result<Forked> {
    let flags = libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::SIGCHLD;
    // SAFETY: with a null stack `clone` behaves as `fork` (the child continues on a copy of
    // the caller's stack), and the process has a single thread (the proof), so the child is a
    // complete copy. libc's fork handlers do not run; with one thread there is no lock for
    // them to reset. The remaining arguments (parent tid, child tid, tls) are unused without
    // the flags that read them.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::c_ulong::try_from(flags).unwrap_or(0),
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    forked(libc::pid_t::try_from(ret).unwrap_or(-1))
}

/// `unshare(flags)`. `CLONE_FILES` is refused: it is the flag that makes `unshare` unsafe
/// (descriptors of other threads would vanish), and nothing here needs it.
pub(crate) fn unshare(
    _one: &SingleThreaded,
    flags: rustix::thread::UnshareFlags,
) -> io::Result<()> {
    if flags.contains(rustix::thread::UnshareFlags::FILES) {
        return Err(io::Error::other("unshare(CLONE_FILES) is not used here"));
    }
    // SAFETY: without CLONE_FILES, unsharing cannot invalidate descriptors another thread
    // holds; and there is no other thread (the proof).
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(io::Error::from)
}

/// Replaces the process with `program` (`argv`, `envp`); returns only on failure.
pub(crate) fn exec(program: &CStr, argv: &[CString], envp: &[CString]) -> io::Error {
    let mut args: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    args.push(std::ptr::null());
    let mut env: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    env.push(std::ptr::null());
    // SAFETY: `program` and every element are NUL-terminated strings that outlive the call;
    // both arrays end with a null pointer, as execve requires.
    unsafe { libc::execve(program.as_ptr(), args.as_ptr(), env.as_ptr()) };
    io::Error::last_os_error()
}

/// Ends the process at once with `code`, without running exit handlers or flushing std's
/// buffers (a forked child must not flush what its parent buffered).
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` is always safe to call; it does not return.
    unsafe { libc::_exit(code) }
}

/// Closes every descriptor from `first` up (`close_range`). Owned descriptors of this
/// process above `first` must not be used afterwards: callers call this in a fresh child
/// right before it execs or waits, holding none.
pub(crate) fn close_descriptors_from(first: u32) -> io::Result<()> {
    close_descriptors(first, u32::MAX)
}

/// Closes descriptors `first ..= last` (`close_range`), with the same caveat.
pub(crate) fn close_descriptors(first: u32, last: u32) -> io::Result<()> {
    // SAFETY: closing descriptors cannot violate memory safety; the callers (a new child
    // about to exec or wait, or the init's start) hold no `OwnedFd` in the range that they
    // use again.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Takes over a descriptor number inherited from the parent (e.g. `0`, the channel).
/// `None` if it is not open.
pub(crate) fn inherited(fd: i32) -> Option<OwnedFd> {
    rustix::io::fcntl_getfd(
        // SAFETY: only used to ask whether `fd` is open; not kept.
        unsafe { BorrowedFd::borrow_raw(fd) },
    )
    .ok()?;
    // SAFETY: the descriptor is open (checked above) and nothing else in this process owns
    // it: the init takes over its inherited descriptors once, at its start.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets `SIGPIPE` to be ignored (the keeper and the init, which write to pipes whose reader
/// may have gone: they take `EPIPE`) or to its default action (right before an `execve`: an
/// ignored signal stays ignored across it, and a command would see `EPIPE` instead of dying
/// quietly, as in `yes | head`).
pub(crate) fn sigpipe(ignore: bool) -> io::Result<()> {
    let action = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
    // SAFETY: SIG_IGN and SIG_DFL are valid dispositions for SIGPIPE; no handler code is
    // involved.
    let old = unsafe { libc::signal(libc::SIGPIPE, action) };
    if old == libc::SIG_ERR {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `MOUNT_ATTR_RDONLY`.
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `MOUNT_ATTR_NOSUID`.
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// `MOUNT_ATTR_NODEV`.
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x4;
/// `MOUNT_ATTR_IDMAP`.
pub(crate) const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, …)`: sets `set` on every mount of
/// the detached or attached tree `tree` (an `open_tree` descriptor), idmapped through
/// `userns` when given.
pub(crate) fn mount_setattr(
    tree: BorrowedFd<'_>,
    set: u64,
    userns: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set
            | if userns.is_some() {
                MOUNT_ATTR_IDMAP
            } else {
                0
            },
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.map_or(0, |fd| u64::try_from(fd.as_raw_fd()).unwrap_or(0)),
    };
    let flags = libc::AT_EMPTY_PATH | libc::AT_RECURSIVE;
    // SAFETY: the path is a valid empty C string, `attr` is a properly laid out
    // `struct mount_attr` that outlives the call, and its size is passed with it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `LOOP_CTL_GET_FREE`.
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
/// `LOOP_CONFIGURE`.
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
/// `LO_FLAGS_AUTOCLEAR`: the device lets go of its file when the last user closes it.
const LO_FLAGS_AUTOCLEAR: u32 = 4;
/// `LO_FLAGS_DIRECT_IO`.
const LO_FLAGS_DIRECT_IO: u32 = 16;

/// `struct loop_info64`.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// `FIFREEZE` (`_IOWR('X', 119, int)`), from `linux/fs.h`; libc does not define it.
const FIFREEZE: libc::c_ulong = 0xC004_5877;
/// `FITHAW` (`_IOWR('X', 120, int)`).
const FITHAW: libc::c_ulong = 0xC004_5878;

/// Freezes the filesystem `file` is on (`FIFREEZE`): its dirty data is written out, and
/// every write waits until [`thaw`].
pub(crate) fn freeze(file: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: FIFREEZE reads no argument (the kernel ignores it); `file` is a valid
    // descriptor for the duration of the call.
    let ret = unsafe { libc::ioctl(file.as_raw_fd(), FIFREEZE, 0) };
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Thaws the filesystem `file` is on (`FITHAW`); `EINVAL` if it was not frozen.
pub(crate) fn thaw(file: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: FITHAW reads no argument; `file` is a valid descriptor for the call.
    let ret = unsafe { libc::ioctl(file.as_raw_fd(), FITHAW, 0) };
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The number of a free loop device (`LOOP_CTL_GET_FREE` on `/dev/loop-control`), which
/// the kernel creates if needed.
pub(crate) fn loop_free_number(control: BorrowedFd<'_>) -> io::Result<u32> {
    // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number.
    let ret = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
    u32::try_from(ret).map_err(|_| io::Error::last_os_error())
}

/// Attaches `backing` to the loop device `device` (`LOOP_CONFIGURE`), auto-clearing; with
/// direct I/O when `direct` (no second copy of the image in the page cache).
pub(crate) fn loop_configure(
    device: BorrowedFd<'_>,
    backing: BorrowedFd<'_>,
    direct: bool,
) -> io::Result<()> {
    let config = LoopConfig {
        fd: u32::try_from(backing.as_raw_fd()).map_err(|_| io::Error::other("bad descriptor"))?,
        block_size: 0,
        info: LoopInfo64 {
            lo_device: 0,
            lo_inode: 0,
            lo_rdevice: 0,
            lo_offset: 0,
            lo_sizelimit: 0,
            lo_number: 0,
            lo_encrypt_type: 0,
            lo_encrypt_key_size: 0,
            lo_flags: LO_FLAGS_AUTOCLEAR | if direct { LO_FLAGS_DIRECT_IO } else { 0 },
            lo_file_name: [0; 64],
            lo_crypt_name: [0; 64],
            lo_encrypt_key: [0; 32],
            lo_init: [0; 2],
        },
        reserved: [0; 8],
    };
    // SAFETY: `config` is a properly laid out `struct loop_config` that outlives the call;
    // the kernel only reads it.
    let ret = unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CONFIGURE, &raw const config) };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `fd`, watched for readability by the current tokio runtime's reactor (call it on the
/// runtime).
pub(crate) fn watch_readable(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is a valid open descriptor, owned here and moved into the
    // `AsyncFd`: it stays open, on the same file description, until the `AsyncFd` is dropped
    // (or gives it back), and its `as_raw_fd` always returns that same number.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// The credentials of the peer of Unix socket `fd` (`SO_PEERCRED`), as this process's
/// namespaces see them: its pid (0 when it is not in this pid namespace or one below it)
/// and its uid (the overflow uid when it is not mapped in this user namespace). rustix's
/// `socket_peercred` holds the pid in a non-zero type, which a pid of 0 breaks.
pub(crate) fn peer_credentials(fd: BorrowedFd<'_>) -> io::Result<(libc::pid_t, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>())
        .map_err(|_| io::Error::other("struct ucred does not fit a socklen_t"))?;
    // SAFETY: `cred` is a properly laid out `struct ucred` that outlives the call and `len`
    // is its size: the kernel writes at most `len` bytes into it, and `len` back.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if ret == 0 {
        Ok((cred.pid, cred.uid))
    } else {
        Err(io::Error::last_os_error())
    }
}
